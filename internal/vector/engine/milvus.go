package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// dialMilvus connects to the store's Milvus as login, giving up after DialTimeout.
func dialMilvus(ctx context.Context, addr string, login Login) (client.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	c, err := milvus.Connect(cctx, milvus.Conn{Address: addr, Username: login.Username, Password: login.Password})
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", DialTimeout, err)
		}
		return nil, fmt.Errorf("connecting to Milvus %s: %w", addr, err)
	}
	return c, nil
}
