package restore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
)

const day = 24 * time.Hour

// seed stores items through the memory service (hashing embedder), so the store's
// index holds their vectors as an agent would have left them.
func seed(t testing.TB, s *store, items []memory.Item) *service.Memory {
	t.Helper()
	m, err := service.New(s.Store, s.index, embed.NewHashing(s.index.Spec().Dimension))
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < len(items); start += 200 {
		if _, err := m.RememberBatch(context.Background(), items[start:min(start+200, len(items))]); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func hashing(e embed.Embedder) *countingEmbedder { return &countingEmbedder{Embedder: e} }

// item builds a valid item updated age before testNow.
func item(id, scope string, typ memory.Type, key, content string, age time.Duration) memory.Item {
	at := testNow.Add(-age)
	return memory.Item{MemoryID: id, MemoryType: typ, Scope: scope, Key: key, Content: json.RawMessage(content),
		Source: "redis-agent@1.4", BaseScore: 0.5, CreatedAt: at, UpdatedAt: at}
}

func readDetail(t testing.TB, b []byte) []restore.ScopeDetail {
	t.Helper()
	var out []restore.ScopeDetail
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var d restore.ScopeDetail
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("detail line %q: %v", sc.Text(), err)
		}
		out = append(out, d)
	}
	return out
}

func TestRestoreRoundTrip(t *testing.T) {
	e := newEnv(t)
	src := e.newStore(t)
	seed(t, src, dataset(40, 1))
	source := src.exportAll(t)
	pkg := e.snapshotStore(t, src, "snaps/roundtrip/", nil)

	m, err := restore.NewMapper(restore.UnmappedKeep)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]bool{}
	for _, it := range source {
		if strings.HasPrefix(it.Scope, "user:") && !users[it.Scope] {
			users[it.Scope] = true
			if err := m.AddExact(it.Scope, "user:"+strings.Repeat("0", 4)+strings.TrimPrefix(it.Scope, "user:")+"-uuid"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := m.AddPrefix("session:", "session:legacy-"); err != nil {
		t.Fatal(err)
	}

	var (
		want                         []memory.Item
		expired, vectors, mapped     int64
		scopes, mappedScopes, agents = map[string]bool{}, map[string]bool{}, 0
		byType                       = map[memory.Type]int64{}
	)
	for _, it := range source {
		if it.ExpiresAt != nil && !it.ExpiresAt.After(testNow) {
			expired++
			continue
		}
		want = append(want, it)
		byType[it.MemoryType]++
		if it.ArchivedAt == nil {
			vectors++
		}
		scopes[it.Scope] = true
		if strings.HasPrefix(it.Scope, "agent:") {
			agents++
		} else {
			mapped++
			mappedScopes[it.Scope] = true
		}
	}
	if expired == 0 || byType[memory.Working] == 0 || agents == 0 {
		t.Fatalf("the data set lacks expired (%d), working (%d) or agent (%d) memories", expired, byType[memory.Working], agents)
	}

	dst := e.newStore(t)
	emb := hashing(embed.NewHashing(dim))
	var detail bytes.Buffer
	res := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: emb, Mapping: m,
		Types: memory.AllTypes(), Detail: &detail, BatchSize: 50})

	assertSameItems(t, dst.exportAll(t), mapItems(t, m, want))
	wantRes := restore.Result{PackageID: pkg.Manifest().PackageID, FormatVersion: snapshot.FormatVersion, Shards: 1, Embeddings: restore.Reuse,
		Read: int64(len(source)), Restored: int64(len(want)), Inserted: int64(len(want)), RestoredByType: byType,
		Skipped: restore.Skipped{Expired: expired}, Mapped: mapped, Scopes: int64(len(scopes)), MappedScopes: int64(len(mappedScopes)),
		Vectors: vectors, Batches: (int64(len(want)) + 49) / 50}
	assertResult(t, res, wantRes)
	if n := emb.texts.Load(); n != 0 {
		t.Fatalf("the package's vectors match the target's model, yet %d texts were embedded", n)
	}

	// One detail line per package scope, in scope order.
	lines := readDetail(t, detail.Bytes())
	if len(lines) != len(scopes) {
		t.Fatalf("%d detail lines for %d scopes", len(lines), len(scopes))
	}
	if !slices.IsSortedFunc(lines, func(a, b restore.ScopeDetail) int { return strings.Compare(a.Scope, b.Scope) }) {
		t.Fatal("detail lines are not in scope order")
	}
	var total int64
	for _, l := range lines {
		to, _, _ := m.Map(l.Scope)
		if l.MappedTo != to {
			t.Fatalf("detail %+v: mapped_to, want %s", l, to)
		}
		total += l.Restored + l.SkippedByReason.Total()
	}
	if total != res.Read {
		t.Fatalf("detail lines add up to %d items, read %d", total, res.Read)
	}
	if !bytes.Contains(detail.Bytes(), []byte(`{"scope":"agent:support","mapped_to":"agent:support","restored":2,"skipped_by_reason":{}}`)) {
		t.Fatalf("detail:\n%s", detail.Bytes())
	}
}

// assertResult compares results, ignoring nothing: zero fields must be zero.
func assertResult(t testing.TB, got *restore.Result, want restore.Result) {
	t.Helper()
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("result\ngot  %s\nwant %s", gb, wb)
	}
}

func TestRestoreTypesAndExpiry(t *testing.T) {
	e := newEnv(t)
	exp := func(it memory.Item, at time.Time) memory.Item { it.ExpiresAt = &at; return it }
	items := []memory.Item{
		item("sem", "user:1", memory.Semantic, "k", `{"v":1}`, day),
		item("epi", "user:1", memory.Episodic, "", `{"v":2}`, day),
		item("pro", "agent:a", memory.Procedural, "how", `{"v":3}`, day),
		exp(item("work", "user:1", memory.Working, "", `{"v":4}`, time.Hour), testNow.Add(time.Hour)),
		exp(item("work-old", "user:1", memory.Working, "", `{"v":5}`, 2*time.Hour), testNow.Add(-time.Hour)),
		exp(item("epi-old", "user:1", memory.Episodic, "", `{"v":6}`, 2*day), testNow),                    // expires exactly now
		exp(item("epi-later", "user:1", memory.Episodic, "", `{"v":7}`, 2*day), testNow.Add(time.Second)), // not yet
	}
	pkg := e.writePackage(t, "p/types/", items, pkgOptions{key: testKey})

	// Default: every type but working. The type is judged before expiry.
	dst := e.newStore(t)
	res := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: nil})
	if res.Restored != 4 || res.Skipped != (restore.Skipped{Type: 2, Expired: 1}) || res.Embeddings != restore.Defer || res.Vectors != 0 {
		t.Fatalf("result %+v", res)
	}
	got := ids(dst.exportAll(t))
	if want := []string{"epi", "epi-later", "pro", "sem"}; !slices.Equal(got, want) {
		t.Fatalf("restored %v, want %v", got, want)
	}

	// Working memory only when asked for, still not when expired.
	dst = e.newStore(t)
	res = run(t, restore.Options{Reader: pkg, Target: dst.Store, Types: []memory.Type{memory.Working}, Embeddings: restore.Defer, Index: dst.index})
	if res.Restored != 1 || res.Skipped != (restore.Skipped{Type: 5, Expired: 1}) {
		t.Fatalf("result %+v", res)
	}
	if got := ids(dst.exportAll(t)); !slices.Equal(got, []string{"work"}) {
		t.Fatalf("restored %v", got)
	}
}

func ids(items []memory.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.MemoryID
	}
	slices.Sort(out)
	return out
}

func scopesOf(items []memory.Item) []string {
	var out []string
	for _, it := range items {
		if !slices.Contains(out, it.Scope) {
			out = append(out, it.Scope)
		}
	}
	slices.Sort(out)
	return out
}

// A forgotten user does not come back: not from an older snapshot restored into a
// store that has the tombstone, nor from a package that holds both the user's items
// and its tombstone.
func TestRestoreTombstonesAndDenylist(t *testing.T) {
	e := newEnv(t)
	src := e.newStore(t)
	mem := seed(t, src, []memory.Item{
		item("u1", "user:1", memory.Semantic, "coffee", `{"drink":"tea"}`, day),
		item("u2a", "user:2", memory.Semantic, "coffee", `{"drink":"mocha"}`, day),
		item("u2b", "user:2", memory.Episodic, "", `{"event":"complained"}`, day),
		item("u3", "user:3", memory.Semantic, "", `{"fact":"has a dog"}`, day),
	})
	older := e.snapshotStore(t, src, "snaps/older/", nil)
	if _, err := mem.Forget(context.Background(), "user:2", "user asked", "test"); err != nil {
		t.Fatal(err)
	}
	newer := e.snapshotStore(t, src, "snaps/newer/", nil)
	if ts := newer.Manifest().Tombstones; ts.Count != 1 || ts.Entries[0].Scope != "user:2" {
		t.Fatalf("newer package tombstones %+v", ts)
	}

	m, err := restore.NewMapper(restore.UnmappedFail)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]string{{"user:1", "user:a1"}, {"user:2", "user:a2"}, {"user:3", "user:a3"}} {
		if err := m.AddExact(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	dst := e.newStore(t)
	emb := hashing(embed.NewHashing(dim))
	opts := restore.Options{Target: dst.Store, Index: dst.index, Embedder: emb, Mapping: m}

	opts.Reader = newer
	res := run(t, opts)
	if res.Restored != 2 || res.Tombstones != 1 {
		t.Fatalf("newer: %+v", res)
	}
	tombs, err := dst.Tombstones(context.Background())
	if err != nil || len(tombs) != 1 || tombs[0].Scope != "user:a2" || tombs[0].Reason != "user asked" {
		t.Fatalf("target tombstones %+v, %v", tombs, err)
	}

	opts.Reader = older
	res = run(t, opts)
	if res.Restored != 0 || res.Unchanged != 2 || res.Skipped != (restore.Skipped{Tombstoned: 2}) || res.Vectors != 0 {
		t.Fatalf("older into a store with the tombstone: %+v", res)
	}
	if got := scopesOf(dst.exportAll(t)); !slices.Equal(got, []string{"user:a1", "user:a3"}) {
		t.Fatalf("target scopes %v", got)
	}
	if n := len(dst.vectorsOf(t)); n != 2 {
		t.Fatalf("%d vectors", n)
	}

	// A package's tombstone covers its scope's items created up to it, even though the
	// package holds them, and travels to the target under the mapped name; an item
	// created after it (the user came back) is restored. Unmapped tombstones (Skip) do
	// not travel: their scope has no known identity in the target.
	pkg := e.writePackage(t, "p/own-tombstone/", []memory.Item{
		item("x1", "user:9", memory.Semantic, "k", `{"v":1}`, day),
		item("x2", "user:9", memory.Episodic, "", `{"v":2}`, 2*day),
		item("x3", "user:9", memory.Episodic, "", `{"v":"back"}`, 0),
		item("y1", "user:8", memory.Semantic, "k", `{"v":3}`, day),
		item("z1", "user:7", memory.Semantic, "k", `{"v":4}`, day),
		item("s1", "session:a", memory.Episodic, "", `{"v":5}`, day),
		item("s2", "session:b", memory.Episodic, "", `{"v":6}`, day),
		item("w1", "user:test-1", memory.Episodic, "", `{"v":7}`, day),
	}, pkgOptions{key: testKey, tombstones: []memory.Tombstone{
		{Scope: "user:9", ForgottenAt: testNow.Add(-day), Reason: "gdpr"},
		{Scope: "user:6", ForgottenAt: testNow.Add(-2 * day)},
	}})
	m2, err := restore.NewMapper(restore.UnmappedSkip)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]string{{"user:9", "user:b9"}, {"user:8", "user:b8"}, {"session:a", "session:b-a"}, {"user:test-1", "user:b-test"}} {
		if err := m2.AddExact(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	dst2 := e.newStore(t)
	var detail bytes.Buffer
	res = run(t, restore.Options{Reader: pkg, Target: dst2.Store, Index: dst2.index, Embedder: emb, Mapping: m2,
		Denylist: []string{"session:*", "user:test-*"}, Detail: &detail})
	if res.Restored != 2 || res.Skipped != (restore.Skipped{Tombstoned: 2, Denylisted: 3, Unmapped: 1}) || res.Tombstones != 1 {
		t.Fatalf("result %+v", res)
	}
	if got := ids(dst2.exportAll(t)); !slices.Equal(got, []string{"x3", "y1"}) {
		t.Fatalf("restored %v", got)
	}
	tombs, _ = dst2.Tombstones(context.Background())
	if len(tombs) != 1 || tombs[0].Scope != "user:b9" || tombs[0].Reason != "gdpr" || !tombs[0].ForgottenAt.Equal(testNow.Add(-day)) {
		t.Fatalf("target tombstones %+v", tombs)
	}
	wantDetail := `{"scope":"session:a","restored":0,"skipped_by_reason":{"denylisted":1}}
{"scope":"session:b","restored":0,"skipped_by_reason":{"denylisted":1}}
{"scope":"user:7","restored":0,"skipped_by_reason":{"unmapped":1}}
{"scope":"user:8","mapped_to":"user:b8","restored":1,"skipped_by_reason":{}}
{"scope":"user:9","mapped_to":"user:b9","restored":1,"skipped_by_reason":{"tombstoned":2}}
{"scope":"user:test-1","restored":0,"skipped_by_reason":{"denylisted":1}}
`
	if detail.String() != wantDetail {
		t.Fatalf("detail:\n%s\nwant:\n%s", detail.String(), wantDetail)
	}
}

// conflictTarget is a target store holding memories that a package meets: the
// package's user:1 maps to the target's user:new1.
func conflictTarget(t *testing.T, e *env) *store {
	t.Helper()
	dst := e.newStore(t)
	for _, it := range []memory.Item{
		item("t-coffee", "user:new1", memory.Semantic, "preference.coffee", `{"drink":"tea"}`, 5*day), // older than the package's
		item("t-city", "user:new1", memory.Semantic, "address.city", `{"city":"Rome"}`, day),          // newer than the package's
		item("t-fact", "user:new1", memory.Semantic, "", `{"fact":"likes jazz"}`, 4*day),              // same content
		item("p-event", "user:other", memory.Episodic, "", `{"event":"other user"}`, day),             // same memory_id
	} {
		if _, err := dst.Put(context.Background(), it); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func conflictPackage(t *testing.T, e *env, prefix string) (*snapshot.Reader, *restore.Mapper) {
	t.Helper()
	pkg := e.writePackage(t, prefix, []memory.Item{
		item("p-coffee", "user:1", memory.Semantic, "preference.coffee", `{"drink":"espresso"}`, 2*day),
		item("p-city", "user:1", memory.Semantic, "address.city", `{"city":"Lisbon"}`, 3*day),
		item("p-fact", "user:1", memory.Semantic, "", `{"fact":"likes jazz"}`, day),
		item("p-event", "user:1", memory.Episodic, "", `{"event":"asked for a refund"}`, day),
		item("p-new", "user:1", memory.Semantic, "food", `{"diet":"vegan"}`, day),
	}, pkgOptions{key: testKey})
	m, err := restore.NewMapper(restore.UnmappedFail)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddExact("user:1", "user:new1"); err != nil {
		t.Fatal(err)
	}
	return pkg, m
}

func TestRestoreConflictPolicies(t *testing.T) {
	e := newEnv(t)
	pkg, m := conflictPackage(t, e, "p/conflicts/")
	hist := func(content string, updated, superseded time.Duration) memory.Revision {
		return memory.Revision{Content: json.RawMessage(content), Source: "redis-agent@1.4", BaseScore: 0.5,
			UpdatedAt: testNow.Add(-updated), SupersededAt: testNow.Add(-superseded)}
	}
	type row struct {
		content string
		updated time.Duration
		history []memory.Revision
	}
	for _, tc := range []struct {
		policy restore.ConflictPolicy
		rows   map[string]row // by memory_id, in user:new1
		want   restore.Result
	}{
		{restore.KeepNewer, map[string]row{
			"t-coffee": {`{"drink":"espresso"}`, 2 * day, []memory.Revision{hist(`{"drink":"tea"}`, 5*day, 2*day)}},
			"t-city":   {`{"city":"Rome"}`, day, []memory.Revision{hist(`{"city":"Lisbon"}`, 3*day, day)}},
			"t-fact":   {`{"fact":"likes jazz"}`, 4 * day, nil},
			"p-new":    {`{"diet":"vegan"}`, day, nil},
		}, restore.Result{Restored: 2, Inserted: 1, Replaced: 1, Unchanged: 1, Skipped: restore.Skipped{Conflict: 1, IDInUseByOtherScope: 1},
			HistoryRecorded: 1, Vectors: 2, Embedded: 2}},
		{restore.Overwrite, map[string]row{
			"t-coffee": {`{"drink":"espresso"}`, 2 * day, []memory.Revision{hist(`{"drink":"tea"}`, 5*day, 2*day)}},
			"t-city":   {`{"city":"Lisbon"}`, 3 * day, []memory.Revision{hist(`{"city":"Rome"}`, day, 3*day)}},
			"t-fact":   {`{"fact":"likes jazz"}`, day, nil}, // same content, the package's metadata
			"p-new":    {`{"diet":"vegan"}`, day, nil},
		}, restore.Result{Restored: 4, Inserted: 1, Replaced: 3, Skipped: restore.Skipped{IDInUseByOtherScope: 1},
			Vectors: 4, Embedded: 4}},
		{restore.Skip, map[string]row{
			"t-coffee": {`{"drink":"tea"}`, 5 * day, nil},
			"t-city":   {`{"city":"Rome"}`, day, nil},
			"t-fact":   {`{"fact":"likes jazz"}`, 4 * day, nil},
			"p-new":    {`{"diet":"vegan"}`, day, nil},
		}, restore.Result{Restored: 1, Inserted: 1, Unchanged: 1, Skipped: restore.Skipped{Conflict: 2, IDInUseByOtherScope: 1},
			Vectors: 1, Embedded: 1}},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			dst := conflictTarget(t, e)
			other, err := dst.Get(context.Background(), "p-event")
			if err != nil {
				t.Fatal(err)
			}
			emb := hashing(embed.NewHashing(dim))
			// user:new1 is live in the target: restoring user:1 into it is asked for.
			rec := &newRecordingIndex{Index: dst.index, isNew: map[string]bool{}}
			res := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: rec, Embedder: emb, Mapping: m, Conflict: tc.policy, IntoExisting: true})
			// Only the inserted memory's vector is New (Milvus may insert it during a
			// fresh load); a replaced one may have a vector another writer wrote.
			if !rec.isNew["p-new"] {
				t.Errorf("the inserted memory's vector was not written as New: %v", rec.isNew)
			}
			for id, isNew := range rec.isNew {
				if isNew != (id == "p-new") {
					t.Errorf("vector of %s written with New=%v", id, isNew)
				}
			}

			want := tc.want
			want.PackageID, want.FormatVersion, want.Shards, want.Embeddings = pkg.Manifest().PackageID, snapshot.FormatVersion, 1, restore.Reembed
			want.Read, want.Mapped, want.Scopes, want.MappedScopes, want.Batches = 5, 5, 1, 1, 1
			want.RestoredByType = map[memory.Type]int64{memory.Semantic: want.Restored}
			assertResult(t, res, want)

			// The rows of user:new1, exactly; the other user's memory untouched.
			var got []memory.Item
			err = dst.Export(context.Background(), pgstore.ExportFilter{Scopes: []string{"user:new1"}}, func(it memory.Item) error {
				got = append(got, it)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.rows) {
				t.Fatalf("user:new1 holds %v", ids(got))
			}
			for _, it := range got {
				w, ok := tc.rows[it.MemoryID]
				if !ok {
					t.Fatalf("unexpected memory %s", it.MemoryID)
				}
				wantItem := it
				wantItem.Content, wantItem.UpdatedAt, wantItem.History = json.RawMessage(w.content), testNow.Add(-w.updated), w.history
				assertSameItems(t, []memory.Item{it}, []memory.Item{wantItem})
			}
			if now, _ := dst.Get(context.Background(), "p-event"); now.Scope != "user:other" || !bytes.Equal(now.Content, other.Content) {
				t.Fatalf("the other user's memory changed: %+v", now)
			}
			// Vectors of the written memories come from the target's embedder, under
			// the memory_id of the slot they were merged into.
			vecs := dst.vectorsOf(t)
			if int64(len(vecs)) != want.Vectors {
				t.Fatalf("%d vectors, want %d", len(vecs), want.Vectors)
			}
			if tc.policy != restore.Skip {
				stored, _ := dst.Get(context.Background(), "t-coffee")
				wantVec, _ := embed.NewHashing(dim).Embed(context.Background(), embed.Passage, []string{stored.EmbeddingText()})
				if !vectorsClose(vecs["t-coffee"], wantVec[0]) {
					t.Fatalf("t-coffee vector %v, want %v", vecs["t-coffee"], wantVec[0])
				}
			}

			// Again: nothing changes, nothing recorded twice.
			before := dst.dump(t)
			res = run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: emb, Mapping: m, Conflict: tc.policy, IntoExisting: true})
			assertSameDump(t, dst.dump(t), before)
			wantConflict := int64(5) - tc.want.Restored - tc.want.Unchanged
			if res.Restored != 0 || res.Unchanged != 5-wantConflict || res.Skipped.Conflict+res.Skipped.IDInUseByOtherScope != wantConflict || res.Vectors != 0 {
				t.Fatalf("second run: %+v", res)
			}
		})
	}
}

// A memory whose value a restore replaces must not keep its old vector: under Defer
// (no new vector yet) and when the package's value is archived.
func TestRestoreDropsStaleVectors(t *testing.T) {
	e := newEnv(t)
	dst := e.newStore(t)
	seed(t, dst, []memory.Item{
		item("t-1", "user:1", memory.Semantic, "coffee", `{"drink":"tea"}`, 3*day),
		item("t-2", "user:1", memory.Semantic, "city", `{"city":"Rome"}`, 3*day),
		item("t-3", "user:1", memory.Semantic, "food", `{"diet":"vegan"}`, 3*day),
	})
	archived := item("p-2", "user:1", memory.Semantic, "city", `{"city":"Lisbon"}`, day)
	archived.ArchivedAt = ptr(testNow.Add(-time.Hour))
	pkg := e.writePackage(t, "p/stale/", []memory.Item{
		item("p-1", "user:1", memory.Semantic, "coffee", `{"drink":"espresso"}`, day),
		archived,
		item("p-4", "user:1", memory.Semantic, "music", `{"likes":"jazz"}`, day),
	}, pkgOptions{key: testKey})
	res := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embeddings: restore.Defer})
	if res.Replaced != 2 || res.Inserted != 1 || res.Vectors != 0 || res.VectorsDeleted != 2 {
		t.Fatalf("result %+v", res)
	}
	vecs := dst.vectorsOf(t)
	if _, ok := vecs["t-3"]; !ok || len(vecs) != 1 {
		t.Fatalf("vectors of %v remain, want only t-3's", slices.Sorted(maps.Keys(vecs)))
	}
}

func TestRestoreCrossStoreReuse(t *testing.T) {
	e := newEnv(t)
	src := e.newStore(t)
	seed(t, src, dataset(15, 2))
	srcVecs := src.vectorsOf(t)
	pkg := e.snapshotStore(t, src, "snaps/pg/", nil)
	if pkg.Manifest().Counts.WithEmbedding != int64(len(srcVecs)) {
		t.Fatalf("package has %d embeddings, store %d", pkg.Manifest().Counts.WithEmbedding, len(srcVecs))
	}

	// PostgreSQL index -> Milvus, reusing the package's vectors.
	mc := milvusClient(t)
	mil := newMilvusIndex(t, mc, spec16)
	mstore := e.newStore(t)
	emb := hashing(embed.NewHashing(dim))
	res := run(t, restore.Options{Reader: pkg, Target: mstore.Store, Index: mil, Embedder: emb, Types: memory.AllTypes()})
	if res.Embeddings != restore.Reuse || emb.texts.Load() != 0 || res.Embedded != 0 {
		t.Fatalf("reuse: %+v, %d texts embedded", res, emb.texts.Load())
	}
	restoredIDs := ids(mstore.exportAll(t))
	got, err := mil.Fetch(context.Background(), restoredIDs)
	if err != nil {
		t.Fatal(err)
	}
	wantVecs := map[string][]float32{}
	for _, id := range restoredIDs {
		if v, ok := srcVecs[id]; ok {
			wantVecs[id] = v
		}
	}
	assertSameVectors(t, got, wantVecs)
	if res.Vectors != int64(len(wantVecs)) {
		t.Fatalf("%d vectors written, want %d", res.Vectors, len(wantVecs))
	}

	// And back: Milvus -> a package -> a PostgreSQL index.
	back := e.snapshotStore(t, mstore, "snaps/milvus/", mil)
	pg2 := e.newStore(t)
	res = run(t, restore.Options{Reader: back, Target: pg2.Store, Index: pg2.index, Embedder: emb, Types: memory.AllTypes()})
	if res.Embeddings != restore.Reuse || emb.texts.Load() != 0 {
		t.Fatalf("reuse back: %+v", res)
	}
	assertSameVectors(t, pg2.vectorsOf(t), wantVecs)
	assertSameItems(t, withoutEmbeddings(pg2.exportAll(t)), mstore.exportAll(t)) // mstore's vectors are in Milvus
}

func withoutEmbeddings(items []memory.Item) []memory.Item {
	for i := range items {
		items[i].Embedding = nil
	}
	return items
}

func assertSameVectors(t testing.TB, got, want map[string][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d vectors, want %d", len(got), len(want))
	}
	for id, w := range want {
		if !vectorsClose(got[id], w) {
			t.Fatalf("vector of %s = %v, want %v", id, got[id], w)
		}
	}
}

func TestRestoreModelMismatch(t *testing.T) {
	e := newEnv(t)
	src := e.newStore(t)
	seed(t, src, dataset(10, 3))
	pkg := e.snapshotStore(t, src, "snaps/model/", nil)
	var restorable, live int64 // restorable types, not expired; live: not archived either
	for _, it := range src.exportAll(t) {
		if it.MemoryType != memory.Working && (it.ExpiresAt == nil || it.ExpiresAt.After(testNow)) {
			restorable++
			if it.ArchivedAt == nil {
				live++
			}
		}
	}
	if live == restorable {
		t.Fatal("the data set has no archived memories")
	}

	// The target's model has another dimension: Reuse falls back to re-embedding,
	// and the vectors are the target embedder's.
	spec8 := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	dst := e.newStoreSpec(t, spec8)
	h8 := embed.NewHashing(8)
	emb := hashing(h8)
	res := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: emb})
	if res.Embeddings != restore.Reembed || res.Vectors != live || res.Embedded != live || emb.texts.Load() != live {
		t.Fatalf("reembed: %+v (%d texts)", res, emb.texts.Load())
	}
	vecs := dst.vectorsOf(t)
	for _, it := range dst.exportAll(t) {
		if it.ArchivedAt != nil {
			if _, ok := vecs[it.MemoryID]; ok {
				t.Fatalf("archived %s has a vector", it.MemoryID)
			}
			continue
		}
		want, _ := h8.Embed(context.Background(), embed.Passage, []string{it.EmbeddingText()})
		if !vectorsClose(vecs[it.MemoryID], want[0]) {
			t.Fatalf("%s: vector %v, want the target embedder's %v", it.MemoryID, vecs[it.MemoryID], want[0])
		}
	}

	// Same dimension, another model name: not the same space either.
	dst = e.newStore(t)
	other := &countingEmbedder{Embedder: embed.NewHashing(dim), model: "acme/other-v2"}
	res = run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: other})
	if res.Embeddings != restore.Reembed || res.Embedded != live {
		t.Fatalf("other model: %+v", res)
	}

	// Reuse falling back to Defer, Defer itself, and no index at all: no vectors.
	for _, o := range []restore.Options{
		{Embedder: other, ReuseFallback: restore.Defer},
		{Embedder: other, Embeddings: restore.Defer},
		{Embeddings: restore.Defer},
	} {
		dst = e.newStore(t)
		o.Reader, o.Target, o.Index = pkg, dst.Store, dst.index
		res = run(t, o)
		if res.Embeddings != restore.Defer || res.Vectors != 0 || res.Embedded != 0 || res.Restored != restorable {
			t.Fatalf("defer: %+v", res)
		}
		if n := len(dst.vectorsOf(t)); n != 0 {
			t.Fatalf("defer wrote %d vectors", n)
		}
	}
	if _, err := restore.Run(context.Background(), restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embeddings: restore.Reembed}); err == nil {
		t.Fatal("Reembed without an embedder: no error")
	}
	if _, err := restore.Run(context.Background(), restore.Options{Reader: pkg, Target: dst.Store, Embedder: h8, Embeddings: restore.Reuse}); err == nil {
		t.Fatal("Reuse without an index: no error")
	}
	if _, err := restore.Run(context.Background(), restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: h8, Embeddings: restore.Reembed}); !errors.Is(err, vector.ErrDimensionMismatch) {
		t.Fatalf("embedder of another dimension than the index: %v", err)
	}
}

func TestRestoreDryRun(t *testing.T) {
	e := newEnv(t)
	pkg, m := conflictPackage(t, e, "p/dry/")
	for _, policy := range []restore.ConflictPolicy{restore.KeepNewer, restore.Overwrite, restore.Skip} {
		t.Run(string(policy), func(t *testing.T) {
			dst := conflictTarget(t, e)
			if _, err := dst.ApplyTombstones(context.Background(), []memory.Tombstone{{Scope: "user:gone", ForgottenAt: testNow}}, pgstore.ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			emb := hashing(embed.NewHashing(dim))
			opts := restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: emb, Mapping: m, Conflict: policy, IntoExisting: true}
			dryThenReal(t, dst, opts, func() {
				if emb.texts.Load() != 0 {
					t.Fatal("a dry run called the embedder")
				}
			})
		})
	}
	// A package with tombstones and mappings: still nothing written, same counts.
	src := e.newStore(t)
	mem := seed(t, src, dataset(20, 4))
	if _, err := mem.Forget(context.Background(), "user:1003", "test", "test"); err != nil {
		t.Fatal(err)
	}
	big := e.snapshotStore(t, src, "snaps/dry/", nil)
	mapper := exactMapper(t, src.exportAll(t), restore.UnmappedKeep)
	dst := e.newStore(t)
	before := dst.dump(t)
	opts := restore.Options{Reader: big, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Mapping: mapper, DryRun: true, BatchSize: 7}
	dry := run(t, opts)
	assertSameDump(t, dst.dump(t), before)
	opts.DryRun = false
	full := run(t, opts)
	dry.DryRun = false
	assertResult(t, dry, *full)
	if full.Tombstones != 1 || full.Restored == 0 {
		t.Fatalf("full run: %+v", full)
	}
}

func TestRestoreRefusesBadPackages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	items := []memory.Item{
		item("a", "user:1", memory.Semantic, "k", `{"v":1}`, day),
		item("b", "user:2", memory.Semantic, "k", `{"v":2}`, day),
	}
	tomb := []memory.Tombstone{{Scope: "user:3", ForgottenAt: testNow}}
	dst := e.newStore(t)
	if _, err := dst.Put(ctx, item("t", "user:9", memory.Semantic, "", `{"v":9}`, day)); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.ApplyTombstones(ctx, []memory.Tombstone{{Scope: "user:8", ForgottenAt: testNow}}, pgstore.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	before := dst.dump(t)
	unchanged := func(t *testing.T) {
		t.Helper()
		assertSameDump(t, dst.dump(t), before)
	}
	opts := func(r *snapshot.Reader) restore.Options {
		return restore.Options{Reader: r, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Now: testNow}
	}

	t.Run("tampered shard", func(t *testing.T) {
		pkg := e.writePackage(t, "bad/tampered/", items, pkgOptions{key: testKey, tombstones: tomb})
		e.tamperFirstShard(t, pkg)
		_, err := restore.Run(ctx, opts(pkg))
		if !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
		unchanged(t)
	})
	t.Run("wrong key", func(t *testing.T) {
		e.writePackage(t, "bad/key/", items, pkgOptions{key: testKey, tombstones: tomb})
		if _, err := snapshot.Open(ctx, e.obj, "bad/key/", otherKey); !errors.Is(err, snapshot.ErrWrongKey) {
			t.Fatalf("err = %v, want ErrWrongKey", err)
		}
		unchanged(t)
	})
	t.Run("future format version", func(t *testing.T) {
		e.writePackage(t, "bad/future/", items, pkgOptions{tombstones: tomb})
		rc, err := e.obj.Get(ctx, "bad/future/manifest.json")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(rc)
		_ = rc.Close()
		raw = bytes.Replace(raw, fmt.Appendf(nil, `"formatVersion": %d`, snapshot.FormatVersion), fmt.Appendf(nil, `"formatVersion": %d`, snapshot.FormatVersion+1), 1)
		if _, err := e.obj.Put(ctx, "bad/future/manifest.json", bytes.NewReader(raw)); err != nil {
			t.Fatal(err)
		}
		if _, err := snapshot.Open(ctx, e.obj, "bad/future/", nil); !errors.Is(err, snapshot.ErrUnsupportedVersion) {
			t.Fatalf("err = %v, want ErrUnsupportedVersion", err)
		}
		unchanged(t)
	})
	t.Run("unmapped scope under Fail", func(t *testing.T) {
		pkg := e.writePackage(t, "bad/unmapped/", items, pkgOptions{key: testKey, tombstones: tomb})
		m, _ := restore.NewMapper(restore.UnmappedFail)
		if err := m.AddExact("user:1", "user:one"); err != nil {
			t.Fatal(err)
		}
		o := opts(pkg)
		o.Mapping = m
		_, err := restore.Run(ctx, o)
		if !errors.Is(err, restore.ErrUnmapped) || !strings.Contains(err.Error(), "user:2") {
			t.Fatalf("err = %v, want ErrUnmapped naming user:2", err)
		}
		unchanged(t)
	})
	t.Run("prefix rule producing an invalid scope", func(t *testing.T) {
		long := item("c", "user:"+strings.Repeat("x", 150), memory.Semantic, "k", `{"v":3}`, day)
		pkg := e.writePackage(t, "bad/prefix/", append(slices.Clone(items), long), pkgOptions{key: testKey, tombstones: tomb})
		m, _ := restore.NewMapper(restore.UnmappedKeep)
		if err := m.AddPrefix("user:", "user:"+strings.Repeat("y", 60)); err != nil {
			t.Fatal(err)
		}
		o := opts(pkg)
		o.Mapping = m
		if _, err := restore.Run(ctx, o); err == nil || !strings.Contains(err.Error(), "invalid scope") {
			t.Fatalf("err = %v", err)
		}
		unchanged(t)
	})
	t.Run("bad options", func(t *testing.T) {
		pkg := e.writePackage(t, "bad/options/", items, pkgOptions{key: testKey, tombstones: tomb})
		for _, mod := range []func(*restore.Options){
			func(o *restore.Options) { o.Conflict = "Newest" },
			func(o *restore.Options) { o.Embeddings = "Maybe" },
			func(o *restore.Options) { o.Types = []memory.Type{"dream"} },
			func(o *restore.Options) { o.Denylist = []string{"user 1"} },
			func(o *restore.Options) { o.ReuseFallback = restore.Reuse },
		} {
			o := opts(pkg)
			mod(&o)
			if _, err := restore.Run(ctx, o); err == nil {
				t.Fatalf("options %+v: no error", o)
			}
		}
		unchanged(t)
	})
}

// cancelAfter cancels ctx after the n-th call of its hook.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) hit() {
	if c.n--; c.n == 0 {
		c.cancel()
	}
}

// newRecordingIndex records, by ID, the New mark of every vector written.
type newRecordingIndex struct {
	vector.Index
	isNew map[string]bool
}

func (r *newRecordingIndex) Upsert(ctx context.Context, entries []vector.Entry) error {
	for _, e := range entries {
		r.isNew[e.ID] = e.New
	}
	return r.Index.Upsert(ctx, entries)
}

// cancelingIndex cancels the restore right after writing the n-th batch of vectors,
// before that batch commits: the vectors are in the index, the rows are not.
type cancelingIndex struct {
	vector.Index
	after *cancelAfter
}

func (c *cancelingIndex) Upsert(ctx context.Context, entries []vector.Entry) error {
	err := c.Index.Upsert(ctx, entries)
	c.after.hit()
	return err
}

func TestRestoreInterruptedThenRerun(t *testing.T) {
	e := newEnv(t)
	src := e.newStore(t)
	mem := seed(t, src, dataset(30, 5))
	if _, err := mem.Forget(context.Background(), "user:1004", "test", "test"); err != nil {
		t.Fatal(err)
	}
	pkg := e.snapshotStore(t, src, "snaps/interrupt/", nil)
	mapper := exactMapper(t, src.exportAll(t), restore.UnmappedKeep)
	opts := func(s *store) restore.Options {
		return restore.Options{Reader: pkg, Target: s.Store, Index: s.index, Embedder: embed.NewHashing(dim), Mapping: mapper,
			BatchSize: 10, Now: testNow}
	}

	// The reference: one uninterrupted run.
	ref := e.newStore(t)
	single := run(t, opts(ref))
	want := ref.dump(t)
	if single.Batches < 8 {
		t.Fatalf("only %d batches", single.Batches)
	}

	for _, tc := range []struct {
		name      string
		interrupt func(o *restore.Options, cancel context.CancelFunc)
		committed int64 // batches committed before the interruption
		orphans   bool  // vectors of the uncommitted batch are in the index
	}{
		{"between batches", func(o *restore.Options, cancel context.CancelFunc) {
			c := &cancelAfter{n: 3, cancel: cancel}
			o.Progress = func(restore.Progress) { c.hit() }
		}, 3, false},
		{"after the vectors, before the commit", func(o *restore.Options, cancel context.CancelFunc) {
			o.Index = &cancelingIndex{Index: o.Index, after: &cancelAfter{n: 4, cancel: cancel}}
		}, 3, true},
		{"while embedding", func(o *restore.Options, cancel context.CancelFunc) {
			o.Embeddings = restore.Reembed
			o.Embedder = &cancelingEmbedder{Embedder: o.Embedder, after: &cancelAfter{n: 2, cancel: cancel}}
		}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := e.newStore(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := opts(dst)
			tc.interrupt(&o, cancel)
			partial, err := restore.Run(ctx, o)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run: %v", err)
			}
			if partial.Batches != tc.committed || dst.count(t) != partial.Restored {
				t.Fatalf("interrupted run committed %d batches, %d memories; store holds %d", partial.Batches, partial.Restored, dst.count(t))
			}
			if orphans := int64(len(dst.dump(t).vectors)) > partial.Vectors; orphans != tc.orphans {
				t.Fatalf("%d vectors in the index, %d of committed memories; want orphans %v", len(dst.dump(t).vectors), partial.Vectors, tc.orphans)
			}
			again := run(t, opts(dst))
			assertSameDump(t, dst.dump(t), want)
			if partial.Restored+again.Restored != single.Restored || again.Unchanged != partial.Restored ||
				again.Skipped != single.Skipped || again.Read != single.Read {
				t.Fatalf("rerun %+v after partial %+v; single run %+v", again, partial, single)
			}
		})
	}
}

type cancelingEmbedder struct {
	embed.Embedder
	after *cancelAfter
}

func (c *cancelingEmbedder) Embed(ctx context.Context, role embed.Role, texts []string) ([][]float32, error) {
	c.after.hit()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.Embedder.Embed(ctx, role, texts)
}

// forgettingIndex starts forgetting a scope in the target the first time vectors are
// written (while a batch holding that scope's items is being merged), and waits until
// the forget is held back by the batch before writing them.
type forgettingIndex struct {
	vector.Index
	store   *store
	scope   string
	started bool
	done    chan error
}

func (f *forgettingIndex) Upsert(ctx context.Context, entries []vector.Entry) error {
	if !f.started {
		f.started = true
		go func() {
			_, err := f.store.Forget(context.Background(), f.scope, "user asked during the restore", "test")
			f.done <- err
		}()
		// The store's forget lock (pgstore's key: FNV-64a of its name and the schema).
		h := fnv.New64a()
		h.Write([]byte("memory-operator/pgstore/forget\x00" + f.store.schema))
		key := h.Sum64()
		for {
			var waiting bool
			if err := f.store.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
				AND classid = $1 AND objid = $2 AND objsubid = 1)`, uint32(key>>32), uint32(key)).Scan(&waiting); err != nil {
				return err
			}
			if waiting {
				break
			}
			select {
			case err := <-f.done:
				return fmt.Errorf("the forget did not wait for the batch being merged (err %v)", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return f.Index.Upsert(ctx, entries)
}

// A scope forgotten while a restore runs stays forgotten: the forget waits for the
// batch writing to it, then deletes what it wrote, and no vector of it remains.
func TestRestoreScopeForgottenDuringRestore(t *testing.T) {
	e := newEnv(t)
	items := dataset(6, 9)
	pkg := e.writePackage(t, "p/forget-during/", items, pkgOptions{key: testKey})
	dst := e.newStore(t)
	ix := &forgettingIndex{Index: dst.index, store: dst, scope: "user:1003", done: make(chan error, 1)}
	res := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: ix, Embedder: embed.NewHashing(dim)})
	if err := <-ix.done; err != nil {
		t.Fatal(err)
	}
	if res.Skipped.Tombstoned != 0 || res.Batches != 1 {
		t.Fatalf("result %+v", res)
	}
	d := dst.dump(t)
	for _, rows := range [][]string{d.memories, d.vectors} {
		for _, r := range rows {
			if strings.Contains(r, "user:1003") {
				t.Fatalf("the forgotten scope is back: %s", r)
			}
		}
	}
	// Restoring the package again now skips the scope: its tombstone covers it.
	again := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim)})
	var inScope int64
	for _, it := range items {
		if it.Scope == "user:1003" && it.MemoryType != memory.Working && (it.ExpiresAt == nil || it.ExpiresAt.After(testNow)) {
			inScope++
		}
	}
	if inScope == 0 || again.Skipped.Tombstoned != inScope || again.Restored != 0 {
		t.Fatalf("second restore %+v; %d items of the scope", again, inScope)
	}
}

func TestRestoreIdempotent(t *testing.T) {
	e := newEnv(t)
	src := e.newStore(t)
	seed(t, src, dataset(25, 6))
	pkg := e.snapshotStore(t, src, "snaps/twice/", nil)
	dst := e.newStore(t)
	// Some of the package's slots are already taken, with other values.
	for _, it := range src.exportAll(t)[:10] {
		if it.Key != "" {
			it.MemoryID, it.Content, it.UpdatedAt = "pre-"+it.MemoryID, json.RawMessage(`{"earlier":true}`), it.UpdatedAt.Add(-time.Hour)
			it.History = nil
			if _, err := dst.Put(context.Background(), it); err != nil {
				t.Fatal(err)
			}
		}
	}
	opts := restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), BatchSize: 16, Parallelism: 2}
	first := run(t, opts)
	if first.Replaced == 0 {
		t.Fatalf("no conflicts resolved: %+v", first)
	}
	after := dst.dump(t)
	second := run(t, opts)
	assertSameDump(t, dst.dump(t), after)
	if second.Restored != 0 || second.Unchanged != first.Restored || second.Vectors != 0 || second.Skipped != first.Skipped {
		t.Fatalf("second run %+v after %+v", second, first)
	}
}

// The same queries find the same memories before and after a migration to new IDs.
func TestRestoreRecallConsistency(t *testing.T) {
	e := newEnv(t)
	src := e.newStore(t)
	items := dataset(300, 7)
	srcMem := seed(t, src, items)
	pkg := e.snapshotStore(t, src, "snaps/recall/", nil)
	mapper := exactMapper(t, items, restore.UnmappedFail)
	dst := e.newStore(t)
	res := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Mapping: mapper, Parallelism: 2})
	if res.Embeddings != restore.Reuse || res.Scopes != res.MappedScopes || res.Restored == 0 {
		t.Fatalf("result %+v", res)
	}
	dstMem, err := service.New(dst.Store, dst.index, embed.NewHashing(dim))
	if err != nil {
		t.Fatal(err)
	}
	types := []memory.Type{memory.Episodic, memory.Semantic, memory.Procedural}
	queries := []string{"which coffee drink", "refund for order", "city Lisbon", "diet food", "delivery delay ticket"}
	compared, hits := 0, 0
	for _, scope := range scopesOf(items) {
		to, _, _ := mapper.Map(scope)
		for _, q := range queries {
			before, err := srcMem.Search(context.Background(), service.SearchQuery{Scope: scope, Text: q, Types: types, K: 5, Now: testNow})
			if err != nil {
				t.Fatal(err)
			}
			after, err := dstMem.Search(context.Background(), service.SearchQuery{Scope: to, Text: q, Types: types, K: 5, Now: testNow})
			if err != nil {
				t.Fatal(err)
			}
			if len(before) != len(after) {
				t.Fatalf("%s %q: %d results before, %d after", scope, q, len(before), len(after))
			}
			for i := range before {
				b, a := before[i], after[i]
				if a.Item.MemoryID != b.Item.MemoryID || a.Item.Scope != to || a.Similarity != b.Similarity {
					t.Fatalf("%s %q result %d: before %s (%v), after %s in %s (%v)", scope, q, i,
						b.Item.MemoryID, b.Similarity, a.Item.MemoryID, a.Item.Scope, a.Similarity)
				}
			}
			compared++
			hits += len(before)
		}
	}
	t.Logf("%d queries over %d scopes, %d results, all identical", compared, len(scopesOf(items)), hits)
}

func TestRestoreParallelShards(t *testing.T) {
	e := newEnv(t)
	items := dataset(60, 8)
	// Small shards: many of them, restored by several workers.
	pkg := e.writePackage(t, "p/shards/", items, pkgOptions{key: testKey, shardBytes: 2 << 10,
		tombstones: []memory.Tombstone{{Scope: "user:1010", ForgottenAt: testNow}}})
	if n := len(pkg.Manifest().Shards); n < 10 {
		t.Fatalf("only %d shards", n)
	}
	mapper := exactMapper(t, items, restore.UnmappedKeep)
	var results []*restore.Result
	var dumps []dump
	var details []string
	for _, par := range []int{1, 4} {
		dst := e.newStore(t)
		var detail bytes.Buffer
		results = append(results, run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index,
			Embedder: embed.NewHashing(dim), Mapping: mapper, Parallelism: par, BatchSize: 9, Detail: &detail}))
		dumps = append(dumps, dst.dump(t))
		details = append(details, detail.String())
	}
	assertSameDump(t, dumps[1], dumps[0])
	assertResult(t, results[1], *results[0])
	if details[0] != details[1] {
		t.Fatal("detail differs between serial and parallel runs")
	}
	lines := readDetail(t, []byte(details[0]))
	if len(lines) != len(scopesOf(items)) || !slices.IsSortedFunc(lines, func(a, b restore.ScopeDetail) int { return strings.Compare(a.Scope, b.Scope) }) {
		t.Fatalf("%d detail lines (want %d), sorted %v", len(lines), len(scopesOf(items)), slices.IsSortedFunc(lines, func(a, b restore.ScopeDetail) int { return strings.Compare(a.Scope, b.Scope) }))
	}
	if results[0].Skipped.Tombstoned == 0 {
		t.Fatalf("result %+v", results[0])
	}
}

// The detail is not lost in formatting: every field round-trips.
func TestScopeDetailJSON(t *testing.T) {
	d := restore.ScopeDetail{Scope: "user:1", MappedTo: "user:a", Restored: 3, Unchanged: 1, SkippedByReason: restore.Skipped{Expired: 2, Conflict: 1}}
	b, _ := json.Marshal(d)
	if want := `{"scope":"user:1","mapped_to":"user:a","restored":3,"unchanged":1,"skipped_by_reason":{"expired":2,"conflict":1}}`; string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
}

// Batches of one shard merge at once, yet items that meet the same memory still merge
// in package order: with many scopes mapped onto a few (their slots collide) and the
// order-dependent Overwrite policy, a parallel restore ends exactly like a serial one.
func TestRestoreParallelBatchesKeepOrder(t *testing.T) {
	e := newEnv(t)
	items := dataset(60, 9)
	pkg := e.writePackage(t, "p/one-shard/", items, pkgOptions{key: testKey})
	if n := len(pkg.Manifest().Shards); n != 1 {
		t.Fatalf("%d shards, want 1", n)
	}
	m, err := restore.NewMapper(restore.UnmappedKeep)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scopesOf(items) {
		if strings.HasPrefix(sc, "user:") {
			n, _ := strconv.Atoi(strings.TrimPrefix(sc, "user:"))
			if err := m.AddExact(sc, fmt.Sprintf("user:merged-%d", n%3)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var dumps []dump
	var results []*restore.Result
	for _, par := range []int{1, 4} {
		dst := e.newStore(t)
		results = append(results, run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index,
			Embedder: embed.NewHashing(dim), Mapping: m, Conflict: restore.Overwrite, Parallelism: par, BatchSize: 9, AllowMerge: true}))
		dumps = append(dumps, dst.dump(t))
	}
	assertSameDump(t, dumps[1], dumps[0])
	assertResult(t, results[1], *results[0])
	if results[0].Replaced == 0 {
		t.Fatalf("no slot collided: %+v", results[0])
	}
}

// Rehydrate brings a package's archived memories back live: into a fresh store, and
// into a store that holds them archived; a rerun changes nothing; a dry run only counts.
func TestRestoreRehydrate(t *testing.T) {
	e := newEnv(t)
	items := dataset(20, 11)
	archivedAt := testNow.Add(-24 * time.Hour)
	var archived []string
	for i := range items {
		if i%2 == 0 {
			items[i].ArchivedAt = &archivedAt
		}
		if it := items[i]; it.ArchivedAt != nil && (it.ExpiresAt == nil || it.ExpiresAt.After(testNow)) { // expired ones are not restored
			archived = append(archived, it.MemoryID)
		}
	}
	slices.Sort(archived)
	pkg := e.writePackage(t, "p/cold/", items, pkgOptions{key: testKey})
	opts := func(s *store, rehydrate bool) restore.Options {
		return restore.Options{Reader: pkg, Target: s.Store, Index: s.index, Embedder: embed.NewHashing(dim),
			Types: memory.AllTypes(), Rehydrate: rehydrate, Now: testNow}
	}
	// live returns the memories that are live, and those with a vector.
	live := func(s *store) (liveIDs, indexed []string) {
		vecs := s.vectorsOf(t)
		for _, it := range s.exportAll(t) {
			if it.ArchivedAt == nil {
				liveIDs = append(liveIDs, it.MemoryID)
				if it.UpdatedAt.Before(testNow) && slices.Contains(archived, it.MemoryID) {
					t.Fatalf("%s was rehydrated but its age did not restart (updated_at %s)", it.MemoryID, it.UpdatedAt)
				}
			}
			if vecs[it.MemoryID] != nil {
				indexed = append(indexed, it.MemoryID)
			}
		}
		slices.Sort(liveIDs)
		slices.Sort(indexed)
		return liveIDs, indexed
	}
	all := make([]string, 0, len(items))
	for _, it := range items {
		if it.ExpiresAt == nil || it.ExpiresAt.After(testNow) {
			all = append(all, it.MemoryID)
		}
	}
	slices.Sort(all)

	t.Run("into a fresh store", func(t *testing.T) {
		dst := e.newStore(t)
		res := run(t, opts(dst, true))
		if res.Rehydrated != int64(len(archived)) {
			t.Fatalf("rehydrated %d, want %d", res.Rehydrated, len(archived))
		}
		liveIDs, indexed := live(dst)
		if !slices.Equal(liveIDs, all) || !slices.Equal(indexed, all) {
			t.Fatalf("live %v, indexed %v; want all %v", liveIDs, indexed, all)
		}
	})

	t.Run("into a store that holds them archived", func(t *testing.T) {
		dst := e.newStore(t)
		run(t, opts(dst, false))
		if liveIDs, indexed := live(dst); len(liveIDs) != len(all)-len(archived) || len(indexed) != len(liveIDs) {
			t.Fatalf("without Rehydrate: %d live, %d indexed", len(liveIDs), len(indexed))
		}
		before := dst.dump(t)
		dry := opts(dst, true)
		dry.DryRun = true
		if res := run(t, dry); res.Rehydrated != int64(len(archived)) {
			t.Fatalf("dry run rehydrated %d, want %d", res.Rehydrated, len(archived))
		}
		assertSameDump(t, dst.dump(t), before)

		res := run(t, opts(dst, true))
		if res.Rehydrated != int64(len(archived)) || res.Unchanged != int64(len(all)) {
			t.Fatalf("rehydrated %d (want %d), unchanged %d (want %d)", res.Rehydrated, len(archived), res.Unchanged, len(all))
		}
		liveIDs, indexed := live(dst)
		if !slices.Equal(liveIDs, all) || !slices.Equal(indexed, all) {
			t.Fatalf("live %v, indexed %v; want all %v", liveIDs, indexed, all)
		}
		after := dst.dump(t)
		if res := run(t, opts(dst, true)); res.Rehydrated != 0 {
			t.Fatalf("rerun rehydrated %d", res.Rehydrated)
		}
		assertSameDump(t, dst.dump(t), after)
	})
}

// TestRestoreWrittenPackage: a package the caller wrote itself (Options.Written, an
// import's) restores exactly as when it is read a first time, and what must fail
// before the first write still does: an unmapped scope, two package scopes mapped to
// one (decided from the package's scope list and tombstones). Its one pass still
// checks every checksum.
func TestRestoreWrittenPackage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	items := dataset(20, 7)
	tomb := []memory.Tombstone{{Scope: "user:1003", ForgottenAt: testNow.Add(-24 * time.Hour)}, {Scope: "user:gone", ForgottenAt: testNow}}
	pkg := e.writePackage(t, "written/", items, pkgOptions{key: testKey, tombstones: tomb, shardBytes: 4 << 10})
	if len(pkg.Manifest().Shards) < 2 {
		t.Fatalf("want several shards, got %d", len(pkg.Manifest().Shards))
	}
	m, err := restore.NewMapper(restore.UnmappedKeep)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddPrefix("user:", "user:new-"); err != nil {
		t.Fatal(err)
	}
	opts := func(dst *store, written bool) restore.Options {
		return restore.Options{Reader: pkg, Written: written, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim),
			Mapping: m, Types: memory.AllTypes(), BatchSize: 40, Parallelism: 2}
	}
	read, written := e.newStore(t), e.newStore(t)
	want := run(t, opts(read, false))
	got := run(t, opts(written, true))
	assertResult(t, got, *want)
	assertSameDump(t, written.dump(t), read.dump(t))
	if want.Tombstones != 2 || want.Inserted == 0 {
		t.Fatalf("the package restored %d tombstones and %d memories", want.Tombstones, want.Inserted)
	}

	t.Run("refused before writing", func(t *testing.T) {
		dst := e.newStore(t)
		before := dst.dump(t)
		fail, _ := restore.NewMapper(restore.UnmappedFail)
		if err := fail.AddExact("user:1000", "user:one"); err != nil {
			t.Fatal(err)
		}
		o := opts(dst, true)
		o.Mapping = fail
		if _, err := restore.Run(ctx, o); !errors.Is(err, restore.ErrUnmapped) {
			t.Fatalf("unmapped scope: err = %v, want ErrUnmapped", err)
		}
		merge, _ := restore.NewMapper(restore.UnmappedKeep)
		for _, from := range []string{"user:1000", "user:1001"} {
			if err := merge.AddExact(from, "user:both"); err != nil {
				t.Fatal(err)
			}
		}
		o.Mapping = merge
		if _, err := restore.Run(ctx, o); err == nil || !strings.Contains(err.Error(), "user:1000 and user:1001 to user:both") {
			t.Fatalf("two scopes onto one: err = %v", err)
		}
		assertSameDump(t, dst.dump(t), before)
	})
	t.Run("tampered shard", func(t *testing.T) {
		e.tamperFirstShard(t, e.writePackage(t, "written-bad/", items, pkgOptions{key: testKey, shardBytes: 4 << 10}))
		dst := e.newStore(t)
		o := opts(dst, true)
		o.Reader = e.open(t, "written-bad/", testKey)
		if _, err := restore.Run(ctx, o); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
	})
}
