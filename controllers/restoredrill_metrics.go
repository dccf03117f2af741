package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// Restore drill metrics, per store. The gauges are set again from status on every
// reconcile, so they survive an operator restart; the chart's alert
// MemoryStoreSnapshotNotVerified fires when a store's last verified snapshot is older
// than twice its drill interval.
var (
	drillsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "memory_operator_restore_drills_total",
		Help: "Restore drills that ended, by result (passed, failed).",
	}, []string{"namespace", "store", "result"})
	drillLastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_restore_drill_last_success_timestamp_seconds",
		Help: "Unix time at which the store's last passed restore drill ended; until one passed, when drills were first scheduled.",
	}, []string{"namespace", "store"})
	drillVerifiedSnapshot = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_restore_drill_verified_snapshot_timestamp_seconds",
		Help: "Unix time at which the package of the store's last verified snapshot was cut.",
	}, []string{"namespace", "store"})
	drillInterval = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_restore_drill_interval_seconds",
		Help: "Seconds between two slots of the store's restore drill schedule.",
	}, []string{"namespace", "store"})
	drillRecall = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "memory_operator_restore_drill_recall",
		Help: "Mean recall@10 of the recall sample of the store's last passed restore drill.",
	}, []string{"namespace", "store"})
)

var drillStoreVecs = []*prometheus.GaugeVec{drillLastSuccess, drillVerifiedSnapshot, drillInterval, drillRecall}

func init() {
	metrics.Registry.MustRegister(drillsTotal)
	for _, v := range drillStoreVecs {
		metrics.Registry.MustRegister(v)
	}
}

// countDrill counts a drill that ended; called once per drill, after its result is
// recorded in status.
func countDrill(store *memoryv1alpha1.MemoryStore, run *memoryv1alpha1.DrillRun) {
	result := "failed"
	if run.Passed {
		result = "passed"
	}
	drillsTotal.WithLabelValues(store.Namespace, store.Name, result).Inc()
}

// setDrillGauges brings the gauges in line with status.
func setDrillGauges(store *memoryv1alpha1.MemoryStore, st *memoryv1alpha1.RestoreDrillStatus) {
	if st == nil {
		return
	}
	ns, name := store.Namespace, store.Name
	switch v := st.LastVerified; {
	case v != nil:
		drillLastSuccess.WithLabelValues(ns, name).Set(float64(v.Finished.Unix()))
		if v.SnapshotTime != nil {
			drillVerifiedSnapshot.WithLabelValues(ns, name).Set(float64(v.SnapshotTime.Unix()))
		}
		if r, err := parseRecall(v.Recall); err == nil {
			drillRecall.WithLabelValues(ns, name).Set(r)
		}
	case st.Since != nil:
		drillLastSuccess.WithLabelValues(ns, name).Set(float64(st.Since.Unix()))
	}
	if spec := store.Spec.RestoreDrill; spec != nil {
		if sched, err := parseSchedule(string(spec.Schedule)); err == nil && st.NextScheduleTime != nil {
			next := st.NextScheduleTime.Time
			if after := sched.Next(next); !after.IsZero() {
				drillInterval.WithLabelValues(ns, name).Set(after.Sub(next).Seconds())
			}
		}
	}
}

// forgetDrillMetrics deletes a store's series.
func forgetDrillMetrics(namespace, name string) {
	labels := prometheus.Labels{"namespace": namespace, "store": name}
	drillsTotal.DeletePartialMatch(labels)
	for _, v := range drillStoreVecs {
		v.DeletePartialMatch(labels)
	}
}
