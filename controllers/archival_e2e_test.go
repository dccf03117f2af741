package controllers

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/worker"
)

// An archival run end to end: memories of many ages remembered through the memory
// service, the Job the controller made for the slot, the real archive worker run with
// that Job's own arguments and Secrets (as its pod would), its summary handed back as
// the termination message, and the store's status, metrics and data agreeing with it.
func TestArchivalEndToEndThroughTheWorker(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	key := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: snapshotKeySecret}, Key: "key"}
	store := readyArchivalStore(t, f, "bot", func(a *memoryv1alpha1.ArchivalSpec) {
		a.Threshold = "0.1"
		withCold(key)(a)
	})
	ns := store.Namespace
	slot := nextDaily(store.CreationTimestamp.Time)
	now := slot.Add(time.Minute)
	g := NewWithT(t)

	// Memories are dated by the machine's clock (a write is never dated ahead of the
	// server's); the run's clock, which the Job fixes at `now`, is up to a day later,
	// which the ages below leave room for.
	written := time.Now()
	aged := func(id, scope string, typ memory.Type, base float64, age time.Duration) memory.Item {
		at := written.Add(-age).UTC().Truncate(time.Millisecond)
		c, _ := json.Marshal(map[string]string{"text": id + " about coffee and trains"})
		return memory.Item{MemoryID: id, MemoryType: typ, Scope: scope, Content: c, Source: "test@1",
			BaseScore: base, CreatedAt: at, UpdatedAt: at}
	}
	expired := aged("expired-task", "session:s1", memory.Working, 0.9, time.Hour)
	expired.ExpiresAt = ptr.To(now.Add(-time.Minute))
	items := []memory.Item{
		aged("old-episode", "user:1", memory.Episodic, 0.5, 120*24*time.Hour),            // 0.5·½⁴ ≈ 0.03: archived
		aged("stale-task", "session:s1", memory.Working, 0.9, 48*time.Hour),              // 0.9·½⁸ ≈ 0.004: archived
		aged("fresh-fact", "user:1", memory.Semantic, 0.5, time.Hour),                    // kept
		aged("old-procedure", "agent:planner", memory.Procedural, 0.5, 100*24*time.Hour), // 0.5·½^0.27 ≈ 0.41: kept
		expired, // purged
	}
	mem, pool := storeService(t, store)
	_, err := mem.RememberBatch(ctx, items)
	g.Expect(err).NotTo(HaveOccurred())

	r := newArchivalReconciler(clocktesting.NewFakePassiveClock(now))
	reconcileArchival(t, r, store)
	job := getJob(g, ns, archiveJobName(store, slot))

	// The test plays the pod: the worker with the Job's arguments and Secrets.
	cfg, err := jobArchiveConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	sum, err := worker.RunArchive(ctx, cfg, worker.SecretsFrom(jobSecretEnv(t, job, worker.EnvPostgresURI, worker.EnvS3AccessKey,
		worker.EnvS3SecretKey, worker.EnvEncryptionKey)), worker.RunOptions{Version: "test"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sum.Archived).To(Equal(int64(2)))
	g.Expect(sum.ArchivedByType).To(Equal(map[string]int64{"episodic": 1, "working": 1}))
	g.Expect(sum.ExpiredPurged).To(Equal(int64(1)))
	g.Expect(sum.ColdPackage).To(Equal(cfg.Cold.Prefix))
	msg, err := sum.TerminationMessage()
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 0, string(msg))
	end := completeJob(t, job)
	reconcileArchival(t, r, store)

	// Status says what the worker did.
	st, c := archivalOf(g, store)
	run := st.LastRun
	g.Expect(run.Result).To(Equal(memoryv1alpha1.ArchivalRunSucceeded))
	g.Expect([]int64{run.Scanned, run.Archived, run.ExpiredPurged, run.Deleted, run.VectorsDeleted, run.Recovered, run.ColdItems}).
		To(Equal([]int64{sum.Scanned, sum.Archived, sum.ExpiredPurged, sum.Deleted, sum.VectorsDeleted, sum.Recovered, sum.ColdItems}))
	g.Expect(run.ArchivedByType).To(Equal(sum.ArchivedByType))
	g.Expect(run.ColdPackage).To(Equal(&memoryv1alpha1.SnapshotLocation{Endpoint: f.s3.Endpoint, Bucket: "memory-test", Prefix: sum.ColdPackage}))
	g.Expect(run.CompletionTime.Time).To(BeTemporally("==", end.Time))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSucceeded))
	v, _ := metricValue(g, "memory_operator_archival_archived_memories", storeLabels(store, "type", "episodic"))
	g.Expect(v).To(Equal(1.0))

	// The store: exactly those two archived at the run's clock, the expired one gone,
	// recall leaves the archived ones out.
	archived := map[string]time.Time{}
	var ids []string
	g.Expect(pgstore.New(pool, store.Status.Postgres.Schema).Export(ctx, pgstore.ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
		ids = append(ids, it.MemoryID)
		if it.ArchivedAt != nil {
			archived[it.MemoryID] = *it.ArchivedAt
		}
		return nil
	})).To(Succeed())
	sort.Strings(ids)
	g.Expect(ids).To(Equal([]string{"fresh-fact", "old-episode", "old-procedure", "stale-task"}))
	g.Expect(archived).To(HaveLen(2))
	g.Expect(archived["old-episode"]).To(BeTemporally("==", now))
	g.Expect(archived["stale-task"]).To(BeTemporally("==", now))
	recalled, err := mem.Recall(ctx, pgstore.RecallQuery{Scope: "user:1", Limit: 10, Now: now})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(recalled).To(HaveLen(1))
	g.Expect(recalled[0].Item.MemoryID).To(Equal("fresh-fact"))

	// The cold package is complete: its manifest is there, written last.
	g.Expect(objectsUnder(g, minioClient(t, f), "memory-test", sum.ColdPackage)).To(ContainElement(sum.ColdPackage + snapshot.ManifestName))
}

// storeService is the memory service over a store, as an agent with its connection
// Secret would use it (vectors in PostgreSQL, the built-in embedder).
func storeService(t *testing.T, store *memoryv1alpha1.MemoryStore) (*service.Memory, *pgxpool.Pool) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), connectionSecret(t, store)["uri"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := store.Status.Postgres.Schema
	index := pgindex.New(pool, schema, vector.Spec{Dimension: int(store.Spec.Vector.Dimension), Metric: vector.Metric(store.MetricOrDefault())})
	m, err := service.New(pgstore.New(pool, schema), index, embed.NewHashing(int(store.Spec.Vector.Dimension)))
	if err != nil {
		t.Fatal(err)
	}
	return m, pool
}
