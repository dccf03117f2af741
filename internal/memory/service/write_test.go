package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/service"
)

// TestGuaranteeDedupWritersNeverExhaustThePool: many more concurrent near-duplicate
// writers than the pool has connections all finish. Each holds a connection for its
// (scope, type) lock and needs another for its queries; without a bound on lock
// holders they took every connection and waited on each other forever.
func TestGuaranteeDedupWritersNeverExhaustThePool(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		writers := 8 * e.store.PoolSize()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 3 {
					it := memory.Item{Scope: fmt.Sprintf("user:%d", i), MemoryType: memory.Semantic, BaseScore: 0.5,
						Content: json.RawMessage(fmt.Sprintf(`{"fact":"writer %d fact %d about something else entirely %d"}`, i, j, i*j))}
					if _, err := e.mem.Write(ctx, []memory.Item{it}, service.WriteOptions{DedupThreshold: 0.9}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%d writers over a pool of %d: %v", writers, e.store.PoolSize(), err)
		}
	})
}
