package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/testutil"
)

// TestGRPCurl calls every method of memory.v1.MemoryService with grpcurl, a generic
// gRPC client that learns the API from the gateway's reflection service (it is
// given no .proto), and checks the answers and an error's code and details.
func TestGRPCurl(t *testing.T) {
	integration(t)
	bin := testutil.HarnessFile(t, filepath.Join(testutil.RepoRoot(t), "bin", "grpcurl"), "run `hack/install-tools.sh clients` or `make tools`")
	a := newKey(t, "a", false, "user:a", "session:*")
	b := newKey(t, "b", false, "user:b")
	g := startGateway(t, gatewayOptions{keys: []apiKey{a, b}, grpc: true})

	// call runs grpcurl and returns its JSON answer, or its error output.
	call := func(key, method string, req any) (map[string]any, string, error) {
		t.Helper()
		args := []string{"-plaintext", "-max-time", "30"}
		if key != "" {
			args = append(args, "-H", "x-api-key: "+key)
		}
		if req != nil {
			body, err := json.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			args = append(args, "-d", string(body))
		}
		args = append(args, g.grpcAddr, method)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var out map[string]any
		if err == nil && strings.HasPrefix(strings.TrimSpace(stdout.String()), "{") {
			if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
				t.Fatalf("%s: %v: %s", method, jerr, stdout.String())
			}
		}
		return out, stdout.String() + stderr.String(), err
	}
	must := func(key, method string, req any) map[string]any {
		t.Helper()
		out, text, err := call(key, "memory.v1.MemoryService/"+method, req)
		if err != nil {
			t.Fatalf("grpcurl %s: %v\n%s", method, err, text)
		}
		return out
	}

	_, text, err := call("", "list", nil)
	if err != nil || !strings.Contains(text, "memory.v1.MemoryService") || !strings.Contains(text, "grpc.health.v1.Health") {
		t.Fatalf("grpcurl list: %v\n%s", err, text)
	}
	_, text, err = call("", "describe", nil)
	for _, m := range []string{"WhoAmI", "Remember", "RememberBatch", "Get", "Update", "Delete", "List", "Search", "Recall", "Forget",
		"AppendTurns", "GetSession", "SummarizeSession", "PromoteSession", "EndSession"} {
		if err != nil || !strings.Contains(text, "rpc "+m+" (") {
			t.Fatalf("grpcurl describe lacks %s: %v\n%s", m, err, text)
		}
	}
	if out := must(a.plain, "WhoAmI", nil); out["key"] != "a" {
		t.Fatalf("WhoAmI = %v", out)
	}
	w := must(a.plain, "Remember", map[string]any{"scope": "user:a", "memory_type": "semantic", "key": "drink", "content_json": `{"text":"Prefers green tea"}`})
	// grpcurl prints protobuf's JSON mapping: lowerCamelCase field names, 64-bit
	// integers as strings.
	id, _ := w["memoryId"].(string)
	if id == "" || w["outcome"] != "inserted" {
		t.Fatalf("Remember = %v", w)
	}
	if out := must(a.plain, "RememberBatch", map[string]any{"memories": []any{
		map[string]any{"scope": "user:a", "memory_type": "episodic", "content_json": `{"text":"asked about Lisbon"}`},
		map[string]any{"scope": "user:a", "memory_type": "procedural", "content_json": `{"text":"answer briefly"}`}}}); len(out["results"].([]any)) != 2 {
		t.Fatalf("RememberBatch = %v", out)
	}
	if out := must(a.plain, "Get", map[string]any{"memory_id": id}); out["key"] != "drink" || !strings.Contains(out["contentJson"].(string), "green tea") {
		t.Fatalf("Get = %v", out)
	}
	if out := must(a.plain, "Update", map[string]any{"memory_id": id, "content_json": `{"text":"Now prefers oolong"}`}); len(out["history"].([]any)) != 1 {
		t.Fatalf("Update = %v", out)
	}
	if out := must(a.plain, "List", map[string]any{"scope": "user:a", "limit": 10}); len(out["memories"].([]any)) != 3 {
		t.Fatalf("List = %v", out)
	}
	res := must(a.plain, "Search", map[string]any{"scope": "user:a", "query": "oolong", "top_k": 1})["results"].([]any)
	if len(res) != 1 || res[0].(map[string]any)["memory"].(map[string]any)["memoryId"] != id {
		t.Fatalf("Search = %v", res)
	}
	if out := must(a.plain, "Recall", map[string]any{"scope": "user:a", "query": "Lisbon", "recent_turns": 1}); len(out["recent"].([]any)) != 1 {
		t.Fatalf("Recall = %v", out)
	}
	must(a.plain, "AppendTurns", map[string]any{"session": "session:c1", "owner": "user:a", "turns": []any{
		map[string]any{"role": "user", "content_json": `"my cat is Miso"`}, map[string]any{"role": "assistant", "content_json": `"hi Miso"`}}})
	if out := must(a.plain, "GetSession", map[string]any{"session": "session:c1", "last": 1}); out["lastSeq"] != "2" || len(out["turns"].([]any)) != 1 {
		t.Fatalf("GetSession = %v", out)
	}
	if out := must(a.plain, "SummarizeSession", map[string]any{"session": "session:c1", "through": 1, "content_json": `"a cat"`}); out["replaced"] != float64(1) {
		t.Fatalf("SummarizeSession = %v", out)
	}
	must(a.plain, "PromoteSession", map[string]any{"session": "session:c1"})
	if out := must(a.plain, "EndSession", map[string]any{"session": "session:c1"}); out["turns"] != float64(2) {
		t.Fatalf("EndSession = %v", out)
	}
	must(a.plain, "Delete", map[string]any{"memory_id": id})
	if out := must(a.plain, "Forget", map[string]any{"scope": "user:a", "reason": "grpcurl"}); out["deleted"] == nil {
		t.Fatalf("Forget = %v", out)
	}

	// An error: the status code and the native API's code in ErrorInfo.
	_, text, err = call(b.plain, "memory.v1.MemoryService/Search", map[string]any{"scope": "user:a", "query": "tea"})
	if err == nil || !strings.Contains(text, "PermissionDenied") || !strings.Contains(text, `"reason": "scope_forbidden"`) {
		t.Fatalf("Search of another's scope: %v\n%s", err, text)
	}
	_, text, err = call("", "grpc.health.v1.Health/Check", map[string]any{"service": "memory.v1.MemoryService"})
	if err != nil || !strings.Contains(text, "SERVING") {
		t.Fatalf("health: %v\n%s", err, text)
	}
}

// TestGRPCPythonClient runs the isolation and bad-input cases through a Python client
// that grpcio-tools generates from api/proto (grpc_client.py).
func TestGRPCPythonClient(t *testing.T) {
	integration(t)
	py := testutil.HarnessFile(t, filepath.Join(testutil.RepoRoot(t), "bin", "grpc-venv", "bin", "python"), "run `hack/install-tools.sh clients` or `make tools`")
	a := newKey(t, "a", false, "user:a", "session:*")
	b := newKey(t, "b", false, "user:b", "session:*")
	ro := newKey(t, "a-reader", true, "user:a")
	g := startGateway(t, gatewayOptions{keys: []apiKey{a, b, ro}, grpc: true})
	rep := runScriptWith(t, py, "grpc_client.py", map[string]any{"addr": g.grpcAddr, "proto": filepath.Join(testutil.RepoRoot(t), "api", "proto"),
		"out": t.TempDir(), "a": a.plain, "b": b.plain, "ro": ro.plain})
	var ids struct{ A, B string }
	rep.data(t, "ids", &ids)
	// b's memory is untouched by everything a's key tried.
	var got map[string]any
	g.must(200, b.plain, "GET", "/v1/memories/"+ids.B, nil, &got)
}
