package importer

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"slices"
	"time"

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
	// counts, when not nil, counts the items of each scope; digest, when not nil,
	// hashes every run as it is written (see Convert).
	counts map[string]int64
	digest hash.Hash
}

type seqItem struct {
	Seq  int64
	Item memory.Item
}

// defaultSortBudget is the approximate memory the sorter holds before spilling.
const defaultSortBudget = 32 << 20

// newScopeSorter spills to dir (os.TempDir() when empty, as os.CreateTemp does).
func newScopeSorter(dir string, budget int) *scopeSorter {
	if budget <= 0 {
		budget = defaultSortBudget
	}
	return &scopeSorter{dir: dir, budget: budget}
}

func (s *scopeSorter) add(it memory.Item) error {
	if s.counts != nil {
		s.counts[it.Scope]++
	}
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
	f, err := os.CreateTemp(s.dir, "import-run-*.bin")
	if err != nil {
		return fmt.Errorf("import: spilling sorted items: %w", err)
	}
	var out io.Writer = f
	if s.digest != nil {
		out = io.MultiWriter(f, s.digest)
	}
	w := bufio.NewWriterSize(out, 1<<20)
	var rec []byte
	for i := range s.buf {
		if rec, err = appendRecord(rec[:0], &s.buf[i]); err != nil {
			_ = f.Close()
			return fmt.Errorf("import: spilling sorted items: %w", err)
		}
		if _, err := w.Write(rec); err != nil {
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

// Spilled runs hold one length-prefixed record per item: the fields an import sets,
// written directly (a JSON round trip of every item cost a third of an import), its
// history (mem0's updates) last. Items with an embedding or an archive time are not
// made by imports.
func appendRecord(b []byte, si *seqItem) ([]byte, error) {
	it := &si.Item
	if len(it.Embedding) > 0 || it.ArchivedAt != nil {
		return nil, fmt.Errorf("memory %s has fields an import does not make", it.MemoryID)
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0) // record length, filled in below
	b = binary.AppendVarint(b, si.Seq)
	for _, s := range []string{it.MemoryID, string(it.MemoryType), it.Scope, it.Key, it.Source, string(it.Content)} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(it.BaseScore))
	b = binary.AppendVarint(b, it.CreatedAt.UnixNano())
	b = binary.AppendVarint(b, it.UpdatedAt.UnixNano())
	if it.ExpiresAt != nil {
		b = append(b, 1)
		b = binary.AppendVarint(b, it.ExpiresAt.UnixNano())
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(it.History)))
	for _, r := range it.History {
		for _, s := range []string{string(r.Content), r.Source} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(r.BaseScore))
		b = binary.AppendVarint(b, r.UpdatedAt.UnixNano())
		b = binary.AppendVarint(b, r.SupersededAt.UnixNano())
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b, nil
}

// readRecord decodes one record of appendRecord.
func readRecord(r *bufio.Reader, buf []byte) (seqItem, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return seqItem{}, buf, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return seqItem{}, buf, fmt.Errorf("import: a spilled run is truncated: %w", err)
	}
	// One string holds the record; the item's fields are slices of it (one
	// allocation per item instead of one per field).
	d := recordDecoder{b: buf, s: string(buf)}
	var si seqItem
	si.Seq = d.varint()
	var strs [6]string
	for i := range strs {
		strs[i] = d.str()
	}
	it := &si.Item
	it.MemoryID, it.MemoryType, it.Scope, it.Key, it.Source = strs[0], memory.Type(strs[1]), strs[2], strs[3], strs[4]
	it.Content = json.RawMessage(strs[5])
	it.BaseScore = math.Float64frombits(d.uint64())
	it.CreatedAt = time.Unix(0, d.varint()).UTC()
	it.UpdatedAt = time.Unix(0, d.varint()).UTC()
	if d.byte() == 1 {
		t := time.Unix(0, d.varint()).UTC()
		it.ExpiresAt = &t
	}
	if n := d.uvarint(); n > 0 && d.err == nil {
		it.History = make([]memory.Revision, 0, min(n, 1024))
		for range n {
			content, source := d.str(), d.str()
			r := memory.Revision{Content: json.RawMessage(content), Source: source, BaseScore: math.Float64frombits(d.uint64())}
			r.UpdatedAt = time.Unix(0, d.varint()).UTC()
			r.SupersededAt = time.Unix(0, d.varint()).UTC()
			if d.err != nil {
				break
			}
			it.History = append(it.History, r)
		}
	}
	if d.err != nil {
		return seqItem{}, buf, fmt.Errorf("import: a spilled run is corrupt: %w", d.err)
	}
	return si, buf, nil
}

type recordDecoder struct {
	b []byte
	// s is the whole record as a string; b is its unread end.
	s   string
	err error
}

func (d *recordDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordDecoder) str() string {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || uint64(len(d.b)-n) < v {
		d.err = errors.New("bad string")
		return ""
	}
	at := len(d.s) - len(d.b) + n
	d.b = d.b[n+int(v):]
	return d.s[at : at+int(v)]
}

func (d *recordDecoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.err = errors.New("short record")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *recordDecoder) byte() byte {
	if len(d.b) < 1 {
		d.err = errors.New("short record")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
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
		r := &run{r: bufio.NewReaderSize(f, 1<<20)}
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
	r   *bufio.Reader
	buf []byte
	cur seqItem
}

func (r *run) next() (bool, error) {
	si, buf, err := readRecord(r.r, r.buf)
	r.buf = buf
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.cur = si
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
