package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// fixture returns a mixed set of items across scopes, with history, expiry, archive
// and embeddings, in (scope, memory_id) order.
func fixture() []memory.Item {
	items := []memory.Item{
		item("a1", "agent:planner", memory.Procedural, "deploy", `{"steps":["build","test","ship"]}`, 0.7, 10*day),
		item("s1", "session:x1", memory.Working, "", `{"draft":"hello"}`, 0.3, time.Hour),
		item("u1", "user:1", memory.Semantic, "address", `{"city":"Munich","zip":"80331"}`, 0.9, day),
		item("u2", "user:1", memory.Episodic, "", `{"event":"trip","n":1.50}`, 0.6, 5*day),
		item("u3", "user:1", memory.Working, "", `{"scratch":true}`, 0.2, 2*time.Hour),
		item("u4", "user:1", memory.Semantic, "", `{"archived":true}`, 0.1, 100*day),
		item("v1", "user:2", memory.Semantic, "", `{"likes":"jazz","nested":{"b":[1,{"c":null}]}}`, 0.8, 3*day),
	}
	items[2].History = []memory.Revision{{Content: json.RawMessage(`{"city":"Berlin"}`), Source: "old@1", BaseScore: 0.5,
		UpdatedAt: now.Add(-30 * day), SupersededAt: now.Add(-day)}}
	items[2].CreatedAt = now.Add(-30 * day)
	items[4].ExpiresAt = ptr(now.Add(-time.Hour)) // expired
	items[1].ExpiresAt = ptr(now.Add(time.Hour))  // live
	items[5].ArchivedAt = ptr(now.Add(-day))
	items[0].Embedding = []float32{0.25, -1, 3.5}
	items[2].Embedding = []float32{1, 2, 3}
	items[6].Embedding = []float32{-0.5, 0, 0.125}
	return items
}

func pick(items []memory.Item, want ...string) []memory.Item {
	var out []memory.Item
	for _, id := range want {
		for _, it := range items {
			if it.MemoryID == id {
				out = append(out, it)
			}
		}
	}
	return out
}

func withoutEmbeddings(items []memory.Item) []memory.Item {
	out := make([]memory.Item, len(items))
	for i, it := range items {
		it.Embedding = nil
		out[i] = it
	}
	return out
}

func TestExport(t *testing.T) {
	s, _ := newStore(t)
	items := fixture()
	if res := importSlice(t, s, items); res.Inserted != 7 || res.Skipped != 0 || res.Embeddings != 3 {
		t.Fatalf("Import = %+v", res)
	}
	bare := withoutEmbeddings(items)

	tests := []struct {
		name string
		f    ExportFilter
		want []memory.Item
	}{
		{"default: all but archived, no embeddings", ExportFilter{}, pick(bare, "a1", "s1", "u1", "u2", "u3", "v1")},
		{"include archived", ExportFilter{IncludeArchived: true}, bare},
		{"exclude expired", ExportFilter{ExcludeExpired: true, Now: now}, pick(bare, "a1", "s1", "u1", "u2", "v1")},
		{"expired judged at Now", ExportFilter{ExcludeExpired: true, Now: now.Add(-2 * time.Hour)}, pick(bare, "a1", "s1", "u1", "u2", "u3", "v1")},
		{"exact scopes", ExportFilter{Scopes: []string{"user:2", "agent:planner"}}, pick(bare, "a1", "v1")},
		{"exact scope is not a prefix", ExportFilter{Scopes: []string{"user:"}}, nil},
		{"prefix", ExportFilter{ScopePrefixes: []string{"user:"}}, pick(bare, "u1", "u2", "u3", "v1")},
		{"prefix or exact", ExportFilter{ScopePrefixes: []string{"session:"}, Scopes: []string{"user:2"}}, pick(bare, "s1", "v1")},
		{"prefix with LIKE metacharacters is literal", ExportFilter{ScopePrefixes: []string{"user:_", "%"}}, nil},
		{"types", ExportFilter{Types: []memory.Type{memory.Semantic, memory.Working}}, pick(bare, "s1", "u1", "u3", "v1")},
		{"types and scope", ExportFilter{Types: []memory.Type{memory.Semantic}, Scopes: []string{"user:1"}, IncludeArchived: true}, pick(bare, "u1", "u4")},
		{"embeddings", ExportFilter{IncludeEmbeddings: true, IncludeArchived: true}, items},
		// user:1's newest memory is a day old, session:x1's an hour: both stay whole
		// (u3 too, though two hours old); agent:planner (10 days) and user:2 (3 days) go.
		{"active since", ExportFilter{ActiveSince: now.Add(-2 * day)}, pick(bare, "s1", "u1", "u2", "u3")},
		// Archived u4 is 100 days old but user:1 is still active: it comes along.
		{"active since keeps whole scopes", ExportFilter{ActiveSince: now.Add(-2 * day), IncludeArchived: true, Scopes: []string{"user:1"}}, pick(bare, "u1", "u2", "u3", "u4")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertItemsEqual(t, exportAll(t, s, tt.f), tt.want)
		})
	}

	if err := s.Export(t.Context(), ExportFilter{Types: []memory.Type{"bogus"}}, func(memory.Item) error { return nil }); err == nil {
		t.Fatal("Export with an unknown type succeeded")
	}
}

func TestExportStopsOnError(t *testing.T) {
	s, _ := newStore(t)
	s.importBatch = 500
	const n = 3000
	items := make([]memory.Item, n)
	for i := range items {
		items[i] = item(fmt.Sprintf("m%05d", i), fmt.Sprintf("user:%03d", i%100), memory.Episodic, "",
			fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 200)), 0.5, 0)
	}
	if res := importSlice(t, s, items); res.Inserted != n {
		t.Fatalf("Import = %+v", res)
	}
	stop := errors.New("stop")
	calls := 0
	var last memory.Item
	err := s.Export(t.Context(), ExportFilter{}, func(it memory.Item) error {
		calls++
		last = it
		if calls == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 5 {
		t.Fatalf("Export = %v after %d calls, want fn's error after 5", err, calls)
	}
	// Rows arrive in (scope, memory_id) order: user:000 holds m00000, m00100, ...
	if last.MemoryID != "m00400" || last.Scope != "user:000" {
		t.Fatalf("5th item = %s in %s, want m00400 in user:000", last.MemoryID, last.Scope)
	}
	// The pool is healthy after the abandoned query.
	if c, err := s.Count(t.Context()); err != nil || c != n {
		t.Fatalf("Count after stop = %d, %v", c, err)
	}
	// A full export sees every row once, in order.
	prev := ""
	seen := 0
	if err := s.Export(t.Context(), ExportFilter{}, func(it memory.Item) error {
		k := it.Scope + "\x00" + it.MemoryID
		if k <= prev {
			return fmt.Errorf("out of order: %q after %q", k, prev)
		}
		prev = k
		seen++
		return nil
	}); err != nil || seen != n {
		t.Fatalf("full export: %d items, %v", seen, err)
	}
}

func TestImportIdempotent(t *testing.T) {
	s, pool := newStore(t)
	s.importBatch = 3 // several batches
	items := fixture()
	// Extra items that conflict with earlier ones inside the same import.
	dupContent := item("dup-content", "user:1", memory.Episodic, "", `{"n":1.5,"event":"trip"}`, 0.1, 0) // = u2's content
	dupSlot := item("dup-slot", "user:1", memory.Semantic, "address", `{"city":"Paris"}`, 1, 0)          // u1's slot
	dupSlot.Embedding = []float32{9, 9, 9}                                                               // must not land anywhere
	dupID := item("u2", "user:3", memory.Semantic, "", `{"other":"tenant"}`, 1, 0)                       // u2's id, another scope
	dupID.Embedding = []float32{5}                                                                       // must not attach to u2
	all := append(append([]memory.Item{}, items...), dupContent, dupSlot, dupID)

	res := importSlice(t, s, all)
	if res != (ImportResult{Inserted: 7, Skipped: 3, Embeddings: 3}) {
		t.Fatalf("first Import = %+v, want 7 inserted, 3 skipped, 3 embeddings", res)
	}
	before := exportAll(t, s, ExportFilter{IncludeArchived: true, IncludeEmbeddings: true})
	assertItemsEqual(t, before, items)

	res = importSlice(t, s, all)
	if res != (ImportResult{Inserted: 0, Skipped: 10, Embeddings: 0}) {
		t.Fatalf("second Import = %+v, want nothing inserted", res)
	}
	after := exportAll(t, s, ExportFilter{IncludeArchived: true, IncludeEmbeddings: true})
	assertItemsEqual(t, after, before)
	if got := countRows(t, pool, s.t.vectors, ""); got != 3 {
		t.Fatalf("vectors rows = %d, want 3", got)
	}
	var vtype string
	if err := pool.QueryRow(t.Context(), `SELECT memory_type FROM `+s.t.vectors+` WHERE memory_id = 'a1'`).Scan(&vtype); err != nil || vtype != "procedural" {
		t.Fatalf("vectors.memory_type of a1 = %q, %v", vtype, err)
	}

	// An embedding for an existing memory without one is added on re-import.
	u2 := pick(items, "u2")[0]
	u2.Embedding = []float32{7}
	if res := importSlice(t, s, []memory.Item{u2}); res != (ImportResult{Skipped: 1, Embeddings: 1}) {
		t.Fatalf("Import of an embedding = %+v", res)
	}

	// Export -> Import into another store reproduces the store exactly.
	s2, _ := newStore(t)
	exported := exportAll(t, s, ExportFilter{IncludeArchived: true, IncludeEmbeddings: true})
	if res := importSlice(t, s2, exported); res.Inserted != 7 || res.Embeddings != 4 {
		t.Fatalf("Import into second store = %+v", res)
	}
	assertItemsEqual(t, exportAll(t, s2, ExportFilter{IncludeArchived: true, IncludeEmbeddings: true}), exported)
	// The re-imported content hashes equal Put's: Put of the same content is Unchanged.
	mustPut(t, s2, pick(items, "u2")[0], Unchanged)
	mustPut(t, s2, pick(items, "u1")[0], Unchanged)
}

func TestImportErrors(t *testing.T) {
	s, _ := newStore(t)
	s.importBatch = 2
	items := []memory.Item{
		item("ok1", "user:1", memory.Semantic, "", `{"a":1}`, 1, 0),
		item("ok2", "user:1", memory.Semantic, "", `{"a":2}`, 1, 0),
		item("ok3", "user:1", memory.Semantic, "", `{"a":3}`, 1, 0),
		item("bad", "user:1", memory.Semantic, "", `"a string"`, 1, 0),
	}
	res, err := s.Import(t.Context(), sliceSource(items))
	var fe *memory.FieldError
	if !errors.As(err, &fe) || fe.Field != "content" || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("Import with an invalid item = %v", err)
	}
	// The first full batch committed; the pending one did not.
	if res != (ImportResult{Inserted: 2}) {
		t.Fatalf("result = %+v, want the first batch", res)
	}
	if n, _ := s.Count(t.Context()); n != 2 {
		t.Fatalf("Count = %d, want 2", n)
	}

	boom := errors.New("boom")
	_, err = s.Import(t.Context(), func() (memory.Item, bool, error) { return memory.Item{}, false, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Import with a failing source = %v", err)
	}

	// A cancelled context aborts.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Import(ctx, sliceSource(items[:1])); !errors.Is(err, context.Canceled) {
		t.Fatalf("Import with a cancelled context = %v", err)
	}
}

func TestImportLarge(t *testing.T) {
	s, _ := newStore(t)
	const n = 25000 // crosses DefaultImportBatch twice
	i := 0
	next := func() (memory.Item, bool, error) {
		if i == n {
			return memory.Item{}, false, nil
		}
		it := item(fmt.Sprintf("L%06d", i), fmt.Sprintf("user:%d", i%50), memory.Episodic, "", fmt.Sprintf(`{"i":%d}`, i), 0.5, 0)
		if i%10 == 0 {
			it.Embedding = []float32{float32(i), 1}
		}
		i++
		return it, true, nil
	}
	res, err := s.Import(t.Context(), next)
	if err != nil || res != (ImportResult{Inserted: n, Embeddings: n / 10}) {
		t.Fatalf("Import = %+v, %v", res, err)
	}
	i = 0
	res, err = s.Import(t.Context(), next)
	if err != nil || res != (ImportResult{Skipped: n}) {
		t.Fatalf("re-Import = %+v, %v", res, err)
	}
	if c, _ := s.Count(t.Context()); c != n {
		t.Fatalf("Count = %d, want %d", c, n)
	}
}
