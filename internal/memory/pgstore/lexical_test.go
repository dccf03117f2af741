package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/testutil"
)

// refBM25 ranks docs for query by the textbook Okapi BM25 (k1 1.2, b 0.75, the
// non-negative idf ln(1 + (N - df + 0.5)/(df + 0.5))), computed here from the
// memories' texts alone: the reference LexicalSearch must agree with.
func refBM25(docs []memory.Item, query string) []LexicalHit {
	tokens := make([][]string, len(docs))
	total := 0
	for i, d := range docs {
		tokens[i] = memory.Terms(d.EmbeddingText())
		total += len(tokens[i])
	}
	n := float64(len(docs))
	avgdl := float64(total) / n
	q := slices.Compact(slices.Sorted(slices.Values(memory.Terms(query))))
	dfs := map[string]int{}
	for _, term := range q {
		for _, toks := range tokens {
			if slices.Contains(toks, term) {
				dfs[term]++
			}
		}
	}
	var hits []LexicalHit
	for i, d := range docs {
		var score float64
		matched := 0
		for _, term := range q {
			df := dfs[term]
			tf := 0
			for _, tok := range tokens[i] {
				if tok == term {
					tf++
				}
			}
			if tf == 0 {
				continue
			}
			matched++
			idf := math.Log(1 + (n-float64(df)+0.5)/(float64(df)+0.5))
			dl := float64(len(tokens[i]))
			score += idf * float64(tf) * 2.2 / (float64(tf) + 1.2*(1-0.75+0.75*dl/avgdl))
		}
		if matched > 0 {
			hits = append(hits, LexicalHit{MemoryID: d.MemoryID, Score: score, Matched: matched})
		}
	}
	slices.SortFunc(hits, func(a, b LexicalHit) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), strings.Compare(a.MemoryID, b.MemoryID))
	})
	return hits
}

func search(t *testing.T, s *Store, q LexicalQuery) []LexicalHit {
	t.Helper()
	if q.K == 0 {
		q.K = 10
	}
	if q.Now.IsZero() {
		q.Now = now
	}
	hits, err := s.LexicalSearch(t.Context(), q)
	if err != nil {
		t.Fatalf("LexicalSearch(%+v): %v", q, err)
	}
	return hits
}

func hitIDs(hits []LexicalHit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.MemoryID
	}
	return out
}

func sameHits(t *testing.T, got, want []LexicalHit) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("hits %v, want %v", got, want)
	}
	for i := range got {
		if got[i].MemoryID != want[i].MemoryID || got[i].Matched != want[i].Matched || math.Abs(got[i].Score-want[i].Score) > 1e-9 {
			t.Fatalf("hit %d = %+v, want %+v\n got  %v\n want %v", i, got[i], want[i], got, want)
		}
	}
}

func textItem(id, scope, key, text string) memory.Item {
	content := fmt.Sprintf(`{"text": %q}`, text)
	return item(id, scope, memory.Episodic, key, content, 0.5, time.Hour)
}

var lexCorpus = []string{
	"I drink coffee with oat milk every morning",
	"coffee coffee coffee: the user really likes coffee",
	"Moved to Berlin in 2019, lives near the Tiergarten",
	"Prefers tea in the evening, never coffee after 6pm",
	"Allergic to peanuts and tree nuts",
	"The quarterly invoice 4711 was paid by bank transfer on 2024-03-05",
	"oat milk latte",
	"Works as a nurse in Munich; commutes by bike",
}

// TestLexicalSearchBM25 holds the scores and the order to the textbook formula,
// counted per scope: the same words in another scope change nothing.
func TestLexicalSearchBM25(t *testing.T) {
	s, _ := newStore(t)
	var docs []memory.Item
	for i, text := range lexCorpus {
		it := textItem(fmt.Sprintf("a%02d", i), "user:a", "", text)
		if i == 7 {
			it = item("a07", "user:a", memory.Semantic, "job", `{"role": "nurse", "city": "Munich", "commute": ["bike", "train"]}`, 1, 0)
		}
		mustPut(t, s, it, Inserted)
		docs = append(docs, it)
	}
	// Another scope full of the query's words: it must not move user:a's df or N.
	for i := range 30 {
		mustPut(t, s, textItem(fmt.Sprintf("b%02d", i), "user:b", "", "coffee oat milk berlin "+strings.Repeat("x ", i)), Inserted)
	}
	for _, q := range []string{"coffee", "oat milk coffee", "Berlin 2019", "invoice 4711", "nurse munich bike", "coffee preferences"} {
		t.Run(q, func(t *testing.T) {
			sameHits(t, search(t, s, LexicalQuery{Scope: "user:a", Text: q, K: 100}), refBM25(docs, q))
		})
	}
	// K bounds the results, keeping the best.
	want := refBM25(docs, "coffee oat milk")
	sameHits(t, search(t, s, LexicalQuery{Scope: "user:a", Text: "coffee oat milk", K: 2}), want[:2])
	// Terms given directly are the same query.
	sameHits(t, search(t, s, LexicalQuery{Scope: "user:a", Terms: memory.Terms("coffee oat milk"), K: 100}), want)
	// The other scope sees only its own.
	for _, h := range search(t, s, LexicalQuery{Scope: "user:b", Text: "coffee nurse", K: 100}) {
		if !strings.HasPrefix(h.MemoryID, "b") {
			t.Fatalf("user:b's search returned %s", h.MemoryID)
		}
	}
	if hits := search(t, s, LexicalQuery{Scope: "user:c", Text: "coffee"}); len(hits) != 0 {
		t.Fatalf("an empty scope returned %v", hits)
	}
}

func TestLexicalSearchRareWord(t *testing.T) {
	s, _ := newStore(t)
	for i := range 40 {
		mustPut(t, s, textItem(fmt.Sprintf("e%02d", i), "user:en", "", fmt.Sprintf("we talked about the trip and the weather, day %d", i)), Inserted)
	}
	mustPut(t, s, textItem("zz", "user:en", "", "we talked about the trip to Zanzibar"), Inserted)
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:en", Text: "When was the Zanzibar trip?"})); len(got) == 0 || got[0] != "zz" {
		t.Fatalf("the rare word found %v, want zz first", got)
	}
	for i, text := range []string{"我住在北京海淀区", "北京的天气很好", "我喜欢喝咖啡", "上海的朋友来北京了"} {
		mustPut(t, s, textItem(fmt.Sprintf("c%d", i), "user:zh", "", text), Inserted)
	}
	mustPut(t, s, textItem("cy", "user:zh", "", "我住在北京朝阳区"), Inserted)
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:zh", Text: "朝阳"})); !slices.Equal(got, []string{"cy"}) {
		t.Fatalf("朝阳 found %v, want [cy]", got)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:zh", Text: "他住在朝阳吗"})); len(got) == 0 || got[0] != "cy" {
		t.Fatalf("a Chinese question found %v, want cy first", got)
	}
}

func TestLexicalSearchFilters(t *testing.T) {
	s, _ := newStore(t)
	sc := "user:f"
	mustPut(t, s, textItem("live", sc, "", "kiwi jam"), Inserted)
	sem := item("sem", sc, memory.Semantic, "", `{"text": "kiwi jam"}`, 1, 0)
	mustPut(t, s, sem, Inserted)
	arch := textItem("arch", sc, "", "kiwi tart")
	arch.ArchivedAt = ptr(now.Add(-time.Minute))
	mustPut(t, s, arch, Inserted)
	exp := item("exp", sc, memory.Working, "", `{"text": "kiwi pie"}`, 1, 0)
	exp.ExpiresAt = ptr(now.Add(time.Hour))
	mustPut(t, s, exp, Inserted)

	if got := hitIDs(search(t, s, LexicalQuery{Scope: sc, Text: "kiwi"})); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"exp", "live", "sem"}) {
		t.Fatalf("kiwi found %v; want the live ones, not the archived one", got)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: sc, Text: "kiwi", Now: now.Add(2 * time.Hour)})); slices.Contains(got, "exp") {
		t.Fatalf("an expired memory was found: %v", got)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: sc, Text: "kiwi", Types: []memory.Type{memory.Semantic, memory.Working}})); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"exp", "sem"}) {
		t.Fatalf("the types filter found %v", got)
	}
	if got := search(t, s, LexicalQuery{Scope: sc, Text: "tart"}); len(got) != 0 {
		t.Fatalf("only the archived memory says tart, found %v", got)
	}
	// Archival keeps the postings: unarchived, it is found again.
	if _, err := s.Unarchive(t.Context(), sc, now, "arch"); err != nil {
		t.Fatal(err)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: sc, Text: "tart"})); !slices.Equal(got, []string{"arch"}) {
		t.Fatalf("unarchived, tart found %v", got)
	}
	// Queries without terms, and a bad K.
	for _, q := range []string{"", "the of and is", "!!!"} {
		if got := search(t, s, LexicalQuery{Scope: sc, Text: q}); got == nil || len(got) != 0 {
			t.Fatalf("query %q found %#v, want an empty slice", q, got)
		}
	}
	if _, err := s.LexicalSearch(t.Context(), LexicalQuery{Scope: sc, Text: "kiwi"}); err == nil {
		t.Fatal("K 0 was accepted")
	}
	if _, err := s.LexicalSearch(t.Context(), LexicalQuery{Scope: "nope", Text: "kiwi", K: 1}); err == nil {
		t.Fatal("an invalid scope was accepted")
	}
}

// Equal scores come in memory_id order, whatever the order of writing.
func TestLexicalSearchTies(t *testing.T) {
	s, _ := newStore(t)
	for _, id := range []string{"m5", "m1", "m9", "m3"} {
		mustPut(t, s, textItem(id, "user:t", "", "plum "+id), Inserted)
	}
	hits := search(t, s, LexicalQuery{Scope: "user:t", Text: "plum"})
	if got := hitIDs(hits); !slices.Equal(got, []string{"m1", "m3", "m5", "m9"}) || hits[0].Score != hits[3].Score {
		t.Fatalf("ties: %v", hits)
	}
}

// postings returns the terms memory id is indexed under, with their frequencies.
func postings(t *testing.T, s *Store, id string) map[string]int {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT term, tf FROM `+s.t.memoryTerms+` WHERE memory_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var term string
		var tf int
		if err := rows.Scan(&term, &tf); err != nil {
			t.Fatal(err)
		}
		got[term] = tf
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return got
}

func wantPostings(it memory.Item) map[string]int {
	want := map[string]int{}
	for _, term := range memory.Terms(it.EmbeddingText()) {
		want[term]++
	}
	return want
}

func TestLexicalSearchFollowsWrites(t *testing.T) {
	s, pool := newStore(t)
	sc := "user:w"
	mustPut(t, s, item("k", sc, memory.Semantic, "drink", `{"text": "oolong"}`, 1, time.Hour), Inserted)
	mustPut(t, s, item("k2", sc, memory.Semantic, "drink", `{"text": "espresso"}`, 1, 0), Superseded)
	if got := search(t, s, LexicalQuery{Scope: sc, Text: "oolong"}); len(got) != 0 {
		t.Fatalf("the superseded word still finds %v", got)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: sc, Text: "espresso"})); !slices.Equal(got, []string{"k"}) {
		t.Fatalf("the new word found %v", got)
	}
	mustPut(t, s, textItem("d", sc, "", "delete me: rhubarb"), Inserted)
	if _, _, err := s.DeleteQueued(t.Context(), "d", "test"); err != nil {
		t.Fatal(err)
	}
	if got := search(t, s, LexicalQuery{Scope: sc, Text: "rhubarb"}); len(got) != 0 {
		t.Fatalf("a deleted memory is found: %v", got)
	}
	if len(postings(t, s, "d")) != 0 || countRows(t, pool, s.t.termDocs, "memory_id = 'd'") != 0 {
		t.Fatal("a deleted memory's postings stayed")
	}
	mustPut(t, s, textItem("f", "user:gone", "", "rhubarb pie"), Inserted)
	if _, err := s.Forget(t.Context(), "user:gone", "test", "test"); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, s.t.memoryTerms, "scope = 'user:gone'") + countRows(t, pool, s.t.termDocs, "scope = 'user:gone'"); n != 0 {
		t.Fatalf("a forgotten scope keeps %d lexical rows", n)
	}
	termsConsistent(t, s)
}

// Restores (Merge, both its paths) and imports write no postings in their batches,
// but a search finds what they wrote, and not what they replaced.
func TestLexicalSearchAfterMergeAndImport(t *testing.T) {
	s, pool := newStore(t)
	sc := "user:r"
	batch := []memory.Item{textItem("r1", sc, "", "saffron risotto"), item("r2", sc, memory.Semantic, "pet", `{"name": "Rex", "kind": "dog"}`, 1, time.Hour)}
	if res, err := s.Merge(t.Context(), batch, MergeOptions{}); err != nil || res.Outcomes[0] != MergeInserted {
		t.Fatalf("Merge: %+v, %v", res, err)
	}
	if s.copiedNew.Load() != 1 {
		t.Fatal("the first batch did not take the COPY path")
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: sc, Text: "saffron"})); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("after a merge, saffron found %v", got)
	}
	// A newer value through the merge statement replaces the postings.
	newer := item("r2", sc, memory.Semantic, "pet", `{"name": "Tom", "kind": "cat"}`, 1, 0)
	if res, err := s.Merge(t.Context(), []memory.Item{newer}, MergeOptions{}); err != nil || res.Outcomes[0] != MergeReplaced {
		t.Fatalf("Merge: %+v, %v", res, err)
	}
	if got := search(t, s, LexicalQuery{Scope: sc, Text: "dog Rex"}); len(got) != 0 {
		t.Fatalf("the replaced value is found: %v", got)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: sc, Text: "cat"})); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("the merged value found %v", got)
	}
	if got, want := postings(t, s, "r2"), wantPostings(newer); !maps.Equal(got, want) {
		t.Fatalf("r2's postings %v, want %v", got, want)
	}
	// A dry run leaves no mark and nothing found.
	if _, err := s.Merge(t.Context(), []memory.Item{textItem("dry", sc, "", "truffle")}, MergeOptions{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, s.t.termPending, ""); n != 0 {
		t.Fatalf("marks after a dry run: %d", n)
	}
	importSlice(t, s, []memory.Item{textItem("i1", "user:imp", "", "imported quince")})
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:imp", Text: "quince"})); !slices.Equal(got, []string{"i1"}) {
		t.Fatalf("after an import, quince found %v", got)
	}
	// IndexPendingTerms makes every marked scope's postings ahead of a search.
	importSlice(t, s, []memory.Item{textItem("i2", "user:imp2", "", "medlar")})
	if n, err := s.IndexPendingTerms(t.Context()); err != nil || n != 1 {
		t.Fatalf("IndexPendingTerms = %d, %v", n, err)
	}
	if len(postings(t, s, "i2")) == 0 || countRows(t, pool, s.t.termPending, "") != 0 {
		t.Fatal("IndexPendingTerms left postings owed")
	}
	termsConsistent(t, s)
}

// A store upgraded from version 7 finds its old memories right after Migrate.
func TestLexicalSearchAfterMigrationFrom7(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := migrateTo(ctx, pool, schema, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "memories"}.Sanitize()+` (memory_id, memory_type, scope, key, content, content_hash, base_score, created_at, updated_at) VALUES
		('o1', 'semantic', 'user:old', 'city', '{"name": "Lisbon"}', '\x01', 1, '2025-01-01', '2025-01-01'),
		('o2', 'episodic', 'user:old', NULL, '{"text": "我住在北京朝阳区"}', '\x02', 1, '2025-01-01', '2025-01-01')`); err != nil {
		t.Fatal(err)
	}
	if n, err := Migrate(ctx, pool, schema); err != nil || n != LatestVersion-7 {
		t.Fatalf("Migrate = %d, %v", n, err)
	}
	s := New(pool, schema)
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:old", Text: "city lisbon"})); !slices.Equal(got, []string{"o1"}) {
		t.Fatalf("after the migration, lisbon found %v", got)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:old", Text: "朝阳"})); !slices.Equal(got, []string{"o2"}) {
		t.Fatalf("after the migration, 朝阳 found %v", got)
	}
}

// termsConsistent checks what migration 14 relies on: every memory's term_docs row
// lists exactly the terms of its postings (or none, NULL, when a previous version
// wrote it), and no posting lacks its term_docs row.
func termsConsistent(t *testing.T, s *Store) {
	t.Helper()
	var bad int64
	err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+s.t.termDocs+` d FULL JOIN (
			SELECT memory_id, array_agg(term ORDER BY term) AS terms FROM `+s.t.memoryTerms+` GROUP BY memory_id) p
		ON p.memory_id = d.memory_id
		WHERE d.memory_id IS NULL OR (d.terms IS NOT NULL AND coalesce(p.terms, '{}') <> ARRAY(SELECT x FROM unnest(d.terms) AS x ORDER BY x))`).Scan(&bad)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d memories' postings and term_docs.terms disagree", bad)
	}
}

// TestLexicalMigrationTo14: postings written at version 13 (a memory_id index, no
// terms in term_docs) are listed in term_docs.terms by the migration, and are then
// replaced and dropped through them: by a supersede, a delete and a forget.
func TestLexicalMigrationTo14(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := migrateTo(ctx, pool, schema, 13); err != nil {
		t.Fatal(err)
	}
	old := []memory.Item{
		item("m1", "user:a", memory.Semantic, "drink", `{"text": "oolong tea every morning"}`, 1, time.Hour),
		textItem("m2", "user:a", "", "我住在北京朝阳区"),
		textItem("m3", "user:b", "", "rhubarb pie rhubarb"),
		textItem("m4", "user:b", "", ""),
	}
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	// v13 writes a memory the way version 13's code does.
	v13 := func(it memory.Item) {
		t.Helper()
		it.SetDefaults(now)
		hash, err := it.ContentHash()
		if err != nil {
			t.Fatal(err)
		}
		var key *string
		if it.Key != "" {
			key = &it.Key
		}
		if _, err := pool.Exec(ctx, `INSERT INTO `+q("memories")+` (memory_id, memory_type, scope, key, content, content_hash, base_score, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $7)`, it.MemoryID, it.MemoryType, it.Scope, key, string(it.Content), hash, it.CreatedAt); err != nil {
			t.Fatal(err)
		}
		// Version 13's writeTermDocs: postings and a term_docs row without terms.
		d := makeTermDoc(it.MemoryID, &it, hash)
		if _, err := pool.Exec(ctx, `INSERT INTO `+q("term_docs")+` (memory_id, scope, content_hash, length) VALUES ($1, $2, $3, $4)`,
			d.id, d.scope, d.hash, d.length); err != nil {
			t.Fatal(err)
		}
		for i, term := range d.terms {
			if _, err := pool.Exec(ctx, `INSERT INTO `+q("memory_terms")+` (scope, term, memory_id, tf, dl) VALUES ($1, $2, $3, $4, $5)`,
				d.scope, term, d.id, d.tfs[i], d.length); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, it := range old {
		v13(it)
	}
	if n, err := Migrate(ctx, pool, schema); err != nil || n != LatestVersion-13 {
		t.Fatalf("Migrate = %d, %v", n, err)
	}
	s := New(pool, schema)
	termsConsistent(t, s)
	// A gateway of version 13 still serving after the migration (until its rollout)
	// writes rows without terms; their postings still go with their memories.
	late := textItem("late", "user:a", "", "written by the previous gateway: quince jam")
	v13(late)
	late2 := textItem("late2", "user:a", "", "also late: medlar")
	v13(late2)
	if _, _, err := s.DeleteQueued(ctx, "late", "test"); err != nil {
		t.Fatal(err)
	}
	if len(postings(t, s, "late")) != 0 {
		t.Fatal("the postings of a memory a previous version wrote stayed after its delete")
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		it := textItem("late2", "user:a", "", "rewritten: loquat")
		return s.writeTermDocs(ctx, tx, []termDoc{makeTermDoc("late2", &it, []byte{9})})
	}); err != nil {
		t.Fatal(err)
	}
	if got := postings(t, s, "late2"); got["medlar"] != 0 || got["loquat"] != 1 {
		t.Fatalf("late2's postings after they were replaced: %v", got)
	}
	if n := countRows(t, pool, "pg_indexes", "schemaname = $1 AND indexname = 'memory_terms_memory_idx'", schema); n != 0 {
		t.Fatal("memory_terms keeps its memory_id index")
	}
	mustPut(t, s, item("m1-new", "user:a", memory.Semantic, "drink", `{"text": "espresso"}`, 1, 0), Superseded)
	if got := search(t, s, LexicalQuery{Scope: "user:a", Text: "oolong"}); len(got) != 0 {
		t.Fatalf("the superseded words still find %v", got)
	}
	if !maps.Equal(postings(t, s, "m1"), wantPostings(item("m1", "user:a", memory.Semantic, "drink", `{"text": "espresso"}`, 1, 0))) {
		t.Fatalf("m1's postings after the supersede: %v", postings(t, s, "m1"))
	}
	if _, _, err := s.DeleteQueued(ctx, "m2", "test"); err != nil {
		t.Fatal(err)
	}
	if len(postings(t, s, "m2")) != 0 {
		t.Fatal("a deleted memory's postings stayed")
	}
	if _, err := s.Forget(ctx, "user:b", "test", "test"); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, s.t.memoryTerms, "scope = 'user:b'") + countRows(t, pool, s.t.termDocs, "scope = 'user:b'"); n != 0 {
		t.Fatalf("a forgotten scope keeps %d lexical rows", n)
	}
	termsConsistent(t, s)
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:a", Text: "espresso"})); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("espresso found %v", got)
	}
}

// TestDroppedPostingsAreProbed: the postings of deleted memories are removed by one
// primary-key probe each, whatever the statement deleting them; in particular after
// the session's trigger plan was made for a single deleted memory, a forget of a
// whole scope reads its postings once, not once per memory (which made a forget of
// 100,000 memories run for over ten minutes). Index pages read are counted, not
// time.
func TestDroppedPostingsAreProbed(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	// One connection: the trigger's plan is cached per session.
	cfg := pool.Config().Copy()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	s := New(one, schema)
	const n = 2000
	loadScale(t, s, scaleItems("user:big", n))
	if err := s.IndexTerms(ctx, "user:big"); err != nil {
		t.Fatal(err)
	}
	postingsOfScope := countRows(t, pool, s.t.memoryTerms, "")
	read := func() int64 {
		t.Helper()
		var v int64
		// The counters of this session's own statements, flushed now.
		if err := one.QueryRow(ctx, `SELECT pg_stat_force_next_flush()`).Scan(new(any)); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT pg_stat_clear_snapshot()`).Scan(new(any)); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0) FROM pg_statio_user_indexes WHERE schemaname = $1 AND relname = 'memory_terms'`, schema).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := read()
	if _, _, err := s.DeleteQueued(ctx, "s0000007", "test"); err != nil {
		t.Fatal(err)
	}
	afterOne := read()
	if _, err := s.Forget(ctx, "user:big", "test", "test"); err != nil {
		t.Fatal(err)
	}
	afterAll := read()
	t.Logf("index pages of memory_terms read: %d deleting one memory, %d forgetting %d postings", afterOne-before, afterAll-afterOne, postingsOfScope)
	if got := afterOne - before; got > 100 {
		t.Errorf("deleting one memory read %d index pages of memory_terms (the scope has %d postings)", got, postingsOfScope)
	}
	// A probe reads two pages (root and leaf, at this size); a scan of the scope's
	// postings per memory read ten times that.
	if got := afterAll - afterOne; got > 4*postingsOfScope {
		t.Errorf("forgetting the scope read %d index pages of memory_terms for its %d postings", got, postingsOfScope)
	}
	if n := countRows(t, pool, s.t.memoryTerms, "") + countRows(t, pool, s.t.termDocs, ""); n != 0 {
		t.Fatalf("%d lexical rows left", n)
	}
}

// Concurrent supersedes of one slot, with catch-ups and merges of the scope running
// beside them, leave the slot's postings those of its final value.
func TestLexicalConcurrentSupersedes(t *testing.T) {
	s, pool := newStore(t)
	sc := "user:cc"
	mustPut(t, s, item("slot", sc, memory.Semantic, "fav", `{"text": "start"}`, 1, time.Hour), Inserted)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 6 {
		wg.Go(func() {
			for i := range 15 {
				it := item(fmt.Sprintf("w%d-%d", w, i), sc, memory.Semantic, "fav", fmt.Sprintf(`{"text": "word%dx%d"}`, w, i), 1, 0)
				it.UpdatedAt = now.Add(time.Duration(w*100+i) * time.Millisecond)
				if _, err := s.Put(t.Context(), it); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 15 {
			if _, err := s.Merge(t.Context(), []memory.Item{textItem(fmt.Sprintf("mg%d", i), sc, "", fmt.Sprintf("merged %d", i))}, MergeOptions{}); err != nil {
				errs <- err
				return
			}
			if err := s.IndexTerms(t.Context(), sc); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The merges' marks are cleared (each was followed by a catch-up): what the
	// slot's postings say now, Put's transactions left.
	if n := countRows(t, pool, s.t.termPending, ""); n != 0 {
		t.Fatalf("%d marks left", n)
	}
	final, err := s.Get(t.Context(), "slot")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := postings(t, s, "slot"), wantPostings(final); !maps.Equal(got, want) {
		t.Fatalf("the slot's postings %v, want those of its final value %v", got, want)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: sc, Text: "merged 7"})); !slices.Contains(got, "mg7") {
		t.Fatalf("merged 7 found %v", got)
	}
	termsConsistent(t, s)
}

// scaleItems are n memories of one scope with words from a small vocabulary (so
// frequent terms have long posting lists) and one planted rare word.
func scaleItems(scope string, n int) []memory.Item {
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	words := strings.Fields("coffee tea oat milk berlin munich jazz running allergy peanuts invoice refund " +
		"delivery address birthday vegetarian window seat morning evening premium plan support ticket")
	items := make([]memory.Item, n)
	for i := range items {
		var b strings.Builder
		for range 6 + rng.IntN(10) {
			b.WriteString(words[rng.IntN(len(words))] + " ")
		}
		fmt.Fprintf(&b, "turn%d", i%5000)
		if i == n/2 {
			b.WriteString(" xylophone")
		}
		items[i] = textItem(fmt.Sprintf("s%07d", i), scope, "", b.String())
	}
	return items
}

func loadScale(tb testing.TB, s *Store, items []memory.Item) {
	for start := 0; start < len(items); start += 5000 {
		res, err := s.Merge(tb.Context(), items[start:min(start+5000, len(items))], MergeOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		if res.Outcomes[0] != MergeInserted {
			tb.Fatalf("outcome %s", res.Outcomes[0])
		}
	}
}

// At 100k memories in a scope the results are still the reference's.
func TestLexicalSearchScale(t *testing.T) {
	if testing.Short() {
		t.Skip("100k memories")
	}
	s, pool := newStore(t)
	items := scaleItems("user:big", 100_000)
	loadScale(t, s, items)
	start := time.Now()
	got := search(t, s, LexicalQuery{Scope: "user:big", Text: "xylophone", K: 5})
	t.Logf("first search (indexing 100k memories) took %s", time.Since(start))
	if ids := hitIDs(got); !slices.Equal(ids, []string{items[50_000].MemoryID}) {
		t.Fatalf("the rare word found %v", ids)
	}
	for _, q := range []string{"oat milk berlin turn42", "jazz refund"} {
		want := refBM25(items, q)
		sameHits(t, search(t, s, LexicalQuery{Scope: "user:big", Text: q, K: 10}), want[:10])
	}
	// Forgetting the scope removes its million postings in one statement's trigger.
	start = time.Now()
	if _, err := s.Forget(t.Context(), "user:big", "test", "test"); err != nil {
		t.Fatal(err)
	}
	t.Logf("forgetting 100k memories took %s", time.Since(start))
	if n := countRows(t, pool, s.t.memoryTerms, "") + countRows(t, pool, s.t.termDocs, ""); n != 0 {
		t.Fatalf("%d lexical rows left after the forget", n)
	}
}

// BenchmarkLexicalSearch: search latency in a scope of 100k memories (and 1k),
// for a rare term, a frequent one and a mixed question.
func BenchmarkLexicalSearch(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("memories=%d", n), func(b *testing.B) {
			s := newStoreTB(b)
			items := scaleItems("user:bench", n)
			loadScale(b, s, items)
			if err := s.IndexTerms(b.Context(), "user:bench"); err != nil {
				b.Fatal(err)
			}
			if _, err := s.pool.Exec(b.Context(), `ANALYZE `+s.t.memoryTerms+`; ANALYZE `+s.t.termDocs+`; ANALYZE `+s.t.memories); err != nil {
				b.Fatal(err)
			}
			for _, q := range []string{"xylophone", "coffee", "what did I say about oat milk and the jazz ticket"} {
				b.Run(strings.Fields(q)[0], func(b *testing.B) {
					for b.Loop() {
						if _, err := s.LexicalSearch(b.Context(), LexicalQuery{Scope: "user:bench", Text: q, K: 10, Now: now}); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run("stats", func(b *testing.B) {
				for b.Loop() {
					var n, avg float64
					if err := s.pool.QueryRow(b.Context(), `SELECT count(*)::float8, coalesce(avg(length), 0)::float8 FROM `+s.t.termDocs+` WHERE scope = $1`, "user:bench").Scan(&n, &avg); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// newStoreTB is newStore for benchmarks.
func newStoreTB(tb testing.TB) *Store {
	tb.Helper()
	pool, err := pgxpool.New(tb.Context(), testutil.PostgresDSN(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	schema := testutil.UniqueName("t_")
	tb.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if _, err := Migrate(tb.Context(), pool, schema); err != nil {
		tb.Fatal(err)
	}
	return New(pool, schema)
}
