package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	memoryv1 "github.com/amemory/memory-operator/api/proto/memory/v1"
	"github.com/amemory/memory-operator/internal/testutil"
)

// grpcEnv is a gateway serving its gRPC API on loopback, and a client of it.
func grpcEnv(t *testing.T, o envOptions, creds credentials.TransportCredentials) (*env, memoryv1.MemoryServiceClient, *grpc.ClientConn) {
	t.Helper()
	prev := o.config
	o.config = func(c *Config) {
		c.GRPCListen = "127.0.0.1:0"
		if prev != nil {
			prev(c)
		}
	}
	e := newEnv(t, o)
	testutil.Eventually(t, "the gRPC API listens", func() (bool, error) { return e.gw.GRPCAddr() != "", nil })
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(e.gw.GRPCAddr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return e, memoryv1.NewMemoryServiceClient(conn), conn
}

// as is ctx with the API key in the call's metadata.
func as(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
}

// wantStatus expects a gRPC error with the code and the native API's error code in
// its ErrorInfo.
func wantStatus(t *testing.T, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error = %v, want %s", err, code)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.Reason != reason || info.Domain != ErrorDomain {
				t.Fatalf("ErrorInfo = %v, want reason %q", info, reason)
			}
			return st
		}
	}
	t.Fatalf("%v: no ErrorInfo in %v", err, st.Details())
	return nil
}

// jsonSame compares JSON texts as values, numbers by their digits (the store keeps
// content as jsonb: key order and spacing are its own).
func jsonSame(a, b string) bool {
	var x, y any
	da, db := json.NewDecoder(strings.NewReader(a)), json.NewDecoder(strings.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	return da.Decode(&x) == nil && db.Decode(&y) == nil && reflect.DeepEqual(x, y)
}

func TestGRPCAPI(t *testing.T) {
	agent := newTestKey(t, "agent", false, "user:1", "session:*")
	other := newTestKey(t, "other", false, "user:2")
	reader := newTestKey(t, "reader", true, "user:1")
	e, c, conn := grpcEnv(t, envOptions{keys: []testKey{agent, other, reader}}, nil)
	a, o, ro := as(agent.plain), as(other.plain), as(reader.plain)

	who, err := c.WhoAmI(a, &memoryv1.WhoAmIRequest{})
	if err != nil || who.GetKey() != "agent" || who.GetReadOnly() {
		t.Fatalf("WhoAmI = %v, %v", who, err)
	}
	// Content travels as JSON text, unchanged: an integer past float64's precision
	// comes back as written.
	w, err := c.Remember(a, &memoryv1.NewMemory{Scope: "user:1", MemoryType: "semantic", Key: "city",
		ContentJson: `{"text":"I live in Lisbon","id":12345678901234567890}`})
	if err != nil || w.GetOutcome() != "inserted" || !w.GetIndexed() {
		t.Fatalf("Remember = %v, %v", w, err)
	}
	got, err := c.Get(a, &memoryv1.GetRequest{MemoryId: w.GetMemoryId()})
	if err != nil || !jsonSame(got.GetContentJson(), `{"text":"I live in Lisbon","id":12345678901234567890}`) || got.GetRecordedAt() == nil {
		t.Fatalf("Get = %v, %v", got, err)
	}
	batch, err := c.RememberBatch(a, &memoryv1.RememberBatchRequest{Memories: []*memoryv1.NewMemory{
		{Scope: "user:1", MemoryType: "episodic", ContentJson: `{"text":"we talked about cats"}`},
		{Scope: "user:1", MemoryType: "procedural", ContentJson: `{"text":"answer in Portuguese"}`, BaseScore: proto.Float64(0.9)},
	}})
	if err != nil || len(batch.GetResults()) != 2 {
		t.Fatalf("RememberBatch = %v, %v", batch, err)
	}
	up, err := c.Update(a, &memoryv1.UpdateRequest{MemoryId: w.GetMemoryId(), ContentJson: proto.String(`{"text":"I live in Porto"}`)})
	if err != nil || !jsonSame(up.GetContentJson(), `{"text":"I live in Porto"}`) || len(up.GetHistory()) != 1 {
		t.Fatalf("Update = %v, %v", up, err)
	}
	list, err := c.List(ro, &memoryv1.ListRequest{Scope: "user:1", Limit: 2})
	if err != nil || len(list.GetMemories()) != 2 || list.GetNextAfter() == "" {
		t.Fatalf("List = %v, %v", list, err)
	}
	found, err := c.Search(ro, &memoryv1.SearchRequest{Scope: "user:1", Query: "where do I live", TopK: 3})
	if err != nil || len(found.GetResults()) == 0 || found.GetResults()[0].GetMemory().GetMemoryId() != w.GetMemoryId() ||
		found.GetResults()[0].GetWhy() == nil || found.GetResults()[0].Similarity == nil {
		t.Fatalf("Search = %v, %v", found, err)
	}
	rec, err := c.Recall(ro, &memoryv1.RecallRequest{Scope: "user:1", Limit: 2})
	if err != nil || len(rec.GetResults()) != 2 || rec.GetResults()[0].GetWhy() != nil {
		t.Fatalf("Recall = %v, %v", rec, err)
	}

	// The native API's rules, with its codes in ErrorInfo.
	_, err = c.Get(context.Background(), &memoryv1.GetRequest{MemoryId: w.GetMemoryId()})
	wantStatus(t, err, codes.Unauthenticated, CodeUnauthenticated)
	_, err = c.Get(as("not-a-key"), &memoryv1.GetRequest{MemoryId: w.GetMemoryId()})
	wantStatus(t, err, codes.Unauthenticated, CodeUnauthenticated)
	_, err = c.Get(o, &memoryv1.GetRequest{MemoryId: w.GetMemoryId()})
	wantStatus(t, err, codes.NotFound, CodeNotFound)
	_, err = c.Search(o, &memoryv1.SearchRequest{Scope: "user:1", Query: "x"})
	wantStatus(t, err, codes.PermissionDenied, CodeScopeForbidden)
	_, err = c.Remember(ro, &memoryv1.NewMemory{Scope: "user:1", ContentJson: `{"text":"x"}`})
	wantStatus(t, err, codes.PermissionDenied, CodeReadOnly)
	_, err = c.Remember(a, &memoryv1.NewMemory{Scope: "user:1", ContentJson: `{"text":`})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidJSON)
	_, err = c.Remember(a, &memoryv1.NewMemory{Scope: "user:1", MemoryType: "semantic", ContentJson: `"a string"`})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidContent)
	_, err = c.Remember(a, &memoryv1.NewMemory{Scope: "user:1", MemoryType: "semantic"})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidContent)
	_, err = c.Remember(a, &memoryv1.NewMemory{Scope: "user:1", ContentJson: `{"text":"x"}`})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidType)
	_, err = c.Remember(a, &memoryv1.NewMemory{Scope: "team:1", ContentJson: `{"text":"x"}`})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidScope)
	_, err = c.Remember(a, &memoryv1.NewMemory{Scope: "user:1", MemoryType: "semantic", ContentJson: `{"text":"x"}`, BaseScore: proto.Float64(2)})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidRequest)
	_, err = c.Remember(a, &memoryv1.NewMemory{Scope: "user:1", MemoryType: "semantic", ContentJson: `{"text":"x"}`, ExpiresAt: &timestamppb.Timestamp{Seconds: -1 << 62}})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidRequest)
	_, err = c.Search(a, &memoryv1.SearchRequest{Scope: "user:1", Query: " "})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidRequest)
	_, err = c.Search(a, &memoryv1.SearchRequest{Scope: "user:1", Query: "x", TopK: 101})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidRequest)
	_, err = c.List(a, &memoryv1.ListRequest{Scope: "user:1", Types: []string{"dream"}})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidType)
	_, err = c.RememberBatch(a, &memoryv1.RememberBatchRequest{})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidRequest)
	big := make([]*memoryv1.NewMemory, MaxBatch+1)
	for i := range big {
		big[i] = &memoryv1.NewMemory{Scope: "user:1", MemoryType: "semantic", ContentJson: `{}`}
	}
	_, err = c.RememberBatch(a, &memoryv1.RememberBatchRequest{Memories: big})
	wantStatus(t, err, codes.InvalidArgument, CodeBatchTooLarge)

	// Sessions.
	app, err := c.AppendTurns(a, &memoryv1.AppendTurnsRequest{Session: "session:g1", Owner: "user:1", Turns: []*memoryv1.TurnIn{
		{Role: "user", ContentJson: `"my cat is called Miso"`}, {Role: "assistant", ContentJson: `{"text":"Hello Miso"}`}}})
	if err != nil || len(app.GetTurns()) != 2 || app.GetTurns()[1].GetSeq() != 2 {
		t.Fatalf("AppendTurns = %v, %v", app, err)
	}
	sess, err := c.GetSession(a, &memoryv1.GetSessionRequest{Session: "session:g1", Last: 1})
	if err != nil || sess.GetOwner() != "user:1" || len(sess.GetTurns()) != 1 || !jsonSame(sess.GetTurns()[0].GetContentJson(), `{"text":"Hello Miso"}`) {
		t.Fatalf("GetSession = %v, %v", sess, err)
	}
	_, err = c.GetSession(a, &memoryv1.GetSessionRequest{Session: "session:none"})
	wantStatus(t, err, codes.NotFound, CodeNotFound)
	_, err = c.SummarizeSession(a, &memoryv1.SummarizeSessionRequest{Session: "session:g1", Through: 9, ContentJson: `"s"`})
	wantStatus(t, err, codes.InvalidArgument, CodeInvalidRequest)
	pr, err := c.PromoteSession(a, &memoryv1.PromoteSessionRequest{Session: "session:g1", Through: 1})
	if err != nil || pr.GetPromoted() != 1 {
		t.Fatalf("PromoteSession = %v, %v", pr, err)
	}
	sum, err := c.SummarizeSession(a, &memoryv1.SummarizeSessionRequest{Session: "session:g1", Through: 2, ContentJson: `"a cat named Miso"`})
	if err != nil || sum.GetReplaced() != 2 {
		t.Fatalf("SummarizeSession = %v, %v", sum, err)
	}
	end, err := c.EndSession(a, &memoryv1.EndSessionRequest{Session: "session:g1", Promote: proto.Bool(false)})
	if err != nil || end.GetTurns() != 1 {
		t.Fatalf("EndSession = %v, %v", end, err)
	}

	// Delete and forget.
	if _, err := c.Delete(ro, &memoryv1.DeleteRequest{MemoryId: w.GetMemoryId()}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Delete by a reader = %v", err)
	}
	if _, err := c.Delete(a, &memoryv1.DeleteRequest{MemoryId: w.GetMemoryId()}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(a, &memoryv1.GetRequest{MemoryId: w.GetMemoryId()})
	wantStatus(t, err, codes.NotFound, CodeNotFound)
	fg, err := c.Forget(a, &memoryv1.ForgetRequest{Scope: "user:1", Reason: "user asked"})
	if err != nil || fg.GetDeleted() < 3 || fg.GetForgottenAt() == nil {
		t.Fatalf("Forget = %v, %v", fg, err)
	}
	// A memory written after the forget is kept, back-dated or not: the store's clock
	// (recorded_at) decides what a forget covers.
	_, err = c.Remember(a, &memoryv1.NewMemory{Scope: "user:1", MemoryType: "semantic", ContentJson: `{"text":"old"}`, CreatedAt: timestamppb.New(time.Now().Add(-time.Hour))})
	if err != nil {
		t.Fatalf("a memory written after the forget: %v", err)
	}

	// Health and the metrics of the gRPC door.
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "memory.v1.MemoryService"})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", hc, err)
	}
	mrec := httptest.NewRecorder()
	e.gw.MetricsHandler().ServeHTTP(mrec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(mrec.Body.String(), `memory_gateway_requests_total{code="403",route="grpc Search"} 1`) {
		t.Fatalf("metrics lack the gRPC routes:\n%s", mrec.Body.String())
	}
}

// TestGRPCTLS serves the gRPC API with the HTTP API's certificate: a client that
// trusts it connects, a plaintext one does not.
func TestGRPCTLS(t *testing.T) {
	agent := newTestKey(t, "agent", false, "user:1")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeCert(t, certFile, keyFile, 1)
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	_, c, _ := grpcEnv(t, envOptions{keys: []testKey{agent}, config: func(c *Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile }},
		credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	if _, err := c.WhoAmI(as(agent.plain), &memoryv1.WhoAmIRequest{}); err != nil {
		t.Fatal(err)
	}
}
