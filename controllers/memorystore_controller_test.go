package controllers

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/minio/minio-go/v7"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

func TestMemoryStoreProvisionsEveryBackend(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	tenant := newTenant()
	store := f.inlineStore(ns, "support-bot", tenant, 16, true)
	create(t, store)

	got := waitReady(t, client.ObjectKeyFromObject(store))
	g := NewWithT(t)
	for _, c := range []string{memoryv1alpha1.ConditionPostgresReady, memoryv1alpha1.ConditionVectorReady, memoryv1alpha1.ConditionObjectStoreReady} {
		g.Expect(got.Status.Conditions).To(ContainElement(And(
			HaveField("Type", c), HaveField("Status", metav1.ConditionTrue))), "condition %s", c)
	}
	schema := "mem_" + tenant
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseReady))
	g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
	g.Expect(got.Finalizers).To(ContainElement(memoryv1alpha1.FinalizerName))
	g.Expect(got.Status.Postgres).To(Equal(&memoryv1alpha1.PostgresStatus{
		Database: "postgres", Schema: schema, Role: schema + "_agent", WorkerRole: schema + "_worker", SchemaVersion: got.Status.Postgres.SchemaVersion}))
	g.Expect(got.Status.Postgres.SchemaVersion).To(BeNumerically(">=", 1))
	g.Expect(got.Status.Vector.Engine).To(Equal("Milvus"))
	g.Expect(got.Status.Vector.Collection).To(Equal(schema))
	g.Expect(got.Status.Vector.EmbeddingModel).To(Equal("memory-operator/hashing-v1"))
	g.Expect(got.Status.ObjectStorage.Prefix).To(Equal("memory-operator/" + tenant + "/"))
	g.Expect(got.Status.ConnectionSecret).To(Equal("support-bot-memory"))

	// The connection Secret carries the store's own role, never the admin login.
	data := connectionSecret(t, got)
	g.Expect(data).To(HaveKeyWithValue("username", schema+"_agent"))
	g.Expect(data).To(HaveKeyWithValue("schema", schema))
	g.Expect(data).To(HaveKeyWithValue("collection", schema))
	g.Expect(data).To(HaveKeyWithValue("vectorEngine", "Milvus"))
	g.Expect(data).To(HaveKeyWithValue("prefix", "memory-operator/"+tenant+"/"))
	for k, v := range data {
		g.Expect(v).NotTo(ContainSubstring(f.pg.Password), "key %s leaks the admin password", k)
		g.Expect(v).NotTo(ContainSubstring(f.s3.SecretKey), "key %s leaks the S3 secret key", k)
	}

	// An agent with that Secret can read and write its memories and nothing else.
	agent, err := pgx.Connect(ctx, data["uri"])
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = agent.Close(ctx) }()
	_, err = agent.Exec(ctx, `INSERT INTO memories (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at)
		VALUES ('m1', 'semantic', 'user:1', '{"a": 1}', '\x01', 0.5, now(), now())`)
	g.Expect(err).NotTo(HaveOccurred(), "unqualified names resolve to the store's schema")
	g.Expect(pgCode(agent.QueryRow(ctx, `SELECT count(*) FROM `+otherSchemaTable(t)).Scan(new(int)))).To(Equal("42501"),
		"another schema must be out of reach")
	_, err = agent.Exec(ctx, `CREATE TABLE mine (x int)`)
	g.Expect(pgCode(err)).To(Equal("42501"), "the agent role has no DDL rights")
	_, err = agent.Exec(ctx, `DELETE FROM schema_migrations`)
	g.Expect(pgCode(err)).To(Equal("42501"), "the agent role cannot touch migrations")
	_, err = agent.Exec(ctx, `DELETE FROM tombstones`)
	g.Expect(pgCode(err)).To(Equal("42501"), "the agent role cannot remove a tombstone")

	// The Jobs' Secret carries the worker role, for the Jobs only.
	g.Expect(got.Status.WorkerSecret).To(Equal("support-bot-memory-worker"))
	ws := &corev1.Secret{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.Status.WorkerSecret}, ws)).To(Succeed())
	g.Expect(string(ws.Data["username"])).To(Equal(schema + "_worker"))
	g.Expect(metav1.IsControlledBy(ws, got)).To(BeTrue())
	for k, v := range ws.Data {
		g.Expect(string(v)).NotTo(ContainSubstring(f.pg.Password), "key %s leaks the admin password", k)
	}
	jobs, err := pgx.Connect(ctx, string(ws.Data["uri"]))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = jobs.Close(ctx) }()
	g.Expect(jobs.QueryRow(ctx, `SELECT count(*) FROM index_deletions`).Scan(new(int))).To(Succeed())

	// Milvus has the collection with the declared dimension (EnsureCollection is a no-op).
	mc, err := provision.ConnectMilvus(ctx, provision.MilvusConn{Address: f.milvus})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = mc.Close() }()
	created, err := milvus.EnsureCollection(ctx, mc, schema, vector.Spec{Dimension: 16, Metric: vector.Metric("COSINE")}, milvus.Owner{ID: ns + "/support-bot"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(created).To(BeFalse())

	// The prefix is reserved in the bucket.
	s3, err := provision.NewS3Client(provision.S3Conn{Endpoint: f.s3.Endpoint, AccessKey: f.s3.AccessKey, SecretKey: f.s3.SecretKey})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s3.StatObject(ctx, "memory-test", "memory-operator/"+tenant+"/.memory-store.json", minio.StatObjectOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// The transition to Ready was announced.
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements("Ready", "SecretCreated", "CollectionCreated"))
}

func TestMemoryStoreReconcileIsIdempotentAcrossRestart(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.inlineStore(ns, "twice", newTenant(), 8, false)
	create(t, store)
	key := client.ObjectKeyFromObject(store)
	before := waitReady(t, key)
	secretBefore := connectionSecret(t, before)

	// A restarted operator is a new reconciler with nothing in memory.
	restarted := newReconciler(k8sClient, k8sClient)
	for i := 0; i < 2; i++ {
		res, err := restarted.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
		if err != nil || res.RequeueAfter != 0 {
			t.Fatalf("reconcile %d: %+v, %v", i, res, err)
		}
	}
	g := NewWithT(t)
	after := getStore(g, key)
	g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "a converged store must not be rewritten")
	g.Expect(connectionSecret(t, after)).To(Equal(secretBefore))
}

func TestMemoryStoreHealsAfterCrashMidProvisioning(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	tenant := newTenant()
	// An earlier operator created the schema and the role, then died before writing the
	// connection Secret; the role's password is one nobody knows.
	names, err := provision.NamesFor(tenant, "")
	if err != nil {
		t.Fatal(err)
	}
	admin := provision.PostgresConn{Host: f.pg.Host, Port: int(f.pgPort()), Database: "postgres", SSLMode: "disable",
		User: f.pg.User, Password: f.pg.Password}
	if _, err := provision.EnsurePostgres(context.Background(), admin, names, ns+"/heal", provision.Passwords{Agent: "lost", Worker: "lost-too"}); err != nil {
		t.Fatal(err)
	}

	store := f.inlineStore(ns, "heal", tenant, 8, false)
	create(t, store)
	got := waitReady(t, client.ObjectKeyFromObject(store))
	agent, err := pgx.Connect(context.Background(), connectionSecret(t, got)["uri"])
	if err != nil {
		t.Fatalf("the agent must log in with the Secret's password after healing: %v", err)
	}
	_ = agent.Close(context.Background())
}

func TestMemoryStoreWaitsForMissingSecret(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	store := f.inlineStore(ns, "patient", newTenant(), 8, false)
	store.Spec.Backend.ObjectStorage = nil
	create(t, store)
	key := client.ObjectKeyFromObject(store)

	got := waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretNotFound)
	NewWithT(t).Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed))
	NewWithT(t).Expect(conditionMessage(got, memoryv1alpha1.ConditionReady)).To(ContainSubstring(ns + "/pg-admin"))

	// A Secret without the password key is named precisely.
	createSecret(t, ns, "pg-admin", map[string]string{"username": f.pg.User})
	waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretKeyMissing)

	// Fixing the Secret is picked up by the Secret watch.
	s := &corev1.Secret{}
	NewWithT(t).Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pg-admin"}, s)).To(Succeed())
	s.StringData = map[string]string{"password": f.pg.Password}
	NewWithT(t).Expect(k8sClient.Update(context.Background(), s)).To(Succeed())
	waitReady(t, key)
}

func TestMemoryStoreReportsWrongCredentials(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	const wrong = "not-the-password-4711"
	createSecret(t, ns, "pg-admin", map[string]string{"username": f.pg.User, "password": wrong})
	store := f.inlineStore(ns, "denied", newTenant(), 8, false)
	store.Spec.Backend.ObjectStorage = nil
	create(t, store)

	got := waitForCondition(t, client.ObjectKeyFromObject(store), memoryv1alpha1.ConditionPostgresReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonAuthenticationFailed)
	g := NewWithT(t)
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionReady)).NotTo(ContainSubstring(wrong), "credentials never reach status")
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement(memoryv1alpha1.ReasonAuthenticationFailed))
}

func TestMemoryStoreReportsUnreachableBackends(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)

	// A port that nothing listens on: bind one, then close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

	pgDown := f.inlineStore(ns, "pg-down", newTenant(), 8, false)
	pgDown.Spec.Backend.Postgres.Port = int32(closedPort)
	create(t, pgDown)
	waitForCondition(t, client.ObjectKeyFromObject(pgDown), memoryv1alpha1.ConditionPostgresReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonUnreachable)

	milvusDown := f.inlineStore(ns, "milvus-down", newTenant(), 8, true)
	milvusDown.Spec.Backend.Milvus.Address = "127.0.0.1:" + strconv.Itoa(closedPort)
	create(t, milvusDown)
	got := waitForCondition(t, client.ObjectKeyFromObject(milvusDown), memoryv1alpha1.ConditionVectorReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonUnreachable)
	NewWithT(t).Expect(got.Status.Conditions).To(ContainElement(And(
		HaveField("Type", memoryv1alpha1.ConditionPostgresReady), HaveField("Status", metav1.ConditionTrue))))

	s3Down := f.inlineStore(ns, "s3-down", newTenant(), 8, false)
	s3Down.Spec.Backend.ObjectStorage.Endpoint = "127.0.0.1:" + strconv.Itoa(closedPort)
	create(t, s3Down)
	waitForCondition(t, client.ObjectKeyFromObject(s3Down), memoryv1alpha1.ConditionObjectStoreReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonUnreachable)

	noBucket := f.inlineStore(ns, "no-bucket", newTenant(), 8, false)
	noBucket.Spec.Backend.ObjectStorage.Bucket = "absent-bucket"
	noBucket.Spec.Backend.ObjectStorage.CreateBucket = false
	create(t, noBucket)
	waitForCondition(t, client.ObjectKeyFromObject(noBucket), memoryv1alpha1.ConditionObjectStoreReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonBucketNotFound)
}

func TestMemoryStoreDegradedOnDimensionMismatch(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	tenant := newTenant()
	collection := "mem_" + tenant

	// Someone already made the collection with another dimension and put data in it.
	mc, err := provision.ConnectMilvus(ctx, provision.MilvusConn{Address: f.milvus})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mc.Close() }()
	spec8 := vector.Spec{Dimension: 8, Metric: vector.Metric("COSINE")}
	// Marked as the store's own, so the store meets the dimension, not a stranger.
	if _, err := milvus.EnsureCollection(ctx, mc, collection, spec8, milvus.Owner{ID: ns + "/mismatch"}); err != nil {
		t.Fatal(err)
	}
	existing := milvus.New(mc, collection, spec8)
	if err := existing.Upsert(ctx, []vector.Entry{{ID: "keep-me", Scope: "user:1", Type: "semantic",
		Vector: []float32{1, 0, 0, 0, 0, 0, 0, 0}}}); err != nil {
		t.Fatal(err)
	}

	store := f.inlineStore(ns, "mismatch", tenant, 16, true)
	create(t, store)
	got := waitForCondition(t, client.ObjectKeyFromObject(store), memoryv1alpha1.ConditionDegraded,
		metav1.ConditionTrue, memoryv1alpha1.ReasonDimensionMismatch)
	g := NewWithT(t)
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseDegraded))
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionVectorReady)).To(And(ContainSubstring("8"), ContainSubstring("16")))
	g.Expect(got.Status.Conditions).To(ContainElement(And(
		HaveField("Type", memoryv1alpha1.ConditionReady), HaveField("Reason", memoryv1alpha1.ReasonDimensionMismatch))))

	// Nothing was dropped: the 8-dimensional collection still answers with its data.
	hits, err := existing.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0, 0, 0, 0, 0, 0}, K: 1})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hits).To(HaveLen(1))
	g.Expect(hits[0].ID).To(Equal("keep-me"))
}

func TestMemoryStoreRefusesTenantOfAnotherStore(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	tenant := newTenant()
	first := f.inlineStore(ns, "first", tenant, 8, false)
	create(t, first)
	waitReady(t, client.ObjectKeyFromObject(first))

	second := f.inlineStore(ns, "second", tenant, 8, false)
	create(t, second)
	got := waitForCondition(t, client.ObjectKeyFromObject(second), memoryv1alpha1.ConditionReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonTenantConflict)
	g := NewWithT(t)
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseDegraded))
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionReady)).To(ContainSubstring(ns + "/first"))
	g.Expect(getStore(g, client.ObjectKeyFromObject(first)).IsReady()).To(BeTrue())

	// Deleting the second store (even with Delete) must not touch the first one's data.
	got.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
	g.Expect(k8sClient.Update(context.Background(), got)).To(Succeed())
	g.Expect(k8sClient.Delete(context.Background(), got)).To(Succeed())
	g.Consistently(func() bool { return schemaExists(t, "mem_"+tenant) }).WithTimeout(3 * pollEvery * 5).Should(BeTrue())
}

// TestGuaranteeStoreThatLostATenantConflictIsDeletable: a store that claimed a tenant
// another store holds provisioned nothing, so deleting it, even with reclaimPolicy
// Delete, finishes at once and takes nothing of the other store's: not its schema,
// roles, data, Milvus collection or object prefix.
func TestGuaranteeStoreThatLostATenantConflictIsDeletable(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	tenant := newTenant()
	first := f.inlineStore(ns, "holder", tenant, 8, true)
	create(t, first)
	waitReady(t, client.ObjectKeyFromObject(first))
	if _, err := pgAdmin(t).Exec(ctx, `INSERT INTO `+pgx.Identifier{"mem_" + tenant, "memories"}.Sanitize()+
		` (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at)
		VALUES ('m1', 'semantic', 'user:1', '{}', '\x01', 0.5, now(), now())`); err != nil {
		t.Fatal(err)
	}

	second := f.inlineStore(ns, "claimant", tenant, 8, true)
	second.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
	// The default, a snapshot before deletion: a store that owns nothing has nothing
	// to snapshot and goes at once.
	second.Spec.PreChangeSnapshot = nil
	create(t, second)
	waitForCondition(t, client.ObjectKeyFromObject(second), memoryv1alpha1.ConditionReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonTenantConflict)
	deleteAndWaitGone(t, second)

	g := NewWithT(t)
	g.Expect(getStore(g, client.ObjectKeyFromObject(first)).IsReady()).To(BeTrue())
	g.Expect(schemaExists(t, "mem_"+tenant)).To(BeTrue(), "schema")
	g.Expect(roleExists(t, "mem_"+tenant+"_agent")).To(BeTrue(), "agent role")
	g.Expect(roleExists(t, "mem_"+tenant+"_worker")).To(BeTrue(), "worker role")
	var n int
	g.Expect(pgAdmin(t).QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{"mem_" + tenant, "memories"}.Sanitize()).Scan(&n)).To(Succeed())
	g.Expect(n).To(Equal(1), "the holder's memories")
	mc, err := provision.ConnectMilvus(ctx, provision.MilvusConn{Address: f.milvus})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = mc.Close() }()
	has, err := mc.HasCollection(ctx, "mem_"+tenant)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(has).To(BeTrue(), "the holder's collection")
	s3, err := provision.NewS3Client(provision.S3Conn{Endpoint: f.s3.Endpoint, AccessKey: f.s3.AccessKey, SecretKey: f.s3.SecretKey})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s3.StatObject(ctx, "memory-test", "memory-operator/"+tenant+"/.memory-store.json", minio.StatObjectOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the holder's prefix marker")
	g.Eventually(func() []string { return eventReasons(ns, second.Name) }).
		WithTimeout(waitTimeout).WithPolling(pollEvery).Should(ContainElement("BackendsKept"))
	// Nothing was reclaimed, so no event may say so. Events are recorded asynchronously
	// and in no set order: give one that must not come the time to come.
	g.Consistently(func() []string { return eventReasons(ns, second.Name) }).
		WithTimeout(3 * time.Second).WithPolling(pollEvery).ShouldNot(ContainElement("Reclaimed"))
}

func TestMemoryStoreDeletion(t *testing.T) {
	for _, policy := range []memoryv1alpha1.ReclaimPolicy{memoryv1alpha1.ReclaimRetain, memoryv1alpha1.ReclaimDelete} {
		t.Run(string(policy), func(t *testing.T) {
			f := services(t)
			ctx := context.Background()
			ns := newNamespace(t)
			f.adminSecrets(t, ns)
			tenant := newTenant()
			store := f.inlineStore(ns, "bye", tenant, 8, true)
			store.Spec.ReclaimPolicy = policy
			create(t, store)
			waitReady(t, client.ObjectKeyFromObject(store))

			// Data an agent wrote, to check that Retain really keeps it.
			if _, err := pgAdmin(t).Exec(ctx, `INSERT INTO `+pgx.Identifier{"mem_" + tenant, "memories"}.Sanitize()+
				` (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at)
				VALUES ('m1', 'semantic', 'user:1', '{}', '\x01', 0.5, now(), now())`); err != nil {
				t.Fatal(err)
			}
			// A snapshot package under the store's prefix outlives the store either way.
			s3, err := provision.NewS3Client(provision.S3Conn{Endpoint: f.s3.Endpoint, AccessKey: f.s3.AccessKey, SecretKey: f.s3.SecretKey})
			if err != nil {
				t.Fatal(err)
			}
			snapshotObject := "memory-operator/" + tenant + "/snapshots/nightly/manifest.json"
			if _, err := s3.PutObject(ctx, "memory-test", snapshotObject, strings.NewReader("{}"), 2, minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			deleteAndWaitGone(t, store)

			keep := policy == memoryv1alpha1.ReclaimRetain
			g := NewWithT(t)
			if !keep {
				// The event names what was deleted, each part.
				g.Eventually(func() []string { return eventNotes(ns, store.Name, "Reclaimed") }).
					WithTimeout(waitTimeout).WithPolling(pollEvery).Should(ContainElement(And(
					ContainSubstring("schema mem_"+tenant+" and its roles"),
					ContainSubstring("Milvus collection mem_"+tenant),
					ContainSubstring("object prefix memory-operator/"+tenant+"/"))))
			}
			g.Expect(schemaExists(t, "mem_"+tenant)).To(Equal(keep), "schema")
			g.Expect(roleExists(t, "mem_"+tenant+"_agent")).To(Equal(keep), "agent role")
			g.Expect(roleExists(t, "mem_"+tenant+"_worker")).To(Equal(keep), "worker role")

			mc, err := provision.ConnectMilvus(ctx, provision.MilvusConn{Address: f.milvus})
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = mc.Close() }()
			has, err := mc.HasCollection(ctx, "mem_"+tenant)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(has).To(Equal(keep), "collection")

			_, err = s3.StatObject(ctx, "memory-test", "memory-operator/"+tenant+"/.memory-store.json", minio.StatObjectOptions{})
			g.Expect(err == nil).To(Equal(keep), "prefix marker: %v", err)
			_, err = s3.StatObject(ctx, "memory-test", snapshotObject, minio.StatObjectOptions{})
			g.Expect(err).NotTo(HaveOccurred(), "snapshot packages outlive their store")

			if keep {
				var n int
				g.Expect(pgAdmin(t).QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{"mem_" + tenant, "memories"}.Sanitize()).Scan(&n)).To(Succeed())
				g.Expect(n).To(Equal(1))
				// A store created again under the same name adopts the retained data.
				again := f.inlineStore(ns, "bye", tenant, 8, true)
				create(t, again)
				waitReady(t, client.ObjectKeyFromObject(again))
			}
		})
	}
}

func TestMemoryStoreWithClusterBackend(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	other := newNamespace(t)
	// The platform team's Secrets live in the operator's namespace, out of tenants' reach.
	secretName := testutil.UniqueName("shared-pg-")
	createSecret(t, operatorNamespace, secretName, map[string]string{"username": f.pg.User, "password": f.pg.Password})
	backend := &memoryv1alpha1.ClusterMemoryBackend{
		ObjectMeta: objectMeta("", testutil.UniqueName("shared-")),
		Spec: memoryv1alpha1.ClusterMemoryBackendSpec{
			BackendSpec:       memoryv1alpha1.BackendSpec{Postgres: *f.postgresSpec(secretName)},
			AllowedNamespaces: []string{ns},
		},
	}
	create(t, backend)

	store := &memoryv1alpha1.MemoryStore{
		ObjectMeta: objectMeta(ns, "tenant-a"),
		Spec: memoryv1alpha1.MemoryStoreSpec{
			Tenant:  newTenant(),
			Backend: memoryv1alpha1.StoreBackend{ClusterBackend: backend.Name},
			Vector:  memoryv1alpha1.VectorSpec{Dimension: 32, Metric: "L2"},
		},
	}
	create(t, store)
	got := waitReady(t, client.ObjectKeyFromObject(store))
	g := NewWithT(t)
	g.Expect(got.Status.Vector.Engine).To(Equal("Postgres"), "no Milvus declared: vectors stay in PostgreSQL")
	g.Expect(got.Status.ObjectStorage).To(BeNil())
	data := connectionSecret(t, got)
	g.Expect(data).NotTo(HaveKey("collection"))
	g.Expect(data).To(HaveKeyWithValue("vectorMetric", "L2"))

	denied := store.DeepCopy()
	denied.ObjectMeta = objectMeta(other, "tenant-b")
	denied.Spec.Tenant = newTenant()
	create(t, denied)
	waitForCondition(t, client.ObjectKeyFromObject(denied), memoryv1alpha1.ConditionReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonBackendNotAllowed)

	missing := store.DeepCopy()
	missing.ObjectMeta = objectMeta(ns, "tenant-c")
	missing.Spec.Tenant = newTenant()
	missing.Spec.Backend.ClusterBackend = "does-not-exist"
	create(t, missing)
	waitForCondition(t, client.ObjectKeyFromObject(missing), memoryv1alpha1.ConditionReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonBackendNotFound)

	// Allowing the namespace later is picked up by the ClusterMemoryBackend watch.
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(backend), backend)).To(Succeed())
	backend.Spec.AllowedNamespaces = append(backend.Spec.AllowedNamespaces, other)
	g.Expect(k8sClient.Update(context.Background(), backend)).To(Succeed())
	waitReady(t, client.ObjectKeyFromObject(denied))
}

// --- small helpers used above ---

// conditionMessage returns the message of a condition ("" when unset).
func conditionMessage(s *memoryv1alpha1.MemoryStore, condType string) string {
	for _, c := range s.Status.Conditions {
		if c.Type == condType {
			return c.Message
		}
	}
	return ""
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// otherSchemaTable creates a table in a schema that belongs to no store and returns its
// qualified name.
func otherSchemaTable(t *testing.T) string {
	t.Helper()
	schema := testutil.UniqueName("other_")
	name := pgx.Identifier{schema, "secrets"}.Sanitize()
	if _, err := pgAdmin(t).Exec(context.Background(), `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()+`; CREATE TABLE `+name+` (x int)`); err != nil {
		t.Fatal(err)
	}
	return name
}

func eventReasons(namespace, name string) []string {
	var list eventsv1.EventList
	if err := k8sClient.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// eventNotes are the messages of the object's events with this reason.
func eventNotes(namespace, name, reason string) []string {
	var list eventsv1.EventList
	if err := k8sClient.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes
}
