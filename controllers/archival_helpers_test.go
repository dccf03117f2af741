package controllers

import (
	"context"
	"sort"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// Helpers of the archival tests. The suite's manager runs no archival reconciler: the
// tests drive their own with fake clocks (a reconciler on another clock would disagree
// about what is due), and one test starts a manager of its own to check the wiring.

// newArchivalReconciler builds the archival reconciler as main.go does, reading and
// writing straight through the API server, with the given clock.
func newArchivalReconciler(clk clock.PassiveClock) *ArchivalReconciler {
	return &ArchivalReconciler{
		Client:      k8sClient,
		APIReader:   k8sClient,
		Scheme:      k8sClient.Scheme(),
		Recorder:    testMgr.GetEventRecorder("memory-operator"),
		Clock:       clk,
		WorkerImage: testWorkerImage,
	}
}

func reconcileArchival(t *testing.T, r *ArchivalReconciler, store client.Object) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(store)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

// readyArchivalStore is a Ready inline store (PostgreSQL, MinIO) in a namespace of its
// own, to which archival is then added as a user would, with mutate applied to it.
func readyArchivalStore(t *testing.T, f backendFixture, name string, mutate func(*memoryv1alpha1.ArchivalSpec)) *memoryv1alpha1.MemoryStore {
	t.Helper()
	store := readySnapshotStore(t, f, name)
	return setArchival(t, store, func(a *memoryv1alpha1.ArchivalSpec) {
		*a = *validArchival()
		if mutate != nil {
			mutate(a)
		}
	})
}

// setArchival changes the store's archival spec (creating it when absent) and returns
// the store as stored. A store that was Ready is waited for until it is Ready for the
// new generation (the MemoryStore reconciler's to say), as archival requires.
func setArchival(t *testing.T, store *memoryv1alpha1.MemoryStore, mutate func(*memoryv1alpha1.ArchivalSpec)) *memoryv1alpha1.MemoryStore {
	t.Helper()
	g := NewWithT(t)
	key := client.ObjectKeyFromObject(store)
	wasReady := getStore(g, key).IsReady()
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, key)
		if s.Spec.Archival == nil {
			s.Spec.Archival = &memoryv1alpha1.ArchivalSpec{}
		}
		mutate(s.Spec.Archival)
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	if wasReady {
		return waitReady(t, key)
	}
	return getStore(g, key)
}

// archivalOf returns the store's archival status and condition.
func archivalOf(g Gomega, store client.Object) (*memoryv1alpha1.ArchivalStatus, metav1.Condition) {
	s := getStore(g, client.ObjectKeyFromObject(store))
	var c metav1.Condition
	if found := meta.FindStatusCondition(s.Status.Conditions, memoryv1alpha1.ConditionArchival); found != nil {
		c = *found
	}
	return s.Status.Archival, c
}

// archiveJobNames lists the names of the store's archive Jobs.
func archiveJobNames(g Gomega, store client.Object) []string {
	var list batchv1.JobList
	g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(store.GetNamespace()),
		client.MatchingLabels{"app.kubernetes.io/component": archiveContainer})).To(Succeed())
	names := []string{}
	for _, j := range list.Items {
		if j.DeletionTimestamp.IsZero() {
			names = append(names, j.Name)
		}
	}
	sort.Strings(names)
	return names
}

func getJob(g Gomega, namespace, name string) *batchv1.Job {
	job := &batchv1.Job{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, job)).To(Succeed())
	return job
}

// metricValue reads a series from controller-runtime's registry, as the metrics
// endpoint would serve it; ok is false when the series does not exist.
func metricValue(g Gomega, name string, labels map[string]string) (value float64, ok bool) {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// storeLabels are the labels of a store's series.
func storeLabels(store client.Object, extra ...string) map[string]string {
	l := map[string]string{"namespace": store.GetNamespace(), "store": store.GetName()}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}
