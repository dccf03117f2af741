package querycache

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// DefaultSemanticVectors bounds the query vectors kept for semantic reuse when
// Options.SemanticVectors is not set: 16 MiB at 1,024 dimensions.
const DefaultSemanticVectors = 4096

// perGroup is how many recent queries of one scope, version and group semantic
// reuse compares a query with: it reuses the results of recent paraphrases, it is
// not a search over every query ever cached.
const perGroup = 16

// semantic keeps the vectors of cached queries, in-process, for semantic reuse:
// per (scope, group), the latest perGroup queries of the newest version seen, each
// with its key and its entry's expiry. It never serves data itself: a match names
// a key, which the backend must still hold at the lookup's version. With the Redis
// backend this index is each replica's own, so a paraphrase finds the queries this
// replica cached (an exact repeat finds every replica's).
type semantic struct {
	threshold float64
	now       func() time.Time

	mu     sync.Mutex
	groups *simplelru.LRU[string, *semGroup] // by scope + "\x00" + group
}

type semGroup struct {
	version int64
	entries []semEntry // oldest first
}

type semEntry struct {
	key   string
	unit  []float32 // the query's vector, scaled to length 1
	until time.Time
}

func newSemantic(threshold float64, vectors int, now func() time.Time) *semantic {
	if vectors <= 0 {
		vectors = DefaultSemanticVectors
	}
	groups, _ := simplelru.NewLRU[string, *semGroup](max(1, vectors/perGroup), nil) // the size is positive: no error
	return &semantic{threshold: threshold, now: now, groups: groups}
}

// nearest returns the keys of up to n queries of (scope, group) at version whose
// similarity to vec is at least the threshold, most similar first. A group of an
// older version is dropped.
func (s *semantic) nearest(scope, group string, version int64, vec []float32, n int) []string {
	q := unit(vec)
	if q == nil {
		return nil
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := scope + "\x00" + group
	g, ok := s.groups.Get(k)
	if !ok {
		return nil
	}
	if g.version < version {
		s.groups.Remove(k)
		return nil
	}
	if g.version > version {
		return nil
	}
	type match struct {
		key string
		sim float64
	}
	var found []match
	for _, e := range g.entries {
		if !now.Before(e.until) {
			continue
		}
		if sim := dot(q, e.unit); sim >= s.threshold {
			found = append(found, match{e.key, sim})
		}
	}
	slices.SortFunc(found, func(a, b match) int { return cmp.Compare(b.sim, a.sim) })
	keys := make([]string, 0, min(n, len(found)))
	for _, m := range found[:min(n, len(found))] {
		keys = append(keys, m.key)
	}
	return keys
}

// add records key's query vector at version, until its entry expires.
func (s *semantic) add(scope, group, key string, version int64, vec []float32, until time.Time) {
	u := unit(vec)
	if u == nil {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := scope + "\x00" + group
	g, ok := s.groups.Get(k)
	switch {
	case !ok || g.version < version:
		g = &semGroup{version: version}
		s.groups.Add(k, g)
	case g.version > version:
		return
	}
	g.entries = slices.DeleteFunc(g.entries, func(e semEntry) bool { return e.key == key || !now.Before(e.until) })
	if len(g.entries) == perGroup {
		g.entries = g.entries[1:]
	}
	g.entries = append(g.entries, semEntry{key: key, unit: u, until: until})
}

// forget drops key from (scope, group): the backend no longer has its entry.
func (s *semantic) forget(scope, group, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.groups.Peek(scope + "\x00" + group); ok {
		g.entries = slices.DeleteFunc(g.entries, func(e semEntry) bool { return e.key == key })
	}
}

// unit returns v scaled to length 1 (a copy), nil for a zero or non-finite vector.
func unit(v []float32) []float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n == 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		return nil
	}
	inv := 1 / math.Sqrt(n)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

// dot is the cosine similarity of two unit vectors (0 when their lengths differ).
func dot(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}
