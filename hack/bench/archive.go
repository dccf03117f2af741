package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// archiveShare is the share of memories the threshold is chosen to archive.
const archiveShare = 0.10

// archiveRounds is how often each contender runs (alternating which goes first, each
// on a fresh copy of the table); the medians are compared.
const archiveRounds = 3

// benchArchive times archival's scan and mark over n memories (about 10% below the
// threshold) against one set-based SQL UPDATE with the same predicate, each on a fresh,
// vacuumed copy of the same table, then the Milvus deletes of the archived memories'
// vectors, reported separately.
func (e *env) benchArchive(ctx context.Context, n int) error {
	const src, work = "bench_archive", "bench_archive_run"
	fmt.Printf("\nArchival benchmark: %d memories, about %.0f%% below the threshold, median of %d runs each\n\n", n, archiveShare*100, archiveRounds)
	if err := e.generate(ctx, src, n); err != nil {
		return err
	}
	defer e.dropSchemas(src, work)
	now := time.Now().UTC().Truncate(time.Microsecond)
	hl := memory.DefaultHalfLives()
	threshold, err := e.archiveThreshold(ctx, src, now, hl)
	if err != nil {
		return err
	}

	// The reference: what a DBA would write, the effective-score rule spelled plainly
	// (date_part: extract returns numeric, much slower).
	mem := pgx.Identifier{work, "memories"}.Sanitize()
	refSQL := `UPDATE ` + mem + ` m SET archived_at = $1
		WHERE m.archived_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > $1)
		  AND NOT EXISTS (SELECT 1 FROM ` + pgx.Identifier{work, "tombstones"}.Sanitize() + ` t WHERE t.scope = m.scope)
		  AND m.base_score * power(0.5::float8, greatest(date_part('epoch', $1 - m.updated_at), 0)
		      / CASE m.memory_type WHEN 'working' THEN $2::float8 WHEN 'episodic' THEN $3::float8
		                           WHEN 'semantic' THEN $4::float8 ELSE $5::float8 END) < $6`
	store := pgstore.New(e.pool, work)
	var (
		marks, refs []time.Duration
		res         pgstore.MarkResult
		refRows     int64
	)
	for round := range archiveRounds {
		order := []string{"ref", "mark"} // the last round ends with mark: its result feeds the Milvus part
		if round%2 == 1 {
			order = []string{"mark", "ref"}
		}
		for _, c := range order {
			if err := e.copyForArchive(ctx, src, work); err != nil {
				return err
			}
			t0 := time.Now()
			if c == "ref" {
				tag, err := e.pool.Exec(ctx, refSQL, now, hl[memory.Working].Seconds(), hl[memory.Episodic].Seconds(),
					hl[memory.Semantic].Seconds(), hl[memory.Procedural].Seconds(), threshold)
				if err != nil {
					return fmt.Errorf("reference UPDATE: %w", err)
				}
				refs, refRows = append(refs, time.Since(t0)), tag.RowsAffected()
				continue
			}
			if res, err = store.MarkArchived(ctx, now, threshold, hl, false); err != nil {
				return err
			}
			marks = append(marks, time.Since(t0))
		}
		fmt.Printf("round %d: MarkArchived %.2fs, UPDATE %.2fs\n", round+1, marks[round].Seconds(), refs[round].Seconds())
	}
	if res.Archived != refRows {
		return fmt.Errorf("MarkArchived archived %d memories, the reference UPDATE %d", res.Archived, refRows)
	}
	mark, ref := median(marks), median(refs)
	fmt.Printf("\n%-80s %9s\n", "", "wall")
	fmt.Printf("%-80s %8.2fs\n", fmt.Sprintf("MarkArchived, scanned %d, archived %d (one statement, run record, counts)", res.Scanned, res.Archived), mark.Seconds())
	fmt.Printf("%-80s %8.2fs\n", fmt.Sprintf("reference: UPDATE ... SET archived_at WHERE <same predicate>, %d rows", refRows), ref.Seconds())
	fmt.Printf("ratio archival scan and mark / UPDATE: %.2fx   (target <= 1.5x), Milvus deletes excluded\n", mark.Seconds()/ref.Seconds())

	return e.benchVectorDeletes(ctx, store, res.Archived)
}

// copyForArchive makes dst a fresh store holding src's memories, in the same physical
// state for every contender: vacuumed (hint bits, visibility map), analysed, without
// autovacuum starting halfway, warm in the page cache, and checkpointed.
func (e *env) copyForArchive(ctx context.Context, src, dst string) error {
	if err := e.freshSchemas(ctx, dst); err != nil {
		return err
	}
	mem := func(s string) string { return pgx.Identifier{s, "memories"}.Sanitize() }
	for _, q := range []string{
		`INSERT INTO ` + mem(dst) + ` SELECT * FROM ` + mem(src),
		`VACUUM (ANALYZE) ` + mem(dst),
		`ALTER TABLE ` + mem(dst) + ` SET (autovacuum_enabled = false)`,
		`SELECT sum(base_score) FROM ` + mem(dst),
		`CHECKPOINT`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// archiveThreshold picks the threshold below which archiveShare of the memories score at
// now, by the Go rule (memory.HalfLives.Score).
func (e *env) archiveThreshold(ctx context.Context, schema string, now time.Time, hl memory.HalfLives) (float64, error) {
	rows, err := e.pool.Query(ctx, `SELECT memory_type, base_score, updated_at FROM `+pgx.Identifier{schema, "memories"}.Sanitize())
	if err != nil {
		return 0, err
	}
	var scores []float64
	for rows.Next() {
		var it memory.Item
		var typ string
		if err := rows.Scan(&typ, &it.BaseScore, &it.UpdatedAt); err != nil {
			return 0, err
		}
		it.MemoryType = memory.Type(typ)
		scores = append(scores, hl.Score(it, now))
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(scores) == 0 {
		return 0, fmt.Errorf("no memories in %s", schema)
	}
	slices.Sort(scores)
	return scores[int(float64(len(scores))*archiveShare)], nil
}

// benchVectorDeletes fills a Milvus collection with vectors for the archived memories
// (what the index holds before archival deletes them) and times the worker's step 4:
// the recorded deletions worked off in batches of 1000 against Milvus.
func (e *env) benchVectorDeletes(ctx context.Context, store *pgstore.Store, archived int64) error {
	addr := os.Getenv("MEMORY_TEST_MILVUS_ADDR")
	if addr == "" {
		fmt.Println("vector deletes: skipped (MEMORY_TEST_MILVUS_ADDR unset)")
		return nil
	}
	c, err := milvus.Connect(ctx, milvus.Conn{Address: addr})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	const coll = "bench_archive"
	owner := milvus.Owner{ID: "bench/archive"}
	spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	if err := milvus.DropCollection(ctx, c, coll, owner); err != nil {
		return err
	}
	if _, err := milvus.EnsureCollection(ctx, c, coll, spec, owner); err != nil {
		return err
	}
	defer func() { _ = milvus.DropCollection(context.Background(), c, coll, owner) }()
	ix := milvus.New(c, coll, spec)

	start := time.Now()
	rows, err := e.pool.Query(ctx, `SELECT memory_id, scope, memory_type FROM `+
		pgx.Identifier{store.Schema(), "memories"}.Sanitize()+` WHERE archived_at IS NOT NULL`)
	if err != nil {
		return err
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (vector.Entry, error) {
		var en vector.Entry
		err := r.Scan(&en.ID, &en.Scope, &en.Type)
		return en, err
	})
	if err != nil {
		return err
	}
	rng := mrand.New(mrand.NewPCG(3, 4))
	for i := range entries {
		v := make([]float32, spec.Dimension)
		for j := range v {
			v[j] = rng.Float32() + 0.01
		}
		entries[i].Vector = v
	}
	for i := 0; i < len(entries); i += 50_000 {
		if err := ix.Upsert(ctx, entries[i:min(i+50_000, len(entries))]); err != nil {
			return err
		}
	}
	fmt.Printf("\nloaded %d vectors into Milvus collection %s in %.1fs\n", len(entries), coll, time.Since(start).Seconds())

	t0 := time.Now()
	res, err := store.ProcessIndexDeletions(ctx, pgstore.DeletionOptions{BatchSize: 1000}, ix.Delete)
	if err != nil {
		return err
	}
	wall := time.Since(t0)
	if res.Deleted != archived {
		return fmt.Errorf("deleted %d vectors, archived %d", res.Deleted, archived)
	}
	sample := make([]string, 0, 1000)
	for i := 0; i < len(entries) && len(sample) < cap(sample); i += max(1, len(entries)/1000) {
		sample = append(sample, entries[i].ID)
	}
	if left, err := ix.Fetch(ctx, sample); err != nil || len(left) != 0 {
		return fmt.Errorf("after the deletes %d of %d sampled vectors remain (%v)", len(left), len(sample), err)
	}
	fmt.Printf("vector deletes (reported separately): %d IDs in batches of 1000 to Milvus Lite, each acknowledged in PostgreSQL: %.2fs (%.0f IDs/s)\n",
		res.Deleted, wall.Seconds(), float64(res.Deleted)/wall.Seconds())
	return nil
}

// dropSchemas removes the archival benchmark's schemas (two copies of the table).
func (e *env) dropSchemas(schemas ...string) {
	for _, s := range schemas {
		_, _ = e.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`)
	}
}
