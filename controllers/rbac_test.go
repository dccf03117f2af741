package controllers

import (
	"context"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// TestChartRBACMatchesMarkers: the chart's ClusterRole grants exactly what the
// +kubebuilder:rbac markers generate into config/rbac/role.yaml. Drift between the two
// is a classic operator bug (a permission that works in envtest, which runs as admin,
// and fails once installed); `make manifests` keeps them equal.
func TestChartRBACMatchesMarkers(t *testing.T) {
	rules := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i := strings.Index(s, "\nrules:\n")
		if i < 0 {
			t.Fatalf("%s has no rules", path)
		}
		return strings.TrimSuffix(strings.TrimSpace(s[i:]), "{{- end }}")
	}
	generated, chart := rules("../config/rbac/role.yaml"), rules("../charts/memory-operator/templates/clusterrole.yaml")
	if strings.TrimSpace(generated) != strings.TrimSpace(chart) {
		t.Fatalf("the chart's ClusterRole differs from config/rbac/role.yaml: run `make manifests`\n--- generated\n%s\n--- chart\n%s", generated, chart)
	}
}

// TestOperatorPermissionsRefuse: the identity the manager runs as (the generated
// ClusterRole, as the chart binds it) is refused what an operator of memory stores must
// never do. Reading Secrets cannot be limited to namespaces with a MemoryStore: RBAC
// has no such condition, and a store may name its credentials in any namespace at any
// time; the operator instead never caches Secrets and reads only those a resource
// names (docs/memorystore.md).
func TestOperatorPermissionsRefuse(t *testing.T) {
	ctx := context.Background()
	op, err := client.New(operatorConfig, client.Options{Scheme: k8sClient.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	forbidden := map[string]func() error{
		"create a ClusterRole": func() error {
			return op.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "escalate"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}}})
		},
		"bind a role": func() error {
			return op.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "escalate"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: operatorServiceAccount, Namespace: operatorNamespace}}})
		},
		"create a Pod": func() error {
			return op.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}})
		},
		"delete a Namespace": func() error { return op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) },
		"read Nodes":         func() error { return op.List(ctx, &corev1.NodeList{}) },
		"edit a CRD": func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := k8sClient.Get(ctx, client.ObjectKey{Name: "memorystores.memory.amemory.io"}, crd); err != nil {
				return err
			}
			return op.Update(ctx, crd)
		},
		"write a ConfigMap": func() error {
			return op.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}})
		},
		"list ServiceAccounts": func() error {
			return op.List(ctx, &corev1.ServiceAccountList{}, client.InNamespace(ns))
		},
	}
	for what, call := range forbidden {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("the operator may %s: %v", what, err)
		}
	}
	// What it needs works under the same identity.
	if err := op.List(ctx, &memoryv1alpha1.MemoryStoreList{}, client.InNamespace(ns)); err != nil {
		t.Errorf("the operator may not list MemoryStores: %v", err)
	}
}

// TestRestrictedNamespacesRefuseLaxPods: the API server enforces the test namespaces'
// restricted level (so the Pods the tests make from the operator's templates prove
// something), and the gateway's Pod template is admitted there too.
func TestRestrictedNamespacesRefuseLaxPods(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	lax := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lax"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := k8sClient.Create(ctx, lax); !apierrors.IsForbidden(err) {
		t.Fatalf("a Pod without a restricted security context was admitted: %v", err)
	}

	f := services(t)
	f.adminSecrets(t, ns)
	store := f.inlineStore(ns, "gw", newTenant(), 8, false)
	store.Spec.Gateway = &memoryv1alpha1.GatewaySpec{Enabled: true}
	create(t, store)
	waitReady(t, client.ObjectKeyFromObject(store))
	dep := &appsv1.Deployment{}
	NewWithT(t).Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gw-gateway"}, dep)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed(), "the gateway Deployment")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gateway-pod", Labels: dep.Spec.Template.Labels},
		Spec: *dep.Spec.Template.Spec.DeepCopy()}
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatalf("the gateway's Pod template is not admitted at the restricted level: %v", err)
	}
}

// TestTenancyNeverCrossesNamespaces: objects in one namespace that name Secrets,
// stores or snapshots existing only in another never reach them: each waits with a
// condition naming what is missing in its own namespace. (A ClusterMemoryBackend is
// the only way across, and only for the namespaces it allows: see
// TestMemoryStoreWithClusterBackend.)
func TestTenancyNeverCrossesNamespaces(t *testing.T) {
	f := services(t)
	nsA, nsB := newNamespace(t), newNamespace(t)
	f.adminSecrets(t, nsA)
	createKeySecret(t, nsA, snapshotKeySecret, randomBytes(t, 32))
	storeA := f.inlineStore(nsA, "shared-name", newTenant(), 8, false)
	create(t, storeA)
	waitReady(t, client.ObjectKeyFromObject(storeA))
	create(t, newSnapshot(nsA, "snap-a", "shared-name", nil))

	// A store in B naming A's admin Secrets.
	thief := f.inlineStore(nsB, "thief", newTenant(), 8, false)
	create(t, thief)
	got := waitForCondition(t, client.ObjectKeyFromObject(thief), memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretNotFound)
	if c := meta.FindStatusCondition(got.Status.Conditions, memoryv1alpha1.ConditionReady); !strings.Contains(c.Message, nsB) || strings.Contains(c.Message, nsA) {
		t.Errorf("store in %s: %s", nsB, c.Message)
	}
	// A snapshot in B naming A's store.
	snap := newSnapshot(nsB, "steal", "shared-name", nil)
	create(t, snap)
	waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionProgressing, metav1.ConditionFalse, memoryv1alpha1.ReasonStoreNotFound)
	// A restore in B from A's snapshot.
	r := newRestore(nsB, "steal", "snap-a", "thief", nil)
	create(t, r)
	waitRestoreWaiting(t, client.ObjectKeyFromObject(r), memoryv1alpha1.ReasonSnapshotNotFound, "MemorySnapshot snap-a not found in namespace "+nsB+"; waiting for it")
	// Nothing was made in B.
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(nsB)); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("jobs in %s: %d (%v)", nsB, len(jobs.Items), err)
	}
}
