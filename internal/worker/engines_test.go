package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// engineStore is a store provisioned on one engine the way the operator provisions
// it (its schema and two roles, its index, on Milvus its own user), for the Jobs to
// run against as its worker role.
type engineStore struct {
	engine string
	names  provision.Names
	agent  *pgxpool.Pool // the agents' role
	// workerURI is the worker role's connection URI (the worker Secret's "uri").
	workerURI string
	// adminURI is the server's admin login, for tests that read what the store holds.
	adminURI string
	vectors  engine.Vectors
	login    engine.Login
	spec     vector.Spec
}

// provisionEngineStore provisions a store whose vectors are in eng: Postgres on the
// PostgreSQL 15 server, PGVector on the PostgreSQL 16 one with pgvector (with a small
// exact-search bound, so its HNSW path serves the searches), Milvus on the server with
// authentication, with the store's own Milvus user.
func provisionEngineStore(t *testing.T, eng string, dim int) *engineStore {
	t.Helper()
	s, err := provisionEngineStoreE(t, eng, dim)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// provisionEngineStores provisions n stores on eng at once: Milvus applies each new
// user in the background, and waiting for one store after the other would dominate
// a table's time.
func provisionEngineStores(t *testing.T, eng string, dim, n int) []*engineStore {
	t.Helper()
	// The services' settings are read here first: a missing one skips or fails the
	// test on its own goroutine.
	testutil.PostgresParts(t)
	switch eng {
	case engine.PGVector:
		testutil.PGVectorParts(t)
	case engine.Milvus:
		testutil.MilvusAuth(t)
	}
	out := make([]*engineStore, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = provisionEngineStoreE(t, eng, dim)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// provisionEngineStoreE is provisionEngineStore returning its error, for use off the
// test's goroutine (t only registers cleanups and reads the services' settings).
func provisionEngineStoreE(t *testing.T, eng string, dim int) (*engineStore, error) {
	ctx := context.Background()
	admin, root := engineAdmins(t, eng)
	tenant := testutil.UniqueName("mv")
	names, err := provision.NamesFor(tenant, "memory-operator")
	if err != nil {
		return nil, err
	}
	owner := "engines/" + tenant
	pw := provision.Passwords{Agent: testutil.UniqueName("agent-pw-"), Worker: testutil.UniqueName("worker-pw-")}
	if _, err := provision.EnsurePostgres(ctx, admin, names, owner, pw); err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = provision.DeletePostgres(context.Background(), admin, names, owner) })
	s := &engineStore{engine: eng, names: names, spec: vector.Spec{Dimension: dim, Metric: vector.Cosine}, vectors: engine.Vectors{VectorEngine: eng}}
	switch eng {
	case engine.Postgres:
		_, err = provision.EnsureVectors(ctx, admin, nil, names, milvus.Owner{ID: owner}, s.spec)
	case engine.PGVector:
		_, err = provision.EnsurePGVector(ctx, admin, names, s.spec, pgvector.Params{})
	case engine.Milvus:
		s.vectors.MilvusAddress, s.vectors.Collection = root.Address, names.Collection
		if _, err = provision.EnsureVectors(ctx, admin, root, names, milvus.Owner{ID: owner}, s.spec); err != nil {
			return nil, err
		}
		t.Cleanup(func() {
			_ = provision.DeleteMilvusTenant(context.Background(), *root, names, milvus.Owner{ID: owner})
			_ = provision.DeleteVectors(context.Background(), admin, root, names, milvus.Owner{ID: owner})
		})
		s.login = engine.Login{Username: names.MilvusUser, Password: testutil.UniqueName("milvus-pw-")}
		err = ensureMilvusTenant(ctx, *root, names, owner, s.login.Password)
	}
	if err != nil {
		return nil, err
	}
	as := func(user, password string) string {
		c := admin
		c.User, c.Password = user, password
		return c.URL(url.Values{"options": {"-c search_path=" + names.Schema}})
	}
	if s.agent, err = pgxpool.New(ctx, as(names.Role, pw.Agent)); err != nil {
		return nil, err
	}
	t.Cleanup(s.agent.Close)
	s.workerURI = as(names.WorkerRole, pw.Worker)
	s.adminURI = admin.URL(nil)
	return s, nil
}

// engineAdmins are the admin logins of eng's servers: PostgreSQL's, and the Milvus
// server's (nil but for Milvus).
func engineAdmins(t *testing.T, eng string) (provision.PostgresConn, *provision.MilvusConn) {
	pg := testutil.PostgresParts(t)
	if eng == engine.PGVector {
		pg = testutil.PGVectorParts(t)
	}
	admin := provision.PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}
	if eng != engine.Milvus {
		return admin, nil
	}
	m := testutil.MilvusAuth(t)
	return admin, &provision.MilvusConn{Address: m.Addr, Username: m.User, Password: m.Password}
}

// ensureMilvusTenant makes the store's Milvus user, waiting (as the operator's
// requeues do) while the server has not applied it yet.
func ensureMilvusTenant(ctx context.Context, root provision.MilvusConn, names provision.Names, owner, password string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := provision.EnsureMilvusTenant(ctx, root, names, owner, password, password)
		if err == nil || !errors.Is(err, provision.ErrMilvusTenantPending) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

// memoryService is the store's memory service as its gateway runs it (the agents'
// role, the hashing embedder).
func (s *engineStore) memoryService(t *testing.T) *service.Memory {
	t.Helper()
	ix, closeIx, err := s.vectors.Open(context.Background(), s.agent, s.names.Schema, s.spec, s.login)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeIx)
	m, err := service.New(pgstore.New(s.agent, s.names.Schema), ix, embed.NewHashing(s.spec.Dimension))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// topTexts is the texts of the scope's top k memories for the query, best first.
func topTexts(t *testing.T, m *service.Memory, scope, query string, k int) []string {
	t.Helper()
	res, err := m.Search(context.Background(), service.SearchQuery{Scope: scope, Text: query, K: k, Mode: service.Dense})
	if err != nil {
		t.Fatalf("search %s %q: %v", scope, query, err)
	}
	out := make([]string, len(res))
	for i, r := range res {
		var c struct{ Text string }
		_ = json.Unmarshal(r.Item.Content, &c)
		out[i] = c.Text
	}
	return out
}

var moveWords = strings.Fields(`coffee tea oat milk berlin lisbon flight refund invoice dentist
	birthday sister dog cat vegan allergy peanuts piano guitar running marathon python golang
	kubernetes postgres meeting monday friday hotel museum train bicycle garden tomato`)

func moveText(rng *rand.Rand, i int) string {
	var b strings.Builder
	for range 6 {
		b.WriteString(moveWords[rng.IntN(len(moveWords))])
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "#%d", i)
	return b.String()
}

// TestGuaranteeStoresMoveBetweenEngines: a store on any engine snapshots and restores
// into a store on any other (Postgres, PGVector, Milvus with authentication), the
// Jobs running as the stores' own roles and Milvus users: every memory and its vector
// arrive (reused when the embedding space matches, made again when the target's
// dimension differs), the forgotten user stays forgotten, the mapping is applied, and
// searches rank as before: the same top 10 between exact engines, at least 0.95 of it
// where an approximate index answers.
func TestGuaranteeStoresMoveBetweenEngines(t *testing.T) {
	f := newFixture(t) // MinIO, and the bucket
	engines := []string{engine.Postgres, engine.PGVector, engine.Milvus}
	const dim, perScope = 32, 400
	for _, from := range engines {
		for _, to := range engines {
			if from == to {
				continue
			}
			t.Run(from+"To"+to, func(t *testing.T) {
				ctx := context.Background()
				src := provisionEngineStore(t, from, dim)
				toDim := dim
				if to == engine.PGVector && from == engine.Milvus {
					toDim = 48 // one move into another embedding space: re-embedded
				}
				dst := provisionEngineStore(t, to, toDim)
				// Between PGVector and Milvus both sides answer from their HNSW index
				// (scopes of 400 above a bound of 200); beside Postgres, PGVector
				// searches exactly (the default bound), and must rank as Postgres does.
				for _, s := range []*engineStore{src, dst} {
					if s.engine == engine.PGVector && (from == engine.Milvus || to == engine.Milvus) {
						s.vectors.ExactBelow = 200
					}
				}

				rng := rand.New(rand.NewPCG(7, uint64(len(from)*31+len(to))))
				var items []memory.Item
				for _, scope := range []string{"user:1024", "user:7", "user:gone"} {
					for i := range perScope {
						c, _ := json.Marshal(map[string]string{"text": moveText(rng, i)})
						items = append(items, memory.Item{MemoryType: memory.Episodic, Scope: scope, Content: c, Source: "move@1", BaseScore: 0.5})
					}
				}
				m := src.memoryService(t)
				if _, err := m.Write(ctx, items, service.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
				if _, err := m.Forget(ctx, "user:gone", "asked to", "test"); err != nil {
					t.Fatal(err)
				}

				prefix := "moves/" + testutil.UniqueName(from+"-"+to+"-") + "/"
				snap := SnapshotConfig{
					StoreNamespace: "team", StoreName: "src", Tenant: "src", SnapshotName: "move",
					Schema: src.names.Schema, Vectors: src.vectors, EmbeddingModel: embed.HashingModel, Dimension: dim, Metric: "COSINE",
					Destination: Destination{Endpoint: f.s3cfg.Endpoint, Insecure: true, Bucket: f.bucket, Prefix: prefix},
					Types:       []string{"episodic"}, IncludeEmbeddings: true, Unencrypted: true, CompressionLevel: 1,
				}
				if _, err := RunSnapshot(ctx, snap, Secrets{PostgresURI: src.workerURI, S3AccessKey: f.s3cfg.AccessKey, S3SecretKey: f.s3cfg.SecretKey, Milvus: src.login},
					RunOptions{Now: time.Now()}); err != nil {
					t.Fatalf("snapshot: %v", err)
				}
				rcfg := RestoreConfig{
					RestoreNamespace: "team", RestoreName: "move", Source: snap.Destination,
					TargetNamespace: "team", TargetName: "dst", Tenant: "dst", Schema: dst.names.Schema,
					Vectors: dst.vectors, EmbeddingModel: embed.HashingModel, Dimension: toDim, Metric: "COSINE", Embedder: "Hashing",
					Unmapped: "Keep", ConflictPolicy: "KeepNewer", Embeddings: "Reuse", Unencrypted: true,
					ScopeMap: []ScopeRule{{From: "user:1024", To: "user:dbc0a3"}},
					Types:    []string{"episodic"}, DetailKey: prefix + "restore-detail.jsonl.zst",
				}
				sum, err := RunRestore(ctx, rcfg, RestoreSecrets{PostgresURI: dst.workerURI, SourceS3AccessKey: f.s3cfg.AccessKey,
					SourceS3SecretKey: f.s3cfg.SecretKey, Milvus: dst.login}, RunOptions{Now: time.Now()})
				if err != nil {
					t.Fatalf("restore: %v", err)
				}
				if sum.Restored != 2*perScope || sum.Vectors != 2*perScope {
					t.Fatalf("restored %d memories, %d vectors; want %d of each (summary %+v)", sum.Restored, sum.Vectors, 2*perScope, sum)
				}

				n := dst.memoryService(t)
				for _, scope := range []string{"user:gone", "user:1024"} {
					if got := topTexts(t, n, scope, "coffee", 10); len(got) != 0 {
						t.Fatalf("the target holds %d memories of %s", len(got), scope)
					}
				}
				exact := func(s *engineStore) bool {
					return s.engine == engine.Postgres || s.engine == engine.PGVector && s.vectors.ExactBelow == 0
				}
				var overlap, total int
				for q := range 20 {
					query := moveText(rng, 1000+q)
					for _, pair := range [][2]string{{"user:1024", "user:dbc0a3"}, {"user:7", "user:7"}} {
						before := topTexts(t, m, pair[0], query, 10)
						after := topTexts(t, n, pair[1], query, 10)
						if len(after) != 10 {
							t.Fatalf("%s: %d results, want 10", pair[1], len(after))
						}
						if toDim == dim && exact(src) && exact(dst) && !slices.Equal(before, after) {
							t.Fatalf("%q in %s: %q before, %q after", query, pair[0], before, after)
						}
						for _, x := range after {
							if slices.Contains(before, x) {
								overlap++
							}
						}
						total += 10
					}
				}
				ratio := float64(overlap) / float64(total)
				t.Logf("%s → %s: top-10 overlap %.3f", from, to, ratio)
				if toDim == dim && ratio < 0.95 {
					t.Fatalf("top-10 overlap after the move %.3f, want >= 0.95", ratio)
				}
			})
		}
	}
}
