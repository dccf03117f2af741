package testutil

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
)

// APICall makes a request to a JSON API (the gateway) with an API key ("" for none)
// and decodes a 2xx response into out (when non-nil); it returns the status and the
// raw body. A string or []byte body is sent as is (for malformed input); anything
// else is encoded as JSON.
func APICall(t testing.TB, c *http.Client, base, key, method, path string, body, out any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, raw
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a process's output, a
// logger).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// HarnessFile returns path, a file the harness installs (a venv's program, a
// server). When it is missing the test fails under CI (a broken harness is never a
// pass) and is skipped elsewhere; hint says how to install it.
func HarnessFile(t testing.TB, path, hint string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		missing(t, path+" is missing ("+hint+")")
	}
	return path
}
