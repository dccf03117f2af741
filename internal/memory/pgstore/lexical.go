// Lexical search: BM25 over the memories of one scope, beside the vector index.
//
// Terms. A memory's indexed text is memory.Item.EmbeddingText, the text the dense
// channel embeds; memory.Terms splits it (NFKC, case folding, words of letters and
// digits, CJK runs as character bigrams since PostgreSQL's parsers do not split
// Chinese, a few English stopwords, plurals folded). The tokenizer is Go, so the
// query and every writer share it exactly.
//
// Storage (migration 8). memory_terms holds one posting per (scope, term, memory)
// with the term's frequency tf and the memory's length dl; term_docs one row per
// indexed memory with the content hash its postings were made from and its length.
// Postings are scope-local, so a term's document frequency is a range count of the
// primary key and a scope never sees another's statistics. Since migration 14
// term_docs also lists the memory's terms, which name its postings: replacing or
// dropping them probes the primary key, and memory_terms has no other index. A
// trigger on memories removes both when a memory is deleted (delete, forget, purge);
// archival and expiry keep them, and search filters those memories out.
//
// Maintenance. Put writes a memory's postings in its own transaction, replacing them
// when its content changes. Bulk writes (Merge: restore; Import) do not: postings
// are about fifteen rows per memory, and writing them would make a restore several
// times slower. They record instead, in the same transaction, that their scopes have
// postings owed (term_pending), and LexicalSearch makes a scope's owed postings
// before it searches it (IndexTerms; IndexPendingTerms does every scope, for a
// worker that wants them made ahead of the first search). A scope's catch-up reads
// its memories once (an anti-join against term_docs, about 1 ms per thousand
// memories) and writes the missing postings. The catch-up holds the scope's terms
// lock exclusively, Put holds it shared, so a catch-up never overwrites a newer
// write's postings; a bulk write that commits during a catch-up leaves its mark,
// which the next search honours.
//
// Ranking. Okapi BM25 with k1 = 1.2 and b = 0.75 and the idf that never goes
// negative (Lucene's): idf = ln(1 + (N - df + 0.5) / (df + 0.5)), where N is the
// number of memories of the scope and df the number holding the term; a memory
// scores the sum over the distinct query terms it holds of
// idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)). The collection is
// every indexed memory of the scope (archived, expired and other types included),
// so statistics do not move with a request's filters; the filters choose among the
// ranked memories. Ties go by memory_id.
//
// Cost. A search reads every posting of its terms in the scope (term at a time:
// a frequent term's postings are a good part of the scope), scores and sorts the
// candidates, and checks the best against memories until K are live; N and avgdl
// are an index scan of the scope's term_docs, linear in the scope. Measured here
// (BenchmarkLexicalSearch, 2 shared cores, PostgreSQL 15): at 1,000 memories a
// search takes 1-3 ms; at 100,000, 11 ms for a rare term (8 ms of it the
// statistics), 90 ms for a term in a third of the memories, 300 ms for a
// six-term question of frequent words. At 10^6 memories in one scope the
// statistics alone would be some 80 ms and frequent terms seconds: a per-scope
// counter row and pruning (WAND/MaxScore over impact-ordered postings) are the
// next steps. Catching up a scope costs about 70 µs per memory (100,000 in 7 s,
// TestLexicalSearchScale), once; forgetting it about 14 µs per memory.

package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
)

// BM25 parameters (the usual defaults).
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// LexicalQuery is a lexical search within one scope.
type LexicalQuery struct {
	Scope string
	// Types limits the search to these memory types; empty means all.
	Types []memory.Type
	// Text is the query, split by memory.Terms; Terms, when set, are used instead.
	Text  string
	Terms []string
	// K is the number of results wanted, at least 1.
	K int
	// Now decides expiry; zero means the clock.
	Now time.Time
}

// LexicalHit is one result of LexicalSearch.
type LexicalHit struct {
	MemoryID string
	// Score is the memory's BM25 score for the query.
	Score float64
	// Matched is how many distinct query terms the memory holds.
	Matched int
}

// lexicalAttempts bounds how often a search catches up a scope that bulk writes keep
// marking meanwhile; each catch-up makes what was owed when it began.
const lexicalAttempts = 4

// LexicalSearch returns the K live memories of the scope (not archived, not expired
// at q.Now, of q.Types if set) that score best by BM25 for the query (see the top of
// this file), best first, ties by memory_id. A query without terms (empty, or only
// stopwords) and a query no memory matches return an empty slice.
func (s *Store) LexicalSearch(ctx context.Context, q LexicalQuery) ([]LexicalHit, error) {
	if err := memory.ValidateScope(q.Scope); err != nil {
		return nil, fmt.Errorf("pgstore: lexical search: %w", err)
	}
	if q.K < 1 {
		return nil, fmt.Errorf("pgstore: lexical search: K is %d, want at least 1", q.K)
	}
	terms := q.Terms
	if terms == nil {
		terms = memory.Terms(q.Text)
	}
	terms = slices.Compact(slices.Sorted(slices.Values(terms)))
	if len(terms) > 0 && terms[0] == "" {
		terms = terms[1:]
	}
	hits := []LexicalHit{}
	if len(terms) == 0 {
		return hits, nil
	}
	now := q.Now
	if now.IsZero() {
		now = time.Now()
	}
	var types []string
	for _, t := range q.Types {
		types = append(types, string(t))
	}
	for attempt := 1; ; attempt++ {
		var owed bool
		err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			// One snapshot: postings are complete in it exactly when no mark is.
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.t.termPending+` WHERE scope = $1)`, q.Scope).Scan(&owed); err != nil || owed {
				return err
			}
			rows, err := tx.Query(ctx, s.lexicalSQL(), q.Scope, terms, now, types, q.K)
			if err != nil {
				return err
			}
			hits, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (LexicalHit, error) {
				var h LexicalHit
				return h, r.Scan(&h.MemoryID, &h.Score, &h.Matched)
			})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("pgstore: lexical search: %w", err)
		}
		if !owed {
			return hits, nil
		}
		if attempt == lexicalAttempts {
			return nil, fmt.Errorf("pgstore: lexical search: scope %q is being written in bulk; retry", q.Scope)
		}
		if err := s.IndexTerms(ctx, q.Scope); err != nil {
			return nil, err
		}
	}
}

// lexicalSQL is the search: $1 scope, $2 distinct terms, $3 now, $4 types (NULL: all),
// $5 K. The candidates are scored from their postings alone, sorted, and checked
// against memories one by one (OFFSET 0 keeps the lookup a probe per candidate) until
// K are live.
func (s *Store) lexicalSQL() string {
	return fmt.Sprintf(`WITH st AS (
		SELECT count(*)::float8 AS n, coalesce(avg(length), 0)::float8 AS avgdl FROM %[1]s WHERE scope = $1
	), p AS (
		SELECT t.memory_id, t.tf, t.dl, count(*) OVER (PARTITION BY t.term) AS df
		FROM %[2]s t WHERE t.scope = $1 AND t.term = ANY($2::text[])
	), c AS (
		SELECT p.memory_id,
			sum(ln(1 + (st.n - p.df + 0.5) / (p.df + 0.5)) * p.tf * (%[4]g + 1) /
				(p.tf + %[4]g * (1 - %[5]g + %[5]g * p.dl / st.avgdl))) AS score,
			count(*)::int AS matched
		FROM p CROSS JOIN st GROUP BY p.memory_id
	)
	SELECT c.memory_id, c.score, c.matched FROM (SELECT * FROM c ORDER BY score DESC, memory_id) c
	JOIN LATERAL (
		SELECT 1 FROM %[3]s m WHERE m.memory_id = c.memory_id AND m.archived_at IS NULL
			AND (m.expires_at IS NULL OR m.expires_at > $3) AND ($4::text[] IS NULL OR m.memory_type = ANY($4))
		OFFSET 0
	) live ON true
	ORDER BY c.score DESC, c.memory_id
	LIMIT $5`, s.t.termDocs, s.t.memoryTerms, s.t.memories, bm25K1, bm25B)
}

// termDoc is the postings of one memory, made from its EmbeddingText.
type termDoc struct {
	id, scope string
	hash      []byte
	terms     []string // distinct, sorted
	tfs       []int32
	length    int32
}

// makeTermDoc counts the terms of it (Key and Content decide them).
func makeTermDoc(id string, it *memory.Item, hash []byte) termDoc {
	all := memory.Terms(it.EmbeddingText())
	d := termDoc{id: id, scope: it.Scope, hash: hash, length: int32(len(all))}
	slices.Sort(all)
	for i, t := range all {
		if i > 0 && t == all[i-1] {
			d.tfs[len(d.tfs)-1]++
			continue
		}
		d.terms, d.tfs = append(d.terms, t), append(d.tfs, 1)
	}
	return d
}

// termsLock is the advisory lock of a scope's postings: Put holds it shared, a
// catch-up exclusively.
func (s *Store) termsLock(scope string) int64 {
	h := fnv.New64a()
	for _, p := range []string{"memory-operator/pgstore/terms", s.schema, scope} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return int64(h.Sum64())
}

// copyPostingsFrom is how many postings a write COPYs rather than INSERTs from
// arrays: COPY fills a heap page per WAL record and reads no arrays, and costs a
// round trip of its own, which a batch's 12,000 postings repay and one memory's do
// not.
const copyPostingsFrom = 1000

// writeTermDocs replaces the postings of docs (which may have none yet).
func (s *Store) writeTermDocs(ctx context.Context, tx pgx.Tx, docs []termDoc) error {
	if len(docs) == 0 {
		return nil
	}
	// One round trip below copyPostingsFrom: Put pays it on every write that
	// changes a value.
	b := &pgx.Batch{}
	p := s.queueTermDocs(b, docs)
	if n := len(p.postings); n > 0 && n < copyPostingsFrom {
		scopes, terms, ids := make([]string, n), make([]string, n), make([]string, n)
		tfs, dls := make([]int32, n), make([]int32, n)
		for i := range n {
			scopes[i], terms[i], ids[i], tfs[i], dls[i] = p.at(i)
		}
		b.Queue(`INSERT INTO `+s.t.memoryTerms+` (scope, term, memory_id, tf, dl)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::int4[])`, scopes, terms, ids, tfs, dls)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("writing postings: %w", err)
	}
	if len(p.postings) >= copyPostingsFrom {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{s.schema, "memory_terms"}, postingCols, p); err != nil {
			return fmt.Errorf("writing postings: %w", err)
		}
	}
	return nil
}

// queueTermDocs queues on b the statements that replace the term_docs rows of docs
// and drop their postings, and returns their new postings, in the order of
// memory_terms' primary key (scope, term, memory_id; COLLATE "C" is Go's byte
// order): consecutive entries then land on the same or neighbouring index pages.
func (s *Store) queueTermDocs(b *pgx.Batch, docs []termDoc) *postingRows {
	var (
		ids, scopes, joined []string
		hashes              [][]byte
		lengths             []int32
	)
	p := &postingRows{docs: docs, next: -1}
	for di, d := range docs {
		ids, scopes, hashes, lengths = append(ids, d.id), append(scopes, d.scope), append(hashes, d.hash), append(lengths, d.length)
		joined = append(joined, strings.Join(d.terms, " "))
		for ti := range d.terms {
			p.postings = append(p.postings, posting{doc: int32(di), term: int32(ti)})
		}
	}
	slices.SortFunc(p.postings, func(a, b posting) int {
		da, db := &docs[a.doc], &docs[b.doc]
		return cmp.Or(strings.Compare(da.scope, db.scope), strings.Compare(da.terms[a.term], db.terms[b.term]),
			strings.Compare(da.id, db.id))
	})
	// A memory's postings are found through the terms its term_docs row lists
	// (migration 14): the rows go first and name the postings' keys (OFFSET 0 keeps
	// them apart, see the migration), each then a probe of memory_terms' primary key.
	// A new memory has neither: nothing is read but its term_docs key. A row without
	// terms (a previous version's gateway wrote it during an upgrade) names its
	// postings by a read of its scope's.
	b.Queue(`WITH d AS (
			DELETE FROM `+s.t.termDocs+` WHERE memory_id = ANY($1) RETURNING memory_id, scope, terms
		)
		DELETE FROM `+s.t.memoryTerms+` t USING (
			SELECT d.scope, x.term, d.memory_id FROM d CROSS JOIN LATERAL unnest(coalesce(d.terms,
				ARRAY(SELECT p.term FROM `+s.t.memoryTerms+` p WHERE p.scope = d.scope AND p.memory_id = d.memory_id))) AS x(term)
			OFFSET 0
		) k
		WHERE t.scope = k.scope AND t.term = k.term AND t.memory_id = k.memory_id`, ids)
	// Each row's terms travel as one space-separated text (no term holds a space,
	// memory.Terms): PostgreSQL's arrays are rectangular, so an array of arrays cannot
	// carry them, and aggregating the postings' terms back cost more than the rest of
	// the statement.
	b.Queue(`INSERT INTO `+s.t.termDocs+` (memory_id, scope, content_hash, length, terms)
		SELECT u.memory_id, u.scope, u.content_hash, u.length, string_to_array(u.terms, ' ')
		FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int4[], $5::text[]) AS u(memory_id, scope, content_hash, length, terms)`,
		ids, scopes, hashes, lengths, joined)
	return p
}

// postingCols are memory_terms' columns in the order postingRows gives them.
var postingCols = []string{"scope", "term", "memory_id", "tf", "dl"}

// posting is one entry of memory_terms: term number term of docs[doc].
type posting struct{ doc, term int32 }

// postingRows are the memory_terms rows of docs; they are a pgx.CopyFromSource.
type postingRows struct {
	docs     []termDoc
	postings []posting
	next     int
	row      [5]any
}

// at returns the columns of the i-th posting.
func (p *postingRows) at(i int) (scope, term, id string, tf, dl int32) {
	e := p.postings[i]
	d := &p.docs[e.doc]
	return d.scope, d.terms[e.term], d.id, d.tfs[e.term], d.length
}

func (p *postingRows) Next() bool {
	p.next++
	return p.next < len(p.postings)
}

// Values returns the current row; pgx encodes it before it asks for the next, so
// one slice serves every row.
func (p *postingRows) Values() ([]any, error) {
	scope, term, id, tf, dl := p.at(p.next)
	p.row = [5]any{scope, term, id, tf, dl}
	return p.row[:], nil
}

func (p *postingRows) Err() error { return nil }

// markTermsOwed records, in a bulk write's transaction, that scopes have memories
// whose postings are not written yet.
func (s *Store) markTermsOwed(ctx context.Context, tx pgx.Tx, scopes []string) error {
	if len(scopes) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+s.t.termPending+` (scope) SELECT DISTINCT unnest($1::text[])`, scopes)
	return err
}

// termsPage is how many memories a catch-up reads and indexes per statement.
const termsPage = 2000

// IndexTerms makes the postings a scope is owed: those of its memories that have none,
// or none for their current content. It clears the scope's marks first, in the same
// transaction, so a bulk write that commits meanwhile stays marked. LexicalSearch
// calls it when it finds a mark.
func (s *Store) IndexTerms(ctx context.Context, scope string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.termsLock(scope)); err != nil {
			return err
		}
		// Marks committed before this statement are cleared; the memories those
		// writes committed are visible to the reads below, which come later.
		if _, err := tx.Exec(ctx, `DELETE FROM `+s.t.termPending+` WHERE scope = $1`, scope); err != nil {
			return err
		}
		after := ""
		for {
			// FOR KEY SHARE: a memory deleted after this read waits for this
			// transaction, and its trigger then drops the postings written here;
			// without the lock they would outlive it (orphans, which skew the
			// scope's statistics and would clash with a later memory of that ID).
			rows, err := tx.Query(ctx, `SELECT m.memory_id, m.key, m.content, m.content_hash
				FROM `+s.t.memories+` m LEFT JOIN `+s.t.termDocs+` d ON d.memory_id = m.memory_id
				WHERE m.scope = $1 AND m.memory_id > $2 AND (d.memory_id IS NULL OR d.content_hash <> m.content_hash)
				ORDER BY m.memory_id LIMIT $3 FOR KEY SHARE OF m`, scope, after, termsPage)
			if err != nil {
				return err
			}
			var docs []termDoc
			for rows.Next() {
				var (
					id, content []byte
					key         *string
					hash        []byte
				)
				if err := rows.Scan(&id, &key, &content, &hash); err != nil {
					rows.Close()
					return err
				}
				it := memory.Item{Scope: scope, Key: deref(key), Content: content}
				docs = append(docs, makeTermDoc(string(id), &it, hash))
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if err := s.writeTermDocs(ctx, tx, docs); err != nil {
				return err
			}
			if len(docs) < termsPage {
				return nil
			}
			after = docs[len(docs)-1].id
		}
	})
	if err != nil {
		return fmt.Errorf("pgstore: indexing the terms of %q: %w", scope, err)
	}
	return nil
}

// IndexPendingTerms makes the postings every marked scope is owed (IndexTerms) and
// returns how many scopes it indexed. A restore or import worker may call it after
// its last batch so that no first search waits for them.
func (s *Store) IndexPendingTerms(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT scope FROM `+s.t.termPending+` ORDER BY scope`)
	if err != nil {
		return 0, fmt.Errorf("pgstore: listing scopes owed terms: %w", err)
	}
	scopes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("pgstore: listing scopes owed terms: %w", err)
	}
	for i, scope := range scopes {
		if err := s.IndexTerms(ctx, scope); err != nil {
			return i, err
		}
		if ctx.Err() != nil {
			return i + 1, ctx.Err()
		}
	}
	return len(scopes), nil
}
