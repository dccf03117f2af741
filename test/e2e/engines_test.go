//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/redis/go-redis/v9"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// productionEngines runs a store on each production vector engine through the
// cluster: PGVector on PostgreSQL 16 with pgvector (the backend's default engine) and
// Milvus on a server with authentication, whose store gets a Milvus user of its own.
// Agents write and search through each gateway, a snapshot Job reads the Milvus
// store's vectors as that user, and deleting the stores removes the user.
func (s *suite) productionEngines() {
	t := s.t
	env := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			t.Fatalf("%s is unset: hack/e2e.sh starts PostgreSQL with pgvector and a Milvus server with authentication", name)
		}
		return v
	}
	pgHost, pgPort := env("MEMORY_TEST_PGVECTOR_HOST"), env("MEMORY_TEST_PGVECTOR_PORT")
	pgUser, pgPassword := env("MEMORY_TEST_PGVECTOR_USER"), env("MEMORY_TEST_PGVECTOR_PASSWORD")
	milvusAddr, milvusUser, milvusPassword := env("MEMORY_TEST_MILVUS_AUTH_ADDR"), env("MEMORY_TEST_MILVUS_AUTH_USER"), env("MEMORY_TEST_MILVUS_AUTH_PASSWORD")
	redisAddr, redisUser, redisPassword := env("MEMORY_TEST_REDIS_ADDR"), env("MEMORY_TEST_REDIS_USER"), env("MEMORY_TEST_REDIS_PASSWORD")
	s.apply(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: e2e-redis-admin, namespace: %[1]s}
stringData: {username: %[2]s, password: %[3]s}
`, operatorNS, redisUser, redisPassword))
	s.apply(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: e2e-pgvector-admin, namespace: %[1]s}
stringData: {username: %[2]s, password: %[3]s}
---
apiVersion: v1
kind: Secret
metadata: {name: e2e-milvus-admin, namespace: %[1]s}
stringData: {username: %[4]s, password: %[5]s}
---
apiVersion: memory.amemory.io/v1alpha1
kind: ClusterMemoryBackend
metadata: {name: e2e-engines}
spec:
  vectorEngine: PGVector
  postgres: {host: %[6]s, port: %[7]s, sslMode: disable, adminSecret: {name: e2e-pgvector-admin}}
  milvus: {address: %[8]s, credentialsSecret: {name: e2e-milvus-admin}}
  objectStorage: {endpoint: %[9]s, bucket: e2e-memory, insecure: true, createBucket: true, credentialsSecret: {name: e2e-object-storage}}
  redis: {address: %[11]s, credentialsSecret: {name: e2e-redis-admin}}
  allowedNamespaces: [%[10]s]
`, operatorNS, pgUser, pgPassword, milvusUser, milvusPassword, pgHost, pgPort, milvusAddr, s.s3Endpoint, tenantNS, redisAddr))
	s.condition(&memoryv1.ClusterMemoryBackend{ObjectMeta: objectMeta("", "e2e-engines")}, "Ready", 90*time.Second)

	s.apply(fmt.Sprintf(`apiVersion: memory.amemory.io/v1alpha1
kind: MemoryStore
metadata: {name: vec-pg, namespace: %[1]s}
spec:
  tenant: vec-pg
  backend: {clusterBackend: e2e-engines}
  vector: {dimension: 64, index: {exactSearchBelow: 2}}
  reclaimPolicy: Delete
  preChangeSnapshot: {enabled: false}   # flow_test.go checks the snapshot before deletion
  gateway: {enabled: true, keys: [{name: agent}]}
---
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryStore
metadata: {name: vec-milvus, namespace: %[1]s}
spec:
  tenant: vec-milvus
  backend: {clusterBackend: e2e-engines}
  vector: {dimension: 64, engine: Milvus}
  reclaimPolicy: Delete
  preChangeSnapshot: {enabled: false}
  gateway: {enabled: true, keys: [{name: agent}]}
`, tenantNS))
	want := map[string]string{"vec-pg": "PGVector", "vec-milvus": "Milvus"}
	refunds := map[string]string{}
	for _, name := range []string{"vec-pg", "vec-milvus"} {
		st := &memoryv1.MemoryStore{ObjectMeta: objectMeta(tenantNS, name)}
		s.condition(st, "Ready", 150*time.Second)
		s.condition(st, "GatewayReady", 120*time.Second)
		if v := st.Status.Vector; v == nil || v.Engine != want[name] {
			t.Fatalf("%s: vector status %+v, want engine %s", name, st.Status.Vector, want[name])
		}
		refunds[name] = s.writeAndSearch(st)
	}

	// Sessions in Redis, through the gateway, as the store's own Redis user.
	vp := s.store("vec-pg")
	if st := vp.Status.ShortTerm; st == nil || st.Store != "Redis" || st.RedisUser == "" || st.RedisUser == redisUser {
		t.Fatalf("vec-pg: short-term status %+v, want Redis with the store's own user", vp.Status.ShortTerm)
	}
	storeRedisUser := vp.Status.ShortTerm.RedisUser
	storeRedisPassword := s.secretValue(tenantNS, vp.ConnectionSecretNameOrDefault(), "redisPassword")
	s.sessionRoundTrip(vp)

	// The Milvus store's own user: in its Secrets, in its gateway's environment by
	// reference, never the admin.
	vm := s.store("vec-milvus")
	user, password := s.secretValue(tenantNS, vm.ConnectionSecretNameOrDefault(), "milvusUsername"), s.secretValue(tenantNS, vm.ConnectionSecretNameOrDefault(), "milvusPassword")
	if user == "" || user != vm.Status.Vector.MilvusUser || user == milvusUser || password == milvusPassword {
		t.Fatalf("vec-milvus: Milvus login %q (status %q), want the store's own", user, vm.Status.Vector.MilvusUser)
	}
	for _, p := range s.pods(tenantNS, map[string]string{"memory.amemory.io/store": "vec-milvus", "app.kubernetes.io/component": "gateway"}) {
		found := false
		for _, e := range p.Spec.Containers[0].Env {
			if e.Name == "MEMORY_MILVUS_USERNAME" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				found = true
			}
		}
		if !found {
			t.Errorf("gateway pod %s has no Milvus login from a Secret", p.Name)
		}
	}

	// A snapshot Job reads the vectors from Milvus as the store's user.
	s.apply(fmt.Sprintf(`apiVersion: memory.amemory.io/v1alpha1
kind: MemorySnapshot
metadata: {name: vec-milvus-vectors, namespace: %[1]s}
spec:
  storeRef: {name: vec-milvus}
  destination: {credentialsSecret: {name: s3-credentials}}
  encryption: {keySecret: {name: snapshot-key, key: key}}
  includeEmbeddings: true
`, tenantNS))
	snap := &memoryv1.MemorySnapshot{ObjectMeta: objectMeta(tenantNS, "vec-milvus-vectors")}
	s.condition(snap, "Ready", 120*time.Second)
	if snap.Status.Items != 3 {
		t.Fatalf("vec-milvus snapshot holds %d memories, want 3", snap.Status.Items)
	}
	s.checkJobPod(snap.Status.JobName, false)

	// Both switch embedding models in place (64 to 48 dimensions): a re-embed Job
	// fills a table (PGVector) or a collection (Milvus, as the store's own user) of
	// the new generation while the gateways serve, and they roll over to it.
	wantIndex := map[string]string{"vec-pg": "embeddings_g2", "vec-milvus": "mem_vec_milvus_g2"}
	for _, name := range []string{"vec-pg", "vec-milvus"} {
		s.run(`{"spec":{"vector":{"dimension":48},"embeddingSwitch":{"tolerance":"0.3"}}}`,
			s.kubectl, "patch", "memorystore", name, "-n", tenantNS, "--type", "merge", "--patch-file", "/dev/stdin")
	}
	for _, name := range []string{"vec-pg", "vec-milvus"} {
		s.switched(name, 48, wantIndex[name], refunds[name])
	}

	for _, name := range []string{"vec-pg", "vec-milvus"} {
		s.run("", s.kubectl, "delete", "memorystore", name, "-n", tenantNS, "--timeout=90s")
		if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: tenantNS, Name: name}, &memoryv1.MemoryStore{}); !apierrors.IsNotFound(err) {
			t.Fatalf("store %s still there: %v", name, err)
		}
	}
	s.eventually("vec-milvus's Milvus user removed", 60*time.Second, func() (bool, string) {
		c, err := client.NewClient(s.ctx, client.Config{Address: milvusAddr, Username: user, Password: password})
		if err != nil {
			return true, ""
		}
		defer c.Close()
		_, err = c.ListCollections(s.ctx)
		return err != nil, "the store's login still works"
	})
	s.eventually("vec-pg's Redis user removed", 30*time.Second, func() (bool, string) {
		rc := redis.NewClient(&redis.Options{Addr: redisAddr, Username: storeRedisUser, Password: storeRedisPassword})
		defer func() { _ = rc.Close() }()
		err := rc.Ping(s.ctx).Err()
		return err != nil, "the store's Redis login still works"
	})
	s.run("", s.kubectl, "delete", "clustermemorybackend", "e2e-engines", "--timeout=60s")
}

// switched waits for the store's embedding switch to complete, serving index at dim,
// and finds the refund writeAndSearch wrote through its gateway again.
func (s *suite) switched(name string, dim int32, index, refund string) {
	t := s.t
	s.eventually(name+"'s embedding switch", 240*time.Second, func() (bool, string) {
		st := s.store(name)
		c := meta.FindStatusCondition(st.Status.Conditions, memoryv1.ConditionSwitching)
		if c == nil {
			return false, "no Switching condition"
		}
		return c.Reason == memoryv1.ReasonSwitchCompleted, c.Reason + ": " + c.Message
	})
	st := s.store(name)
	if e := st.Status.Embedding; e == nil || e.Serving.Index != index || e.Serving.Dimension != dim || st.Status.Vector.Dimension != dim || !st.IsReady() {
		t.Fatalf("%s after the switch: embedding %+v, vector %+v", name, st.Status.Embedding, st.Status.Vector)
	}
	base, key := s.gatewayOf(name)
	s.eventually("a search through "+name+"'s switched gateway", 90*time.Second, func() (bool, string) {
		var found searchResponse
		code := s.api(base, key, http.MethodPost, "/v1/search", map[string]any{"scope": "user:1", "query": "refund order 1042", "top_k": 3, "mode": "dense"}, &found)
		ids := found.ids()
		return code == http.StatusOK && len(ids) == 3 && ids[0] == refund, fmt.Sprintf("%d %+v", code, found)
	})
}

// sessionRoundTrip appends two turns to a session through the store's gateway, reads
// them back, and ends the session: its turns become memories of the owner.
func (s *suite) sessionRoundTrip(st *memoryv1.MemoryStore) {
	t := s.t
	base, key := s.gatewayOf(st.Name)
	path := "/v1/sessions/session:e2e"
	if code := s.api(base, key, http.MethodPost, path+"/turns", map[string]any{"owner": "user:2", "turns": []map[string]any{
		{"role": "user", "content": "my parcel should come on Friday"}, {"role": "assistant", "content": "noted"}}}, nil); code != http.StatusCreated {
		t.Fatalf("%s: append turns: %d", st.Name, code)
	}
	var read struct {
		Owner string `json:"owner"`
		Turns []struct {
			Seq int `json:"seq"`
		} `json:"turns"`
	}
	if code := s.api(base, key, http.MethodGet, path+"?last=1", nil, &read); code != http.StatusOK || read.Owner != "user:2" || len(read.Turns) != 1 || read.Turns[0].Seq != 2 {
		t.Fatalf("%s: read the session: %d %+v", st.Name, code, read)
	}
	var ended struct {
		Promoted int `json:"promoted"`
	}
	if code := s.api(base, key, http.MethodDelete, path, nil, &ended); code != http.StatusOK || ended.Promoted != 2 {
		t.Fatalf("%s: end the session: %d %+v", st.Name, code, ended)
	}
}

// writeAndSearch writes three memories through the store's gateway Service and finds
// the one a query is about.
func (s *suite) writeAndSearch(st *memoryv1.MemoryStore) (refund string) {
	t := s.t
	base, key := s.gatewayOf(st.Name)
	s.eventually(st.Name+"'s gateway Service", 30*time.Second, func() (bool, string) {
		resp, err := s.http.Get(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	var written struct {
		Results []struct {
			MemoryID string `json:"memory_id"`
		} `json:"results"`
	}
	code := s.api(base, key, http.MethodPost, "/v1/memories/batch", map[string]any{"memories": []map[string]any{
		{"memory_type": "semantic", "scope": "user:1", "content": map[string]any{"text": "prefers oat milk in a flat white"}},
		{"memory_type": "episodic", "scope": "user:1", "content": map[string]any{"text": "asked for a refund of order 1042"}},
		{"memory_type": "semantic", "scope": "user:1", "content": map[string]any{"text": "lives in Lisbon"}},
	}}, &written)
	if code != http.StatusOK || len(written.Results) != 3 {
		t.Fatalf("%s: batch write: %d %+v", st.Name, code, written)
	}
	var found searchResponse
	if code := s.api(base, key, http.MethodPost, "/v1/search", map[string]any{"scope": "user:1", "query": "refund order 1042", "top_k": 3, "mode": "dense"}, &found); code != http.StatusOK {
		t.Fatalf("%s: search: %d", st.Name, code)
	}
	if ids := found.ids(); len(ids) != 3 || ids[0] != written.Results[1].MemoryID {
		t.Fatalf("%s: search for the refund: %+v, want %s first of 3", st.Name, found, written.Results[1].MemoryID)
	}
	return written.Results[1].MemoryID
}
