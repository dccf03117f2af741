package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// pgvectorFixture is the backend fixture with PostgreSQL 16 and pgvector as the
// system of record, admin Secret pgv-admin.
func pgvectorFixture(t *testing.T, ns string) backendFixture {
	t.Helper()
	f := services(t)
	f.pg = testutil.PGVectorParts(t)
	createSecret(t, ns, "pgv-admin", map[string]string{"username": f.pg.User, "password": f.pg.Password})
	return f
}

// TestMemoryStoreOnPGVector: a store whose engine is PGVector gets the extension (made
// as the admin), its embeddings table with an HNSW index its roles may use, the tuning
// of spec.vector.index in its gateway's flags; a server without pgvector says
// ExtensionMissing and changes nothing.
func TestMemoryStoreOnPGVector(t *testing.T) {
	ns := newNamespace(t)
	f := pgvectorFixture(t, ns)
	ctx := context.Background()
	tenant := newTenant()
	store := f.inlineStore(ns, "pgv", tenant, 16, false)
	store.Spec.Backend.Postgres = f.postgresSpec("pgv-admin")
	store.Spec.Backend.ObjectStorage = nil
	exact := int32(500)
	store.Spec.Vector.Engine = memoryv1alpha1.EnginePGVector
	store.Spec.Vector.Index = &memoryv1alpha1.VectorIndexSpec{M: 12, EfConstruction: 48, EfSearch: 80, ExactSearchBelow: &exact}
	store.Spec.Gateway = &memoryv1alpha1.GatewaySpec{Enabled: true, Keys: []memoryv1alpha1.GatewayKey{{Name: "agent"}}}
	create(t, store)
	got := waitReady(t, client.ObjectKeyFromObject(store))

	g := NewWithT(t)
	schema := "mem_" + tenant
	g.Expect(got.Status.Vector.Engine).To(Equal("PGVector"))
	g.Expect(got.Status.Vector.Collection).To(Equal(schema + ".embeddings"))
	g.Expect(got.Status.Vector.Extension).To(ContainSubstring("vector 0."))
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionVectorReady)).To(ContainSubstring("PGVector index"))
	data := connectionSecret(t, got)
	g.Expect(data).To(HaveKeyWithValue("vectorEngine", "PGVector"))
	g.Expect(data).NotTo(HaveKey("milvusAddress"))

	// The index was built with the spec's parameters.
	admin, err := pgxpool.New(ctx, testutil.PGVectorDSN(t))
	g.Expect(err).NotTo(HaveOccurred())
	defer admin.Close()
	var def string
	g.Expect(admin.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'embeddings_hnsw_idx'`, schema).Scan(&def)).To(Succeed())
	g.Expect(def).To(And(ContainSubstring("hnsw"), ContainSubstring("m='12'"), ContainSubstring("ef_construction='48'")))

	// The agents' role writes and searches vectors through the engine, exactly as the
	// gateway does.
	agent, err := pgxpool.New(ctx, data["uri"])
	g.Expect(err).NotTo(HaveOccurred())
	defer agent.Close()
	spec := vector.Spec{Dimension: 16, Metric: vector.Cosine}
	ix, closeIx, err := engine.Vectors{VectorEngine: engine.PGVector}.Open(ctx, agent, schema, spec, engine.Login{})
	g.Expect(err).NotTo(HaveOccurred())
	defer closeIx()
	v := make([]float32, 16)
	v[3] = 1
	g.Expect(ix.Upsert(ctx, []vector.Entry{{ID: "m1", Scope: "user:1", Type: "semantic", Vector: v}})).To(Succeed())
	hits, err := ix.Search(ctx, vector.Query{Scope: "user:1", Vector: v, K: 5})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hits).To(HaveLen(1))

	// The gateway searches with the store's tuning.
	var dep appsv1.Deployment
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.GatewayName()}, &dep)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	args := dep.Spec.Template.Spec.Containers[0].Args
	g.Expect(args).To(ContainElements("--vector-engine=PGVector", "--hnsw-ef-search=80", "--exact-search-below=500"))

	// PostgreSQL 15 here has no vector extension: the store says so and is Degraded.
	f15 := services(t)
	f15.adminSecrets(t, ns)
	bare := f15.inlineStore(ns, "no-ext", newTenant(), 16, false)
	bare.Spec.Vector.Engine = memoryv1alpha1.EnginePGVector
	create(t, bare)
	st := waitForCondition(t, client.ObjectKeyFromObject(bare), memoryv1alpha1.ConditionVectorReady, metav1.ConditionFalse, memoryv1alpha1.ReasonExtensionMissing)
	g.Expect(conditionMessage(st, memoryv1alpha1.ConditionVectorReady)).To(ContainSubstring("pgvector"))
	waitForCondition(t, client.ObjectKeyFromObject(bare), memoryv1alpha1.ConditionDegraded, metav1.ConditionTrue, memoryv1alpha1.ReasonExtensionMissing)
}

// TestMemoryStoreRefusesEngineChange: the engine a store's vectors are in is kept;
// asking for another (which admission allows when none was named) is refused with a
// reason, as is an engine the backend cannot serve; admission refuses changing a
// named engine and PGVector beyond 2000 dimensions.
func TestMemoryStoreRefusesEngineChange(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.inlineStore(ns, "stay", newTenant(), 8, false)
	create(t, store)
	key := client.ObjectKeyFromObject(store)
	got := waitReady(t, key)
	g := NewWithT(t)
	g.Expect(got.Status.Vector.Engine).To(Equal("Postgres"))

	got.Spec.Vector.Engine = memoryv1alpha1.EnginePGVector
	g.Expect(k8sClient.Update(ctx, got)).To(Succeed())
	st := waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonEngineChangeRefused)
	g.Expect(conditionMessage(st, memoryv1alpha1.ConditionReady)).To(ContainSubstring("snapshot and restore"))
	g.Expect(st.Status.Vector.Engine).To(Equal("Postgres"), "the store keeps the engine its vectors are in")
	waitForCondition(t, key, memoryv1alpha1.ConditionDegraded, metav1.ConditionTrue, memoryv1alpha1.ReasonEngineChangeRefused)

	// A named engine is immutable at admission.
	st.Spec.Vector.Engine = memoryv1alpha1.EngineMilvus
	err := k8sClient.Update(ctx, st)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("vector.engine is immutable"))

	// Milvus without a Milvus server on the backend.
	milvusless := f.inlineStore(ns, "no-milvus", newTenant(), 8, false)
	milvusless.Spec.Vector.Engine = memoryv1alpha1.EngineMilvus
	create(t, milvusless)
	waitForCondition(t, client.ObjectKeyFromObject(milvusless), memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonEngineUnavailable)

	wide := f.inlineStore(ns, "wide", newTenant(), 3072, false)
	wide.Spec.Vector.Engine = memoryv1alpha1.EnginePGVector
	err = k8sClient.Create(ctx, wide)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("at most 2000 dimensions"))
}

// TestMemoryStoreOnAuthenticatedMilvus: on a Milvus server with authentication the
// store gets a Milvus user of its own whose login (never the admin's) is in its
// Secrets and its gateway's environment, can use its own collection, is given a new
// password on request (the old one stops working), and goes with the store.
func TestMemoryStoreOnAuthenticatedMilvus(t *testing.T) {
	f := services(t)
	m := testutil.MilvusAuth(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	// The platform's admin login: a user of the admin role with a password of its
	// own (root's default one would read like any word in a Secret).
	m = milvusAdmin(t, m)
	createSecret(t, ns, "milvus-admin", map[string]string{"username": m.User, "password": m.Password})
	tenant := newTenant()
	store := f.inlineStore(ns, "authed", tenant, 8, false)
	store.Spec.Backend.Milvus = &memoryv1alpha1.MilvusSpec{Address: m.Addr,
		CredentialsSecret: &memoryv1alpha1.CredentialsSecretRef{Name: "milvus-admin", UsernameKey: "username", PasswordKey: "password"}}
	store.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
	store.Spec.Gateway = &memoryv1alpha1.GatewaySpec{Enabled: true, Keys: []memoryv1alpha1.GatewayKey{{Name: "agent"}}}
	create(t, store)
	key := client.ObjectKeyFromObject(store)
	got := waitReady(t, key)

	g := NewWithT(t)
	names, err := provision.NamesFor(tenant, "memory-operator")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status.Vector.Engine).To(Equal("Milvus"))
	g.Expect(got.Status.Vector.MilvusUser).To(Equal(names.MilvusUser))
	conn, worker := connectionSecret(t, got), secretData(t, ns, got.WorkerSecretName())
	for _, data := range []map[string]string{conn, worker} {
		g.Expect(data).To(HaveKeyWithValue("milvusUsername", names.MilvusUser))
		g.Expect(data["milvusPassword"]).NotTo(BeEmpty())
		for k, v := range data {
			g.Expect(v).NotTo(Equal(m.Password), "key %s holds the Milvus admin's password", k)
		}
	}
	first := conn["milvusPassword"]
	g.Expect(worker["milvusPassword"]).To(Equal(first))

	// The store's user works its own collection.
	spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	useCollection := func(password string) error {
		c, err := milvus.Connect(ctx, milvus.Conn{Address: m.Addr, Username: names.MilvusUser, Password: password})
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		_, err = milvus.New(c, names.Collection, spec).Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0, 0, 0, 0, 0, 0}, K: 1})
		return err
	}
	g.Expect(useCollection(first)).To(Succeed())

	// The gateway logs in as that user, from the connection Secret by reference.
	var dep appsv1.Deployment
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.GatewayName()}, &dep)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	env := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		g.Expect(e.Value).To(BeEmpty(), "env %s carries a value, not a Secret reference", e.Name)
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
			env[e.Name] = r.SecretKeyRef.Name + "/" + r.SecretKeyRef.Key
		}
	}
	g.Expect(env).To(HaveKeyWithValue(engine.EnvMilvusUsername, got.ConnectionSecretNameOrDefault()+"/milvusUsername"))
	g.Expect(env).To(HaveKeyWithValue(engine.EnvMilvusPassword, got.ConnectionSecretNameOrDefault()+"/milvusPassword"))

	// Rotation on request: new passwords everywhere, the old Milvus one refused.
	got.Annotations = map[string]string{memoryv1alpha1.AnnotationRotateCredentials: "2026-12-02"}
	g.Expect(k8sClient.Update(ctx, got)).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := getStore(g, key)
		g.Expect(s.Status.CredentialsRotation).To(Equal("2026-12-02"))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	rotated := connectionSecret(t, got)
	g.Expect(rotated["milvusPassword"]).NotTo(Equal(first))
	g.Expect(rotated["password"]).NotTo(Equal(conn["password"]), "the agents' PostgreSQL role has a new password too")
	g.Expect(useCollection(rotated["milvusPassword"])).To(Succeed())
	// Milvus forgets an old login a few seconds late.
	g.Eventually(func() error { return useCollection(first) }).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(HaveOccurred())
	g.Expect(eventReasons(ns, store.Name)).To(ContainElement("CredentialsRotated"))
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.GatewayName()}, &dep)).To(Succeed())
		g.Expect(dep.Spec.Template.Annotations).To(HaveKeyWithValue(memoryv1alpha1.AnnotationRotateCredentials, "2026-12-02"))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed(), "the gateway restarts with the new logins")

	// Deleting the store removes its user: the login is refused.
	deleteAndWaitGone(t, got)
	g.Eventually(func() error { return useCollection(rotated["milvusPassword"]) }).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(HaveOccurred())
	g.Expect(eventNotes(ns, store.Name, "Reclaimed")).To(ContainElement(ContainSubstring("Milvus user " + names.MilvusUser)))
}

func secretData(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatalf("reading Secret %s: %v", name, err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out
}

// milvusAdmin makes a Milvus user with the built-in admin role and a random password,
// removed at the end of the test, and returns the server with that login.
func milvusAdmin(t *testing.T, root testutil.MilvusServer) testutil.MilvusServer {
	t.Helper()
	ctx := context.Background()
	c, err := milvus.Connect(ctx, milvus.Conn{Address: root.Addr, Username: root.User, Password: root.Password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	admin := testutil.MilvusServer{Addr: root.Addr, User: testutil.UniqueName("opadmin"), Password: testutil.UniqueName("pw-")}
	if err := c.CreateCredential(ctx, admin.User, admin.Password); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteCredential(context.Background(), admin.User) })
	if err := c.AddUserRole(ctx, admin.User, "admin"); err != nil {
		t.Fatal(err)
	}
	return admin
}

// TestClusterMemoryBackendChecksPGVector: a backend whose stores default to PGVector
// is Ready only where the server offers pgvector with HNSW (its message says which
// version), and Stalled with ExtensionMissing where it does not, before any store.
func TestClusterMemoryBackendChecksPGVector(t *testing.T) {
	f15, f16 := services(t), services(t)
	f16.pg = testutil.PGVectorParts(t)
	for _, tc := range []struct {
		name   string
		f      backendFixture
		status metav1.ConditionStatus
		reason string
		says   string
	}{
		{"with-pgvector", f16, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned, "with pgvector 0."},
		{"without-pgvector", f15, metav1.ConditionFalse, memoryv1alpha1.ReasonExtensionMissing, "install pgvector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret := testutil.UniqueName("pg-admin-")
			createSecret(t, operatorNamespace, secret, map[string]string{"username": tc.f.pg.User, "password": tc.f.pg.Password})
			cb := &memoryv1alpha1.ClusterMemoryBackend{
				ObjectMeta: metav1.ObjectMeta{Name: testutil.UniqueName("pgv-")},
				Spec: memoryv1alpha1.ClusterMemoryBackendSpec{BackendSpec: memoryv1alpha1.BackendSpec{
					Postgres: *tc.f.postgresSpec(secret), VectorEngine: memoryv1alpha1.EnginePGVector,
				}},
			}
			create(t, cb)
			t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), cb) })
			g := NewWithT(t)
			g.Eventually(func(g Gomega) {
				got := &memoryv1alpha1.ClusterMemoryBackend{}
				g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(cb), got)).To(Succeed())
				c := meta.FindStatusCondition(got.Status.Conditions, memoryv1alpha1.ConditionReady)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(tc.status), c.Message)
				g.Expect(c.Reason).To(Equal(tc.reason), c.Message)
				g.Expect(c.Message).To(ContainSubstring(tc.says))
			}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
		})
	}
}
