package main

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	memoryv1 "github.com/amemory/memory-operator/api/proto/memory/v1"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// benchGRPC makes the same calls to one gateway process over its gRPC API and its
// native HTTP API (search, a single write, a session window), at 1, 8 and 32
// clients, and prints gRPC's p50 over HTTP's (target: at most 1.2).
func (e *env) benchGRPC(ctx context.Context, items, calls int) error {
	fmt.Printf("\ngRPC benchmark: %d memories over %d scopes, %d calls a row, the same calls to one gateway over gRPC and HTTP\n\n", items, gwScopes, calls)
	st, _, cleanup, err := e.seededGwStore(ctx, engine.Postgres, items)
	if err != nil {
		return err
	}
	defer cleanup()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	grpcAddr := ln.Addr().String()
	_ = ln.Close()
	gw, err := e.startGatewayProcess(ctx, st.agentURI, gateway.Config{StoreNamespace: "bench-grpc", StoreName: st.names.Tenant, Schema: st.names.Schema,
		Vectors: st.vectors, Dimension: gwDim, Metric: "COSINE", Embedder: "Hashing", GRPCListen: grpcAddr,
		DedupThreshold: seedDedup, RateLimit: 1e9, RateBurst: 1 << 30, MaxBodyBytes: gateway.DefaultMaxBodyBytes, ShutdownGrace: 5 * time.Second})
	if err != nil {
		return err
	}
	defer gw.stop()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	rpc := memoryv1.NewMemoryServiceClient(conn)
	withKey := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-api-key", gw.key)
	}
	hc := &gwCaller{url: gw.url, key: gw.key, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}}

	scope := func(r *mrand.Rand) string { return fmt.Sprintf("user:%d", r.IntN(gwScopes)) }
	var seq atomic.Int64
	content := func(r *mrand.Rand) string { return fmt.Sprintf(`{"event":%q,"n":%d}`, gwText(r, 8), seq.Add(1)) }
	session := func(r *mrand.Rand) string { return fmt.Sprintf("session:g%d", r.IntN(200)) }
	type way func(context.Context, *mrand.Rand) error
	rows := []struct {
		name       string
		grpc, http way
	}{
		{"search (top 10)", func(ctx context.Context, r *mrand.Rand) error {
			_, err := rpc.Search(withKey(ctx), &memoryv1.SearchRequest{Scope: scope(r), Query: gwText(r, 3), TopK: 10})
			return err
		}, func(ctx context.Context, r *mrand.Rand) error {
			return hc.call(ctx, "POST", "/v1/search", gateway.SearchRequest{Scope: scope(r), Query: gwText(r, 3), TopK: 10}, nil)
		}},
		{"remember one", func(ctx context.Context, r *mrand.Rand) error {
			_, err := rpc.Remember(withKey(ctx), &memoryv1.NewMemory{Scope: scope(r), MemoryType: "episodic", ContentJson: content(r)})
			return err
		}, func(ctx context.Context, r *mrand.Rand) error {
			return hc.call(ctx, "POST", "/v1/memories", gateway.NewMemory{Scope: scope(r), MemoryType: memory.Episodic, Content: json.RawMessage(content(r))}, nil)
		}},
		{"read a session window", func(ctx context.Context, r *mrand.Rand) error {
			_, err := rpc.GetSession(withKey(ctx), &memoryv1.GetSessionRequest{Session: session(r), Last: 20})
			return err
		}, func(ctx context.Context, r *mrand.Rand) error {
			return hc.call(ctx, "GET", "/v1/sessions/"+session(r)+"?last=20", nil, nil)
		}},
	}
	for i := range 200 {
		if _, err := rpc.AppendTurns(withKey(ctx), &memoryv1.AppendTurnsRequest{Session: fmt.Sprintf("session:g%d", i),
			Turns: []*memoryv1.TurnIn{{Role: "user", ContentJson: `"hello"`}, {Role: "assistant", ContentJson: `"hi"`}}}); err != nil {
			return err
		}
	}
	fmt.Printf("%-24s %8s %22s %22s %14s\n", "", "clients", "gRPC p50 / p99", "HTTP p50 / p99", "p50 gRPC/HTTP")
	worst := 0.0
	for _, row := range rows {
		for _, clients := range []int{1, 8, 32} {
			// Warm both (connections, plans), then alternate which goes first.
			for _, f := range []way{row.grpc, row.http} {
				if _, err := runLoad(ctx, clients, 50, 1, f); err != nil {
					return fmt.Errorf("%s: %w", row.name, err)
				}
			}
			first, second := row.grpc, row.http
			if clients == 8 {
				first, second = second, first
			}
			a, err := runLoad(ctx, clients, calls, 1, first)
			if err != nil {
				return fmt.Errorf("%s: %w", row.name, err)
			}
			b, err := runLoad(ctx, clients, calls, 1, second)
			if err != nil {
				return fmt.Errorf("%s: %w", row.name, err)
			}
			g, h := a, b
			if clients == 8 {
				g, h = b, a
			}
			ra := ratio(g.p50, h.p50)
			worst = max(worst, ra)
			fmt.Printf("%-24s %8d %10.2f / %6.2f ms %10.2f / %6.2f ms %13.2fx\n", row.name, clients, msf(g.p50), msf(g.p99), msf(h.p50), msf(h.p99), ra)
		}
	}
	fmt.Printf("\nworst p50 ratio %.2fx (target <= 1.2x); gateway peak RSS %d MiB\n", worst, gw.hwmKB()/1024)
	return nil
}
