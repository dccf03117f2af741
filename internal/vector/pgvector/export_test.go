package pgvector

import "context"

// Raised reports how many HNSW walks were redone with a larger ef_search.
func Raised(ix *Index) int64 { return ix.paths.raised.Load() }

// Paths reports how many searches each path answered: exact from the start, by the
// HNSW index, and exactly after a short HNSW answer.
func Paths(ix *Index) (exact, ann, fallback int64) {
	return ix.paths.exact.Load(), ix.paths.ann.Load(), ix.paths.fallback.Load()
}

// SearchSQL returns the exact and the HNSW search statements (with a types filter
// when types is set), as Search runs them.
func SearchSQL(ctx context.Context, ix *Index, types bool) (exact, ann string, err error) {
	s, err := ix.statements(ctx)
	if err != nil {
		return "", "", err
	}
	i := 0
	if types {
		i = 1
	}
	return s.exact[i], s.ann[i], nil
}

// ForgetSizes empties the cache of scope sizes.
func ForgetSizes(ix *Index) {
	ix.sizes.mu.Lock()
	ix.sizes.m = nil
	ix.sizes.mu.Unlock()
}

// InsertsMet reports whether a COPY of new entries met existing rows (insertNew).
func InsertsMet(ix *Index) bool { return ix.insertsMet.Load() }
