package memory

import (
	"math"
	"testing"
	"time"
)

const day = 24 * time.Hour

func near(a, b float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b))
}

func TestEffectiveScore(t *testing.T) {
	tests := []struct {
		name          string
		base          float64
		age, halfLife time.Duration
		want          float64
	}{
		{"fresh", 0.8, 0, time.Hour, 0.8},
		{"one half-life", 0.8, time.Hour, time.Hour, 0.4},
		{"two half-lives", 0.8, 2 * time.Hour, time.Hour, 0.2},
		{"ten half-lives", 1, 10 * time.Hour, time.Hour, 1.0 / 1024},
		{"half a half-life", 1, 30 * time.Minute, time.Hour, math.Sqrt2 / 2},
		{"negative age is fresh", 0.8, -time.Hour, time.Hour, 0.8},
		{"zero half-life: no decay", 0.8, 1000 * time.Hour, 0, 0.8},
		{"negative half-life: no decay", 0.8, 1000 * time.Hour, -time.Hour, 0.8},
		{"zero base", 0, time.Hour, time.Hour, 0},
		{"very old underflows to zero", 1, 100000 * time.Hour, time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EffectiveScore(tt.base, tt.age, tt.halfLife); !near(got, tt.want) {
				t.Fatalf("EffectiveScore(%v, %v, %v) = %v, want %v", tt.base, tt.age, tt.halfLife, got, tt.want)
			}
		})
	}
}

func TestDefaultHalfLives(t *testing.T) {
	h := DefaultHalfLives()
	want := map[Type]time.Duration{Working: 6 * time.Hour, Episodic: 30 * day, Semantic: 180 * day, Procedural: 365 * day}
	if len(h) != len(want) {
		t.Fatalf("DefaultHalfLives() has %d entries, want %d", len(h), len(want))
	}
	for ty, d := range want {
		if h[ty] != d {
			t.Errorf("half-life of %s = %v, want %v", ty, h[ty], d)
		}
	}
	h[Working] = time.Minute
	if DefaultHalfLives()[Working] != 6*time.Hour {
		t.Fatal("DefaultHalfLives returns a shared map")
	}
}

func TestHalfLivesScore(t *testing.T) {
	h := DefaultHalfLives()
	now := t0.Add(365 * day)
	tests := []struct {
		name string
		item Item
		want float64
	}{
		{"working after 6h", Item{MemoryType: Working, BaseScore: 1, UpdatedAt: now.Add(-6 * time.Hour)}, 0.5},
		{"working after 1 day", Item{MemoryType: Working, BaseScore: 1, UpdatedAt: now.Add(-day)}, 1.0 / 16},
		{"episodic after 30d", Item{MemoryType: Episodic, BaseScore: 0.6, UpdatedAt: now.Add(-30 * day)}, 0.3},
		{"episodic after 60d", Item{MemoryType: Episodic, BaseScore: 0.6, UpdatedAt: now.Add(-60 * day)}, 0.15},
		{"semantic after 180d", Item{MemoryType: Semantic, BaseScore: 0.9, UpdatedAt: now.Add(-180 * day)}, 0.45},
		{"procedural after 365d", Item{MemoryType: Procedural, BaseScore: 0.7, UpdatedAt: now.Add(-365 * day)}, 0.35},
		{"age from updated_at, not created_at", Item{MemoryType: Episodic, BaseScore: 1, CreatedAt: now.Add(-300 * day), UpdatedAt: now.Add(-30 * day)}, 0.5},
		{"falls back to created_at", Item{MemoryType: Episodic, BaseScore: 1, CreatedAt: now.Add(-30 * day)}, 0.5},
		{"future updated_at counts as now", Item{MemoryType: Working, BaseScore: 0.4, UpdatedAt: now.Add(time.Hour)}, 0.4},
		{"unknown type does not decay", Item{MemoryType: "other", BaseScore: 0.4, UpdatedAt: now.Add(-1000 * day)}, 0.4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := h.Score(tt.item, now); !near(got, tt.want) {
				t.Fatalf("Score = %v, want %v", got, tt.want)
			}
		})
	}
	// Same age, different types: the shorter half-life ranks lower.
	age := 10 * day
	var prev float64 = -1
	for _, ty := range AllTypes() { // ordered by increasing half-life
		s := h.Score(Item{MemoryType: ty, BaseScore: 1, UpdatedAt: now.Add(-age)}, now)
		if s <= prev {
			t.Fatalf("%s scores %v, not above the previous type's %v", ty, s, prev)
		}
		prev = s
	}
	var none HalfLives
	if got := none.Score(Item{MemoryType: Working, BaseScore: 0.3, UpdatedAt: t0}, now); got != 0.3 {
		t.Fatalf("nil HalfLives Score = %v, want 0.3 (no decay)", got)
	}
}
