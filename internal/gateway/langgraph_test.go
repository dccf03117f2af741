package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLangGraphStoreAPI: the Store API's wire format and quirks (dot-joined GET
// namespace, DELETE with a body, 204s, the wrapped namespace list), namespaces that
// round-trip exactly, and what LangGraph writes is a memory of the mapped scope that
// the native API, forget and snapshots see.
func TestLangGraphStoreAPI(t *testing.T) {
	k := newTestKey(t, "k", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	put := func(ns []string, key string, value string) {
		e.must(204, k.plain, "PUT", "/store/items", map[string]any{"namespace": ns, "key": key, "value": json.RawMessage(value)}, nil)
	}
	put([]string{"memories", "u1"}, "coffee", `{"drink":"hot americano","n":2}`)
	put([]string{"memories", "u1", "prefs"}, "seat", `{"seat":"window","n":5}`)
	put([]string{"memories", "u1", "prefs", "food"}, "nuts", `{"allergy":"peanuts","n":9}`)
	put([]string{"memories", "u2"}, "coffee", `{"drink":"iced latte"}`)

	var it lgItem
	e.must(200, k.plain, "GET", "/store/items?namespace=memories.u1.prefs&key=seat", nil, &it)
	if mustJSON(t, it.Namespace) != `["memories","u1","prefs"]` || it.Key != "seat" || !jsonEq(it.Value, `{"seat":"window","n":5}`) {
		t.Fatalf("get = %+v", it)
	}
	e.must(200, k.plain, "GET", "/store/items?namespace=memories&namespace=u1&namespace=prefs&key=seat", nil, &it)
	e.wantError(404, CodeNotFound, k.plain, "GET", "/store/items?namespace=memories.u1&key=nope", nil)
	// A put to an existing item supersedes it (history kept in the store).
	put([]string{"memories", "u1"}, "coffee", `{"drink":"flat white","n":2}`)
	e.must(200, k.plain, "GET", "/store/items?namespace=memories.u1&key=coffee", nil, &it)
	if !jsonEq(it.Value, `{"drink":"flat white","n":2}`) {
		t.Fatalf("after second put: %s", it.Value)
	}

	// Search under a prefix: the whole scope, or the labels past the rule.
	var sr lgSearchResponse
	e.must(200, k.plain, "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "u1"}}, &sr)
	if len(sr.Items) != 3 {
		t.Fatalf("search (memories, u1): %d items", len(sr.Items))
	}
	e.must(200, k.plain, "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "u1", "prefs"}}, &sr)
	if len(sr.Items) != 2 {
		t.Fatalf("search (memories, u1, prefs): %+v", sr.Items)
	}
	e.must(200, k.plain, "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "u1"}, "filter": map[string]any{"n": map[string]any{"$gte": 5}}}, &sr)
	if len(sr.Items) != 2 {
		t.Fatalf("filtered search: %+v", sr.Items)
	}
	e.must(200, k.plain, "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "u1"}, "query": "peanuts allergy", "limit": 1}, &sr)
	if len(sr.Items) != 1 || sr.Items[0].Key != "nuts" || sr.Items[0].Score == nil {
		t.Fatalf("semantic search: %+v", sr.Items)
	}
	e.must(200, k.plain, "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "u1"}, "limit": 2, "offset": 2}, &sr)
	if len(sr.Items) != 1 {
		t.Fatalf("offset 2 of 3: %d items", len(sr.Items))
	}
	e.wantError(422, CodeInvalidScope, k.plain, "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories"}})

	var ns lgNamespacesResponse
	e.must(200, k.plain, "POST", "/store/namespaces", map[string]any{"prefix": []string{"memories"}}, &ns)
	if got := mustJSON(t, ns.Namespaces); got != `[["memories","u1"],["memories","u1","prefs"],["memories","u1","prefs","food"],["memories","u2"]]` {
		t.Fatalf("namespaces = %s", got)
	}
	e.must(200, k.plain, "POST", "/store/namespaces", map[string]any{"prefix": []string{"memories", "u1"}, "max_depth": 3}, &ns)
	if got := mustJSON(t, ns.Namespaces); got != `[["memories","u1"],["memories","u1","prefs"]]` {
		t.Fatalf("namespaces max_depth 3 = %s", got)
	}
	e.must(200, k.plain, "POST", "/store/namespaces", map[string]any{"suffix": []string{"food"}}, &ns)
	if got := mustJSON(t, ns.Namespaces); got != `[["memories","u1","prefs","food"]]` {
		t.Fatalf("namespaces by suffix = %s", got)
	}

	// It is all memory of user:u1: the native API sees it, forget removes it.
	var l ListResponse
	e.must(200, k.plain, "GET", "/v1/scopes/user:u1/memories", nil, &l)
	if len(l.Memories) != 3 || l.Memories[0].Source != LGSource {
		t.Fatalf("native view of user:u1: %+v", l.Memories)
	}
	e.must(204, k.plain, "DELETE", "/store/items", map[string]any{"namespace": []string{"memories", "u1", "prefs"}, "key": "seat"}, nil)
	e.must(204, k.plain, "DELETE", "/store/items", map[string]any{"namespace": []string{"memories", "u1", "prefs"}, "key": "seat"}, nil)
	e.wantError(404, CodeNotFound, k.plain, "GET", "/store/items?namespace=memories.u1.prefs&key=seat", nil)
	e.must(200, k.plain, "POST", "/v1/forget", ForgetRequest{Scope: "user:u1"}, nil)
	e.must(200, k.plain, "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "u1"}}, &sr)
	if len(sr.Items) != 0 {
		t.Fatalf("after forget: %+v", sr.Items)
	}

	// TTL (minutes) becomes expires_at; bad namespaces are refused.
	e.must(204, k.plain, "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "u3"}, "key": "k", "value": map[string]any{"a": 1}, "ttl": 1.5}, nil)
	e.must(200, k.plain, "GET", "/v1/scopes/user:u3/memories", nil, &l)
	if len(l.Memories) != 1 || l.Memories[0].ExpiresAt == nil || time.Until(*l.Memories[0].ExpiresAt) < 80*time.Second {
		t.Fatalf("ttl: %+v", l.Memories)
	}
	for _, bad := range []map[string]any{
		{"namespace": []string{"langgraph", "x"}, "key": "k", "value": map[string]any{}},
		{"namespace": []string{"memories", "a.b"}, "key": "k", "value": map[string]any{}},
		{"namespace": []string{}, "key": "k", "value": map[string]any{}},
		{"namespace": []string{"memories", "u1"}, "key": "", "value": map[string]any{}},
		{"namespace": []string{"nobody", "u1"}, "key": "k", "value": map[string]any{}},
	} {
		if code, raw := e.call(k.plain, "PUT", "/store/items", bad, nil); code != 422 {
			t.Errorf("PUT %v: %d %s", bad, code, raw)
		}
	}
	e.wantError(400, CodeInvalidContent, k.plain, "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "u1"}, "key": "k", "value": "a string"})
}

func jsonEq(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && mustMarshal(x) == mustMarshal(y)
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestTLS: with a certificate the API is served over TLS, and a rotated certificate
// is picked up without a restart.
func TestTLS(t *testing.T) {
	k := newTestKey(t, "k", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k}, noService: true})
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	serial1 := writeCert(t, certFile, keyFile, 1)
	e.cfg.TLSCertFile, e.cfg.TLSKeyFile = certFile, keyFile
	e.start(e.agentURI(t))
	e.url = "https://" + e.url[len("http://"):]
	var seen *big.Int
	e.client.Transport.(*validator).next = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, //nolint:gosec // a test certificate
		VerifyConnection: func(cs tls.ConnectionState) error { seen = cs.PeerCertificates[0].SerialNumber; return nil }}, DisableKeepAlives: true}
	e.must(200, k.plain, "GET", "/v1/whoami", nil, nil)
	if seen.Cmp(serial1) != 0 {
		t.Fatalf("served certificate %v, want %v", seen, serial1)
	}
	serial2 := writeCert(t, certFile, keyFile, 2)
	waitFor(t, 10*time.Second, func() bool {
		e.must(200, k.plain, "GET", "/v1/whoami", nil, nil)
		return seen.Cmp(serial2) == 0
	})
}

func writeCert(t *testing.T, certFile, keyFile string, serial int64) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		t.Fatal(err)
	}
	return tmpl.SerialNumber
}

// TestOpenAPIDocumentChecked: docs/gateway-openapi.json is the document the gateway
// serves (UPDATE_OPENAPI=1 rewrites it).
func TestOpenAPIDocumentChecked(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "gateway-openapi.json")
	if os.Getenv("UPDATE_OPENAPI") != "" {
		if err := os.WriteFile(path, OpenAPIDocument, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(OpenAPIDocument) {
		t.Fatalf("%s is not the document the gateway serves; run UPDATE_OPENAPI=1 go test ./internal/gateway -run TestOpenAPIDocumentChecked", path)
	}
}
