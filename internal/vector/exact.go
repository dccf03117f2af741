package vector

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
)

// Scorer is implemented by indexes that can score a chosen set of their entries
// exactly. A search narrowed by something the index does not hold (a key prefix, a
// filter on the content) selects its candidates in the system of record and has them
// scored here, so it ranks exactly what it admits instead of filtering the top hits
// of the whole scope (which comes back short when the admitted ones rank low).
type Scorer interface {
	// ScoreIDs returns, for each of ids that is an entry of q.Scope (and of q.Types
	// when set), its exact score against q.Vector (the score Search reports), best
	// first, ties by ID; at most q.K hits, or all of them when q.K is 0. IDs that are
	// not such entries are left out, duplicates count once.
	ScoreIDs(ctx context.Context, q Query, ids []string) ([]Hit, error)
}

// MultiSearcher is implemented by indexes that answer many searches at once faster
// than one by one (one round trip, one scan of a scope for all of its searches).
type MultiSearcher interface {
	// SearchMany returns, for each of qs, what Search returns for it.
	SearchMany(ctx context.Context, qs []Query) ([][]Hit, error)
}

// Mark is an opaque point in an index's history (ChangeTracker.Mark).
type Mark string

// ChangeTracker is implemented by indexes that can search only the entries written
// after a point in their history. A writer that must search under a lock (the
// near-duplicate check) and finds it held searches everything while it waits, then
// only what was written since, under the lock: the lock is held for the changes,
// not for a scan of the whole scope.
type ChangeTracker interface {
	// Mark returns the index's present point. Every entry written (inserted or
	// updated) by a write not complete when Mark returns is "written since" it.
	Mark(ctx context.Context) (Mark, error)
	// SearchSince answers qs as SearchMany would over only the entries written
	// since m, and returns the IDs of those entries in the searched scopes (and
	// types) as changed. It may count more entries as written since m than were
	// (never fewer).
	SearchSince(ctx context.Context, m Mark, qs []Query) (hits [][]Hit, changed map[string]bool, err error)
}

// SearchMany runs qs on ix: in one call when ix is a MultiSearcher, else as Searches,
// at most parallel at a time. out[i] is qs[i]'s hits; the first error is returned.
func SearchMany(ctx context.Context, ix Index, qs []Query, parallel int) ([][]Hit, error) {
	if ms, ok := ix.(MultiSearcher); ok {
		return ms.SearchMany(ctx, qs)
	}
	out := make([][]Hit, len(qs))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i, q := range qs {
		g.Go(func() error {
			hits, err := ix.Search(ctx, q)
			out[i] = hits
			return err
		})
	}
	return out, g.Wait()
}

// ValidateScoreQuery checks a ScoreIDs call against spec: scope, types, the vector,
// K >= 0 and the IDs.
func ValidateScoreQuery(spec Spec, q Query, ids []string) error {
	if err := ValidateScope(q.Scope); err != nil {
		return fmt.Errorf("score: %w", err)
	}
	for _, t := range q.Types {
		if err := ValidateType(t); err != nil {
			return fmt.Errorf("score: %w", err)
		}
	}
	if q.K < 0 {
		return fmt.Errorf("score: k must not be negative, got %d", q.K)
	}
	for _, id := range ids {
		if err := ValidateID(id); err != nil {
			return fmt.Errorf("score: %w", err)
		}
	}
	return checkVector(spec, q.Vector, "query vector")
}

// CompareHits orders two hits as every engine ranks them: the higher score first,
// then the smaller ID.
func CompareHits(a, b Hit) int {
	return cmp.Or(cmp.Compare(b.Score, a.Score), strings.Compare(a.ID, b.ID))
}

// RankHits sorts hits best first, ties by ID, drops repeated IDs and keeps at most k
// (all when k is 0). Implementations that score outside their engine rank with it, so
// every engine orders ties the same way.
func RankHits(hits []Hit, k int) []Hit {
	seen := make(map[string]bool, len(hits))
	hits = slices.DeleteFunc(hits, func(h Hit) bool {
		dup := seen[h.ID]
		seen[h.ID] = true
		return dup
	})
	slices.SortFunc(hits, CompareHits)
	if k > 0 && len(hits) > k {
		hits = hits[:k]
	}
	return hits
}
