package controllers

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/testutil"
)

const (
	waitTimeout = 60 * time.Second
	pollEvery   = 200 * time.Millisecond
)

func objectMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := testutil.UniqueName("test-")
	// Every test namespace enforces the restricted Pod Security level: the Pods the
	// tests create from the operator's Job templates (playing the kubelet's part) are
	// admitted only if the operator builds them restricted.
	ns := &corev1.Namespace{ObjectMeta: objectMeta("", name)}
	ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return name
}

// newTenant returns a tenant name no other test uses, so tests sharing the backends
// never see each other's schemas, collections or prefixes.
func newTenant() string { return testutil.UniqueName("t") }

func createSecret(t *testing.T, namespace, name string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: objectMeta(namespace, name), StringData: data}
	if err := k8sClient.Create(context.Background(), s); err != nil {
		t.Fatalf("creating Secret %s/%s: %v", namespace, name, err)
	}
}

// backendFixture is the real services, as the specs and Secrets that reach them.
type backendFixture struct {
	pg     testutil.Postgres
	s3     testutil.S3
	milvus string
}

func services(t *testing.T) backendFixture {
	t.Helper()
	return backendFixture{pg: testutil.PostgresParts(t), s3: testutil.S3Config(t), milvus: testutil.MilvusAddr(t)}
}

func (f backendFixture) pgPort() int32 {
	p, _ := strconv.Atoi(f.pg.Port)
	return int32(p)
}

func (f backendFixture) postgresSpec(secret string) *memoryv1alpha1.PostgresSpec {
	return &memoryv1alpha1.PostgresSpec{
		Host: f.pg.Host, Port: f.pgPort(), Database: "postgres", SSLMode: "disable",
		AdminSecret: memoryv1alpha1.CredentialsSecretRef{Name: secret, UsernameKey: "username", PasswordKey: "password"},
	}
}

func (f backendFixture) objectStorageSpec(secret, bucket string) *memoryv1alpha1.ObjectStorageSpec {
	return &memoryv1alpha1.ObjectStorageSpec{
		Endpoint: f.s3.Endpoint, Bucket: bucket, Insecure: true, CreateBucket: true, Prefix: "memory-operator",
		CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: secret, AccessKeyIDKey: "accessKeyID", SecretAccessKeyKey: "secretAccessKey"},
	}
}

// adminSecrets writes the PostgreSQL admin and S3 Secrets into namespace.
func (f backendFixture) adminSecrets(t *testing.T, namespace string) {
	t.Helper()
	createSecret(t, namespace, "pg-admin", map[string]string{"username": f.pg.User, "password": f.pg.Password})
	createSecret(t, namespace, "s3-creds", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
}

// inlineStore is a MemoryStore with inline backends: PostgreSQL, Milvus (when withMilvus)
// and MinIO, its Secrets named as adminSecrets writes them.
func (f backendFixture) inlineStore(namespace, name, tenant string, dim int32, withMilvus bool) *memoryv1alpha1.MemoryStore {
	s := &memoryv1alpha1.MemoryStore{
		ObjectMeta: objectMeta(namespace, name),
		Spec: memoryv1alpha1.MemoryStoreSpec{
			Tenant: tenant,
			Backend: memoryv1alpha1.StoreBackend{
				Postgres:      f.postgresSpec("pg-admin"),
				ObjectStorage: f.objectStorageSpec("s3-creds", "memory-test"),
			},
			Vector: memoryv1alpha1.VectorSpec{Dimension: dim},
			// The tests of deletion with reclaimPolicy Delete are about what is dropped;
			// memorystore_prechange_test.go tests the snapshot taken first.
			PreChangeSnapshot: &memoryv1alpha1.PreChangeSnapshotSpec{Enabled: ptr.To(false)},
		},
	}
	if withMilvus {
		s.Spec.Backend.Milvus = &memoryv1alpha1.MilvusSpec{Address: f.milvus}
	}
	return s
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func getStore(g Gomega, key client.ObjectKey) *memoryv1alpha1.MemoryStore {
	s := &memoryv1alpha1.MemoryStore{}
	g.Expect(k8sClient.Get(context.Background(), key, s)).To(Succeed())
	return s
}

// waitForCondition waits until the store's condition has the status and reason, for the
// store's current generation, and returns the store as it was then.
func waitForCondition(t *testing.T, key client.ObjectKey, condType string, status metav1.ConditionStatus, reason string) *memoryv1alpha1.MemoryStore {
	t.Helper()
	var store *memoryv1alpha1.MemoryStore
	NewWithT(t).Eventually(func(g Gomega) {
		store = getStore(g, key)
		c := meta.FindStatusCondition(store.Status.Conditions, condType)
		g.Expect(c).NotTo(BeNil(), "condition %s not set; conditions: %+v", condType, store.Status.Conditions)
		g.Expect(c.ObservedGeneration).To(Equal(store.Generation))
		g.Expect(c.Status).To(Equal(status), "condition %s: %s", condType, c.Message)
		g.Expect(c.Reason).To(Equal(reason), "condition %s: %s", condType, c.Message)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	return store
}

func waitReady(t *testing.T, key client.ObjectKey) *memoryv1alpha1.MemoryStore {
	t.Helper()
	return waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned)
}

// connectionSecret returns the data of the store's connection Secret.
func connectionSecret(t *testing.T, store *memoryv1alpha1.MemoryStore) map[string]string {
	t.Helper()
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: store.Namespace, Name: store.ConnectionSecretNameOrDefault()}
	if err := k8sClient.Get(context.Background(), key, s); err != nil {
		t.Fatalf("reading connection Secret: %v", err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out
}

// pgAdmin connects to PostgreSQL as the superuser, for inspecting what was provisioned.
func pgAdmin(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), testutil.PostgresDSN(t))
	if err != nil {
		t.Fatalf("connecting to PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	return adminBool(t, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema)
}

func roleExists(t *testing.T, role string) bool {
	t.Helper()
	return adminBool(t, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role)
}

// adminBool runs a boolean query on a connection of its own, closed at once, so that
// polling it does not pile up connections.
func adminBool(t *testing.T, query string, args ...any) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testutil.PostgresDSN(t))
	if err != nil {
		t.Fatalf("connecting to PostgreSQL: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var ok bool
	if err := conn.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func deleteAndWaitGone(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Delete(context.Background(), obj); err != nil {
		t.Fatalf("deleting %s: %v", obj.GetName(), err)
	}
	NewWithT(t).Eventually(func() bool {
		err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return client.IgnoreNotFound(err) == nil && err != nil
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(BeTrue(), "%s was not deleted", obj.GetName())
}
