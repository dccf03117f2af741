package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

func TestPutKeylessIdempotent(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()

	a := item("m-1", "user:1", memory.Episodic, "", `{"event":"booked","where":"Lisbon"}`, 0.7, time.Hour)
	mustPut(t, s, a, Inserted)
	if res := mustPut(t, s, a, Unchanged); res.MemoryID != "m-1" {
		t.Fatalf("re-put id = %q, want m-1", res.MemoryID)
	}
	// Same content, other id, other key order and spacing: still the same memory.
	b := item("m-2", "user:1", memory.Episodic, "", `{ "where": "Lisbon", "event": "booked" }`, 0.9, 0)
	if res := mustPut(t, s, b, Unchanged); res.MemoryID != "m-1" {
		t.Fatalf("same content id = %q, want m-1", res.MemoryID)
	}
	// Same content in another scope is another memory.
	c := item("m-3", "user:2", memory.Episodic, "", `{"event":"booked","where":"Lisbon"}`, 0.7, 0)
	mustPut(t, s, c, Inserted)
	// Same content as another type is another memory.
	d := item("m-4", "user:1", memory.Semantic, "", `{"event":"booked","where":"Lisbon"}`, 0.7, 0)
	mustPut(t, s, d, Inserted)
	if n, err := s.Count(ctx); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}
	got, err := s.Get(ctx, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	assertItemsEqual(t, []memory.Item{got}, []memory.Item{a})

	// Reusing the id with new content edits that memory and keeps the old value.
	e := item("m-1", "user:1", memory.Episodic, "", `{"event":"cancelled","where":"Lisbon"}`, 0.5, 0)
	if res := mustPut(t, s, e, Superseded); res.MemoryID != "m-1" {
		t.Fatalf("edit id = %q", res.MemoryID)
	}
	got, _ = s.Get(ctx, "m-1")
	if !sameJSON(t, got.Content, e.Content) || got.BaseScore != 0.5 || len(got.History) != 1 ||
		!sameJSON(t, got.History[0].Content, a.Content) || !got.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("after edit: %+v", got)
	}
	// The id in another scope is a conflict, not a write.
	_, err = s.Put(ctx, item("m-1", "user:9", memory.Episodic, "", `{"x":1}`, 1, 0))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Put with an id used in another scope = %v, want ErrConflict", err)
	}
	// ...and so is the id of a key-less memory reused for a keyed slot.
	_, err = s.Put(ctx, item("m-1", "user:1", memory.Episodic, "slot", `{"x":1}`, 1, 0))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Put with a key-less memory's id into a slot = %v, want ErrConflict", err)
	}
	if n, _ := s.Count(ctx); n != 3 {
		t.Fatalf("Count after conflicts = %d, want 3", n)
	}
}

func TestPutKeyedSupersedes(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()

	v1 := item("addr-1", "user:1", memory.Semantic, "address", `{"city":"Berlin"}`, 0.9, 3*day)
	v1.Source = "langgraph@0.2"
	mustPut(t, s, v1, Inserted)

	v2 := item("addr-2", "user:1", memory.Semantic, "address", `{"city":"Hamburg"}`, 0.8, 2*day)
	v2.Source = "mem0@1"
	exp := now.Add(400 * day)
	v2.ExpiresAt = &exp
	if res := mustPut(t, s, v2, Superseded); res.MemoryID != "addr-1" {
		t.Fatalf("superseding write returned id %q, want the slot's addr-1", res.MemoryID)
	}
	// Identical content to the slot, even under another id and score: unchanged.
	again := v2
	again.MemoryID, again.BaseScore = "addr-3", 0.1
	if res := mustPut(t, s, again, Unchanged); res.MemoryID != "addr-1" {
		t.Fatalf("unchanged id %q", res.MemoryID)
	}
	v3 := item("addr-4", "user:1", memory.Semantic, "address", `{"city":"Munich"}`, 1, day)
	mustPut(t, s, v3, Superseded)

	got, err := s.Get(ctx, "addr-1")
	if err != nil {
		t.Fatal(err)
	}
	want := memory.Item{
		MemoryID: "addr-1", MemoryType: memory.Semantic, Scope: "user:1", Key: "address",
		Content: json.RawMessage(`{"city":"Munich"}`), Source: "test@1", BaseScore: 1,
		CreatedAt: v1.CreatedAt, UpdatedAt: v3.UpdatedAt,
		History: []memory.Revision{
			{Content: json.RawMessage(`{"city":"Berlin"}`), Source: "langgraph@0.2", BaseScore: 0.9, UpdatedAt: v1.UpdatedAt, SupersededAt: v2.UpdatedAt},
			{Content: json.RawMessage(`{"city":"Hamburg"}`), Source: "mem0@1", BaseScore: 0.8, UpdatedAt: v2.UpdatedAt, SupersededAt: v3.UpdatedAt},
		},
	}
	assertItemsEqual(t, []memory.Item{got}, []memory.Item{want})
	for _, id := range []string{"addr-2", "addr-3", "addr-4"} {
		if _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%s) = %v, want ErrNotFound", id, err)
		}
	}
	// The same key in another scope is another slot.
	mustPut(t, s, item("addr-9", "user:2", memory.Semantic, "address", `{"city":"Berlin"}`, 0.9, 0), Inserted)
	if n, _ := s.Count(ctx); n != 2 {
		t.Fatalf("Count = %d, want 2", n)
	}
}

func TestPutDefaultsAndValidation(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()

	res, err := s.Put(ctx, memory.Item{MemoryType: memory.Working, Scope: "session:abc", Content: json.RawMessage(`{"step":3}`), BaseScore: 0.2})
	if err != nil || res.Outcome != Inserted || memory.ValidateID(res.MemoryID) != nil {
		t.Fatalf("Put without id/times = %+v, %v", res, err)
	}
	got, err := s.Get(ctx, res.MemoryID)
	if err != nil || got.CreatedAt.IsZero() || !got.UpdatedAt.Equal(got.CreatedAt) {
		t.Fatalf("Get = %+v, %v", got, err)
	}

	bad := item("x", "user:1", memory.Semantic, "", `"just a string"`, 1, 0)
	_, err = s.Put(ctx, bad)
	var fe *memory.FieldError
	if !errors.As(err, &fe) || fe.Field != "content" {
		t.Fatalf("Put of string content = %v, want a content FieldError", err)
	}
	bad = item("x", `user:1" or 1=1`, memory.Semantic, "", `{}`, 1, 0)
	if _, err := s.Put(ctx, bad); !errors.As(err, &fe) || fe.Field != "scope" {
		t.Fatalf("Put with a bad scope = %v, want a scope FieldError", err)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(nope) = %v, want ErrNotFound", err)
	}
	if n, _ := s.Count(ctx); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
}

func TestPutTimesRoundTrip(t *testing.T) {
	s, _ := newStore(t)
	it := item("t-1", "user:1", memory.Working, "", `{"a":1}`, 1, 0)
	loc := time.FixedZone("UTC+5", 5*3600)
	it.CreatedAt = time.Date(2025, 1, 2, 3, 4, 5, 123456789, loc)
	it.UpdatedAt = it.CreatedAt.Add(time.Nanosecond)
	exp, arch := it.CreatedAt.Add(time.Hour), it.CreatedAt.Add(2*time.Hour)
	it.ExpiresAt, it.ArchivedAt = &exp, &arch
	mustPut(t, s, it, Inserted)
	got, err := s.Get(t.Context(), "t-1")
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2025, 1, 1, 22, 4, 5, 123456000, time.UTC)
	if got.CreatedAt != want || got.UpdatedAt != want || *got.ExpiresAt != want.Add(time.Hour) || *got.ArchivedAt != want.Add(2*time.Hour) {
		t.Fatalf("times = %v %v %v %v, want UTC microseconds from %v", got.CreatedAt, got.UpdatedAt, got.ExpiresAt, got.ArchivedAt, want)
	}
}

// TestPutConcurrentSlot races writers on one (scope, key) slot: exactly one inserts,
// every other supersedes, and every value ends up either current or in history.
func TestPutConcurrentSlot(t *testing.T) {
	s, _ := newStore(t)
	const writers = 16
	var wg sync.WaitGroup
	results := make([]PutResult, writers)
	errs := make([]error, writers)
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it := item(fmt.Sprintf("w-%02d", i), "user:1", memory.Semantic, "mood", fmt.Sprintf(`{"v":%d}`, i), 1, 0)
			<-start
			results[i], errs[i] = s.Put(context.Background(), it)
		}()
	}
	close(start)
	wg.Wait()

	outcomes := map[Outcome]int{}
	for i := range writers {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		outcomes[results[i].Outcome]++
	}
	if outcomes[Inserted] != 1 || outcomes[Superseded] != writers-1 {
		t.Fatalf("outcomes = %v, want 1 inserted and %d superseded", outcomes, writers-1)
	}
	id := results[0].MemoryID
	for i := range writers {
		if results[i].MemoryID != id {
			t.Fatalf("writer %d got id %q, writer 0 %q: want one memory", i, results[i].MemoryID, id)
		}
	}
	got, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.History) != writers-1 {
		t.Fatalf("history has %d entries, want %d", len(got.History), writers-1)
	}
	var values []int
	for _, c := range append([]json.RawMessage{got.Content}, historyContents(got)...) {
		var v struct{ V int }
		if err := json.Unmarshal(c, &v); err != nil {
			t.Fatal(err)
		}
		values = append(values, v.V)
	}
	sort.Ints(values)
	for i, v := range values {
		if v != i {
			t.Fatalf("values current+history = %v, want each of 0..%d once", values, writers-1)
		}
	}
	if n, _ := s.Count(t.Context()); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
}

func historyContents(it memory.Item) []json.RawMessage {
	var out []json.RawMessage
	for _, r := range it.History {
		out = append(out, r.Content)
	}
	return out
}

// TestPutConcurrentSameContent races identical key-less writes under distinct ids.
func TestPutConcurrentSameContent(t *testing.T) {
	s, _ := newStore(t)
	const writers = 12
	var wg sync.WaitGroup
	results := make([]PutResult, writers)
	errs := make([]error, writers)
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it := item(fmt.Sprintf("c-%02d", i), "user:1", memory.Episodic, "", `{"said":"hello"}`, 0.5, 0)
			<-start
			results[i], errs[i] = s.Put(context.Background(), it)
		}()
	}
	close(start)
	wg.Wait()
	inserted := ""
	for i := range writers {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		if results[i].Outcome == Inserted {
			if inserted != "" {
				t.Fatalf("two inserts: %s and %s", inserted, results[i].MemoryID)
			}
			inserted = results[i].MemoryID
		}
	}
	for i := range writers {
		if results[i].MemoryID != inserted || (results[i].MemoryID != fmt.Sprintf("c-%02d", i) && results[i].Outcome != Unchanged) {
			t.Fatalf("writer %d: %+v, inserted %q", i, results[i], inserted)
		}
	}
	if n, _ := s.Count(t.Context()); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
}

// TestGuaranteeValidationMatchesPostgres feeds content that encoding/json accepts but
// jsonb may not (lone UTF-16 surrogates, invalid UTF-8, NUL, numbers at numeric's
// limits, deep nesting) to Validate and then to PostgreSQL: whatever Validate accepts,
// Put and Merge store; the rest is refused up front, never with a raw SQLSTATE.
func TestGuaranteeValidationMatchesPostgres(t *testing.T) {
	s, _ := newStore(t)
	deep := strings.Repeat(`{"a":`, 2000) + `1` + strings.Repeat(`}`, 2000)
	contents := []string{
		`{"a":"\ud83d"}`, `{"a":"\ude00"}`, `{"a":"x\ud83d\u0041"}`, `{"\udbff":1}`, `{"a":"\ud83d\ude00"}`, `{"a":"\\ud800"}`,
		`{"a":"\u0000"}`, `{"\u0000":1}`, "{\"a\":\"caf\xe9\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"\xff\":1}",
		`{"a":1e400}`, `{"a":-0}`, `{"a":1e-500}`, `{"a":1e-20000}`, `{"a":1e200000}`, `{"a":123456789012345678901234567890}`,
		`{"a":"\u2028\u2029"}`, `{"a":1,"a":2}`, deep, `{"a":[` + strings.Repeat(`1,`, 10000) + `1]}`,
	}
	stored, refused := 0, 0
	for i, c := range contents {
		it := item(fmt.Sprintf("v%d", i), "user:v", memory.Semantic, "", c, 1, 0)
		if err := it.Validate(); err != nil {
			refused++
			var fe *memory.FieldError
			if !errors.As(err, &fe) || fe.Field != "content" {
				t.Errorf("content %.40q: refused without naming the field: %v", c, err)
			}
			continue
		}
		if _, err := s.Put(t.Context(), it); err != nil {
			t.Errorf("content %.40q passed validation but PostgreSQL refused it: %v", c, err)
			continue
		}
		it.MemoryID, it.Scope = fmt.Sprintf("m%d", i), "user:m"
		res, err := s.Merge(t.Context(), []memory.Item{it}, MergeOptions{})
		if err != nil || res.Outcomes[0] != MergeInserted {
			t.Errorf("content %.40q passed validation but Merge failed: %v %v", c, res, err)
			continue
		}
		stored++
	}
	t.Logf("%d contents stored, %d refused by validation", stored, refused)

	// At numeric's limits exactly: stored; one digit beyond: refused.
	for c, ok := range map[string]bool{
		`{"a":1e-16383}`: true, `{"a":1e-16384}`: false, `{"a":0.5e-16382}`: true, `{"a":0e-16384}`: false,
		`{"a":1e131071}`: true, `{"a":1e131072}`: false, `{"a":12.5e131070}`: true,
	} {
		it := item("limit", "user:limit", memory.Semantic, "", c, 1, 0)
		if err := it.Validate(); (err == nil) != ok {
			t.Errorf("content %s: Validate = %v, want accepted %v", c, err, ok)
		}
		if ok {
			if _, err := s.Merge(t.Context(), []memory.Item{it}, MergeOptions{DryRun: true}); err != nil {
				t.Errorf("content %s at the limit: %v", c, err)
			}
		}
	}
}

// A memory its writer does not date takes the server's clock for its own time: its
// created_at and updated_at are exactly its recorded_at. One the writer dates keeps
// its date, and is recorded by the server's clock all the same.
func TestPutUndatedTakesTheServersClock(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	undated := item("undated", "user:1", memory.Semantic, "", `{"v":1}`, 1, 0)
	undated.CreatedAt, undated.UpdatedAt = time.Time{}, time.Time{}
	mustPut(t, s, undated, Inserted)
	got, err := s.Get(ctx, "undated")
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreatedAt.Equal(got.RecordedAt) || !got.UpdatedAt.Equal(got.RecordedAt) || time.Since(got.RecordedAt) > time.Minute {
		t.Fatalf("undated memory: created %s, updated %s, recorded %s", got.CreatedAt, got.UpdatedAt, got.RecordedAt)
	}
	dated := item("dated", "user:1", memory.Semantic, "", `{"v":2}`, 1, day) // a day before the fixed clock
	mustPut(t, s, dated, Inserted)
	if got, err = s.Get(ctx, "dated"); err != nil || !got.CreatedAt.Equal(dated.CreatedAt) || !got.RecordedAt.After(dated.CreatedAt) {
		t.Fatalf("dated memory: %+v, %v", got, err)
	}
}
