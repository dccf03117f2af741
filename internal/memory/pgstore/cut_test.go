package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestGuaranteeCutTimeIsTheSnapshots races writers and forgetters against cuts: a
// cut's Time is the moment of its snapshot for everything this store stamps. Every
// tombstone the store wrote before Time is in the cut (as its scope's latest before
// Time) and none after; every memory in the cut was recorded before Time; and every
// memory still stored at the end that was recorded before Time is in the cut.
func TestGuaranteeCutTimeIsTheSnapshots(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	const writers, forgetters, scopes, cuts = 6, 2, 8, 5
	var (
		stop atomic.Bool
		// writes counts acknowledged writes: the forgets and the cuts are paced by it,
		// not by the clock, so each lands amid writes however fast the machine is.
		writes atomic.Int64
		paced  = func(n int64) {
			for target := writes.Load() + n; writes.Load() < target && !stop.Load(); {
				runtime.Gosched()
			}
		}
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if first == nil {
			first = err
		}
	}
	for w := range writers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				it := item(fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("user:%d", i%scopes), memory.Episodic, "", fmt.Sprintf(`{"w":%d,"i":%d}`, w, i), 1, 0)
				it.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
				it.UpdatedAt = it.CreatedAt
				if _, err := s.Put(ctx, it); err != nil && !errors.Is(err, context.Canceled) {
					fail(err)
					return
				}
				writes.Add(1)
			}
		})
	}
	for f := range forgetters {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				// Half the scopes are forgotten over and over; the others fill up.
				if _, err := s.Forget(ctx, fmt.Sprintf("user:%d", (i*forgetters+f)%(scopes/2)), "", "test"); err != nil {
					fail(err)
					return
				}
				paced(5)
			}
		})
	}
	type cutView struct {
		at         time.Time
		memories   map[string]time.Time // id -> recorded_at
		tombstones map[string]time.Time
	}
	var views []cutView
	for range cuts {
		paced(150)
		v := cutView{memories: map[string]time.Time{}, tombstones: map[string]time.Time{}}
		err := s.ReadCut(ctx, func(ctx context.Context, c *Cut) error {
			v.at = c.Time
			if err := c.EachTombstone(ctx, func(tb Tombstone) error { v.tombstones[tb.Scope] = tb.ForgottenAt; return nil }); err != nil {
				return err
			}
			return c.Export(ctx, ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
				v.memories[it.MemoryID] = it.RecordedAt
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
	}
	stop.Store(true)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}

	// Every tombstone row the store holds, and every memory still stored.
	rows, err := pool.Query(ctx, `SELECT scope, forgotten_at FROM `+s.t.tombstones+` ORDER BY scope, forgotten_at`)
	if err != nil {
		t.Fatal(err)
	}
	type tomb struct {
		scope string
		at    time.Time
	}
	var tombs []tomb
	for rows.Next() {
		var tb tomb
		if err := rows.Scan(&tb.scope, &tb.at); err != nil {
			t.Fatal(err)
		}
		tombs = append(tombs, tb)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	recorded := map[string]time.Time{}
	for _, it := range exportAll(t, s, ExportFilter{IncludeArchived: true}) {
		recorded[it.MemoryID] = it.RecordedAt
	}
	if len(tombs) < cuts || len(recorded) < 100 {
		t.Fatalf("%d tombstones and %d memories: the race did not run", len(tombs), len(recorded))
	}
	for i, v := range views {
		latest := map[string]time.Time{}
		for _, tb := range tombs {
			if tb.at.Before(v.at) && tb.at.After(latest[tb.scope]) {
				latest[tb.scope] = tb.at
			}
		}
		for scope, at := range latest {
			if got, ok := v.tombstones[scope]; !ok || !got.Equal(at) {
				t.Errorf("cut %d at %s: %s was forgotten at %s, before the cut, but the cut has %v", i, v.at, scope, at, got)
			}
		}
		for scope, at := range v.tombstones {
			if !at.Before(v.at) {
				t.Errorf("cut %d at %s holds %s's tombstone of %s, not before it", i, v.at, scope, at)
			}
		}
		for id, at := range v.memories {
			if !at.Before(v.at) {
				t.Errorf("cut %d at %s holds %s recorded at %s, not before it", i, v.at, id, at)
			}
		}
		missing := 0
		for id, at := range recorded {
			if _, ok := v.memories[id]; at.Before(v.at) && !ok {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("cut %d at %s lacks %d memories recorded before it", i, v.at, missing)
		}
	}
	t.Logf("%d cuts; %d tombstone rows, %d memories at the end", len(views), len(tombs), len(recorded))
}
