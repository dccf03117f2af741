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

// TestHalfLivesScoreBoundaries pins the rule archival compares thresholds against
// (pgstore's SQL repeats it): exact values at the edges, strict monotonicity around
// one half-life, and every way a type can end up without decay.
func TestHalfLivesScoreBoundaries(t *testing.T) {
	now := t0.Add(1000 * day)
	h := HalfLives{Working: time.Hour, Episodic: 2 * time.Hour, Semantic: 0, Procedural: -time.Hour}
	at := func(typ Type, base float64, age time.Duration) Item {
		return Item{MemoryType: typ, BaseScore: base, CreatedAt: now.Add(-age - day), UpdatedAt: now.Add(-age)}
	}
	tests := []struct {
		name string
		item Item
		hl   HalfLives
		want float64
	}{
		{"age 0 is the base score", at(Working, 0.8, 0), h, 0.8},
		{"exactly one half-life halves it", at(Working, 0.8, time.Hour), h, 0.4},
		{"exactly two half-lives quarter it", at(Working, 0.8, 2*time.Hour), h, 0.2},
		{"per type: episodic's half-life is its own", at(Episodic, 0.8, 2*time.Hour), h, 0.4},
		{"per type: the same age decays working twice as far", at(Working, 0.8, 4*time.Hour), h, 0.05},
		{"negative age counts as 0", at(Working, 0.8, -time.Hour), h, 0.8},
		{"zero half-life: no decay", at(Semantic, 0.8, 1000*time.Hour), h, 0.8},
		{"negative half-life: no decay", at(Procedural, 0.8, 1000*time.Hour), h, 0.8},
		{"type missing from the map: no decay", at(Episodic, 0.8, 1000*time.Hour), HalfLives{Working: time.Hour}, 0.8},
		{"empty map: no decay", at(Working, 0.8, 1000*time.Hour), HalfLives{}, 0.8},
		{"zero base stays zero", at(Working, 0, time.Hour), h, 0},
		{"zero base, no decay", at(Semantic, 0, time.Hour), h, 0},
		{"base above 1 decays the same way", at(Working, 3, time.Hour), h, 1.5},
		{"underflow is 0, not an error", at(Working, 1, 2000*time.Hour), h, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.hl.Score(tt.item, now); got != tt.want && !near(got, tt.want) {
				t.Fatalf("Score = %v, want %v", got, tt.want)
			}
		})
	}
	// Exactly one half-life is exactly half (archival's "below threshold" is strict, so
	// a memory scoring exactly the threshold stays); a nanosecond either side is not.
	half := h.Score(at(Working, 1, time.Hour), now)
	if half != 0.5 {
		t.Fatalf("one half-life = %v, want exactly 0.5", half)
	}
	if s := h.Score(at(Working, 1, time.Hour+time.Microsecond), now); !(s < half) {
		t.Fatalf("a microsecond older scores %v, not below %v", s, half)
	}
	if s := h.Score(at(Working, 1, time.Hour-time.Microsecond), now); !(s > half) {
		t.Fatalf("a microsecond younger scores %v, not above %v", s, half)
	}
	// Older never scores higher.
	prev := 2.0
	for age := time.Duration(0); age <= 48*time.Hour; age += 7 * time.Minute {
		s := h.Score(at(Episodic, 1, age), now)
		if s > prev {
			t.Fatalf("score rises with age at %v: %v > %v", age, s, prev)
		}
		prev = s
	}
}
