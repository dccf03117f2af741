package gateway

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecodeRequest: every request body the native API decodes, whatever its bytes,
// either decodes or is refused with a client error (400 or 413) and a code; never a
// panic, never a server error.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"scope":"user:1","memory_type":"semantic","key":"k","content":{"a":1}}`,
		`{"memories":[{"scope":"user:1","memory_type":"episodic","content":"x"}]}`,
		`{"scope":"user:1","query":"coffee","top_k":5}`, `{"scope":"user:*"}`, `{}`, `[]`, `null`, ``,
		`{"scope":1}`, `{"unknown":true}`, `{"content":{"a":` + string(bytes.Repeat([]byte("["), 100)), `{} {}`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	targets := []func() any{
		func() any { return &NewMemory{} }, func() any { return &BatchRequest{} }, func() any { return &UpdateRequest{} },
		func() any { return &SearchRequest{} }, func() any { return &RecallRequest{} }, func() any { return &ForgetRequest{} },
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, target := range targets {
			req := httptest.NewRequest(http.MethodPost, "/v1/x", bytes.NewReader(body))
			req.Body = http.MaxBytesReader(httptest.NewRecorder(), req.Body, 4096)
			err := decode(req, target())
			if err == nil {
				continue
			}
			var ae *apiError
			if !errors.As(err, &ae) || (ae.status != http.StatusBadRequest && ae.status != http.StatusRequestEntityTooLarge) || ae.code == "" {
				t.Fatalf("body %q: %T %v", body, err, err)
			}
		}
	})
}
