package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jackc/pgx/v5/pgxpool"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/worker"
)

// agentLayer is the memory layer as the store's gateway has it now: its connection
// Secret's logins (PostgreSQL, and Milvus when the store has a user there), the
// serving index and model.
func agentLayer(t *testing.T, store *memoryv1alpha1.MemoryStore) *service.Memory {
	t.Helper()
	data := connectionSecret(t, store)
	pool, err := pgxpool.New(context.Background(), data["uri"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	v := storeVectors(store, data["milvusAddress"])
	dim := int(store.Status.Vector.Dimension)
	idx, closeIdx, err := v.Open(context.Background(), pool, store.Status.Postgres.Schema, vector.Spec{Dimension: dim, Metric: vector.Cosine},
		engine.Login{Username: data["milvusUsername"], Password: data["milvusPassword"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeIdx)
	m, err := service.New(pgstore.New(pool, store.Status.Postgres.Schema).WithVectorsTable(v.Table()), idx, embed.NewHashing(dim))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// expectFoundFirst expects a dense search of user:1 through m for text to put the
// memory of that text first.
func expectFoundFirst(g Gomega, m *service.Memory, text string) {
	res, err := m.Search(context.Background(), service.SearchQuery{Scope: "user:1", Text: text, K: 3, Mode: service.Dense})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).NotTo(BeEmpty())
	g.Expect(string(res[0].Item.Content)).To(ContainSubstring(text))
}

// expirePreviousNow cuts the store's retention of its previous generation to
// nothing and waits until the generation is gone, the store Ready.
func expirePreviousNow(t *testing.T, g Gomega, store *memoryv1alpha1.MemoryStore) {
	t.Helper()
	setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) {
		s.Spec.EmbeddingSwitch = &memoryv1alpha1.EmbeddingSwitchSpec{RetainPrevious: &metav1.Duration{}, Tolerance: "0.3"}
	})
	g.Eventually(func(g Gomega) {
		emb, _, s := switchOf(g, store)
		g.Expect(emb.Previous).To(BeNil())
		g.Expect(s.IsReady()).To(BeTrue())
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
}

func rememberAll(t *testing.T, m *service.Memory, prefix string, n int) {
	t.Helper()
	var items []memory.Item
	for i := range n {
		it := testItem("", fmt.Sprintf("user:%d", i%4), memory.Semantic, fmt.Sprintf(`{"fact":"%s %d likes %d"}`, prefix, i, i*7%11))
		items = append(items, it)
	}
	opts := service.RememberOptions{}
	NewWithT(t).Eventually(func() error {
		_, err := m.RememberBatchWith(context.Background(), items, opts)
		if err == nil {
			return nil
		}
		// Milvus 2.3.5 refuses a store's user now and then while other clients
		// change roles on the same server (its proxies' policy cache,
		// milvus-io/milvus#34667; seen on loaded CI runs). The agent does what the
		// API says: the memories are stored, and a retry with Reindex repairs.
		if !errors.Is(err, service.ErrNotIndexed) || !strings.Contains(err.Error(), "PermissionDenied") {
			StopTrying("remembering " + prefix).Wrap(err).Now()
		}
		t.Logf("repairing the index after: %v", err)
		opts.Reindex = true
		return err
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
}

// switchOf is the store's embedding status and Switching condition.
func switchOf(g Gomega, store client.Object) (*memoryv1alpha1.EmbeddingStatus, metav1.Condition, *memoryv1alpha1.MemoryStore) {
	s := getStore(g, client.ObjectKeyFromObject(store))
	var c metav1.Condition
	if found := meta.FindStatusCondition(s.Status.Conditions, memoryv1alpha1.ConditionSwitching); found != nil {
		c = *found
	}
	return s.Status.Embedding, c, s
}

func setStoreSpec(t *testing.T, store client.Object, mutate func(*memoryv1alpha1.MemoryStore)) {
	t.Helper()
	NewWithT(t).Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &memoryv1alpha1.MemoryStore{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(store), s); err != nil {
			return err
		}
		mutate(s)
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
}

// reembedPod is the reembed worker running in the background as a Job's pod would.
type reembedPod struct {
	t    *testing.T
	job  *batchv1.Job
	done chan reembedResult
	end  *reembedResult // once it has ended
}

type reembedResult struct {
	sum worker.ReembedSummary
	err error
}

// startReembedPod runs the reembed worker with the Job's arguments and Secrets, as
// its pod would, in the background.
func startReembedPod(t *testing.T, job *batchv1.Job) *reembedPod {
	t.Helper()
	var args []string
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == reembedContainer {
			args = c.Args[1:]
		}
	}
	cfg, err := worker.ParseReembedArgs(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	getenv := jobSecretEnv(t, job, worker.EnvPostgresURI, worker.EnvEmbedderAPIKey, worker.EnvServingEmbedderAPIKey,
		engine.EnvMilvusUsername, engine.EnvMilvusPassword)
	sec := worker.ReembedSecrets{PostgresURI: getenv(worker.EnvPostgresURI),
		Milvus: engine.Login{Username: getenv(engine.EnvMilvusUsername), Password: getenv(engine.EnvMilvusPassword)}}
	p := &reembedPod{t: t, job: job, done: make(chan reembedResult, 1)}
	go func() {
		sum, err := worker.RunReembed(context.Background(), cfg, sec, slog.New(slog.NewTextHandler(io.Discard, nil)))
		p.done <- reembedResult{sum, err}
	}()
	return p
}

// result is the worker's end, nil while it runs.
func (p *reembedPod) result() *reembedResult {
	if p.end == nil {
		select {
		case r := <-p.done:
			p.end = &r
		default:
		}
	}
	return p.end
}

// stopIfFailed ends an Eventually waiting on the switch when the worker has failed:
// the operator would see the pod fail, and the wait would only time out.
func (p *reembedPod) stopIfFailed() {
	if r := p.result(); r != nil && r.err != nil {
		StopTrying(fmt.Sprintf("the re-embed worker failed: %v (%+v)", r.err, r.sum)).Now()
	}
}

// waitCuttingOver waits until the store's switch is cutting over, stopping at once
// when the worker failed.
func (p *reembedPod) waitCuttingOver(g Gomega, store *memoryv1alpha1.MemoryStore) {
	g.Eventually(func(g Gomega) {
		p.stopIfFailed()
		emb, _, _ := switchOf(g, store)
		g.Expect(emb.Switch).NotTo(BeNil())
		g.Expect(emb.Switch.Phase).To(Equal(memoryv1alpha1.SwitchCuttingOver), emb.Switch.Message)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
}

// wait waits for the worker and records its end as the pod's and the Job's.
func (p *reembedPod) wait() worker.ReembedSummary {
	t := p.t
	r := p.result()
	if r == nil {
		got := <-p.done
		p.end, r = &got, &got
	}
	msg, merr := r.sum.TerminationMessage()
	if merr != nil {
		t.Fatal(merr)
	}
	if r.err != nil {
		finishedPod(t, p.job, 1, string(msg))
		failJob(t, p.job, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
	} else {
		finishedPod(t, p.job, 0, string(msg))
		completeJob(t, p.job)
	}
	return r.sum
}

// rollOutServing waits until the gateway Deployment runs the serving generation
// (its --dimension) and plays its rollout.
func rollOutServing(t *testing.T, store *memoryv1alpha1.MemoryStore, dim int) {
	t.Helper()
	dep := waitGatewayDeployment(t, store, func(g Gomega, d *appsv1.Deployment) {
		cfg, err := gateway.ParseArgs(d.Spec.Template.Spec.Containers[0].Args[1:], io.Discard)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.Dimension).To(Equal(dim))
	})
	rollOut(t, dep)
}

// TestEmbeddingSwitchEndToEnd switches a store with a gateway from 8- to
// 16-dimensional vectors while agents write, through the real worker: progress in
// status, Switching and Reconciling while it runs with Ready kept, the cutover only
// once the gateway serves the new index, the new index holding every memory's new
// vector; then a rollback that re-embeds nothing, a switch that fails and one
// abandoned, and the previous generation dropped when its time is up.
func TestEmbeddingSwitchEndToEnd(t *testing.T) {
	f := services(t)
	g := NewWithT(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.gatewayStore(ns, "bot", nil)
	// 8 and 16 dimensions of the hashing embedder collide often: the check's sample
	// is about the mechanics here, not about the models (test/clients has real ones).
	store.Spec.EmbeddingSwitch = &memoryv1alpha1.EmbeddingSwitchSpec{Tolerance: "0.3"}
	create(t, store)
	store = waitReady(t, client.ObjectKeyFromObject(store))
	rollOutServing(t, store, 8)
	rememberAll(t, agentLayer(t, store), "before", 120)
	emb, c, _ := switchOf(g, store)
	g.Expect(emb.Serving.Generation).To(Equal(int32(1)))
	g.Expect(emb.Serving.Index).To(Equal("vectors"))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonNotSwitching))

	// An operator stopped after recording generation 2 for a model the spec has
	// changed from since, before its status said so: the switch starts over.
	_, err := pgstore.StartGeneration(context.Background(), pgAdminPool(t), store.Status.Postgres.Schema,
		pgstore.Generation{Number: 1, Model: "memory-operator/hashing-v1", Dimension: 8, Location: "vectors"},
		pgstore.Generation{Number: 2, Model: "some/other-model", Dimension: 32, Location: "vectors_g2", Embedder: "stale"})
	g.Expect(err).NotTo(HaveOccurred())

	// The switch starts: a new generation, a Job, Switching and Reconciling while Ready.
	setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 16 })
	var job *batchv1.Job
	g.Eventually(func(g Gomega) {
		emb, c, s := switchOf(g, store)
		g.Expect(emb.Switch).NotTo(BeNil())
		g.Expect(emb.Switch.Phase).To(Equal(memoryv1alpha1.SwitchReembedding))
		g.Expect(emb.Switch.Job).NotTo(BeEmpty())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(s.IsReady()).To(BeTrue())
		g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, memoryv1alpha1.ConditionReconciling)).To(BeTrue())
		g.Expect(s.Status.Vector.Dimension).To(Equal(int32(8)), "the store serves the old model meanwhile")
		job = getJob(g, ns, emb.Switch.Job)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(schemaTableExists(t, store.Status.Postgres.Schema, "vectors_g2")).To(BeTrue())
	pod := startReembedPod(t, job)
	// Agents go on writing through the old index; the worker follows them.
	rememberAll(t, agentLayer(t, store), "during", 40)

	g.Eventually(func(g Gomega) {
		pod.stopIfFailed()
		emb, c, _ := switchOf(g, store)
		g.Expect(emb.Switch).NotTo(BeNil())
		g.Expect(emb.Switch.Phase).To(Equal(memoryv1alpha1.SwitchCuttingOver))
		g.Expect(emb.Switch.VerifiedAt).NotTo(BeNil())
		g.Expect(emb.Serving.Generation).To(Equal(int32(2)))
		g.Expect(emb.Previous.Generation).To(Equal(int32(1)))
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonCuttingOver))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	// Until the gateway serves the new index, the new generation does not serve.
	gens, err := pgstore.New(pgAdminPool(t), store.Status.Postgres.Schema).Generations(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gens[1].State).To(Equal(pgstore.GenerationBuilding))
	g.Expect(gens[1].Dimension).To(Equal(16))
	rollOutServing(t, store, 16)
	sum := pod.wait()
	g.Expect(sum.Serving).To(BeTrue(), "%+v", sum)
	g.Expect(sum.Verified).To(BeTrue(), "%+v", sum)
	g.Eventually(func(g Gomega) {
		emb, c, s := switchOf(g, store)
		g.Expect(emb.Switch).To(BeNil())
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSwitchCompleted))
		g.Expect(s.Status.Vector.Dimension).To(Equal(int32(16)))
		g.Expect(meta.FindStatusCondition(s.Status.Conditions, memoryv1alpha1.ConditionReconciling)).To(BeNil())
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	store = getStore(g, client.ObjectKeyFromObject(store))
	checkGenerationVectors(t, store, "vectors_g2", 16)
	// The agents' connection Secret and later Jobs follow the serving generation.
	g.Expect(connectionSecret(t, store)[keyDimension]).To(Equal("16"))
	rememberAll(t, agentLayer(t, store), "after", 10)

	// Back to 8 dimensions within the retention: only the changes since the cutover
	// are re-embedded into generation 1.
	setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 8 })
	g.Eventually(func(g Gomega) {
		emb, _, _ := switchOf(g, store)
		g.Expect(emb.Switch).NotTo(BeNil())
		g.Expect(emb.Switch.Rollback).To(BeTrue())
		g.Expect(emb.Switch.Job).NotTo(BeEmpty())
		job = getJob(g, ns, emb.Switch.Job)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	pod = startReembedPod(t, job)
	g.Eventually(func(g Gomega) {
		pod.stopIfFailed()
		emb, _, _ := switchOf(g, store)
		g.Expect(emb.Serving.Generation).To(Equal(int32(1)))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	rollOutServing(t, store, 8)
	sum = pod.wait()
	g.Expect(sum.Embedded).To(Equal(int64(0)), "a rollback walks nothing: %+v", sum)
	g.Expect(sum.Changes).To(BeNumerically(">=", 10), "%+v", sum)
	g.Eventually(func(g Gomega) {
		emb, c, _ := switchOf(g, store)
		g.Expect(emb.Switch).To(BeNil())
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSwitchCompleted))
		g.Expect(emb.Previous.Generation).To(Equal(int32(2)))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	store = getStore(g, client.ObjectKeyFromObject(store))
	checkGenerationVectors(t, store, "vectors", 8)

	// Retention cut to nothing: the previous generation goes.
	setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) {
		s.Spec.EmbeddingSwitch = &memoryv1alpha1.EmbeddingSwitchSpec{RetainPrevious: &metav1.Duration{}, Tolerance: "0.3"}
	})
	g.Eventually(func(g Gomega) {
		emb, _, _ := switchOf(g, store)
		g.Expect(emb.Previous).To(BeNil())
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(schemaTableExists(t, store.Status.Postgres.Schema, "vectors_g2")).To(BeFalse())
	gens, err = pgstore.New(pgAdminPool(t), store.Status.Postgres.Schema).Generations(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gens).To(HaveLen(1))
	g.Expect(gens[0].Number).To(Equal(1))
	g.Expect(gens[0].State).To(Equal(pgstore.GenerationServing))

	// A switch whose Job fails: the store serves on, Stalled with Ready kept; set
	// back, the switch is abandoned and its generation dropped.
	setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 32 })
	job = failSwitchJob(t, store)
	g.Eventually(func(g Gomega) {
		emb, c, s := switchOf(g, store)
		g.Expect(emb.Switch.Phase).To(Equal(memoryv1alpha1.SwitchFailed))
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSwitchFailed))
		g.Expect(c.Message).To(ContainSubstring("model unloaded"))
		g.Expect(s.IsReady()).To(BeTrue())
		g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, memoryv1alpha1.ConditionStalled)).To(BeTrue())
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 8 })
	g.Eventually(func(g Gomega) {
		emb, c, s := switchOf(g, store)
		g.Expect(emb.Switch).To(BeNil())
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSwitchAbandoned))
		g.Expect(meta.FindStatusCondition(s.Status.Conditions, memoryv1alpha1.ConditionStalled)).To(BeNil())
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(schemaTableExists(t, store.Status.Postgres.Schema, "vectors_g3")).To(BeFalse())
	g.Eventually(func() bool { return jobGone(ns, job.Name) }).WithTimeout(waitTimeout).Should(BeTrue())

}

// TestEmbeddingSwitchOnPGVector switches a store on the PGVector engine from 8- to
// 16-dimensional vectors while agents write: generation 2 is a table of its own
// (embeddings_g2) filled without its HNSW index, which the worker builds with the
// store's index parameters before the check; after the cutover provisioning ensures
// that table, the gateway and agents search it, and when the previous generation's
// time is up the embeddings table is emptied.
func TestEmbeddingSwitchOnPGVector(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f := pgvectorFixture(t, ns)
	store := f.gatewayStore(ns, "pgv-bot", nil)
	store.Spec.Backend.Postgres = f.postgresSpec("pgv-admin")
	store.Spec.Vector.Engine = memoryv1alpha1.EnginePGVector
	store.Spec.Vector.Index = &memoryv1alpha1.VectorIndexSpec{M: 12, EfConstruction: 48}
	store.Spec.EmbeddingSwitch = &memoryv1alpha1.EmbeddingSwitchSpec{Tolerance: "0.3"}
	create(t, store)
	store = waitReady(t, client.ObjectKeyFromObject(store))
	schema := store.Status.Postgres.Schema
	admin, err := pgxpool.New(ctx, testutil.PGVectorDSN(t))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(admin.Close)
	exists := func(rel string) bool {
		var ok bool
		g.Expect(admin.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+"."+rel).Scan(&ok)).To(Succeed())
		return ok
	}
	rollOutServing(t, store, 8)
	rememberAll(t, agentLayer(t, store), "before", 120)
	emb, _, _ := switchOf(g, store)
	g.Expect(emb.Serving.Index).To(Equal("embeddings"))

	setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 16 })
	var job *batchv1.Job
	g.Eventually(func(g Gomega) {
		emb, c, s := switchOf(g, store)
		g.Expect(emb.Switch).NotTo(BeNil())
		g.Expect(emb.Switch.To.Index).To(Equal("embeddings_g2"))
		g.Expect(emb.Switch.Job).NotTo(BeEmpty())
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonReembedding))
		g.Expect(s.IsReady()).To(BeTrue())
		job = getJob(g, ns, emb.Switch.Job)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(exists("embeddings_g2")).To(BeTrue())
	g.Expect(exists("embeddings_g2_hnsw_idx")).To(BeFalse(), "the index is built after the fill")
	pod := startReembedPod(t, job)
	rememberAll(t, agentLayer(t, store), "during", 40)
	pod.waitCuttingOver(g, store)
	// The status of a reconcile during the cutover, for a reconcile that lost its
	// status later (below).
	stale := getStore(g, client.ObjectKeyFromObject(store))
	var def string
	g.Expect(admin.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'embeddings_g2_hnsw_idx'`, schema).Scan(&def)).To(Succeed())
	g.Expect(def).To(And(ContainSubstring("hnsw"), ContainSubstring("m='12'"), ContainSubstring("ef_construction='48'")))
	dep := waitGatewayDeployment(t, store, func(g Gomega, d *appsv1.Deployment) {
		g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--vector-table=embeddings_g2"))
	})
	rollOut(t, dep)
	sum := pod.wait()
	g.Expect(sum.Serving && sum.Verified).To(BeTrue(), "%+v", sum)
	g.Eventually(func(g Gomega) {
		emb, c, s := switchOf(g, store)
		g.Expect(emb.Switch).To(BeNil())
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSwitchCompleted))
		g.Expect(s.Status.Vector.Dimension).To(Equal(int32(16)))
		g.Expect(s.Status.Vector.Collection).To(Equal(schema + ".embeddings_g2"))
		g.Expect(s.IsReady()).To(BeTrue())
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	store = getStore(g, client.ObjectKeyFromObject(store))
	checkEngineGeneration(t, store, admin, engine.PGVector, "embeddings_g2", 16)
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{}))).To(BeTrue(), "the completed Job is deleted")

	// A reconcile that completed the switch (deleting its Job) and then lost its
	// status to a conflicting write: the next one starts from the status before. It
	// must complete the switch from what the database says, not start a Job again.
	names, err := provision.NamesFor(store.Spec.Tenant, "")
	g.Expect(err).NotTo(HaveOccurred())
	pg := testutil.PGVectorParts(t)
	rb := &resolvedBackend{postgres: provision.PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}}
	_, err = newReconciler(k8sClient, k8sClient).followSwitch(ctx, switchCtx{store: stale, rb: rb, names: names, eng: provision.EnginePGVector, now: time.Now()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stale.Status.Embedding.Switch).To(BeNil())
	g.Expect(meta.FindStatusCondition(stale.Status.Conditions, memoryv1alpha1.ConditionSwitching).Reason).To(Equal(memoryv1alpha1.ReasonSwitchCompleted))
	g.Consistently(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{}))
	}).WithTimeout(2*time.Second).Should(BeTrue(), "no Job is started again")

	expectFoundFirst(g, agentLayer(t, store), "during 5 likes 2")

	// The previous generation's time is up: the embeddings table is emptied (the
	// store keeps serving from embeddings_g2, and provisioning keeps ensuring it).
	expirePreviousNow(t, g, store)
	var left int
	g.Expect(admin.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.embeddings`).Scan(&left)).To(Succeed())
	g.Expect(left).To(BeZero())
	checkEngineGeneration(t, store, admin, engine.PGVector, "embeddings_g2", 16)
}

// TestEmbeddingSwitchOnAuthenticatedMilvus switches a store on an authenticated
// Milvus server from 8- to 16-dimensional vectors: generation 2 is a collection of its
// own, marked as the store's, which the store's Milvus user (the Job's and the
// gateway's login, never the admin's) may use before the Job starts; after the
// cutover the connection Secret, the gateway and provisioning follow it; when the
// previous generation's time is up its collection goes, privileges and all; deleting
// the store drops the serving collection.
func TestEmbeddingSwitchOnAuthenticatedMilvus(t *testing.T) {
	f := services(t)
	m := milvusAdmin(t, testutil.MilvusAuth(t))
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	createSecret(t, ns, "milvus-admin", map[string]string{"username": m.User, "password": m.Password})
	store := f.gatewayStore(ns, "milvus-bot", nil)
	tenant := store.Spec.Tenant
	store.Spec.Backend.Milvus = &memoryv1alpha1.MilvusSpec{Address: m.Addr,
		CredentialsSecret: &memoryv1alpha1.CredentialsSecretRef{Name: "milvus-admin", UsernameKey: "username", PasswordKey: "password"}}
	store.Spec.Vector.Engine = memoryv1alpha1.EngineMilvus
	store.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
	store.Spec.PreChangeSnapshot = &memoryv1alpha1.PreChangeSnapshotSpec{Enabled: ptr.To(false)}
	store.Spec.EmbeddingSwitch = &memoryv1alpha1.EmbeddingSwitchSpec{Tolerance: "0.3"}
	create(t, store)
	store = waitReady(t, client.ObjectKeyFromObject(store))
	names, err := provision.NamesFor(tenant, "memory-operator")
	g.Expect(err).NotTo(HaveOccurred())
	base, g2 := names.Collection, names.Collection+"_g2"
	root, err := milvus.Connect(ctx, milvus.Conn{Address: m.Addr, Username: m.User, Password: m.Password})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = root.Close() })
	grants := func() string {
		gs, err := root.ListGrants(ctx, names.MilvusRole, "")
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, gr := range gs {
			out = append(out, gr.ObjectName+":"+gr.PrivilegeName)
		}
		return strings.Join(out, " ")
	}
	rollOutServing(t, store, 8)
	rememberAll(t, agentLayer(t, store), "before", 60)

	setStoreSpec(t, store, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 16 })
	var job *batchv1.Job
	g.Eventually(func(g Gomega) {
		emb, _, s := switchOf(g, store)
		g.Expect(emb.Switch).NotTo(BeNil())
		g.Expect(emb.Switch.To.Index).To(Equal(g2))
		g.Expect(emb.Switch.Job).NotTo(BeEmpty())
		g.Expect(s.IsReady()).To(BeTrue())
		job = getJob(g, ns, emb.Switch.Job)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(grants()).To(And(ContainSubstring(g2+":Upsert"), ContainSubstring(base+":Upsert")))
	pod := startReembedPod(t, job)
	rememberAll(t, agentLayer(t, store), "during", 20)
	pod.waitCuttingOver(g, store)
	dep := waitGatewayDeployment(t, store, func(g Gomega, d *appsv1.Deployment) {
		g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--collection=" + g2))
	})
	rollOut(t, dep)
	sum := pod.wait()
	g.Expect(sum.Serving && sum.Verified).To(BeTrue(), "%+v", sum)
	g.Expect(sum.Embedded).To(BeNumerically(">=", 60), "%+v", sum)
	g.Eventually(func(g Gomega) {
		emb, c, s := switchOf(g, store)
		g.Expect(emb.Switch).To(BeNil())
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSwitchCompleted))
		g.Expect(s.Status.Vector.Collection).To(Equal(g2))
		g.Expect(s.Status.Vector.Dimension).To(Equal(int32(16)))
		g.Expect(s.IsReady()).To(BeTrue())
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	store = getStore(g, client.ObjectKeyFromObject(store))
	g.Expect(connectionSecret(t, store)).To(HaveKeyWithValue("collection", g2))
	expectFoundFirst(g, agentLayer(t, store), "during 5 likes 2")

	// The previous generation's time is up: its collection and privileges go.
	expirePreviousNow(t, g, store)
	has, err := root.HasCollection(ctx, base)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(has).To(BeFalse())
	g.Eventually(grants).WithTimeout(waitTimeout).WithPolling(pollEvery).ShouldNot(ContainSubstring(base + ":"))
	g.Expect(grants()).To(ContainSubstring(g2 + ":Search"))

	// Deleting the store drops the collection that serves.
	deleteAndWaitGone(t, store)
	has, err = root.HasCollection(ctx, g2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(has).To(BeFalse())
}

// failSwitchJob waits for the store's re-embed Job and ends it as a pod whose
// embedder died would, returning it.
func failSwitchJob(t *testing.T, store *memoryv1alpha1.MemoryStore) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	NewWithT(t).Eventually(func(g Gomega) {
		emb, _, _ := switchOf(g, store)
		g.Expect(emb.Switch).NotTo(BeNil())
		g.Expect(emb.Switch.Job).NotTo(BeEmpty())
		job = getJob(g, store.Namespace, emb.Switch.Job)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	msg, _ := worker.ReembedSummary{Error: "embedding with e5: model unloaded"}.TerminationMessage()
	finishedPod(t, job, 1, string(msg))
	failJob(t, job, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
	return job
}

func pgAdminPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgAdmin(t).Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func schemaTableExists(t *testing.T, schema, table string) bool {
	t.Helper()
	return adminBool(t, `SELECT to_regclass($1) IS NOT NULL`, schema+"."+table)
}

// checkGenerationVectors holds a generation's table to the store: a vector for every
// live memory, the hashing embedder's of its text at dim, and nothing else.
func checkGenerationVectors(t *testing.T, store *memoryv1alpha1.MemoryStore, table string, dim int) {
	t.Helper()
	checkEngineGeneration(t, store, pgAdminPool(t), engine.Postgres, table, dim)
}

// checkEngineGeneration is checkGenerationVectors for a store on eng whose
// PostgreSQL the admin pool reaches.
func checkEngineGeneration(t *testing.T, store *memoryv1alpha1.MemoryStore, pool *pgxpool.Pool, eng, table string, dim int) {
	t.Helper()
	ctx := context.Background()
	schema := store.Status.Postgres.Schema
	s := pgstore.New(pool, schema)
	var items []memory.Item
	if err := s.Export(ctx, pgstore.ExportFilter{}, func(it memory.Item) error {
		items = append(items, it)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.MemoryID
	}
	idx, _, err := engine.Vectors{VectorEngine: eng, VectorTable: table}.Open(ctx, pool, schema, vector.Spec{Dimension: dim, Metric: vector.Cosine}, engine.Login{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := idx.(engine.Fetcher).Fetch(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.`+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(items) {
		t.Errorf("%s holds %d vectors for %d memories", table, n, len(items))
	}
	h := embed.NewHashing(dim)
	for _, it := range items {
		want, _ := h.Embed(ctx, embed.Passage, []string{it.EmbeddingText()})
		v := got[it.MemoryID]
		if len(v) != dim || !closeTo(v, vector.Normalize(want[0])) {
			t.Errorf("%s: %s has %v, not its text's %d-dimensional vector", it.MemoryID, table, v, dim)
		}
	}
	if t.Failed() {
		t.Logf("%d memories checked in %s", len(items), strings.Join([]string{schema, table}, "."))
	}
}

func closeTo(a, b []float32) bool {
	for i := range a {
		if d := a[i] - b[i]; d > 1e-5 || d < -1e-5 {
			return false
		}
	}
	return len(a) == len(b)
}
