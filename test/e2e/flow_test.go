//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/minio/minio-go/v7"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1pb "github.com/amemory/memory-operator/api/proto/memory/v1"
	memoryv1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
)

// TestEndToEnd is the user's path, in order: install the chart, declare a shared
// backend and two stores, let an agent remember and search through the gateway's
// Service, snapshot one store (a Job Pod), restore it into the other with an ID
// mapping (a Job Pod), archive on a schedule (a CronJob-like Job Pod), read the
// manager's metrics, and delete the stores under both reclaim policies.
func TestEndToEnd(t *testing.T) {
	s := newSuite(t)
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpDebugBundle()
		}
	})
	// The previous chart version first: the stores it provisions must keep working
	// through the upgrade.
	s.installChart(s.previousChart, s.previousImage, nil)
	s.sharedBackendAndStores()
	s.gatewayThroughService()
	s.upgradeChart()
	s.leaderFailover()
	s.snapshotJobPod()
	s.productionEngines()
	s.restoreWithMapping()
	s.scheduledArchival()
	s.embeddingSwitch()
	s.managerMetrics()
	s.deleteWithBothReclaimPolicies()
	s.uninstallKeepsCRDs()
}

// restricted is the namespace label that makes the API server refuse any Pod that
// does not meet the restricted Pod Security level.
const restricted = `pod-security.kubernetes.io/enforce: restricted`

func (s *suite) namespace(name string) {
	s.apply(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    %s\n", name, restricted))
}

// installChart installs (or upgrades to) the chart in dir with the local image.
func (s *suite) installChart(dir, image string, extra []string) {
	t := s.t
	s.namespace(operatorNS)
	repo, tag, _ := strings.Cut(image, ":")
	start := time.Now()
	args := append([]string{"upgrade", "--install", release, dir, "-n", operatorNS,
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag, "--set", "image.pullPolicy=Never",
		"--wait", "--timeout", "3m"}, extra...)
	s.run("", s.helm, args...)
	t.Logf("helm upgrade --install %s: %s", dir, time.Since(start).Round(time.Millisecond))
	var dep appsv1.Deployment
	if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: operatorNS, Name: release}, &dep); err != nil {
		t.Fatal(err)
	}
	if dep.Status.AvailableReplicas < 1 {
		t.Fatalf("manager Deployment: %d available", dep.Status.AvailableReplicas)
	}
	pods := s.pods(operatorNS, map[string]string{"app.kubernetes.io/name": "memory-operator", "app.kubernetes.io/instance": release})
	if len(pods) == 0 {
		t.Fatal("no manager Pod")
	}
	for _, p := range pods {
		// The chart's ServiceAccount, bound to the generated RBAC: what every request
		// of the rest of this test is authorised as.
		if p.Spec.ServiceAccountName != release {
			t.Fatalf("manager runs as ServiceAccount %q", p.Spec.ServiceAccountName)
		}
		checkRestricted(t, p)
	}
}

// upgradeChart upgrades to this checkout's chart the documented way (CRDs first,
// server-side, then helm upgrade), with two replicas, the NetworkPolicy on and the
// image pinned by digest, and checks that what the previous version provisioned still
// works.
func (s *suite) upgradeChart() {
	t := s.t
	crds := s.root + "/charts/memory-operator/crds/"
	s.run("", s.kubectl, "apply", "--server-side", "--force-conflicts", "-f", crds)
	s.installChart(s.root+"/charts/memory-operator", s.image, []string{"--set", "replicaCount=2", "--set", "networkPolicy.enabled=true", "--set", "image.digest=" + s.imageDigest})
	s.eventually("two manager replicas of the new version", 120*time.Second, func() (bool, string) {
		var dep appsv1.Deployment
		if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: operatorNS, Name: release}, &dep); err != nil {
			return false, err.Error()
		}
		st := dep.Status
		return st.UpdatedReplicas == 2 && st.AvailableReplicas == 2 && st.Replicas == 2 && st.ObservedGeneration == dep.Generation,
			fmt.Sprintf("%+v", st)
	})
	for _, p := range s.pods(operatorNS, map[string]string{"app.kubernetes.io/instance": release}) {
		if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image != s.pinnedImage() {
			t.Errorf("manager pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, s.pinnedImage())
		}
	}
	for _, kind := range []string{"poddisruptionbudget", "networkpolicy"} {
		s.run("", s.kubectl, "get", kind, release, "-n", operatorNS)
	}
	for _, name := range []string{"acme", "acme-v2"} {
		s.condition(&memoryv1.MemoryStore{ObjectMeta: objectMeta(tenantNS, name)}, "Ready", 60*time.Second)
	}
	s.snapshotsBeforeMigration()
	// The gateway the previous version deployed still serves what was written.
	base, key := s.gatewayBase()
	var found searchResponse
	if code := s.api(base, key, http.MethodPost, "/v1/search", map[string]any{"scope": "user:1024", "query": "refund order", "top_k": 2}, &found); code != http.StatusOK || len(found.Results) == 0 {
		t.Fatalf("search after the upgrade: %d %+v", code, found)
	}
	// The gRPC port, which the previous version's gateways did not have.
	s.grpcThroughService(key, s.ids["e2e-2"])
}

// snapshotsBeforeMigration: the stores the previous version made are at its schema
// version; this one snapshots each (a real Job Pod of this version's worker, reading
// the old layout, vectors included) before it migrates them, and then migrates them.
func (s *suite) snapshotsBeforeMigration() {
	t := s.t
	for _, name := range []string{"acme", "acme-v2"} {
		var st *memoryv1.MemoryStore
		s.eventually(name+"'s migration after its snapshot", 180*time.Second, func() (bool, string) {
			st = s.store(name)
			pg := st.Status.Postgres
			return pg != nil && pg.SchemaVersion == pgstore.LatestVersion, fmt.Sprintf("postgres %+v, pre-change snapshot %+v", pg, st.Status.PreChangeSnapshot)
		})
		p := st.Status.PreChangeSnapshot
		if p == nil || p.Change != "Upgrade" || !p.Succeeded {
			t.Fatalf("%s: pre-change snapshot %+v, want the upgrade's, succeeded", name, p)
		}
		snap := &memoryv1.MemorySnapshot{}
		if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: tenantNS, Name: p.Snapshot}, snap); err != nil {
			t.Fatal(err)
		}
		live := s.scalar(`SELECT count(*) FROM ` + pgx.Identifier{st.Status.Postgres.Schema, "memories"}.Sanitize() + ` WHERE archived_at IS NULL`)
		if snap.Labels[memoryv1.LabelPreChange] != "Upgrade" || snap.Status.Phase != "Succeeded" || snap.Status.Items != live {
			t.Fatalf("%s: snapshot %s before the upgrade: labels %v, status %+v; the store holds %v memories", name, snap.Name, snap.Labels, snap.Status, live)
		}
		s.checkJobPod(snap.Status.JobName, false)
		s.event(tenantNS, "MemoryStore", name, "PreChangeSnapshotSucceeded")
	}
}

// leaderFailover deletes the leading manager: the standby takes the lease and the
// rest of the test runs against it.
func (s *suite) leaderFailover() {
	t := s.t
	// The old version's leader released or lost the lease when it stopped; one of the
	// new replicas holds it once it has started.
	var holder, pod string
	s.eventually("a leader among the new replicas", 90*time.Second, func() (bool, string) {
		holder = s.leaseHolder()
		pod, _, _ = strings.Cut(holder, "_")
		for _, p := range s.pods(operatorNS, map[string]string{"app.kubernetes.io/instance": release}) {
			if p.Name == pod && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				return true, ""
			}
		}
		return false, "lease held by " + holder
	})
	s.run("", s.kubectl, "delete", "pod", pod, "-n", operatorNS, "--wait=false")
	start := time.Now()
	s.eventually("a new leader", 90*time.Second, func() (bool, string) {
		h := s.leaseHolder()
		return h != "" && h != holder, h
	})
	t.Logf("leader %s took over %s after %s", s.leaseHolder(), holder, time.Since(start).Round(time.Second))
}

// pinnedImage is the image reference by digest the upgraded release runs, its Jobs too.
func (s *suite) pinnedImage() string {
	repo, _, _ := strings.Cut(s.image, ":")
	return repo + "@" + s.imageDigest
}

func (s *suite) leaseHolder() string {
	var leases coordinationv1.LeaseList
	if err := s.kube.List(s.ctx, &leases, crclient.InNamespace(operatorNS)); err != nil {
		s.t.Fatal(err)
	}
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil && strings.Contains(l.Name, "memory") {
			return *l.Spec.HolderIdentity
		}
	}
	return ""
}

// uninstallKeepsCRDs: helm uninstall removes the operator, never the CRDs (nor the
// users' objects with them).
func (s *suite) uninstallKeepsCRDs() {
	t := s.t
	s.run("", s.helm, "uninstall", release, "-n", operatorNS, "--wait", "--timeout", "2m")
	for _, crd := range []string{"memorystores", "memorysnapshots", "memoryrestores", "clustermemorybackends"} {
		s.run("", s.kubectl, "get", "crd", crd+".memory.amemory.io")
	}
	var snaps memoryv1.MemorySnapshotList
	if err := s.kube.List(s.ctx, &snaps, crclient.InNamespace(tenantNS)); err != nil || len(snaps.Items) == 0 {
		t.Fatalf("snapshots after uninstall: %d (%v)", len(snaps.Items), err)
	}
}

// checkRestricted asserts what the restricted level demands of a Pod (the namespace
// enforces it too; this says which Pod broke it if the chart or operator regress).
func checkRestricted(t *testing.T, p corev1.Pod) {
	t.Helper()
	psc := p.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod %s: security context %+v", p.Name, psc)
	}
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("pod %s container %s: security context %+v", p.Name, c.Name, sc)
		}
	}
}

func (s *suite) pods(ns string, labels map[string]string) []corev1.Pod {
	s.t.Helper()
	var list corev1.PodList
	if err := s.kube.List(s.ctx, &list, crclient.InNamespace(ns), crclient.MatchingLabels(labels)); err != nil {
		s.t.Fatal(err)
	}
	return list.Items
}

func (s *suite) sharedBackendAndStores() {
	t := s.t
	// The platform team's shared backend: its admin Secrets live in the operator's
	// namespace, and only the tenant's namespace may use it.
	s.apply(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: e2e-pg-admin, namespace: %[1]s}
stringData: {username: %[2]s, password: %[3]s}
---
apiVersion: v1
kind: Secret
metadata: {name: e2e-object-storage, namespace: %[1]s}
stringData: {accessKeyID: %[4]s, secretAccessKey: %[5]s}
---
apiVersion: memory.amemory.io/v1alpha1
kind: ClusterMemoryBackend
metadata: {name: e2e-shared}
spec:
  postgres: {host: %[6]s, port: %[7]s, sslMode: disable, adminSecret: {name: e2e-pg-admin}}
  milvus: {address: %[8]s}
  objectStorage: {endpoint: %[9]s, bucket: e2e-memory, insecure: true, createBucket: true, credentialsSecret: {name: e2e-object-storage}}
  allowedNamespaces: [%[10]s]
`, operatorNS, s.pgUser, s.pgPassword, s.s3Access, s.s3Secret, s.pgHost, s.pgPort, s.milvusAddr, s.s3Endpoint, tenantNS))
	s.condition(&memoryv1.ClusterMemoryBackend{ObjectMeta: objectMeta("", "e2e-shared")}, "Ready", 60*time.Second)

	// acme: on the shared backend (Milvus vectors), with a gateway; deleting it
	// deletes its data. acme-v2: its own credentials in the tenant's namespace, vectors
	// in PostgreSQL; deleting it keeps the data.
	s.namespace(tenantNS)
	s.apply(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: pg-admin, namespace: %[1]s}
stringData: {username: %[2]s, password: %[3]s}
---
apiVersion: v1
kind: Secret
metadata: {name: s3-credentials, namespace: %[1]s}
stringData: {accessKeyID: %[4]s, secretAccessKey: %[5]s}
---
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryStore
metadata: {name: acme, namespace: %[1]s}
spec:
  tenant: acme
  backend: {clusterBackend: e2e-shared}
  vector: {dimension: 384, metric: COSINE}
  embedder: {type: Hashing}
  reclaimPolicy: Delete
  gateway:
    enabled: true
    keys: [{name: agent}]
  # Written once a year: here for the snapshot an operator upgrade takes first.
  snapshotSchedule:
    schedule: "0 3 1 1 *"
    template:
      destination: {credentialsSecret: {name: s3-credentials}}
      encryption: {keySecret: {name: snapshot-key, key: key}}
      includeEmbeddings: true
---
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryStore
metadata: {name: acme-v2, namespace: %[1]s}
spec:
  tenant: acme-v2
  backend:
    postgres: {host: %[6]s, port: %[7]s, sslMode: disable, adminSecret: {name: pg-admin}}
    objectStorage: {endpoint: %[8]s, bucket: e2e-memory, insecure: true, credentialsSecret: {name: s3-credentials}}
  vector: {dimension: 384}
  reclaimPolicy: Retain
  snapshotSchedule:
    schedule: "0 3 1 1 *"
    template:
      destination: {credentialsSecret: {name: s3-credentials}}
      encryption: {keySecret: {name: snapshot-key, key: key}}
      includeEmbeddings: true
---
apiVersion: v1
kind: Secret
metadata: {name: snapshot-key, namespace: %[1]s}
stringData: {key: %[9]s}
`, tenantNS, s.pgUser, s.pgPassword, s.s3Access, s.s3Secret, s.pgHost, s.pgPort, s.s3Endpoint, s.snapshotKey))
	for _, name := range []string{"acme", "acme-v2"} {
		st := &memoryv1.MemoryStore{ObjectMeta: objectMeta(tenantNS, name)}
		s.condition(st, "Ready", 90*time.Second)
		pg := st.Status.Postgres
		if pg == nil || pg.Schema == "" || pg.Role == "" {
			t.Fatalf("store %s: postgres status %+v", name, pg)
		}
		if n := s.scalar(`SELECT count(*) FROM pg_namespace WHERE nspname = $1`, pg.Schema); n != int64(1) {
			t.Fatalf("store %s: schema %s not in PostgreSQL", name, pg.Schema)
		}
		if n := s.scalar(`SELECT count(*) FROM pg_roles WHERE rolname = $1 AND NOT rolsuper AND NOT rolcreaterole`, pg.Role); n != int64(1) {
			t.Fatalf("store %s: no least-privilege role %s", name, pg.Role)
		}
		s.event(tenantNS, "MemoryStore", name, "Ready")
	}
	acme := s.store("acme")
	if acme.Status.Vector == nil || acme.Status.Vector.Engine != "Milvus" || acme.Status.Vector.Collection == "" {
		t.Fatalf("acme: vector status %+v", acme.Status.Vector)
	}
	mc, err := client.NewClient(s.ctx, client.Config{Address: s.milvusAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if ok, err := mc.HasCollection(s.ctx, acme.Status.Vector.Collection); err != nil || !ok {
		t.Fatalf("acme: Milvus collection %s: %v %v", acme.Status.Vector.Collection, ok, err)
	}
	if v2 := s.store("acme-v2"); v2.Status.Vector == nil || v2.Status.Vector.Engine != "Postgres" {
		t.Fatalf("acme-v2: vector status %+v", v2.Status.Vector)
	}
}

func objectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

func (s *suite) store(name string) *memoryv1.MemoryStore {
	s.t.Helper()
	st := &memoryv1.MemoryStore{}
	if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: tenantNS, Name: name}, st); err != nil {
		s.t.Fatal(err)
	}
	return st
}

// gatewayBase is the acme gateway's Service address, and the agent's key from the
// connection Secret.
func (s *suite) gatewayBase() (base, key string) { return s.gatewayOf("acme") }

// gatewayOf is a store's gateway Service address and the key its connection Secret
// hands agents.
func (s *suite) gatewayOf(store string) (base, key string) {
	var svc corev1.Service
	if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: tenantNS, Name: store + "-gateway"}, &svc); err != nil {
		s.t.Fatal(err)
	}
	return fmt.Sprintf("http://%s:8080", svc.Spec.ClusterIP), s.secretValue(tenantNS, store+"-memory", "gatewayKey")
}

type searchResponse struct {
	Results []struct {
		Memory struct {
			MemoryID string `json:"memory_id"`
			Scope    string `json:"scope"`
		} `json:"memory"`
		Similarity float64 `json:"similarity"`
	} `json:"results"`
}

func (r searchResponse) ids() []string {
	var ids []string
	for _, x := range r.Results {
		ids = append(ids, x.Memory.MemoryID)
	}
	return ids
}

func (s *suite) gatewayThroughService() {
	t := s.t
	s.condition(&memoryv1.MemoryStore{ObjectMeta: objectMeta(tenantNS, "acme")}, "GatewayReady", 90*time.Second)
	for _, p := range s.pods(tenantNS, map[string]string{"memory.amemory.io/store": "acme", "app.kubernetes.io/component": "gateway"}) {
		checkRestricted(t, p)
		if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("gateway pod %s mounts a ServiceAccount token", p.Name)
		}
	}
	base, key := s.gatewayBase()
	// GatewayReady follows the Deployment; the Service answers once kube-proxy has
	// programmed the ready endpoint (an agent retries the same way).
	s.eventually("the gateway Service", 30*time.Second, func() (bool, string) {
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
			Outcome  string `json:"outcome"`
			Indexed  bool   `json:"indexed"`
		} `json:"results"`
	}
	code := s.api(base, key, http.MethodPost, "/v1/memories/batch", map[string]any{"memories": []map[string]any{
		{"memory_id": "e2e-1", "memory_type": "semantic", "scope": "user:1024", "key": "preference.coffee", "content": map[string]any{"likes": "flat white"}, "base_score": 0.9},
		{"memory_id": "e2e-2", "memory_type": "episodic", "scope": "user:1024", "content": map[string]any{"event": "asked for a refund of order 1042"}, "base_score": 0.6},
		{"memory_id": "e2e-3", "memory_type": "semantic", "scope": "user:2048", "key": "address.city", "content": map[string]any{"city": "Lisbon"}, "base_score": 0.8},
		{"memory_id": "e2e-4", "memory_type": "procedural", "scope": "agent:support", "key": "refund", "content": map[string]any{"steps": []string{"verify", "refund"}}, "base_score": 0.7},
	}}, &written)
	if code != http.StatusOK || len(written.Results) != 4 {
		t.Fatalf("batch write through the Service: %d %+v", code, written)
	}
	s.ids = map[string]string{}
	for i, r := range written.Results {
		// The previous version keeps a client's ID as given; later ones make it
		// unique to its scope (<scope digest>.<ID>).
		want := fmt.Sprintf("e2e-%d", i+1)
		if r.Outcome != "inserted" || !r.Indexed || (r.MemoryID != want && !strings.HasSuffix(r.MemoryID, "."+want)) {
			t.Fatalf("write %s: %+v", r.MemoryID, r)
		}
		s.ids[fmt.Sprintf("e2e-%d", i+1)] = r.MemoryID
	}
	var found searchResponse
	if code := s.api(base, key, http.MethodPost, "/v1/search", map[string]any{"scope": "user:1024", "query": "refund order", "top_k": 2}, &found); code != http.StatusOK {
		t.Fatalf("search: %d", code)
	}
	if ids := found.ids(); len(ids) == 0 || ids[0] != s.ids["e2e-2"] || found.Results[0].Similarity <= 0 {
		t.Fatalf("search user:1024 for a refund: %+v", found)
	}
	// The rows behind it, in the store's own schema.
	schema := s.store("acme").Status.Postgres.Schema
	if n := s.scalar(`SELECT count(*) FROM ` + pgx.Identifier{schema, "memories"}.Sanitize()); n != int64(4) {
		t.Fatalf("acme holds %v memories, want 4", n)
	}
	s.event(tenantNS, "MemoryStore", "acme", "GatewayReady")
}

func (s *suite) snapshotJobPod() {
	t := s.t
	s.apply(fmt.Sprintf(`apiVersion: memory.amemory.io/v1alpha1
kind: MemorySnapshot
metadata: {name: before-migration, namespace: %[1]s}
spec:
  storeRef: {name: acme}
  # acme's backend is shared: the tenant writes with credentials of its own.
  destination: {credentialsSecret: {name: s3-credentials}}
  encryption: {keySecret: {name: snapshot-key, key: key}}
`, tenantNS))
	snap := &memoryv1.MemorySnapshot{ObjectMeta: objectMeta(tenantNS, "before-migration")}
	s.condition(snap, "Ready", 120*time.Second)
	st := snap.Status
	if st.Phase != "Succeeded" || st.Items != 4 || st.Scopes != 3 || st.Location == nil || st.ManifestSHA256 == "" {
		t.Fatalf("snapshot status %+v", st)
	}
	// The package in object storage.
	if _, err := s.s3.StatObject(s.ctx, st.Location.Bucket, st.Location.Prefix+"manifest.json", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("manifest s3://%s/%smanifest.json: %v", st.Location.Bucket, st.Location.Prefix, err)
	}
	s.checkJobPod(st.JobName, false)
	s.event(tenantNS, "MemorySnapshot", "before-migration", "Succeeded")
}

// checkJobPod asserts that a worker Job ran as a real Pod: succeeded, restricted,
// without a ServiceAccount token, and (summary: restore and archive workers; a
// snapshot's counts come from its manifest) with its JSON summary as the termination
// message the controller read.
func (s *suite) checkJobPod(job string, summary bool) {
	t := s.t
	pods := s.pods(tenantNS, map[string]string{"job-name": job})
	if len(pods) == 0 {
		t.Fatalf("job %s: no Pod", job)
	}
	var succeeded *corev1.Pod
	for i := range pods {
		if pods[i].Status.Phase == corev1.PodSucceeded {
			succeeded = &pods[i]
		}
	}
	if succeeded == nil {
		t.Fatalf("job %s: no Pod succeeded (%d Pods)", job, len(pods))
	}
	checkRestricted(t, *succeeded)
	if img := succeeded.Spec.Containers[0].Image; img != s.pinnedImage() {
		t.Errorf("job pod %s runs %s, want the release's %s", succeeded.Name, img, s.pinnedImage())
	}
	if a := succeeded.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("job pod %s mounts a ServiceAccount token", succeeded.Name)
	}
	cs := succeeded.Status.ContainerStatuses
	if !summary {
		return
	}
	if len(cs) == 0 || cs[0].State.Terminated == nil || !strings.HasPrefix(strings.TrimSpace(cs[0].State.Terminated.Message), "{") {
		t.Fatalf("job pod %s: no JSON termination message: %+v", succeeded.Name, cs)
	}
}

func (s *suite) restoreWithMapping() {
	t := s.t
	s.apply(fmt.Sprintf(`apiVersion: memory.amemory.io/v1alpha1
kind: MemoryRestore
metadata: {name: migrate, namespace: %s}
spec:
  source:
    snapshotRef: {name: before-migration}
    keySecret: {name: snapshot-key, key: key}
  targetRef: {name: acme-v2}
  mapping:
    scopes:
    - {from: "user:1024", to: "user:dbc0a3"}
`, tenantNS))
	r := &memoryv1.MemoryRestore{ObjectMeta: objectMeta(tenantNS, "migrate")}
	s.condition(r, "Ready", 120*time.Second)
	if r.Status.Phase != "Succeeded" || r.Status.Restored != 4 || r.Status.MappedScopes != 1 || r.Status.Vectors != 4 {
		t.Fatalf("restore status %+v", r.Status)
	}
	s.checkJobPod(r.Status.JobName, true)
	schema := s.store("acme-v2").Status.Postgres.Schema
	rows, err := s.pg.Query(s.ctx, `SELECT memory_id, scope FROM `+pgx.Identifier{schema, "memories"}.Sanitize()+` ORDER BY memory_id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id, scope string
		err := r.Scan(&id, &scope)
		return id + "@" + scope, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{s.ids["e2e-1"] + "@user:dbc0a3", s.ids["e2e-2"] + "@user:dbc0a3", s.ids["e2e-3"] + "@user:2048", s.ids["e2e-4"] + "@agent:support"}
	slices.Sort(want) // by memory_id, as the query orders them
	if !slices.Equal(got, want) {
		t.Fatalf("acme-v2 holds %v, want %v", got, want)
	}
	// Its vectors, in its PostgreSQL index, under the new scope.
	if n := s.scalar(`SELECT count(*) FROM ` + pgx.Identifier{schema, "vectors"}.Sanitize() + ` WHERE scope = 'user:dbc0a3'`); n != int64(2) {
		t.Fatalf("acme-v2 has %v vectors in user:dbc0a3, want 2", n)
	}
}

func (s *suite) scheduledArchival() {
	t := s.t
	acme := s.store("acme")
	table := pgx.Identifier{acme.Status.Postgres.Schema, "memories"}.Sanitize()
	// An old, unimportant memory: episodic memories halve every 30 days, so 0.3 after
	// 400 days scores about 0.00003.
	if _, err := s.pg.Exec(s.ctx, `INSERT INTO `+table+` (memory_id, memory_type, scope, content, content_hash, source, base_score, created_at, updated_at)
		VALUES ('e2e-old', 'episodic', 'user:1024', '{"event": "asked about opening hours"}', '\x05', 'e2e', 0.3, now() - interval '400 days', now() - interval '400 days')`); err != nil {
		t.Fatal(err)
	}
	s.run(`{"spec":{"archival":{"schedule":"* * * * *","threshold":"0.05"}}}`, s.kubectl, "patch", "memorystore", "acme", "-n", tenantNS, "--type", "merge", "--patch-file", "/dev/stdin")
	s.eventually("an archival run", 150*time.Second, func() (bool, string) {
		st := s.store("acme")
		if st.Status.Archival == nil || st.Status.Archival.LastRun == nil || st.Status.Archival.LastRun.CompletionTime == nil {
			return false, "no completed run yet"
		}
		return true, ""
	})
	run := s.store("acme").Status.Archival.LastRun
	if run.Result != "Succeeded" || run.Archived != 1 || run.Scanned != 5 {
		t.Fatalf("archival run %+v", run)
	}
	s.checkJobPod(run.JobName, true)
	if n := s.scalar(`SELECT count(*) FROM ` + table + ` WHERE memory_id = 'e2e-old' AND archived_at IS NOT NULL`); n != int64(1) {
		t.Fatal("e2e-old was not archived")
	}
	s.run(`{"spec":{"archival":{"suspend":true}}}`, s.kubectl, "patch", "memorystore", "acme", "-n", tenantNS, "--type", "merge", "--patch-file", "/dev/stdin")
	// It left recall: a search for it does not find it.
	base, key := s.gatewayBase()
	var found searchResponse
	s.api(base, key, http.MethodPost, "/v1/search", map[string]any{"scope": "user:1024", "query": "opening hours", "top_k": 5}, &found)
	if slices.Contains(found.ids(), "e2e-old") {
		t.Fatalf("an archived memory is still recalled: %v", found.ids())
	}
}

// embeddingSwitch changes acme-v2's embedding model in place (the hashing embedder,
// 384 to 256 dimensions; a store on the Postgres engine, given a gateway first): a
// real re-embed Job fills a new index generation while the gateway serves, the
// gateway's Deployment rolls over to it, and the store's memories are found through
// it as before.
func (s *suite) embeddingSwitch() {
	t := s.t
	patch := func(p string) {
		s.run(p, s.kubectl, "patch", "memorystore", "acme-v2", "-n", tenantNS, "--type", "merge", "--patch-file", "/dev/stdin")
	}
	patch(`{"spec":{"gateway":{"enabled":true,"keys":[{"name":"agent"}]}}}`)
	s.condition(&memoryv1.MemoryStore{ObjectMeta: objectMeta(tenantNS, "acme-v2")}, "GatewayReady", 90*time.Second)
	patch(`{"spec":{"vector":{"dimension":256},"embeddingSwitch":{"retainPrevious":"1h"}}}`)
	s.eventually("the embedding switch", 180*time.Second, func() (bool, string) {
		st := s.store("acme-v2")
		c := meta.FindStatusCondition(st.Status.Conditions, memoryv1.ConditionSwitching)
		if c == nil {
			return false, "no Switching condition"
		}
		return c.Reason == memoryv1.ReasonSwitchCompleted, c.Reason + ": " + c.Message
	})
	st := s.store("acme-v2")
	e := st.Status.Embedding
	if e == nil || e.Serving.Generation != 2 || e.Serving.Dimension != 256 || e.Serving.Index != "vectors_g2" || e.Previous == nil || e.Previous.Generation != 1 ||
		st.Status.Vector.Dimension != 256 || !st.IsReady() {
		t.Fatalf("after the switch: embedding %+v, vector %+v", e, st.Status.Vector)
	}
	s.event(tenantNS, "MemoryStore", "acme-v2", "EmbeddingSwitchCompleted")
	// The new generation holds a vector for every memory that must be searchable.
	schema := st.Status.Postgres.Schema
	live := s.scalar(`SELECT count(*) FROM ` + pgx.Identifier{schema, "memories"}.Sanitize() + ` WHERE archived_at IS NULL`)
	if n := s.scalar(`SELECT count(*) FROM ` + pgx.Identifier{schema, "vectors_g2"}.Sanitize()); n != live || n == int64(0) {
		t.Fatalf("vectors_g2 holds %v vectors for %v memories", n, live)
	}
	// The gateway serves the new index: the refund is found as before.
	base, key := s.gatewayOf("acme-v2")
	s.eventually("a search through the switched gateway", 60*time.Second, func() (bool, string) {
		var found searchResponse
		code := s.api(base, key, http.MethodPost, "/v1/search", map[string]any{"scope": "user:dbc0a3", "query": "refund order", "top_k": 2}, &found)
		ids := found.ids()
		return code == http.StatusOK && len(ids) > 0 && ids[0] == s.ids["e2e-2"] && found.Results[0].Similarity > 0, fmt.Sprintf("%d %+v", code, found)
	})
}

// managerMetrics scrapes the leader's metrics endpoint (only the leader reconciles;
// the metrics Service spreads scrapes over every replica, which Prometheus does per
// Pod anyway) and checks that the Service answers too.
func (s *suite) managerMetrics() {
	t := s.t
	leader, _, _ := strings.Cut(s.leaseHolder(), "_")
	var pod corev1.Pod
	if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: operatorNS, Name: leader}, &pod); err != nil {
		t.Fatalf("leader pod %q: %v", leader, err)
	}
	text := s.scrape(fmt.Sprintf("http://%s:8080/metrics", pod.Status.PodIP))
	for _, want := range []string{
		`memory_operator_archival_runs_total{`,
		`controller_runtime_reconcile_total{controller="memorystore",result="success"}`,
		`controller_runtime_reconcile_total{controller="memorysnapshot",result="success"}`,
		`controller_runtime_reconcile_total{controller="memoryrestore",result="success"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the leader's metrics lack %s", want)
		}
	}
	var svc corev1.Service
	if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: operatorNS, Name: release + "-metrics"}, &svc); err != nil {
		t.Fatal(err)
	}
	if text := s.scrape(fmt.Sprintf("http://%s:8080/metrics", svc.Spec.ClusterIP)); !strings.Contains(text, "controller_runtime_") {
		t.Error("the metrics Service serves no controller metrics")
	}
}

func (s *suite) scrape(url string) string {
	s.t.Helper()
	resp, err := s.http.Get(url)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("%s: %s", url, resp.Status)
	}
	return string(body)
}

func (s *suite) deleteWithBothReclaimPolicies() {
	t := s.t
	acme, v2 := s.store("acme"), s.store("acme-v2")
	// acme (reclaimPolicy Delete) is snapshotted before its data goes: a real Job on
	// the cluster, written as the store now says (the previous chart's store had no
	// such setting).
	s.run("", s.kubectl, "patch", "memorystore", "acme", "-n", tenantNS, "--type=merge", "-p",
		`{"spec":{"preChangeSnapshot":{"template":{"destination":{"credentialsSecret":{"name":"s3-credentials"}},"encryption":{"keySecret":{"name":"snapshot-key","key":"key"}}}}}}`)
	took := map[string]time.Duration{}
	for _, name := range []string{"acme", "acme-v2"} {
		start := time.Now()
		s.run("", s.kubectl, "delete", "memorystore", name, "-n", tenantNS, "--timeout=180s")
		took[name] = time.Since(start)
	}
	preDelete := &memoryv1.MemorySnapshot{}
	var snaps memoryv1.MemorySnapshotList
	if err := s.kube.List(s.ctx, &snaps, crclient.InNamespace(tenantNS), crclient.MatchingLabels{memoryv1.LabelPreChange: "Delete"}); err != nil {
		t.Fatal(err)
	}
	for i := range snaps.Items {
		if snaps.Items[i].Spec.StoreRef.Name == "acme" {
			preDelete = &snaps.Items[i]
		}
	}
	if preDelete.Name == "" || preDelete.Status.Phase != "Succeeded" || preDelete.Status.Items == 0 || preDelete.Status.CompletionTime == nil {
		t.Fatalf("no succeeded snapshot of acme before its deletion: %+v", preDelete.Status)
	}
	// What the snapshot adds to a deletion, against the snapshot's own time (a
	// measurement, not a check: the README's e2e section quotes it).
	own := preDelete.Status.CompletionTime.Sub(preDelete.CreationTimestamp.Time)
	t.Logf("deleting acme took %s, its pre-delete snapshot %s of it (created to completed: Job, Pod, export); deleting acme-v2 (no snapshot) took %s",
		took["acme"].Round(time.Millisecond), own.Round(time.Second), took["acme-v2"].Round(time.Millisecond))
	for _, name := range []string{"acme", "acme-v2"} {
		err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: tenantNS, Name: name}, &memoryv1.MemoryStore{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("store %s still there: %v", name, err)
		}
	}
	// Delete: schema, role, collection and prefix gone.
	if n := s.scalar(`SELECT count(*) FROM pg_namespace WHERE nspname = $1`, acme.Status.Postgres.Schema); n != int64(0) {
		t.Errorf("acme's schema is still there")
	}
	if n := s.scalar(`SELECT count(*) FROM pg_roles WHERE rolname = $1`, acme.Status.Postgres.Role); n != int64(0) {
		t.Errorf("acme's role is still there")
	}
	mc, err := client.NewClient(s.ctx, client.Config{Address: s.milvusAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if ok, err := mc.HasCollection(s.ctx, acme.Status.Vector.Collection); err != nil || ok {
		t.Errorf("acme's collection: exists %v (%v)", ok, err)
	}
	// Under its prefix only the snapshot packages stay: snapshots outlive their store
	// (docs/memorystore.md), which is what a migration restores from.
	if obs := acme.Status.ObjectStorage; obs != nil {
		kept := 0
		for obj := range s.s3.ListObjects(s.ctx, obs.Bucket, minio.ListObjectsOptions{Prefix: obs.Prefix, Recursive: true}) {
			if !strings.HasPrefix(obj.Key, obs.Prefix+"snapshots/") {
				t.Errorf("acme's prefix still holds %s", obj.Key)
			}
			kept++
		}
		if kept == 0 {
			t.Error("acme's snapshot package went with the store")
		}
	} else {
		t.Error("acme has no object storage status")
	}
	// Retain: the data stays for an operator to take over or drop by hand.
	schema := pgx.Identifier{v2.Status.Postgres.Schema, "memories"}.Sanitize()
	if n := s.scalar(`SELECT count(*) FROM ` + schema); n != int64(4) {
		t.Errorf("acme-v2 (Retain) holds %v memories after deletion, want 4", n)
	}
}

// grpcThroughService makes the same search through the gateway's gRPC API, at the
// address the connection Secret gives agents (resolved to the Service's cluster IP,
// as the test runs outside the cluster's DNS), and checks the standard health service.
func (s *suite) grpcThroughService(key, wantID string) {
	t := s.t
	addr := s.secretValue(tenantNS, "acme-memory", "gatewayGRPCAddress")
	if addr != "acme-gateway."+tenantNS+".svc:8081" {
		t.Fatalf("gatewayGRPCAddress = %q", addr)
	}
	// status.gateway.grpcAddress is new in this version's CRD, applied by the upgrade.
	s.eventually("status.gateway.grpcAddress", 60*time.Second, func() (bool, string) {
		g := s.store("acme").Status.Gateway
		return g != nil && g.GRPCAddress == addr, fmt.Sprintf("%+v", g)
	})
	var svc corev1.Service
	if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: tenantNS, Name: "acme-gateway"}, &svc); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(svc.Spec.ClusterIP+":8081", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx := metadata.AppendToOutgoingContext(s.ctx, "x-api-key", key)
	var res *memoryv1pb.SearchResponse
	s.eventually("a search through the gRPC port", 30*time.Second, func() (bool, string) {
		res, err = memoryv1pb.NewMemoryServiceClient(conn).Search(ctx, &memoryv1pb.SearchRequest{Scope: "user:1024", Query: "refund order", TopK: 2})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if len(res.GetResults()) == 0 || res.GetResults()[0].GetMemory().GetMemoryId() != wantID {
		t.Fatalf("gRPC search user:1024 for a refund: %v", res)
	}
	hc, err := healthpb.NewHealthClient(conn).Check(s.ctx, &healthpb.HealthCheckRequest{Service: "memory.v1.MemoryService"})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health: %v, %v", hc, err)
	}
}
