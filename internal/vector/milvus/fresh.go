package milvus

import (
	"context"
	"fmt"
	"sync"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/vector"
)

// Fresh loads. Milvus has no update: an upsert deletes its IDs and inserts them
// again, and it records those deletes even for IDs it never held. After a bulk load
// of upserts every segment is mostly "deleted" rows as far as Milvus knows, so it
// compacts all of them, a pair a minute, and indexes each merged segment again: after
// a restore of 2,000,000 memories (2026-12-05) that took both cores of the machine for
// more than half an hour, searches slowed meanwhile, on top of the restore's own
// indexing.
//
// A load into an empty collection inserts instead. BeginFreshLoad checks that the
// collection holds no entry; from then on, until EndFreshLoad, Upsert inserts the
// entries marked New (no other writer can have written their ID: vector.Entry) whose
// ID it was not given before in this load, and upserts the others: a memory that
// existed before the load (archived, or without a vector) may have been written by
// the gateway since it began. A Bloom filter remembers the IDs: a false positive only
// makes an entry an upsert, never a duplicate. An ID is recorded before its insert is
// sent, so a write that is retried (after an error, when the first attempt may have
// landed) upserts it.

// freshLoad is the state of a fresh load: the IDs given to Upsert so far.
type freshLoad struct {
	mu   sync.Mutex
	seen *bloom.BloomFilter
}

// freshFalsePositive is the filter's false-positive rate at its expected size: that
// share of a load's entries is upserted although new.
const freshFalsePositive = 0.001

// BeginFreshLoad starts a fresh load of about expected entries when the collection
// holds none, and reports whether it did. A load larger than expected stays correct;
// only more of its entries become upserts.
func (ix *Index) BeginFreshLoad(ctx context.Context, expected int64) (bool, error) {
	empty, err := ix.empty(ctx)
	if err != nil || !empty {
		return false, err
	}
	ix.fresh.Store(&freshLoad{seen: bloom.NewWithEstimates(uint(max(expected, 1000)), freshFalsePositive)})
	return true, nil
}

// EndFreshLoad ends a fresh load: Upsert upserts again.
func (ix *Index) EndFreshLoad() { ix.fresh.Store(nil) }

// empty reports whether the collection holds no entry, as of now (Strong consistency).
func (ix *Index) empty(ctx context.Context) (bool, error) {
	var rs client.ResultSet
	err := ix.loaded(ctx, func() (err error) {
		rs, err = ix.c.Query(ctx, ix.collection, nil, FieldID+` != ""`, []string{FieldID},
			client.WithLimit(1), client.WithSearchQueryConsistencyLevel(entity.ClStrong))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("milvus: is %s empty: %w", ix.collection, err)
	}
	col := rs.GetColumn(FieldID)
	return col == nil || col.Len() == 0, nil
}

// split returns the entries to insert (New, with IDs not given before in this load)
// and those to upsert, and records every ID.
func (f *freshLoad) split(entries []vector.Entry) (insert, upsert []vector.Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range entries {
		if f.seen.TestOrAddString(e.ID) || !e.New {
			upsert = append(upsert, e)
		} else {
			insert = append(insert, e)
		}
	}
	return insert, upsert
}
