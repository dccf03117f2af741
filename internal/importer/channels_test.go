package importer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// threadsSource is a LangGraphSource of threads made in a test.
type threadsSource []Thread

func (s threadsSource) Threads(_ context.Context, fn func(Thread) error) error {
	for _, t := range s {
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

func (threadsSource) StoreItems(context.Context, func(StoreItem) error) error { return nil }

// TestStateChannels: a mapped channel becomes one keyed memory per scope, the most
// recently active thread's value; unmapped channels with a value are counted by name;
// LangGraph's own channels and empty ones are neither.
func TestStateChannels(t *testing.T) {
	day := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	thread := func(id, user string, at time.Time, profile any) Thread {
		return Thread{ID: id, Metadata: map[string]any{"user_id": user}, LastActivity: at,
			Messages: []map[string]any{{"type": "human", "content": "hi", "id": id + "-h"}, {"type": "ai", "content": "hello", "id": id + "-a"}},
			channels: []encodedChannel{
				{name: "notes", inline: json.RawMessage(`"prefers mornings"`)},
				{name: "profile", value: profile, known: true},
				{name: "tags", value: []any{"vip"}, known: true},
				{name: "unset", inline: json.RawMessage(`null`)},
			}}
	}
	src := threadsSource{
		thread("t1", "7", day, map[string]any{"tier": "silver"}),
		thread("t2", "7", day.Add(time.Hour), map[string]any{"tier": "gold"}), // newer: kept
		thread("t3", "7", day.Add(-time.Hour), map[string]any{"tier": "bronze"}),
		thread("t4", "8", day, "plain string"),
	}
	rules := Rules{UserMetadataKey: "user_id", Now: day.Add(24 * time.Hour), SkipZombies: true,
		StateChannels: []StateChannel{{Channel: "profile", Key: "profile"}}}
	var items []memory.Item
	st, err := ImportLangGraph(context.Background(), src, LangGraphOptions{Rules: rules}, func(it memory.Item) error {
		items = append(items, it)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	profiles := map[string]string{}
	for _, it := range items {
		if err := it.Validate(); err != nil {
			t.Fatalf("%+v: %v", it, err)
		}
		if it.Key == "profile" {
			if _, dup := profiles[it.Scope]; dup {
				t.Fatalf("two profile memories in %s", it.Scope)
			}
			profiles[it.Scope] = string(it.Content)
		}
	}
	if profiles["user:7"] != `{"tier":"gold"}` || profiles["user:8"] != `{"value":"plain string"}` || len(profiles) != 2 {
		t.Fatalf("profiles %v", profiles)
	}
	if st.Items != int64(len(items)) || st.Items != 4+2 {
		t.Fatalf("stats %+v, %d items", st, len(items))
	}
	want := map[string]int64{
		`threads holding state channel notes, unmapped`:                                                 4,
		`threads holding state channel tags, unmapped`:                                                  4,
		"mapped state channel values superseded by a more recently active thread's, same scope and key": 2,
	}
	if len(st.LeftOut) != len(want) {
		t.Fatalf("left out %+v", st.LeftOut)
	}
	for _, l := range st.LeftOut {
		if want[l.What] != l.Count {
			t.Fatalf("left out %+v, want %v", st.LeftOut, want)
		}
	}
	for name, bad := range map[string][]StateChannel{
		"messages":   {{Channel: "messages"}},
		"internal":   {{Channel: "__start__"}},
		"trigger":    {{Channel: "branch:to:agent"}},
		"twice":      {{Channel: "a"}, {Channel: "a"}},
		"bad type":   {{Channel: "a", Type: memory.Episodic}},
		"no channel": {{}},
	} {
		if ValidateStateChannels(bad) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestChannelsLeftOutBounded: past maxChannelsLeftOut names, the rest are counted
// together, the most frequent named first.
func TestChannelsLeftOutBounded(t *testing.T) {
	names := map[string]int64{}
	for i := range maxChannelsLeftOut + 5 {
		names[string(rune('a'+i%26))+string(rune('a'+i/26))] = int64(i + 1)
	}
	out := channelsLeftOutCounts(names, 0)
	if len(out) != maxChannelsLeftOut+1 || out[0].Count != int64(maxChannelsLeftOut+5) || out[maxChannelsLeftOut].Count != 1+2+3+4+5 {
		t.Fatalf("%+v", out)
	}
}
