package pgvector

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/vector"
)

// The filtered-search strategy is described in the package documentation.

const (
	// exactMargin is how many rows beyond K an exact search reads, so the K it returns
	// are the best by vector.Score even where the database's float32 distances order
	// near-ties differently.
	exactMargin = 16
	// sizeTTL is how long a scope's (bounded) match count is trusted for choosing a
	// search's path. A stale count picks the slower path for a while, never a short
	// result: the exact path is exact, and a short ANN result is redone exactly.
	sizeTTL = 5 * time.Second
	// maxSizes bounds the cache; it starts over when full.
	maxSizes = 10000
)

// Search returns the K entries of q.Scope (and q.Types) with the highest score, best
// first, ties by memory_id: exactly min(K, matches) hits.
func (ix *Index) Search(ctx context.Context, q vector.Query) ([]vector.Hit, error) {
	if err := vector.ValidateQuery(ix.spec, q); err != nil {
		return nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
	}
	s, err := ix.statements(ctx)
	if err != nil {
		return nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
	}
	query := vector.Prepare(ix.spec.Metric, q.Vector)
	qtext := TextVector(query)
	useANN := q.K <= maxEfSearch
	if useANN {
		n, err := ix.matches(ctx, s, q.Scope, q.Types)
		if err != nil {
			return nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
		}
		useANN = n > ix.params.ExactBelow
	}
	if useANN {
		key := matchKey(q.Scope, q.Types)
		base := max(ix.params.EfSearch, q.K)
		ef := base
		if last, ok := ix.efs.get(key); ok {
			ef = max(ef, last)
		}
		for {
			hits, err := ix.searchANN(ctx, s, q, query, qtext, ef)
			if err != nil {
				return nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
			}
			if len(hits) == q.K {
				if ef > base {
					ix.efs.put(key, ef)
				}
				ix.paths.ann.Add(1)
				return hits, nil
			}
			if ef >= maxEfSearch {
				break
			}
			ef = raiseEf(ef, len(hits), q.K)
			ix.paths.raised.Add(1)
		}
		ix.paths.fallback.Add(1)
	} else {
		ix.paths.exact.Add(1)
	}
	hits, err := ix.searchExact(ctx, s, q, query, qtext)
	if err != nil {
		return nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
	}
	return hits, nil
}

// searchExact ranks every match of the scope (and types): the subquery's OFFSET 0
// keeps the planner from answering the ORDER BY with the HNSW index.
func (ix *Index) searchExact(ctx context.Context, s *statements, q vector.Query, query []float32, qtext string) ([]vector.Hit, error) {
	sql, args := s.exact[0], []any{q.Scope, qtext}
	if len(q.Types) > 0 {
		sql, args = s.exact[1], append(args, q.Types)
	}
	args = append(args, q.K+exactMargin)
	rows, err := ix.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return ix.rank(rows, query, q.K)
}

// raiseEf is the ef_search of the next HNSW walk after one with ef yielded got of the
// k matches wanted. The graph yields ef candidates of the whole table and the filter
// keeps the scope's: got/ef estimates the scope's share of them, so the next walk asks
// for enough candidates that k of them match, with a margin of a quarter, and at
// least twice as many as before (capped at pgvector's maximum).
func raiseEf(ef, got, k int) int {
	next := 2 * ef
	if got > 0 {
		next = max(next, (ef*k*5+4*got-1)/(4*got))
	} else {
		next = 4 * ef
	}
	return min(next, maxEfSearch)
}

// searchANN walks the HNSW index with hnsw.ef_search = ef, set for its own
// (implicit) transaction: the batch runs as one. The statement is planned for its
// scope every time (plan_cache_mode, for the same transaction): a prepared statement's
// cached generic plan cannot know how large the scope is, and on a connection that
// had run it a while PostgreSQL settled on one that sorted the whole scope instead of
// walking the index (0.9 s a search of a 300,000-memory scope, against 4 ms).
func (ix *Index) searchANN(ctx context.Context, s *statements, q vector.Query, query []float32, qtext string, ef int) ([]vector.Hit, error) {
	sql, args := s.ann[0], []any{q.Scope, qtext}
	if len(q.Types) > 0 {
		sql, args = s.ann[1], append(args, q.Types)
	}
	args = append(args, q.K)
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('hnsw.ef_search', $1, true), set_config('plan_cache_mode', 'force_custom_plan', true)`, strconv.Itoa(ef))
	b.Queue(sql, args...)
	br := ix.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("set hnsw.ef_search: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	hits, err := ix.rank(rows, query, q.K)
	if err != nil {
		return nil, err
	}
	return hits, br.Close()
}

// rank scores rows with vector.Score and keeps the best k.
func (ix *Index) rank(rows pgx.Rows, query []float32, k int) ([]vector.Hit, error) {
	hits := make([]vector.Hit, 0, k+exactMargin)
	err := readRows(rows, ix.spec.Dimension, func(id string, v []float32) {
		hits = append(hits, vector.Hit{ID: id, Score: score(ix.spec.Metric, v, query)})
	})
	if err != nil {
		return nil, err
	}
	return vector.RankHits(hits, k), nil
}

// matches counts the entries of scope (and types), up to ExactBelow+1: enough to
// choose the path. Counts are cached for sizeTTL.
func (ix *Index) matches(ctx context.Context, s *statements, scope string, types []string) (int, error) {
	key := matchKey(scope, types)
	if n, ok := ix.sizes.get(key); ok {
		return n, nil
	}
	sql, args := s.count[0], []any{scope}
	if len(types) > 0 {
		sql, args = s.count[1], append(args, types)
	}
	args = append(args, ix.params.ExactBelow+1)
	var n int
	if err := ix.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the entries of scope %s: %w", scope, err)
	}
	ix.sizes.put(key, n)
	return n, nil
}

// matchKey names a scope and types in the caches.
func matchKey(scope string, types []string) string {
	key := scope
	if len(types) > 0 {
		sorted := slices.Clone(types)
		slices.Sort(sorted)
		key += "\x00" + strings.Join(slices.Compact(sorted), "\x00")
	}
	return key
}

type sizeCache struct {
	mu sync.Mutex
	m  map[string]sizeEntry
}

type sizeEntry struct {
	n  int
	at time.Time
}

func (c *sizeCache) get(key string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || time.Since(e.at) > sizeTTL {
		return 0, false
	}
	return e.n, true
}

func (c *sizeCache) put(key string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxSizes {
		c.m = make(map[string]sizeEntry)
	}
	c.m[key] = sizeEntry{n: n, at: time.Now()}
}

// pathCounts count the searches by the path that answered them.
type pathCounts struct {
	exact, ann, fallback atomic.Int64
	// raised counts the HNSW walks redone with a larger ef_search.
	raised atomic.Int64
}

// SearchPaths counts this index's searches by the path that answered them: exact
// (a scope at or below ExactBelow), ann (one HNSW walk), fallback (the walks found
// too few and the search ran exactly), and raised, the HNSW walks redone with a
// larger ef_search.
func (ix *Index) SearchPaths() (exact, ann, fallback, raised int64) {
	return ix.paths.exact.Load(), ix.paths.ann.Load(), ix.paths.fallback.Load(), ix.paths.raised.Load()
}
