package importer

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// LangGraphSource is a LangGraph checkpointer (and store) to import from.
type LangGraphSource interface {
	Threads(ctx context.Context, fn func(Thread) error) error
	StoreItems(ctx context.Context, fn func(StoreItem) error) error
}

// encodedSource is a source that can hand threads with their messages still encoded
// (Thread.decode): decoding is most of an import's work, so the import decodes on
// every core, and only the threads the rules keep.
type encodedSource interface {
	threadsEncoded(ctx context.Context, rules Rules, fn func(Thread) error) error
}

// Stats counts an import by source unit.
type Stats struct {
	Threads      int64 `json:"threads"`
	Imported     int64 `json:"imported"`
	Inactive     int64 `json:"inactive"`
	Zombie       int64 `json:"zombie"`
	NoUser       int64 `json:"noUser"`
	Empty        int64 `json:"empty"`
	Unsupported  int64 `json:"unsupported"`
	StoreItems   int64 `json:"storeItems"`
	StoreSkipped int64 `json:"storeSkipped"`
	Items        int64 `json:"items"`
	// Messages counts the messages of the imported threads.
	Messages int64 `json:"messages,omitempty"`
	// LeftOut counts what the source holds that the import did not convert and no
	// other count covers (a Letta memory block attached to no agent), by what it is,
	// so that nothing is left out without a count.
	LeftOut       []LeftOut `json:"leftOut,omitempty"`
	FirstProblem  string    `json:"firstProblem,omitempty"`
	problemsTaken bool
	superseded    int64 // mapped channel values of older threads for the same (scope, key)
}

// report is the stats as a package's manifest records them.
func (s Stats) report() *snapshot.ImportReport {
	r := &snapshot.ImportReport{Threads: s.Threads, Imported: s.Imported, Inactive: s.Inactive, Zombie: s.Zombie, NoUser: s.NoUser,
		Empty: s.Empty, Unsupported: s.Unsupported, StoreItems: s.StoreItems, StoreSkipped: s.StoreSkipped, Messages: s.Messages,
		FirstProblem: s.FirstProblem}
	for _, l := range s.LeftOut {
		r.LeftOut = append(r.LeftOut, snapshot.ImportLeftOut{What: l.What, Count: l.Count})
	}
	return r
}

// LeftOut is one kind of source data an import did not convert, and how much of it.
type LeftOut struct {
	What  string `json:"what"`
	Count int64  `json:"count"`
}

// leftOutReporter is a source that leaves out, by design, data that no thread or
// store item holds; ImportLangGraph adds its counts to Stats.LeftOut, and its first
// problem when the import had none.
type leftOutReporter interface {
	leftOut() (counts []LeftOut, problem string)
}

// maxChannelsLeftOut bounds the state channels LeftOut names one by one; the rest are
// counted together.
const maxChannelsLeftOut = 24

// channelsLeftOutCounts names the state channels left out, by how many imported
// threads held each (the most frequent first, then by name), and the mapped values
// of older threads that a newer one's replaced.
func channelsLeftOutCounts(names map[string]int64, superseded int64) []LeftOut {
	var out []LeftOut
	for _, name := range slices.SortedFunc(maps.Keys(names), func(a, b string) int {
		return cmp.Or(cmp.Compare(names[b], names[a]), cmp.Compare(a, b))
	}) {
		if len(out) == maxChannelsLeftOut {
			out = append(out, LeftOut{What: "threads holding other state channels, unmapped"})
		}
		if len(out) > maxChannelsLeftOut {
			out[maxChannelsLeftOut].Count += names[name]
			continue
		}
		out = append(out, LeftOut{What: "threads holding state channel " + shown(name) + ", unmapped", Count: names[name]})
	}
	if superseded > 0 {
		out = append(out, LeftOut{What: "mapped state channel values superseded by a more recently active thread's, same scope and key", Count: superseded})
	}
	return out
}

func (s *Stats) problem(p string) {
	if p != "" && !s.problemsTaken {
		s.FirstProblem, s.problemsTaken = p, true
	}
}

func (s *Stats) count(o Outcome) {
	switch o {
	case Imported:
		s.Imported++
	case SkipInactive:
		s.Inactive++
	case SkipZombie:
		s.Zombie++
	case SkipNoUser:
		s.NoUser++
	case SkipEmpty:
		s.Empty++
	case Unsupported:
		s.Unsupported++
	}
}

// LangGraphOptions configure ImportLangGraph.
type LangGraphOptions struct {
	Rules Rules
	// Namespaces map store items' namespaces to scopes (langgraphns.DefaultRules
	// when empty); SkipStore leaves the store out.
	Namespaces []langgraphns.Rule
	SkipStore  bool
	// Progress, when set, is called with the counts so far after each thread and
	// store item, from one goroutine at a time; it must return quickly.
	Progress func(Stats)
}

// ImportLangGraph converts every thread (and store item) of src into memories and
// hands them to fn, in the source's order. Threads and items it cannot convert are
// counted and the first problem kept; it stops only on a source or fn error.
func ImportLangGraph(ctx context.Context, src LangGraphSource, opts LangGraphOptions, fn func(memory.Item) error) (Stats, error) {
	var st Stats
	mapper, err := langgraphns.New(opts.Namespaces)
	if err != nil {
		return st, err
	}
	each := src.Threads
	if enc, ok := src.(encodedSource); ok {
		each = func(ctx context.Context, fn func(Thread) error) error { return enc.threadsEncoded(ctx, opts.Rules, fn) }
	}
	// The memories of mapped state channels, one per (scope, key): of one user's
	// threads, the most recently active one's (ties: the later in the source).
	keyed := map[[2]string]memory.Item{}
	channelsLeftOut := map[string]int64{}
	err = convertInOrder(ctx, each, opts.Rules, runtime.GOMAXPROCS(0), func(res Result) error {
		st.Threads++
		st.Messages += int64(res.Messages)
		st.count(res.Outcome)
		for _, it := range res.Keyed {
			k := [2]string{it.Scope, it.Key}
			if old, ok := keyed[k]; !ok || !it.UpdatedAt.Before(old.UpdatedAt) {
				if ok {
					st.superseded++
				}
				keyed[k] = it
			} else {
				st.superseded++
			}
		}
		for _, name := range res.LeftOutChannels {
			channelsLeftOut[name]++
		}
		if res.Outcome == Unsupported || res.Outcome == SkipNoUser {
			// Threads left out by the rules (idle, zombie, empty) are no problem.
			st.problem(res.Problem)
		}
		for _, it := range res.Items {
			st.Items++
			if err := fn(it); err != nil {
				return err
			}
		}
		if opts.Progress != nil {
			opts.Progress(st)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	for _, k := range slices.SortedFunc(maps.Keys(keyed), func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) }) {
		st.Items++
		if err := fn(keyed[k]); err != nil {
			return st, err
		}
	}
	st.LeftOut = append(st.LeftOut, channelsLeftOutCounts(channelsLeftOut, st.superseded)...)
	if opts.SkipStore {
		return st, nil
	}
	err = src.StoreItems(ctx, func(si StoreItem) error {
		st.StoreItems++
		it, err := storeMemory(mapper, si, opts.Rules.Source, opts.Rules.Now)
		if err != nil {
			st.StoreSkipped++
			labels := make([]string, len(si.Namespace))
			for i, l := range si.Namespace {
				labels[i] = shown(l)
			}
			st.problem(fmt.Sprintf("store item (%s) %q: %v", strings.Join(labels, ", "), si.Key, err))
			return nil
		}
		st.Items++
		if err := fn(it); err != nil {
			return err
		}
		if opts.Progress != nil {
			opts.Progress(st)
		}
		return nil
	})
	if r, ok := src.(leftOutReporter); ok && err == nil {
		counts, problem := r.leftOut()
		st.LeftOut = append(st.LeftOut, counts...)
		st.problem(problem)
	}
	return st, err
}

// convertInOrder reads threads with each and converts them (decoding their messages
// when the rules need them) on workers goroutines, handing the results to emit one at
// a time in the source's order: the package, its counts and its first problem are
// the same whatever the scheduling. A bounded number of threads is in flight. The
// worker that completes the next result in order emits it (and the ones it
// unblocks): a goroutine of its own for that waited for a processor behind the busy
// workers, and held the reader up (a trace showed it waiting, runnable, for half of
// the conversion).
func convertInOrder(ctx context.Context, each func(context.Context, func(Thread) error) error, rules Rules, workers int, emit func(Result) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type job struct {
		seq int
		t   Thread
	}
	// Results wait for every earlier thread: a long conversation must not stall
	// the workers behind it, so the window is wide (measured: 8 threads in flight
	// left the workers idle a sixth of the time; results are a few KiB each).
	inFlight := 64 * max(1, workers)
	slots := make(chan struct{}, inFlight) // taken by the reader, given back once emitted
	jobs := make(chan job, inFlight)
	readErr := make(chan error, 1)
	go func() {
		defer close(jobs)
		seq := 0
		readErr <- each(ctx, func(t Thread) error {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			jobs <- job{seq: seq, t: t} // a worker always takes it: workers stop only when jobs closes
			seq++
			return nil
		})
	}()
	var (
		wg        sync.WaitGroup
		fetchErr  error
		fetchOnce sync.Once
		// mu guards the results waiting for their turn, the next one's number and
		// the first error of emit.
		mu      sync.Mutex
		pending = map[int]Result{}
		next    int
		emitErr error
	)
	deliver := func(seq int, res Result) {
		mu.Lock()
		defer mu.Unlock()
		pending[seq] = res
		for {
			res, ok := pending[next]
			if !ok {
				return
			}
			delete(pending, next)
			next++
			if emitErr == nil {
				if emitErr = emit(res); emitErr != nil {
					cancel() // stop the reader; the workers drain what it sent
				}
			}
			<-slots
		}
	}
	for range max(1, workers) {
		wg.Go(func() {
			for j := range jobs {
				if rules.NeedsMessages(j.t) {
					if err := j.t.decode(ctx, true); err != nil {
						fetchOnce.Do(func() { fetchErr = err })
						cancel()
					}
				}
				deliver(j.seq, rules.Convert(j.t))
			}
		})
	}
	wg.Wait()
	if emitErr != nil {
		return emitErr
	}
	if fetchErr != nil {
		return fetchErr
	}
	return <-readErr
}

// storeMemory makes a memory (semantic unless the item says) of a store item: the namespace gives the scope
// (by the same rules as the gateway's LangGraph API, so the item is where a
// LangGraph client of the gateway would find it), the key its key, the value its
// content. An item the source does not date (an AutoGen ListMemory's) is dated now,
// the import's time.
func storeMemory(m *langgraphns.Mapper, si StoreItem, source string, now time.Time) (memory.Item, error) {
	if si.CreatedAt.IsZero() {
		si.CreatedAt = now
	}
	if si.UpdatedAt.IsZero() {
		si.UpdatedAt = si.CreatedAt
	}
	id := deterministicID("lgs", strings.Join(si.Namespace, "."), si.Key)
	scope, key := si.Scope, si.Key
	if scope == "" {
		slot, err := m.Slot(si.Namespace, si.Key)
		if err != nil {
			return memory.Item{}, err
		}
		scope, key = slot.Scope, slot.Key
	} else {
		id = deterministicID("item", scope, key)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(si.Value, &obj); err != nil {
		return memory.Item{}, fmt.Errorf("value is not a JSON object")
	}
	it := memory.Item{MemoryID: id, MemoryType: cmp.Or(si.Type, memory.Semantic),
		Scope: scope, Key: key, Content: si.Value, Source: source, BaseScore: 0.5,
		CreatedAt: si.CreatedAt.UTC(), UpdatedAt: si.UpdatedAt.UTC(), ExpiresAt: si.ExpiresAt, History: si.History}
	return it, it.Validate()
}
