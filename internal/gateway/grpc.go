package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	memoryv1 "github.com/amemory/memory-operator/api/proto/memory/v1"
	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/shortterm"
)

// The gRPC API (memory.v1.MemoryService, api/proto/memory/v1/memory.proto): the
// native API's operations behind one service, with the same keys (metadata
// x-api-key or authorization), scopes, limits and error codes. Each method converts
// its message to the native request, runs the operation every door runs, and
// converts the answer back; nothing here decides what a call may do.

// ErrorDomain is the domain of the google.rpc.ErrorInfo a gRPC error carries; its
// reason is the native API's error code.
const ErrorDomain = "memory.amemory.dev"

// grpcService is the fully qualified name of the memory service: its methods need a
// key, the health and reflection services do not.
const grpcService = "/memory.v1.MemoryService/"

// grpcWrites are the methods a read-only key may not call (the native API's write
// routes).
var grpcWrites = map[string]bool{
	"Remember": true, "RememberBatch": true, "Update": true, "Delete": true, "Forget": true,
	"AppendTurns": true, "SummarizeSession": true, "PromoteSession": true, "EndSession": true,
}

// GRPCServerOptions are the options the gateway's gRPC server needs: the key check,
// deadline, metrics and error mapping of every call, and the request size limit.
// Serve adds TLS credentials when the API has them.
func (s *Server) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(s.grpcUnary),
		grpc.MaxRecvMsgSize(int(s.cfg.MaxBodyBytes)),
	}
}

// RegisterGRPC registers the memory service on srv.
func (s *Server) RegisterGRPC(srv grpc.ServiceRegistrar) {
	memoryv1.RegisterMemoryServiceServer(srv, &grpcAPI{s: s})
}

type grpcKeyCtx struct{}

// grpcUnary authenticates a memory service call as the HTTP doors do (route), runs
// it under the request deadline, and turns its error into a gRPC status.
func (s *Server) grpcUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method, ok := strings.CutPrefix(info.FullMethod, grpcService)
	if !ok { // health checks
		return handler(ctx, req)
	}
	start := time.Now()
	route := "grpc " + method
	keyName := ""
	resp, err := func() (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		k, err := s.keyFor(first(md.Get("x-api-key")), first(md.Get("authorization")))
		if err != nil {
			return nil, err
		}
		keyName = k.Name
		if grpcWrites[method] && k.ReadOnly {
			return nil, errf(http.StatusForbidden, CodeReadOnly, "key %q is read-only", k.Name)
		}
		ctx, cancel := context.WithTimeoutCause(embed.WithCaller(ctx, k.Name), s.cfg.RequestTimeout, errRequestTime)
		defer cancel()
		resp, err := handler(context.WithValue(ctx, grpcKeyCtx{}, k), req)
		return resp, inTime(ctx, err)
	}()
	code := http.StatusOK
	if err != nil {
		e := classify(err)
		code = e.status
		if e.status >= 500 {
			s.log.Warn("backend error", "route", route, "code", e.code, "error", err.Error())
		}
		err = grpcStatus(e)
	}
	s.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	s.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	if code >= 500 {
		s.log.Error("request failed", "route", route, "status", code, "key", keyName, "duration", time.Since(start).String())
	} else {
		s.log.Debug("request", "route", route, "status", code, "key", keyName, "duration", time.Since(start).String())
	}
	return resp, err
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// grpcCode is the gRPC code of an API error: the HTTP status's, with the 409s told
// apart and the permanent 413s as the invalid arguments they are.
func grpcCode(e *apiError) codes.Code {
	switch e.code {
	case CodeConflict:
		return codes.AlreadyExists
	case CodeForgotten:
		return codes.FailedPrecondition
	case CodeSessionFull:
		return codes.ResourceExhausted
	case CodeTimeout:
		return codes.DeadlineExceeded
	}
	switch e.status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case 499:
		return codes.Canceled
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}

// grpcStatus is e as a gRPC status: the code, the message, and details a client can
// act on: ErrorInfo (the native code) and, for what may be retried, RetryInfo.
func grpcStatus(e *apiError) error {
	st := status.New(grpcCode(e), e.msg)
	var err error
	if e.retryAfter > 0 {
		st, err = st.WithDetails(&errdetails.ErrorInfo{Reason: e.code, Domain: ErrorDomain},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(e.retryAfter) * time.Second)})
	} else {
		st, err = st.WithDetails(&errdetails.ErrorInfo{Reason: e.code, Domain: ErrorDomain})
	}
	if err != nil { // only a detail that cannot be marshalled: ours always can
		return status.Error(grpcCode(e), e.msg)
	}
	return st.Err()
}

// grpcAPI implements memoryv1.MemoryServiceServer over the Server's operations.
type grpcAPI struct {
	memoryv1.UnimplementedMemoryServiceServer
	s *Server
}

func keyOf(ctx context.Context) *Key { return ctx.Value(grpcKeyCtx{}).(*Key) }

func (g *grpcAPI) WhoAmI(ctx context.Context, _ *memoryv1.WhoAmIRequest) (*memoryv1.WhoAmIResponse, error) {
	k := keyOf(ctx)
	return &memoryv1.WhoAmIResponse{Key: k.Name, Scopes: k.Patterns(), ReadOnly: k.ReadOnly}, nil
}

func (g *grpcAPI) Remember(ctx context.Context, in *memoryv1.NewMemory) (*memoryv1.WriteResult, error) {
	n, err := newMemoryIn(in, "")
	if err != nil {
		return nil, err
	}
	res, err := g.s.rememberOne(ctx, keyOf(ctx), n)
	if err != nil {
		return nil, err
	}
	return writeResultOut(res), nil
}

func (g *grpcAPI) RememberBatch(ctx context.Context, in *memoryv1.RememberBatchRequest) (*memoryv1.RememberBatchResponse, error) {
	memories := make([]NewMemory, len(in.GetMemories()))
	for i, m := range in.GetMemories() {
		n, err := newMemoryIn(m, "memories["+strconv.Itoa(i)+"].")
		if err != nil {
			return nil, err
		}
		memories[i] = n
	}
	res, err := g.s.rememberMany(ctx, keyOf(ctx), memories)
	if err != nil {
		return nil, err
	}
	out := &memoryv1.RememberBatchResponse{Results: make([]*memoryv1.WriteResult, len(res.Results))}
	for i, r := range res.Results {
		out.Results[i] = writeResultOut(r)
	}
	return out, nil
}

func (g *grpcAPI) Get(ctx context.Context, in *memoryv1.GetRequest) (*memoryv1.Memory, error) {
	it, err := g.s.visible(ctx, keyOf(ctx), in.GetMemoryId())
	if err != nil {
		return nil, err
	}
	return memoryOut(it), nil
}

func (g *grpcAPI) Update(ctx context.Context, in *memoryv1.UpdateRequest) (*memoryv1.Memory, error) {
	req := UpdateRequest{BaseScore: in.BaseScore, Source: in.GetSource()}
	if in.ContentJson != nil {
		c, err := jsonIn("content_json", in.GetContentJson())
		if err != nil {
			return nil, err
		}
		req.Content = c
	}
	var err error
	if req.ExpiresAt, err = timeIn("expires_at", in.GetExpiresAt()); err != nil {
		return nil, err
	}
	it, err := g.s.update(ctx, keyOf(ctx), in.GetMemoryId(), req)
	if err != nil {
		return nil, err
	}
	return memoryOut(it), nil
}

func (g *grpcAPI) Delete(ctx context.Context, in *memoryv1.DeleteRequest) (*memoryv1.DeleteResponse, error) {
	if err := g.s.deleteOne(ctx, keyOf(ctx), in.GetMemoryId()); err != nil {
		return nil, err
	}
	return &memoryv1.DeleteResponse{}, nil
}

func (g *grpcAPI) List(ctx context.Context, in *memoryv1.ListRequest) (*memoryv1.ListResponse, error) {
	res, err := g.s.listPage(ctx, keyOf(ctx), in.GetScope(), in.GetTypes(), int(in.GetLimit()), in.GetAfter())
	if err != nil {
		return nil, err
	}
	return &memoryv1.ListResponse{Memories: memoriesOut(res.Memories), NextAfter: res.NextAfter}, nil
}

func (g *grpcAPI) Search(ctx context.Context, in *memoryv1.SearchRequest) (*memoryv1.SearchResponse, error) {
	res, err := g.s.searchReq(ctx, keyOf(ctx), SearchRequest{Scope: in.GetScope(), Query: in.GetQuery(), Types: typesIn(in.GetTypes()),
		TopK: int(in.GetTopK()), Mode: in.GetMode(), MinSimilarity: in.MinSimilarity})
	if err != nil {
		return nil, err
	}
	out := &memoryv1.SearchResponse{Results: make([]*memoryv1.SearchResult, len(res.Results))}
	for i, r := range res.Results {
		out.Results[i] = &memoryv1.SearchResult{Memory: memoryOut(r.Memory), Similarity: r.Similarity, EffectiveScore: r.EffectiveScore,
			AgeSeconds: r.AgeSeconds, Relevance: r.Relevance, Score: r.Score, Why: whyOut(&r.Why)}
	}
	return out, nil
}

func (g *grpcAPI) Recall(ctx context.Context, in *memoryv1.RecallRequest) (*memoryv1.RecallResponse, error) {
	res, err := g.s.recallReq(ctx, keyOf(ctx), RecallRequest{Scope: in.GetScope(), Types: typesIn(in.GetTypes()), Key: in.GetKey(),
		Limit: int(in.GetLimit()), MinScore: in.GetMinScore(), Query: in.GetQuery(), TopK: int(in.GetTopK()), Mode: in.GetMode(),
		MinSimilarity: in.MinSimilarity, RecentTurns: int(in.GetRecentTurns()), SessionScope: in.GetSessionScope()})
	if err != nil {
		return nil, err
	}
	out := &memoryv1.RecallResponse{Recent: memoriesOut(res.Recent), Results: make([]*memoryv1.RecallResult, len(res.Results))}
	for i, r := range res.Results {
		out.Results[i] = &memoryv1.RecallResult{Memory: memoryOut(r.Memory), EffectiveScore: r.EffectiveScore, AgeSeconds: r.AgeSeconds,
			Similarity: r.Similarity, Relevance: r.Relevance, Score: r.Score, Why: whyOut(r.Why)}
	}
	return out, nil
}

func (g *grpcAPI) Forget(ctx context.Context, in *memoryv1.ForgetRequest) (*memoryv1.ForgetResponse, error) {
	res, err := g.s.forgetReq(ctx, keyOf(ctx), ForgetRequest{Scope: in.GetScope(), Reason: in.GetReason()})
	if err != nil {
		return nil, err
	}
	return &memoryv1.ForgetResponse{Scope: res.Scope, Deleted: res.Deleted, ForgottenAt: timestamppb.New(res.ForgottenAt)}, nil
}

func (g *grpcAPI) AppendTurns(ctx context.Context, in *memoryv1.AppendTurnsRequest) (*memoryv1.AppendTurnsResponse, error) {
	req := AppendRequest{Owner: in.GetOwner(), Turns: make([]TurnIn, len(in.GetTurns()))}
	for i, t := range in.GetTurns() {
		c, err := jsonValueIn("turns["+strconv.Itoa(i)+"].content_json", t.GetContentJson())
		if err != nil {
			return nil, err
		}
		req.Turns[i] = TurnIn{Role: t.GetRole(), Content: c}
	}
	res, err := g.s.appendTurns(ctx, keyOf(ctx), in.GetSession(), req)
	if err != nil {
		return nil, err
	}
	return &memoryv1.AppendTurnsResponse{Session: res.Session, Turns: turnsPB(res.Turns), ExpiresAt: timestamppb.New(res.ExpiresAt)}, nil
}

func (g *grpcAPI) GetSession(ctx context.Context, in *memoryv1.GetSessionRequest) (*memoryv1.Session, error) {
	last := int(in.GetLast())
	if last < 0 || last > shortterm.DefaultMaxTurns {
		return nil, errf(http.StatusBadRequest, CodeInvalidRequest, "last must be in [0, %d] (0: all)", shortterm.DefaultMaxTurns)
	}
	asOf, err := timeIn("as_of", in.GetAsOf())
	if err != nil {
		return nil, err
	}
	var at time.Time
	if asOf != nil {
		at = *asOf
	}
	res, err := g.s.readSession(ctx, keyOf(ctx), in.GetSession(), last, at)
	if err != nil {
		return nil, err
	}
	return &memoryv1.Session{Session: res.Session, Owner: res.Owner, LastSeq: res.LastSeq, PromotedThrough: res.PromotedThrough,
		ExpiresAt: timestamppb.New(res.ExpiresAt), Turns: turnsPB(res.Turns)}, nil
}

func (g *grpcAPI) SummarizeSession(ctx context.Context, in *memoryv1.SummarizeSessionRequest) (*memoryv1.SummarizeSessionResponse, error) {
	c, err := jsonValueIn("content_json", in.GetContentJson())
	if err != nil {
		return nil, err
	}
	res, err := g.s.summarize(ctx, keyOf(ctx), in.GetSession(), SummaryRequest{Through: in.GetThrough(), Content: c})
	if err != nil {
		return nil, err
	}
	return &memoryv1.SummarizeSessionResponse{Replaced: int32(res.Replaced)}, nil //nolint:gosec // at most the session's turn limit
}

func (g *grpcAPI) PromoteSession(ctx context.Context, in *memoryv1.PromoteSessionRequest) (*memoryv1.PromoteSessionResponse, error) {
	res, err := g.s.promote(ctx, keyOf(ctx), in.GetSession(), in.GetThrough())
	if err != nil {
		return nil, err
	}
	return &memoryv1.PromoteSessionResponse{Promoted: int32(res.Promoted)}, nil //nolint:gosec // at most the session's turn limit
}

func (g *grpcAPI) EndSession(ctx context.Context, in *memoryv1.EndSessionRequest) (*memoryv1.EndSessionResponse, error) {
	res, err := g.s.endSession(ctx, keyOf(ctx), in.GetSession(), in.Promote)
	if err != nil {
		return nil, err
	}
	return &memoryv1.EndSessionResponse{Session: res.Session, Turns: int32(res.Turns), Promoted: int32(res.Promoted)}, nil //nolint:gosec // at most the session's turn limit
}

// Conversions. Field names in errors are the proto's, as a client wrote them.

func newMemoryIn(in *memoryv1.NewMemory, at string) (NewMemory, error) {
	n := NewMemory{Scope: in.GetScope(), MemoryType: memory.Type(in.GetMemoryType()), Key: in.GetKey(), MemoryID: in.GetMemoryId(),
		Source: in.GetSource(), BaseScore: in.BaseScore, TTLSeconds: in.GetTtlSeconds()}
	var err error
	if n.Content, err = jsonIn(at+"content_json", in.GetContentJson()); err != nil {
		return n, err
	}
	if n.ExpiresAt, err = timeIn(at+"expires_at", in.GetExpiresAt()); err != nil {
		return n, err
	}
	if n.CreatedAt, err = timeIn(at+"created_at", in.GetCreatedAt()); err != nil {
		return n, err
	}
	return n, nil
}

// jsonIn is a JSON object field: empty is left to the operation to refuse (as a
// missing content is in the native API), anything else must be valid JSON.
func jsonIn(field, v string) (json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	if !json.Valid([]byte(v)) {
		return nil, errf(http.StatusBadRequest, CodeInvalidJSON, "%s is not valid JSON", field)
	}
	return json.RawMessage(v), nil
}

func jsonValueIn(field, v string) (JSONValue, error) {
	raw, err := jsonIn(field, v)
	return JSONValue(raw), err
}

func timeIn(field string, ts *timestamppb.Timestamp) (*time.Time, error) {
	if ts == nil {
		return nil, nil
	}
	if err := ts.CheckValid(); err != nil {
		return nil, errf(http.StatusBadRequest, CodeInvalidRequest, "%s: %v", field, err)
	}
	t := ts.AsTime()
	return &t, nil
}

func typesIn(names []string) []memory.Type {
	if len(names) == 0 {
		return nil
	}
	out := make([]memory.Type, len(names))
	for i, n := range names {
		out[i] = memory.Type(n)
	}
	return out
}

func writeResultOut(r WriteResponse) *memoryv1.WriteResult {
	return &memoryv1.WriteResult{MemoryId: r.MemoryID, Outcome: r.Outcome, Indexed: r.Indexed, Similarity: r.Similarity}
}

func timeOut(t *time.Time) *timestamppb.Timestamp {
	if t == nil || t.IsZero() {
		return nil
	}
	return timestamppb.New(*t)
}

func memoryOut(it memory.Item) *memoryv1.Memory {
	m := &memoryv1.Memory{MemoryId: it.MemoryID, MemoryType: string(it.MemoryType), Scope: it.Scope, Key: it.Key,
		ContentJson: string(it.Content), Source: it.Source, BaseScore: it.BaseScore,
		CreatedAt: timeOut(&it.CreatedAt), UpdatedAt: timeOut(&it.UpdatedAt), RecordedAt: timeOut(&it.RecordedAt),
		ExpiresAt: timeOut(it.ExpiresAt), ArchivedAt: timeOut(it.ArchivedAt)}
	for _, h := range it.History {
		m.History = append(m.History, &memoryv1.Revision{ContentJson: string(h.Content), Source: h.Source, BaseScore: h.BaseScore,
			UpdatedAt: timeOut(&h.UpdatedAt), SupersededAt: timeOut(&h.SupersededAt)})
	}
	return m
}

func memoriesOut(items []memory.Item) []*memoryv1.Memory {
	out := make([]*memoryv1.Memory, len(items))
	for i, it := range items {
		out[i] = memoryOut(it)
	}
	return out
}

func whyOut(w *SearchWhy) *memoryv1.Why {
	if w == nil {
		return nil
	}
	return &memoryv1.Why{Channels: w.Channels, DenseRank: int32(w.DenseRank), LexicalRank: int32(w.LexicalRank), //nolint:gosec // ranks are at most top_k
		LexicalScore: w.LexicalScore, MatchedTerms: int32(w.MatchedTerms)} //nolint:gosec // terms of one query
}

func turnsPB(ts []TurnOut) []*memoryv1.Turn {
	out := make([]*memoryv1.Turn, len(ts))
	for i, t := range ts {
		out[i] = &memoryv1.Turn{Seq: t.Seq, Role: t.Role, ContentJson: string(t.Content), Ts: timestamppb.New(t.At)}
	}
	return out
}

// serveGRPC serves the gRPC API on cfg.GRPCListen, with TLS when the HTTP API has it
// (the same certificate, re-read when it changes), the standard health service
// (SERVING while the store's database answers, as /readyz) and reflection (so that
// grpcurl and other generic clients need no .proto). stop drains in-flight calls for
// up to grace.
func (g *Gateway) serveGRPC(ctx context.Context, tlsConfig *tls.Config, errc chan<- error) (stop func(grace time.Duration), err error) {
	ln, err := net.Listen("tcp", g.cfg.GRPCListen)
	if err != nil {
		return nil, fmt.Errorf("--grpc-listen: %w", err)
	}
	opts := g.Server.GRPCServerOptions()
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	srv := grpc.NewServer(opts...)
	g.Server.RegisterGRPC(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	g.grpcAddr.Store(ln.Addr().String())
	go g.Server.reportHealth(ctx, hs)
	go func() { errc <- srv.Serve(ln) }()
	g.log.Info("gRPC API serving", "address", ln.Addr().String(), "tls", tlsConfig != nil)
	return func(grace time.Duration) {
		hs.Shutdown()
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
			srv.Stop()
		}
	}, nil
}

// GRPCAddr is the address the gRPC API listens on ("" before Serve starts it).
func (g *Gateway) GRPCAddr() string {
	addr, _ := g.grpcAddr.Load().(string)
	return addr
}

// grpcHealthEvery is how often the gRPC health status is refreshed.
const grpcHealthEvery = 5 * time.Second

// reportHealth keeps the health service's status (for the whole server, "", and for
// memory.v1.MemoryService) on what /readyz says, until ctx ends.
func (s *Server) reportHealth(ctx context.Context, hs *health.Server) {
	t := time.NewTicker(grpcHealthEvery)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st := healthpb.HealthCheckResponse_SERVING
		if s.ready(cctx) != nil || s.keys.count() == 0 {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		cancel()
		for _, name := range []string{"", memoryv1.MemoryService_ServiceDesc.ServiceName} {
			hs.SetServingStatus(name, st)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
