package importer

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/amemory/memory-operator/internal/memory"
)

// scopeSorter puts items in the order a package needs (by scope, byte order; within
// a scope, arrival order) with bounded memory: items gather in memory up to a budget,
// each full batch is sorted and spilled to a temporary file, and the runs are merged
// at the end. A source's threads are in thread order, and one user's threads are
// spread all over it.
type scopeSorter struct {
	dir    string
	budget int
	buf    []seqItem
	bytes  int
	runs   []string
	seq    int64
}

type seqItem struct {
	Seq  int64       `json:"s"`
	Item memory.Item `json:"i"`
}

// defaultSortBudget is the approximate memory the sorter holds before spilling.
const defaultSortBudget = 64 << 20

func newScopeSorter(dir string, budget int) *scopeSorter {
	if budget <= 0 {
		budget = defaultSortBudget
	}
	return &scopeSorter{dir: dir, budget: budget}
}

func (s *scopeSorter) add(it memory.Item) error {
	s.buf = append(s.buf, seqItem{Seq: s.seq, Item: it})
	s.seq++
	s.bytes += len(it.Content) + len(it.Scope) + len(it.MemoryID) + len(it.Key) + 256
	if s.bytes >= s.budget {
		return s.spill()
	}
	return nil
}

func less(a, b seqItem) int {
	return cmp.Or(cmp.Compare(a.Item.Scope, b.Item.Scope), cmp.Compare(a.Seq, b.Seq))
}

func (s *scopeSorter) spill() error {
	slices.SortFunc(s.buf, less)
	f, err := os.CreateTemp(s.dir, "import-run-*.jsonl")
	if err != nil {
		return fmt.Errorf("import: spilling sorted items: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	for i := range s.buf {
		if err := enc.Encode(&s.buf[i]); err != nil {
			_ = f.Close()
			return fmt.Errorf("import: spilling sorted items: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("import: spilling sorted items: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("import: spilling sorted items: %w", err)
	}
	s.runs = append(s.runs, f.Name())
	s.buf, s.bytes = s.buf[:0], 0
	return nil
}

// each calls fn for every item in order.
func (s *scopeSorter) each(fn func(memory.Item) error) error {
	slices.SortFunc(s.buf, less)
	if len(s.runs) == 0 {
		for _, si := range s.buf {
			if err := fn(si.Item); err != nil {
				return err
			}
		}
		return nil
	}
	if len(s.buf) > 0 {
		if err := s.spill(); err != nil {
			return err
		}
	}
	h := &runHeap{}
	for _, name := range s.runs {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		r := &run{dec: json.NewDecoder(bufio.NewReaderSize(f, 1<<20))}
		if ok, err := r.next(); err != nil {
			return err
		} else if ok {
			heap.Push(h, r)
		}
	}
	for h.Len() > 0 {
		r := (*h)[0]
		if err := fn(r.cur.Item); err != nil {
			return err
		}
		ok, err := r.next()
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	return nil
}

// close removes the spilled runs.
func (s *scopeSorter) close() {
	for _, name := range s.runs {
		_ = os.Remove(name)
	}
	s.runs = nil
}

type run struct {
	dec *json.Decoder
	cur seqItem
}

func (r *run) next() (bool, error) {
	r.cur = seqItem{}
	if !r.dec.More() {
		return false, nil
	}
	if err := r.dec.Decode(&r.cur); err != nil {
		return false, fmt.Errorf("import: reading a spilled run: %w", err)
	}
	return true, nil
}

type runHeap []*run

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return less(h[i].cur, h[j].cur) < 0 }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(*run)) }
func (h *runHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}
