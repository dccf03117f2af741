package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// milvusConnectTimeout bounds connecting to Milvus: the SDK dials blocking and would
// retry an unreachable server for as long as the context lives, leaving a Job hanging
// until its deadline with no word of why. Tests shorten it.
var milvusConnectTimeout = 30 * time.Second

// connectMilvus dials the store's Milvus, giving up after milvusConnectTimeout.
func connectMilvus(ctx context.Context, addr string) (client.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, milvusConnectTimeout)
	defer cancel()
	c, err := milvus.Connect(cctx, milvus.Conn{Address: addr})
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", milvusConnectTimeout, err)
		}
		return nil, fmt.Errorf("connecting to Milvus %s: %w", addr, err)
	}
	return c, nil
}
