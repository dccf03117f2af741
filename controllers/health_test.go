package controllers

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/hack/health"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/worker"
	"github.com/amemory/memory-operator/test/importers"
)

// healthDir holds the Argo CD scripts, their fixtures and the Flux expressions.
const healthDir = "../config/health"

// updateFixtures rewrites the fixtures and each kind's health_test.yaml from what the
// controllers write now: UPDATE_HEALTH_FIXTURES=1 go test ./controllers -run TestHealthVerdicts
var updateFixtures = os.Getenv("UPDATE_HEALTH_FIXTURES") != ""

// healthCase is one state a GitOps tool can meet an object in, produced by the real
// controllers, and the verdict every judge must give it.
type healthCase struct {
	kind, fixture string // the fixture is testdata/<fixture>.yaml of the kind
	want          health.Health
	// capture brings an object into the state and returns it as the API server
	// serves it, with the test's random names to replace by stable ones.
	capture func(t *testing.T) captured
}

type captured struct {
	obj   map[string]any
	names map[string]string // random → stable, applied to the whole fixture
}

// TestHealthVerdicts drives the controllers into every state of every kind that a
// GitOps tool acts on — new, waiting, running, done, each failure, deletion — and
// judges what they wrote with kstatus (Flux's wait and health checks), the Argo CD Lua
// checks and the Flux CEL expressions of config/health. The three must agree with each
// other and with the expected verdict, on the live object and on its saved fixture,
// whose conditions must still be what the controllers write (else it is stale).
func TestHealthVerdicts(t *testing.T) {
	f := services(t)
	cases := slices.Concat(storeHealthCases(f), backendHealthCases(f), snapshotHealthCases(f), restoreHealthCases(f))
	listed := map[string][]healthCase{}
	for _, tc := range cases {
		if strings.Contains(tc.fixture, "failed") != (tc.want == health.Degraded) {
			t.Fatalf("%s/%s: a fixture's name says failed exactly when it is Degraded", tc.kind, tc.fixture)
		}
		listed[tc.kind] = append(listed[tc.kind], tc)
		t.Run(tc.kind+"/"+tc.fixture, func(t *testing.T) {
			got := tc.capture(t)
			live := normalizeFixture(t, got)
			judged, err := health.Judge(healthDir, live)
			if err != nil {
				t.Fatal(err)
			}
			if !judged.Agree() || judged.ArgoCD.Health != tc.want {
				t.Fatalf("want %s from every judge, got:\n%s\nobject:\n%s", tc.want, judged, mustYAML(t, live))
			}
			path := filepath.Join(healthDir, memoryv1alpha1.GroupVersion.Group, tc.kind, "testdata", tc.fixture+".yaml")
			if updateFixtures {
				writeFile(t, path, mustYAML(t, live))
				return
			}
			saved := readFixture(t, path)
			if a, b := fixtureShape(saved), fixtureShape(live); a != b {
				t.Fatalf("%s is stale: the controllers now write\n%s\nwhere it has\n%s\nRegenerate with UPDATE_HEALTH_FIXTURES=1 and review the diff", path, b, a)
			}
			judgedSaved, err := health.Judge(healthDir, saved)
			if err != nil {
				t.Fatal(err)
			}
			if !judgedSaved.Agree() || judgedSaved.ArgoCD.Health != tc.want {
				t.Fatalf("%s: want %s from every judge, got:\n%s", path, tc.want, judgedSaved)
			}
		})
	}
	if updateFixtures && !t.Failed() {
		for kind, kcs := range listed {
			writeArgoTests(t, kind, kcs)
		}
	}
}

// writeArgoTests writes a kind's health_test.yaml (Argo CD's format) for its fixtures.
func writeArgoTests(t *testing.T, kind string, cases []healthCase) {
	t.Helper()
	type entry struct {
		HealthStatus struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"healthStatus"`
		InputPath string `json:"inputPath"`
	}
	dir := filepath.Join(healthDir, memoryv1alpha1.GroupVersion.Group, kind)
	var tests []entry
	for _, tc := range cases {
		var e entry
		e.InputPath = "testdata/" + tc.fixture + ".yaml"
		judged, err := health.Judge(healthDir, readFixture(t, filepath.Join(dir, e.InputPath)))
		if err != nil {
			t.Fatal(err)
		}
		e.HealthStatus.Status, e.HealthStatus.Message = judged.ArgoCD.Raw, judged.ArgoCD.Message
		tests = append(tests, e)
	}
	slices.SortFunc(tests, func(a, b entry) int { return strings.Compare(a.InputPath, b.InputPath) })
	b, err := yaml.Marshal(map[string]any{"tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "health_test.yaml"), b)
}

// fixtureShape is what a fixture must keep in step with the controllers: deletion and
// finalizers, whether the generation is observed, and each condition's type, status
// and reason (messages and times may differ from run to run).
func fixtureShape(obj map[string]any) string {
	u := unstructured.Unstructured{Object: obj}
	gen, _, _ := unstructured.NestedInt64(obj, "metadata", "generation")
	observed, found, _ := unstructured.NestedInt64(obj, "status", "observedGeneration")
	conditions, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	var cs []string
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		cs = append(cs, fmt.Sprintf("%v=%v/%v", m["type"], m["status"], m["reason"]))
	}
	slices.Sort(cs)
	return fmt.Sprintf("deleting=%v finalizers=%v observed=%v conditions=%v",
		u.GetDeletionTimestamp() != nil, u.GetFinalizers(), found && observed == gen, cs)
}

// fixtureTime replaces every time in a fixture.
const fixtureTime = "2026-11-30T12:00:00Z"

// normalizeFixture makes a captured object a stable fixture: no server bookkeeping,
// fixed times, and the test's random names (namespaces, tenants, UIDs, addresses)
// replaced by stable ones.
func normalizeFixture(t *testing.T, c captured) map[string]any {
	t.Helper()
	obj := c.obj
	u := unstructured.Unstructured{Object: obj}
	names := maps.Clone(c.names)
	if names == nil {
		names = map[string]string{}
	}
	if uid := string(u.GetUID()); uid != "" {
		names[uid] = "5a6b7c8d-0000-4000-8000-00000000000a"
		names[uid[:8]] = "5a6b7c8d"
	}
	unstructured.RemoveNestedField(obj, "metadata", "managedFields")
	unstructured.RemoveNestedField(obj, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(obj, "metadata", "uid")
	unstructured.RemoveNestedField(obj, "metadata", "selfLink")
	_ = unstructured.SetNestedField(obj, fixtureTime, "metadata", "creationTimestamp")
	if u.GetDeletionTimestamp() != nil {
		_ = unstructured.SetNestedField(obj, fixtureTime, "metadata", "deletionTimestamp")
	}
	if conditions, ok, _ := unstructured.NestedSlice(obj, "status", "conditions"); ok {
		for _, cond := range conditions {
			cond.(map[string]any)["lastTransitionTime"] = fixtureTime
		}
		_ = unstructured.SetNestedSlice(obj, conditions, "status", "conditions")
	}
	for _, field := range []string{"startTime", "completionTime", "lastChecked", "expiresAt"} {
		if _, ok, _ := unstructured.NestedFieldNoCopy(obj, "status", field); ok {
			_ = unstructured.SetNestedField(obj, fixtureTime, "status", field)
		}
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(obj, "status", "lastRestore", "completedAt"); ok {
		_ = unstructured.SetNestedField(obj, fixtureTime, "status", "lastRestore", "completedAt")
	}
	text := string(mustYAML(t, obj))
	olds := slices.Collect(maps.Keys(names))
	slices.SortFunc(olds, func(a, b string) int { return len(b) - len(a) }) // longest first
	var pairs []string
	for _, old := range olds {
		pairs = append(pairs, old, names[old])
	}
	text = strings.NewReplacer(pairs...).Replace(text)
	var out map[string]any
	if err := yaml.Unmarshal([]byte(text), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustYAML(t *testing.T, obj any) []byte {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readFixture(t *testing.T, path string) map[string]any {
	t.Helper()
	objs, err := health.ReadObjects(path)
	if err != nil {
		t.Fatalf("%v (write the fixtures with UPDATE_HEALTH_FIXTURES=1)", err)
	}
	if len(objs) != 1 {
		t.Fatalf("%s holds %d objects, want 1", path, len(objs))
	}
	return objs[0]
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// served reads obj as the API server serves it now (not from the cache).
func served(t *testing.T, kind string, key client.ObjectKey) map[string]any {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(memoryv1alpha1.GroupVersion.WithKind(kind))
	if err := testMgr.GetAPIReader().Get(context.Background(), key, u); err != nil {
		t.Fatal(err)
	}
	return u.Object
}

// response is a typed object as an API response returned it (a create or an update).
func response(t *testing.T, kind string, obj client.Object) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	m["apiVersion"], m["kind"] = memoryv1alpha1.GroupVersion.String(), kind
	return m
}

// awaitSummary waits until obj's summary conditions say state, with reason, for its
// current generation, and returns it as served.
func awaitSummary(t *testing.T, kind string, key client.ObjectKey, state healthState, reason string) map[string]any {
	t.Helper()
	var obj map[string]any
	NewWithT(t).Eventually(func(g Gomega) {
		obj = served(t, kind, key)
		gen, _, _ := unstructured.NestedInt64(obj, "metadata", "generation")
		observed, _, _ := unstructured.NestedInt64(obj, "status", "observedGeneration")
		g.Expect(observed).To(Equal(gen))
		conditions, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
		byType := map[string]map[string]any{}
		for _, c := range conditions {
			m := c.(map[string]any)
			byType[m["type"].(string)] = m
		}
		want := map[healthState][3]string{ // Ready, Reconciling, Stalled
			working: {"False", "True", ""}, done: {"True", "", ""}, stalled: {"False", "", "True"},
			servingWorking: {"True", "True", ""}, servingStalled: {"True", "", "True"},
		}[state]
		serving := state == servingWorking || state == servingStalled
		for i, condType := range []string{memoryv1alpha1.ConditionReady, memoryv1alpha1.ConditionReconciling, memoryv1alpha1.ConditionStalled} {
			c, ok := byType[condType]
			if want[i] == "" {
				g.Expect(ok).To(BeFalse(), "%s present: %v", condType, c)
				continue
			}
			g.Expect(ok).To(BeTrue(), "%s missing; conditions %v", condType, conditions)
			g.Expect(c["status"]).To(Equal(want[i]), "%s: %v", condType, c["message"])
			if serving && condType == memoryv1alpha1.ConditionReady {
				continue // a store that serves keeps its Ready reason
			}
			g.Expect(c["reason"]).To(Equal(reason), "%s: %v", condType, c["message"])
		}
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	return obj
}

// holdFinalizer is a finalizer of another controller (a backup tool, a policy engine),
// which keeps an object in deletion as long as the test needs.
const holdFinalizer = "example.com/hold"

// deleting adds holdFinalizer to obj, deletes it and returns it as served, in
// deletion; the finalizer is removed when the test ends.
func deleting(t *testing.T, kind string, obj client.Object) map[string]any {
	t.Helper()
	ctx := context.Background()
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	obj.SetFinalizers(append(obj.GetFinalizers(), holdFinalizer))
	if err := k8sClient.Patch(ctx, obj, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err == nil {
			p := client.MergeFrom(obj.DeepCopyObject().(client.Object))
			obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == holdFinalizer }))
			_ = k8sClient.Patch(ctx, obj, p)
		}
	})
	if err := k8sClient.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	NewWithT(t).Eventually(func(g Gomega) {
		got = served(t, kind, client.ObjectKeyFromObject(obj))
		u := unstructured.Unstructured{Object: got}
		g.Expect(u.GetDeletionTimestamp()).NotTo(BeNil())
		// Until only the finalizers no controller of ours removes are left.
		g.Expect(u.GetFinalizers()).NotTo(ContainElement(memoryv1alpha1.FinalizerName))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	return got
}

// backendNames maps the test services' addresses to stable ones.
func (f backendFixture) backendNames(ns, tenant string) map[string]string {
	names := map[string]string{
		f.pg.Host + ":" + f.pg.Port: "postgres.example:5432",
		f.s3.Endpoint:               "minio.example:9000",
		f.milvus:                    "milvus.example:19530",
	}
	if ns != "" {
		names[ns] = "team-a"
	}
	if tenant != "" {
		names[tenant] = "acme"
	}
	return names
}

func storeHealthCases(f backendFixture) []healthCase {
	const kind = "MemoryStore"
	inNamespace := func(t *testing.T) (string, string) {
		ns := newNamespace(t)
		f.adminSecrets(t, ns)
		return ns, newTenant()
	}
	return []healthCase{
		{kind, "new", health.Progressing, func(t *testing.T) captured {
			ns, tenant := inNamespace(t)
			store := f.inlineStore(ns, "support-bot", tenant, 8, false)
			create(t, store)
			return captured{response(t, kind, store), f.backendNames(ns, tenant)}
		}},
		{kind, "waiting-for-secret", health.Progressing, func(t *testing.T) captured {
			ns, tenant := inNamespace(t)
			store := f.inlineStore(ns, "support-bot", tenant, 8, false)
			store.Spec.Backend.Postgres.AdminSecret.Name = "pg-admin-later"
			create(t, store)
			obj := awaitSummary(t, kind, client.ObjectKeyFromObject(store), working, memoryv1alpha1.ReasonSecretNotFound)
			return captured{obj, f.backendNames(ns, tenant)}
		}},
		{kind, "ready", health.Healthy, func(t *testing.T) captured {
			ns, tenant := inNamespace(t)
			store := f.inlineStore(ns, "support-bot", tenant, 8, true)
			create(t, store)
			obj := awaitSummary(t, kind, client.ObjectKeyFromObject(store), done, memoryv1alpha1.ReasonProvisioned)
			return captured{obj, f.backendNames(ns, tenant)}
		}},
		{kind, "spec-changed", health.Progressing, func(t *testing.T) captured {
			ns, tenant := inNamespace(t)
			store := f.inlineStore(ns, "support-bot", tenant, 8, false)
			create(t, store)
			ready := waitReady(t, client.ObjectKeyFromObject(store))
			// The update's response: the new generation, the status of the old one.
			ready.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
			if err := k8sClient.Update(context.Background(), ready); err != nil {
				t.Fatal(err)
			}
			return captured{response(t, kind, ready), f.backendNames(ns, tenant)}
		}},
		{kind, "switching", health.Progressing, func(t *testing.T) captured {
			// An embedding switch under way: the store serves, its spec is not yet
			// what runs.
			ns, tenant := inNamespace(t)
			store := f.inlineStore(ns, "support-bot", tenant, 8, false)
			create(t, store)
			waitReady(t, client.ObjectKeyFromObject(store))
			setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 16 })
			obj := awaitSummary(t, kind, client.ObjectKeyFromObject(store), servingWorking, memoryv1alpha1.ReasonReembedding)
			return captured{obj, f.backendNames(ns, tenant)}
		}},
		{kind, "switch-failed", health.Degraded, func(t *testing.T) captured {
			// Its re-embed Job failed: the store serves the old model, and a person
			// must act.
			ns, tenant := inNamespace(t)
			store := f.inlineStore(ns, "support-bot", tenant, 8, false)
			create(t, store)
			waitReady(t, client.ObjectKeyFromObject(store))
			setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 16 })
			failSwitchJob(t, store)
			obj := awaitSummary(t, kind, client.ObjectKeyFromObject(store), servingStalled, memoryv1alpha1.ReasonSwitchFailed)
			return captured{obj, f.backendNames(ns, tenant)}
		}},
		{kind, "tenant-conflict-failed", health.Degraded, func(t *testing.T) captured {
			ns, tenant := inNamespace(t)
			first := f.inlineStore(ns, "support-bot", tenant, 8, false)
			create(t, first)
			waitReady(t, client.ObjectKeyFromObject(first))
			second := f.inlineStore(ns, "support-bot-v2", tenant, 8, false)
			create(t, second)
			obj := awaitSummary(t, kind, client.ObjectKeyFromObject(second), stalled, memoryv1alpha1.ReasonTenantConflict)
			return captured{obj, f.backendNames(ns, tenant)}
		}},
		{kind, "authentication-failed", health.Degraded, func(t *testing.T) captured {
			ns, tenant := inNamespace(t)
			createSecret(t, ns, "pg-wrong", map[string]string{"username": f.pg.User, "password": "not-the-password"})
			store := f.inlineStore(ns, "support-bot", tenant, 8, false)
			store.Spec.Backend.Postgres.AdminSecret.Name = "pg-wrong"
			create(t, store)
			obj := awaitSummary(t, kind, client.ObjectKeyFromObject(store), stalled, memoryv1alpha1.ReasonAuthenticationFailed)
			return captured{obj, f.backendNames(ns, tenant)}
		}},
		{kind, "deleting-blocked", health.Progressing, func(t *testing.T) captured {
			// reclaimPolicy Delete, and the admin password changed meanwhile: the
			// finalizer stays until the schema can be dropped.
			ns, tenant := inNamespace(t)
			store := f.inlineStore(ns, "support-bot", tenant, 8, false)
			store.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
			create(t, store)
			ready := waitReady(t, client.ObjectKeyFromObject(store))
			secret := &corev1.Secret{}
			if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pg-admin"}, secret); err != nil {
				t.Fatal(err)
			}
			setSecretData(t, secret, map[string][]byte{"username": []byte(f.pg.User), "password": []byte("rotated-elsewhere")})
			t.Cleanup(func() {
				setSecretData(t, secret, map[string][]byte{"username": []byte(f.pg.User), "password": []byte(f.pg.Password)})
			})
			if err := k8sClient.Delete(context.Background(), ready); err != nil {
				t.Fatal(err)
			}
			obj := awaitSummary(t, kind, client.ObjectKeyFromObject(store), working, memoryv1alpha1.ReasonCleanupFailed)
			return captured{obj, f.backendNames(ns, tenant)}
		}},
	}
}

func backendHealthCases(f backendFixture) []healthCase {
	const kind = "ClusterMemoryBackend"
	// newBackend is a ClusterMemoryBackend on the test services, with Secrets of its
	// own in the operator's namespace; password and bucket may be spoiled.
	newBackend := func(t *testing.T, password, bucket string, createBucket bool) (*memoryv1alpha1.ClusterMemoryBackend, map[string]string) {
		name := strings.ToLower(newTenant())
		pgSecret, s3Secret := name+"-pg", name+"-s3"
		createSecret(t, operatorNamespace, pgSecret, map[string]string{"username": f.pg.User, "password": password})
		createSecret(t, operatorNamespace, s3Secret, map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
		storage := f.objectStorageSpec(s3Secret, bucket)
		storage.CreateBucket = createBucket
		cb := &memoryv1alpha1.ClusterMemoryBackend{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: memoryv1alpha1.ClusterMemoryBackendSpec{BackendSpec: memoryv1alpha1.BackendSpec{
				Postgres: *f.postgresSpec(pgSecret), Milvus: &memoryv1alpha1.MilvusSpec{Address: f.milvus}, ObjectStorage: storage,
			}},
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), cb) })
		names := f.backendNames("", "")
		names[name] = "shared"
		return cb, names
	}
	return []healthCase{
		{kind, "new", health.Progressing, func(t *testing.T) captured {
			cb, names := newBackend(t, f.pg.Password, "memory-test", true)
			create(t, cb)
			return captured{response(t, kind, cb), names}
		}},
		{kind, "ready", health.Healthy, func(t *testing.T) captured {
			cb, names := newBackend(t, f.pg.Password, "memory-test", true)
			create(t, cb)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(cb), done, memoryv1alpha1.ReasonProvisioned), names}
		}},
		{kind, "waiting-for-secret", health.Progressing, func(t *testing.T) captured {
			cb, names := newBackend(t, f.pg.Password, "memory-test", true)
			cb.Spec.Postgres.AdminSecret.Name = "created-later"
			create(t, cb)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(cb), working, memoryv1alpha1.ReasonSecretNotFound), names}
		}},
		{kind, "authentication-failed", health.Degraded, func(t *testing.T) captured {
			cb, names := newBackend(t, "not-the-password", "memory-test", true)
			create(t, cb)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(cb), stalled, memoryv1alpha1.ReasonAuthenticationFailed), names}
		}},
		{kind, "bucket-missing-failed", health.Degraded, func(t *testing.T) captured {
			cb, names := newBackend(t, f.pg.Password, "no-such-bucket", false)
			create(t, cb)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(cb), stalled, memoryv1alpha1.ReasonBucketNotFound), names}
		}},
		{kind, "deleting", health.Progressing, func(t *testing.T) captured {
			cb, names := newBackend(t, f.pg.Password, "memory-test", true)
			create(t, cb)
			awaitSummary(t, kind, client.ObjectKeyFromObject(cb), done, memoryv1alpha1.ReasonProvisioned)
			return captured{deleting(t, kind, cb), names}
		}},
	}
}

// snapshotScene is a namespace with a Ready store ("support-bot") holding a few
// memories, and the snapshot key Secret.
type snapshotScene struct {
	ns    string
	store *memoryv1alpha1.MemoryStore
	names map[string]string
}

func newSnapshotScene(t *testing.T, f backendFixture) snapshotScene {
	t.Helper()
	store := readySnapshotStore(t, f, "support-bot")
	putMemories(t, store,
		testItem("m-1", "user:1024", memory.Semantic, `{"likes":"flat white"}`),
		testItem("m-2", "user:2048", memory.Episodic, `{"asked":"refund"}`))
	return snapshotScene{ns: store.Namespace, store: store, names: f.backendNames(store.Namespace, store.Spec.Tenant)}
}

// snapshotted creates snapshot name and plays its Job through to success.
func (s snapshotScene) snapshotted(t *testing.T, name string, mutate func(*memoryv1alpha1.MemorySnapshot)) *memoryv1alpha1.MemorySnapshot {
	t.Helper()
	snap := newSnapshot(s.ns, name, s.store.Name, mutate)
	create(t, snap)
	job := waitForJob(t, snap)
	runWorker(t, job)
	completeJob(t, job)
	return waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
}

// failed plays a Job's pod failing with the worker's error, and the Job giving up.
func failedJob(t *testing.T, job *batchv1.Job, workerError string) {
	t.Helper()
	failedPod(t, job, workerError)
	failJob(t, job, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
}

// running plays a Job's pod running.
func running(t *testing.T, job *batchv1.Job) {
	t.Helper()
	start, _ := jobTimes()
	updateJobStatus(t, job, func(s *batchv1.JobStatus) { s.StartTime, s.Active = &start, 1 })
}

func snapshotHealthCases(f backendFixture) []healthCase {
	const kind = "MemorySnapshot"
	return []healthCase{
		{kind, "new", health.Progressing, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			snap := newSnapshot(s.ns, "before-migration", s.store.Name, nil)
			create(t, snap)
			return captured{response(t, kind, snap), s.names}
		}},
		{kind, "waiting-for-store", health.Progressing, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			snap := newSnapshot(s.ns, "before-migration", "support-bot-v2", nil)
			create(t, snap)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(snap), working, memoryv1alpha1.ReasonStoreNotFound), s.names}
		}},
		{kind, "running", health.Progressing, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			snap := newSnapshot(s.ns, "before-migration", s.store.Name, nil)
			create(t, snap)
			running(t, waitForJob(t, snap))
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(snap), working, memoryv1alpha1.ReasonRunning), s.names}
		}},
		{kind, "succeeded", health.Healthy, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			snap := s.snapshotted(t, "before-migration", nil)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(snap), done, memoryv1alpha1.ReasonSucceeded), s.names}
		}},
		{kind, "ttl-kept-gitops-managed", health.Healthy, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			snap := s.snapshotted(t, "before-migration", func(m *memoryv1alpha1.MemorySnapshot) {
				m.Spec.TTL = &metav1.Duration{Duration: time.Second}
				m.Annotations = map[string]string{"argocd.argoproj.io/tracking-id": "memory:memory.amemory.io/MemorySnapshot:team-a/before-migration"}
			})
			waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionExpired, metav1.ConditionFalse, memoryv1alpha1.ReasonTTLKept)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(snap), done, memoryv1alpha1.ReasonSucceeded), s.names}
		}},
		{kind, "job-failed", health.Degraded, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			snap := newSnapshot(s.ns, "before-migration", s.store.Name, nil)
			create(t, snap)
			failedJob(t, waitForJob(t, snap), "snapshot: exporting: pgstore: connection reset by peer")
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(snap), stalled, memoryv1alpha1.ReasonFailed), s.names}
		}},
		{kind, "job-deleted-failed", health.Degraded, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			snap := newSnapshot(s.ns, "before-migration", s.store.Name, nil)
			create(t, snap)
			job := waitForJob(t, snap)
			waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
			if err := k8sClient.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
				t.Fatal(err)
			}
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(snap), stalled, memoryv1alpha1.ReasonFailed), s.names}
		}},
		{kind, "invalid-key-failed", health.Degraded, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			createKeySecret(t, s.ns, "short-key", []byte("too-short-key"))
			snap := newSnapshot(s.ns, "before-migration", s.store.Name, func(m *memoryv1alpha1.MemorySnapshot) {
				m.Spec.Encryption.KeySecret.Name = "short-key"
			})
			create(t, snap)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(snap), stalled, memoryv1alpha1.ReasonInvalidKey), s.names}
		}},
		{kind, "deleting", health.Progressing, func(t *testing.T) captured {
			s := newSnapshotScene(t, f)
			snap := s.snapshotted(t, "before-migration", nil)
			return captured{deleting(t, kind, snap), s.names}
		}},
	}
}

// restoreScene is a snapshot scene with a succeeded snapshot "before-migration" and a
// second Ready store, "support-bot-v2", to restore into.
type restoreScene struct {
	snapshotScene
	target *memoryv1alpha1.MemoryStore
}

func newRestoreScene(t *testing.T, f backendFixture) restoreScene {
	t.Helper()
	s := newSnapshotScene(t, f)
	snap := s.snapshotted(t, "before-migration", nil)
	s.names[string(snap.UID)], s.names[string(snap.UID)[:8]] = "1f0e4c9a-0000-4000-8000-00000000000c", "1f0e4c9a"
	tenant := newTenant()
	target := f.inlineStore(s.ns, "support-bot-v2", tenant, 8, false)
	create(t, target)
	s.names[tenant] = "acme-v2"
	return restoreScene{snapshotScene: s, target: waitReady(t, client.ObjectKeyFromObject(target))}
}

// restore creates a restore of before-migration into the target.
func (s restoreScene) restore(t *testing.T, name string, mutate func(*memoryv1alpha1.MemoryRestore)) *memoryv1alpha1.MemoryRestore {
	t.Helper()
	r := newRestore(s.ns, name, "before-migration", s.target.Name, mutate)
	create(t, r)
	return r
}

// importLangGraph creates "import-langgraph", an import into the target of the
// LangGraph database in Secret langgraph-db (the generated data's rules).
func (s restoreScene) importLangGraph(t *testing.T, mutate func(*memoryv1alpha1.ImportSource)) *memoryv1alpha1.MemoryRestore {
	t.Helper()
	imp := memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphPostgres,
		Postgres: &memoryv1alpha1.ImportPostgres{URISecret: corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "langgraph-db"}, Key: "uri"}},
		User:              memoryv1alpha1.ImportUser{ThreadIDPattern: lgThreadIDPattern},
		SkipInactiveAfter: &metav1.Duration{Duration: 168 * time.Hour}}
	if mutate != nil {
		mutate(&imp)
	}
	r := importRestore(s.ns, "import-langgraph", s.target.Name, imp)
	create(t, r)
	return r
}

// playRestore plays the restore Job's pod: the worker with the Job's arguments and
// Secrets, its summary or error as the termination message, and the Job's end.
func playRestore(t *testing.T, job *batchv1.Job) {
	t.Helper()
	cfg, err := worker.ParseRestoreArgs(restoreJobArgs(t, job), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Import != nil {
		cfg.Import.Dir = t.TempDir() // the pod's /tmp
	}
	sec := worker.RestoreSecretsFrom(jobSecretEnv(t, job, worker.EnvPostgresURI, worker.EnvSourceS3AccessKey,
		worker.EnvSourceS3SecretKey, worker.EnvSourceKey, worker.EnvEmbedderAPIKey, worker.EnvImportPostgresURI))
	sum, err := worker.RunRestore(context.Background(), cfg, sec, worker.RunOptions{Version: "test", Now: time.Now()})
	if err != nil {
		failedJob(t, job, err.Error())
		return
	}
	msg, err := sum.TerminationMessage()
	if err != nil {
		t.Fatal(err)
	}
	finishedPod(t, job, 0, string(msg))
	completeJob(t, job)
}

func restoreHealthCases(f backendFixture) []healthCase {
	const kind = "MemoryRestore"
	mapped := func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: []memoryv1alpha1.ScopeRename{{From: "user:1024", To: "user:dbc0a3"}}}
	}
	return []healthCase{
		{kind, "new", health.Progressing, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := s.restore(t, "migrate", mapped)
			return captured{response(t, kind, r), s.names}
		}},
		{kind, "waiting-for-snapshot", health.Progressing, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := newRestore(s.ns, "migrate", "after-migration", s.target.Name, mapped)
			create(t, r)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), working, memoryv1alpha1.ReasonSnapshotNotFound), s.names}
		}},
		{kind, "running", health.Progressing, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := s.restore(t, "migrate", mapped)
			running(t, waitForJob(t, r))
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), working, memoryv1alpha1.ReasonRunning), s.names}
		}},
		{kind, "succeeded", health.Healthy, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := s.restore(t, "migrate", mapped)
			playRestore(t, waitForJob(t, r))
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), done, memoryv1alpha1.ReasonSucceeded), s.names}
		}},
		{kind, "dry-run", health.Healthy, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := s.restore(t, "migrate-dry-run", func(r *memoryv1alpha1.MemoryRestore) { mapped(r); r.Spec.DryRun = true })
			playRestore(t, waitForJob(t, r))
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), done, memoryv1alpha1.ReasonSucceeded), s.names}
		}},
		{kind, "already-restored", health.Healthy, func(t *testing.T) captured {
			// What a GitOps tool's self-heal does: the same restore, created again.
			s := newRestoreScene(t, f)
			first := s.restore(t, "migrate", mapped)
			playRestore(t, waitForJob(t, first))
			awaitSummary(t, kind, client.ObjectKeyFromObject(first), done, memoryv1alpha1.ReasonSucceeded)
			again := s.restore(t, "migrate-again", mapped)
			playRestore(t, waitForJob(t, again))
			s.names[string(first.UID)] = "0f1e2d3c-0000-4000-8000-00000000000b"
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(again), done, memoryv1alpha1.ReasonAlreadyRestored), s.names}
		}},
		{kind, "snapshot-failed", health.Degraded, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			snap := newSnapshot(s.ns, "after-migration", s.store.Name, nil)
			create(t, snap)
			failedJob(t, waitForJob(t, snap), "snapshot: exporting: pgstore: connection reset by peer")
			r := newRestore(s.ns, "migrate", "after-migration", s.target.Name, mapped)
			create(t, r)
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), stalled, memoryv1alpha1.ReasonSnapshotFailed), s.names}
		}},
		{kind, "wrong-key-failed", health.Degraded, func(t *testing.T) captured {
			// A well-formed key, but not the package's: the worker fails to open it.
			s := newRestoreScene(t, f)
			createKeySecret(t, s.ns, "other-key", []byte(strings.Repeat("c4", 32)))
			r := s.restore(t, "migrate", func(r *memoryv1alpha1.MemoryRestore) { mapped(r); r.Spec.Source.KeySecret.Name = "other-key" })
			playRestore(t, waitForJob(t, r))
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), stalled, memoryv1alpha1.ReasonFailed), s.names}
		}},
		{kind, "invalid-key-failed", health.Degraded, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			createKeySecret(t, s.ns, "short-key", []byte("too-short-key"))
			r := s.restore(t, "migrate", func(r *memoryv1alpha1.MemoryRestore) { mapped(r); r.Spec.Source.KeySecret.Name = "short-key" })
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), stalled, memoryv1alpha1.ReasonInvalidKey), s.names}
		}},
		{kind, "merging-mapping-failed", health.Degraded, func(t *testing.T) captured {
			// More renames than admission checks pairwise; two of them meet.
			s := newRestoreScene(t, f)
			r := s.restore(t, "migrate", func(r *memoryv1alpha1.MemoryRestore) {
				var scopes []memoryv1alpha1.ScopeRename
				for i := range 501 {
					scopes = append(scopes, memoryv1alpha1.ScopeRename{From: fmt.Sprintf("user:%d", i), To: fmt.Sprintf("user:new-%d", i)})
				}
				scopes[500].To = "user:new-0"
				r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: scopes}
			})
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), stalled, memoryv1alpha1.ReasonFailed), s.names}
		}},
		{kind, "partially-written-failed", health.Degraded, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := s.restore(t, "migrate", mapped)
			job := waitForJob(t, r)
			summary := worker.RestoreSummary{ManifestSHA256: strings.Repeat("ab", 32), FormatVersion: 2, PackageID: "p", Shards: 4,
				Embeddings: "Reuse", Read: 12000, Restored: 9000, Unchanged: 1000, Scopes: 900,
				Error: "restore: shard shards/000003.jsonl.zst.sealed: pgstore: merge: connection reset by peer"}
			msg, err := summary.TerminationMessage()
			if err != nil {
				t.Fatal(err)
			}
			finishedPod(t, job, 1, string(msg))
			failJob(t, job, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), stalled, memoryv1alpha1.ReasonFailed), s.names}
		}},
		{kind, "import-succeeded", health.Healthy, func(t *testing.T) captured {
			// Real LangGraph checkpoints, imported by the worker.
			exp := importers.Generate(t, importers.Options{})
			s := newRestoreScene(t, f)
			createSecret(t, s.ns, "langgraph-db", map[string]string{"uri": exp.DSN})
			r := s.importLangGraph(t, nil)
			playRestore(t, waitForJob(t, r))
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), done, memoryv1alpha1.ReasonSucceeded), s.names}
		}},
		{kind, "import-not-a-checkpointer-failed", health.Degraded, func(t *testing.T) captured {
			// A database that holds no LangGraph checkpointer: a memory store's own.
			s := newRestoreScene(t, f)
			createSecret(t, s.ns, "langgraph-db", map[string]string{"uri": connectionSecret(t, s.target)["uri"]})
			r := s.importLangGraph(t, nil)
			playRestore(t, waitForJob(t, r))
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), stalled, memoryv1alpha1.ReasonNotACheckpointer), s.names}
		}},
		{kind, "import-thread-pattern-failed", health.Degraded, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := s.importLangGraph(t, func(imp *memoryv1alpha1.ImportSource) { imp.User.ThreadIDPattern = `^u-[^:]+:` })
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), stalled, memoryv1alpha1.ReasonInvalidThreadIDPattern), s.names}
		}},
		{kind, "job-deleted-failed", health.Degraded, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := s.restore(t, "migrate", mapped)
			job := waitForJob(t, r)
			waitRestoreCondition(t, client.ObjectKeyFromObject(r), memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
			if err := k8sClient.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
				t.Fatal(err)
			}
			return captured{awaitSummary(t, kind, client.ObjectKeyFromObject(r), stalled, memoryv1alpha1.ReasonFailed), s.names}
		}},
		{kind, "deleting", health.Progressing, func(t *testing.T) captured {
			s := newRestoreScene(t, f)
			r := s.restore(t, "migrate", mapped)
			playRestore(t, waitForJob(t, r))
			awaitSummary(t, kind, client.ObjectKeyFromObject(r), done, memoryv1alpha1.ReasonSucceeded)
			return captured{deleting(t, kind, r), s.names}
		}},
	}
}
