package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
)

// Archival metrics, per store, in controller-runtime's registry (served by the manager's
// metrics endpoint). The gauges describe the store's last successful run (what it would
// have done, for a dry run: memory_operator_archival_last_run_dry_run tells); they are
// set again from status on every reconcile, so they survive an operator restart. A
// store's series are deleted with the store, or when it stops declaring archival.
var (
	archivalRunsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "memory_operator_archival_runs_total",
		Help: "Archive runs that finished, by result (succeeded, failed).",
	}, []string{"namespace", "store", "result"})
	archivalArchived = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_archival_archived_memories",
		Help: "Memories archived by the store's last successful archive run, by memory type.",
	}, []string{"namespace", "store", "type"})
	archivalScanned = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_archival_scanned_memories",
		Help: "Live memories scored by the store's last successful archive run.",
	}, []string{"namespace", "store"})
	archivalExpiredPurged = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_archival_expired_purged_memories",
		Help: "Expired memories purged by the store's last successful archive run.",
	}, []string{"namespace", "store"})
	archivalDeleted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_archival_deleted_memories",
		Help: "Archived memories deleted from PostgreSQL (after coldStorage.deleteAfter) by the store's last successful archive run.",
	}, []string{"namespace", "store"})
	archivalVectorsDeleted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_archival_vectors_deleted",
		Help: "Vectors deleted from the index by the store's last successful archive run.",
	}, []string{"namespace", "store"})
	archivalDryRun = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_archival_last_run_dry_run",
		Help: "1 when the store's last successful archive run was a dry run (its counts are what would have happened), else 0.",
	}, []string{"namespace", "store"})
	archivalLastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_archival_last_success_timestamp_seconds",
		Help: "Unix time at which the store's last successful archive run completed.",
	}, []string{"namespace", "store"})
)

// archivalStoreVecs are the vectors labelled by namespace and store only.
var archivalStoreVecs = []*prometheus.GaugeVec{
	archivalScanned, archivalExpiredPurged, archivalDeleted, archivalVectorsDeleted, archivalDryRun, archivalLastSuccess,
}

func init() {
	metrics.Registry.MustRegister(archivalRunsTotal, archivalArchived)
	for _, v := range archivalStoreVecs {
		metrics.Registry.MustRegister(v)
	}
}

// Values of the result label of memory_operator_archival_runs_total.
const (
	metricResultSucceeded = "succeeded"
	metricResultFailed    = "failed"
)

// countArchivalRun counts a run that finished; called once per run, after its result
// is recorded in status.
func countArchivalRun(store *memoryv1alpha1.MemoryStore, run *memoryv1alpha1.ArchivalRun) {
	result := metricResultFailed
	if run.Result == memoryv1alpha1.ArchivalRunSucceeded {
		result = metricResultSucceeded
	}
	archivalRunsTotal.WithLabelValues(store.Namespace, store.Name, result).Inc()
}

// setArchivalGauges sets the gauges from the store's recorded archival status: the
// counts of its last run when that run succeeded, and the time of the last success.
func setArchivalGauges(store *memoryv1alpha1.MemoryStore, st *memoryv1alpha1.ArchivalStatus) {
	if st == nil {
		return
	}
	ns, name := store.Namespace, store.Name
	if st.LastSuccessTime != nil {
		archivalLastSuccess.WithLabelValues(ns, name).Set(float64(st.LastSuccessTime.Unix()))
	}
	run := st.LastRun
	if run == nil || run.Result != memoryv1alpha1.ArchivalRunSucceeded {
		return
	}
	// Every type gets a series, 0 included, so a type that stops being archived drops to 0.
	for _, t := range memory.AllTypes() {
		archivalArchived.WithLabelValues(ns, name, string(t)).Set(float64(run.ArchivedByType[string(t)]))
	}
	archivalScanned.WithLabelValues(ns, name).Set(float64(run.Scanned))
	archivalExpiredPurged.WithLabelValues(ns, name).Set(float64(run.ExpiredPurged))
	archivalDeleted.WithLabelValues(ns, name).Set(float64(run.Deleted))
	archivalVectorsDeleted.WithLabelValues(ns, name).Set(float64(run.VectorsDeleted))
	dry := 0.0
	if run.DryRun {
		dry = 1
	}
	archivalDryRun.WithLabelValues(ns, name).Set(dry)
}

// forgetArchivalMetrics deletes every series of a store.
func forgetArchivalMetrics(namespace, name string) {
	labels := prometheus.Labels{"namespace": namespace, "store": name}
	archivalRunsTotal.DeletePartialMatch(labels)
	archivalArchived.DeletePartialMatch(labels)
	for _, v := range archivalStoreVecs {
		v.DeletePartialMatch(labels)
	}
}
