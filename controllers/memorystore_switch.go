package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jackc/pgx/v5/pgxpool"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
	"github.com/amemory/memory-operator/internal/worker"
)

// A store switches embedding model in place when spec.embedder (or vector.dimension)
// changes once it serves (pgstore's generations.go has the mechanism):
//
//  1. the operator calibrates the new model, makes a new index generation (its
//     table) and records it, Building: from then on every change of a memory is
//     recorded for it, whoever writes;
//  2. a Job (`memory-operator reembed --follow`) fills it at spec.embeddingSwitch's
//     pace, catches up on the recorded changes, checks it (every memory has a vector,
//     the new model finds a sample of memories about as well as the serving one)
//     and marks it verified, then keeps catching up; status.embedding.switch shows
//     its progress, the Switching condition (and Reconciling) that it is under way;
//  3. once verified, and with no restore or archival Job of the store running, the
//     cutover begins: the serving generation is retained (changes are now recorded
//     for both), status.embedding.serving becomes the new one, so the gateway rolls
//     to it and every later Job uses it;
//  4. once every gateway pod serves the new generation and the old ones had time to
//     end, the new generation serves (changes are no longer recorded for it); the Job
//     finishes what was recorded before and ends;
//  5. the previous generation is kept, and kept current through the recorded changes,
//     for spec.embeddingSwitch.retainPrevious: setting the previous model again
//     switches back by catching up only. Then it is dropped.
//
// Searches use the serving generation throughout; a switch that fails or is
// abandoned (the spec set back before the cutover) leaves the store serving it, and
// drops the generation it was filling. Every engine switches in place: a
// generation's index is a table beside the serving one (Postgres: vectors_g<N>;
// PGVector: embeddings_g<N> with its own HNSW index), or a collection of its own
// marked as the store's, which the store's Milvus role may use (Milvus:
// <collection>_g<N>). EmbeddingSwitchUnsupported, which an older operator recorded
// for PGVector and Milvus, gives way to the switch.

const (
	reembedContainer = "reembed"
	// defaultRetainPrevious is how long the previous generation is kept after a
	// cutover, unless spec.embeddingSwitch.retainPrevious says otherwise.
	defaultRetainPrevious = 24 * time.Hour
	// switchRecheck is how often a switch in progress is looked at (its progress,
	// the gateway's rollout).
	switchRecheck = 10 * time.Second
	// reembedDeadline bounds a re-embed Job unless its options say otherwise: a
	// million memories at the default pace take three hours.
	reembedDeadline = int64(7 * 24 * 3600)
	// switchMaxBacklog is the most recorded changes the new generation may still owe
	// when the cutover begins: past it, searches on the new index would miss the
	// latest memories' vectors for longer than the cutover takes.
	switchMaxBacklog = 1000
)

// retainPrevious is how long the previous generation is kept after a cutover.
func retainPrevious(store *memoryv1alpha1.MemoryStore) time.Duration {
	if s := store.Spec.EmbeddingSwitch; s != nil && s.RetainPrevious != nil {
		return max(s.RetainPrevious.Duration, 0)
	}
	return defaultRetainPrevious
}

// generationIndex is where generation n of a store on engine keeps its vectors.
func generationIndex(eng string, names provision.Names, n int32) string {
	switch {
	case eng == provision.EngineMilvus && n > 1:
		return fmt.Sprintf("%s_g%d", names.Collection, n)
	case eng == provision.EngineMilvus:
		return names.Collection
	case n > 1:
		return provision.GenerationTable(eng, int(n))
	case eng == provision.EnginePGVector:
		return pgvector.Table
	}
	return pgindex.Table
}

// initEmbedding records the serving generation of a store that has none recorded:
// the one its spec describes (a store provisioned before switches existed served
// exactly that).
func initEmbedding(store *memoryv1alpha1.MemoryStore, eng string, names provision.Names) {
	if store.Status.Embedding != nil {
		return
	}
	dim := store.Spec.Vector.Dimension
	if v := store.Status.Vector; v != nil && v.Dimension > 0 {
		dim = v.Dimension
	}
	store.Status.Embedding = &memoryv1alpha1.EmbeddingStatus{Serving: memoryv1alpha1.EmbeddingGeneration{
		Generation: 1, Embedder: *store.Spec.Embedder.DeepCopy(), Dimension: dim,
		Index: generationIndex(eng, names, 1), Calibration: store.Status.Embedder.DeepCopy(),
	}}
}

// servingGeneration settles which generation the store is provisioned with: a
// change of embedding model is a switch, during which the store keeps serving its
// serving generation, and a switch's trouble never makes it less Ready (it is in
// the Switching condition, and returned to be retried). It says how soon to look
// again.
func (r *MemoryStoreReconciler) servingGeneration(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend,
	names provision.Names, eng string) (time.Duration, error) {
	if store.Status.Vector == nil { // first provisioning: the spec is what it serves
		initEmbedding(store, eng, names)
		noteNotSwitching(store)
		return 0, nil
	}
	again, err := r.reconcileSwitch(ctx, store, rb, names, eng)
	if err != nil {
		store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionFalse, reasonOf(err), "Embedding switch: "+err.Error())
	}
	return again, err
}

// withSwitch folds a switch's requeue and error into a reconcile's result.
func withSwitch(res ctrl.Result, err error, again time.Duration, switchErr error) (ctrl.Result, error) {
	if err == nil {
		err = switchErr
	}
	if again > 0 && (res.RequeueAfter == 0 || again < res.RequeueAfter) {
		res.RequeueAfter = again
	}
	return res, err
}

// noteNotSwitching records that the store serves what its spec says, unless the
// Switching condition already tells how the last switch ended.
func noteNotSwitching(store *memoryv1alpha1.MemoryStore) {
	switch conditionReason(store, memoryv1alpha1.ConditionSwitching) {
	case "", memoryv1alpha1.ReasonEmbeddingSwitchUnsupported, memoryv1alpha1.ReasonReembedding, memoryv1alpha1.ReasonCuttingOver:
		emb := store.Status.Embedding
		store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionFalse, memoryv1alpha1.ReasonNotSwitching,
			fmt.Sprintf("Serving %s (dimension %d) from index generation %d", modelName(emb.Serving), emb.Serving.Dimension, emb.Serving.Generation))
	}
}

// switchCtx is what one reconcile of a switch works with.
type switchCtx struct {
	store *memoryv1alpha1.MemoryStore
	rb    *resolvedBackend
	names provision.Names
	eng   string
	now   time.Time
}

// reconcileSwitch runs the switch state machine before the store is provisioned with
// its serving generation. It returns how soon to look again (0: no need).
func (r *MemoryStoreReconciler) reconcileSwitch(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend,
	names provision.Names, eng string) (time.Duration, error) {
	initEmbedding(store, eng, names)
	sc := switchCtx{store: store, rb: rb, names: names, eng: eng, now: time.Now()}
	emb := store.Status.Embedding
	want := modelDigest(store.Spec.Embedder, store.Spec.Vector.Dimension)
	if sw := emb.Switch; sw != nil && modelDigest(sw.To.Embedder, sw.To.Dimension) != want && sw.CutoverAt == nil {
		if err := r.abandonSwitch(ctx, sc, "spec.embedder changed again before the cutover"); err != nil {
			return 0, err
		}
	}
	if emb.Switch == nil && want == modelDigest(emb.Serving.Embedder, emb.Serving.Dimension) {
		// What does not change vectors (the token, the input limit) applies at once.
		emb.Serving.Embedder = *store.Spec.Embedder.DeepCopy()
		noteNotSwitching(store)
		return r.expirePrevious(ctx, sc)
	}
	if emb.Switch == nil {
		if err := r.startSwitch(ctx, sc); err != nil {
			store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionFalse, reasonOf(err), "Starting the switch: "+err.Error())
			return 0, err
		}
	}
	return r.followSwitch(ctx, sc)
}

// startSwitch begins a switch to the spec's model: back to the retained previous
// generation when it is that one (a rollback), else into a new generation.
func (r *MemoryStoreReconciler) startSwitch(ctx context.Context, sc switchCtx) error {
	store, emb := sc.store, sc.store.Status.Embedding
	want := modelDigest(store.Spec.Embedder, store.Spec.Vector.Dimension)
	sw := &memoryv1alpha1.EmbeddingSwitch{Phase: memoryv1alpha1.SwitchReembedding, StartedAt: metav1.NewTime(sc.now)}
	if p := emb.Previous; p != nil && modelDigest(p.Embedder, p.Dimension) == want {
		sw.To, sw.Rollback = *p.EmbeddingGeneration.DeepCopy(), true
		sw.To.Embedder = *store.Spec.Embedder.DeepCopy()
	} else {
		if p != nil {
			// A third model: the previous one will never serve again.
			if err := r.dropGeneration(ctx, sc, p.EmbeddingGeneration); err != nil {
				return err
			}
			emb.Previous = nil
		}
		n := max(emb.Serving.Generation, emb.HighestGeneration) + 1
		emb.HighestGeneration = n
		sw.To = memoryv1alpha1.EmbeddingGeneration{Generation: n, Embedder: *store.Spec.Embedder.DeepCopy(),
			Dimension: store.Spec.Vector.Dimension, Index: generationIndex(sc.eng, sc.names, n)}
	}
	e, cal, err := r.embedderFor(ctx, store, sw.To.Embedder, sw.To.Dimension, sw.To.Calibration)
	if err != nil {
		return err
	}
	sw.To.Calibration = cal
	if !sw.Rollback {
		if err := r.clearStaleGeneration(ctx, sc, sw.To, want); err != nil {
			return err
		}
		if err := r.ensureGenerationIndex(ctx, sc, sw.To); err != nil {
			return err
		}
		err := withAdmin(ctx, sc.rb.postgres, func(admin adminPool) error {
			serving := pgstore.Generation{Number: int(emb.Serving.Generation), Model: modelName(emb.Serving), Dimension: int(emb.Serving.Dimension), Location: emb.Serving.Index,
				Embedder: modelDigest(emb.Serving.Embedder, emb.Serving.Dimension)}
			next := pgstore.Generation{Number: int(sw.To.Generation), Model: e.Model(), Dimension: int(sw.To.Dimension), Location: sw.To.Index, Embedder: want}
			_, err := pgstore.StartGeneration(ctx, admin, sc.names.Schema, serving, next)
			return err
		})
		if err != nil {
			return err
		}
	}
	emb.Switch = sw
	what := "Switching"
	if sw.Rollback {
		what = "Rolling back"
	}
	r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "EmbeddingSwitchStarted", "Switch",
		"%s from %s (dimension %d) to %s (dimension %d) in index generation %d (%s)", what,
		modelName(emb.Serving), emb.Serving.Dimension, modelName(sw.To), sw.To.Dimension, sw.To.Generation, sw.To.Index)
	return nil
}

// clearStaleGeneration drops generation g when the store's database has it for
// another model than want: an operator that stopped after making it and before
// recording the switch in status, for a spec that changed since.
func (r *MemoryStoreReconciler) clearStaleGeneration(ctx context.Context, sc switchCtx, g memoryv1alpha1.EmbeddingGeneration, want string) error {
	var stale bool
	err := withAdmin(ctx, sc.rb.postgres, func(admin adminPool) error {
		found, err := pgstore.New(admin, sc.names.Schema).GenerationByNumber(ctx, int(g.Generation))
		if errors.Is(err, pgstore.ErrNoGeneration) {
			return nil
		}
		stale = err == nil && (found.Embedder != want || found.Dimension != int(g.Dimension))
		return err
	})
	if err != nil || !stale {
		return err
	}
	return r.dropGeneration(ctx, sc, g)
}

// followSwitch moves a switch along: its Job, its progress, the cutover.
func (r *MemoryStoreReconciler) followSwitch(ctx context.Context, sc switchCtx) (time.Duration, error) {
	store := sc.store
	sw := store.Status.Embedding.Switch
	if s := store.Spec.EmbeddingSwitch; s != nil && s.Suspend && sw.CutoverAt == nil {
		if err := r.deleteReembedJob(ctx, store, sw); err != nil {
			return 0, err
		}
		sw.Phase, sw.Message = memoryv1alpha1.SwitchSuspended, "spec.embeddingSwitch.suspend holds the switch; the store serves "+modelName(store.Status.Embedding.Serving)
		store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionFalse, memoryv1alpha1.ReasonSwitchSuspended, sw.Message)
		return 0, nil
	}
	job, err := r.reembedJob(ctx, store, sw)
	if err != nil {
		return 0, err
	}
	if job != nil {
		if c := jobFinished(job); c != nil && c.Type == batchv1.JobFailed {
			msg := workerError(ctx, r.APIReader, job, reembedContainer)
			if sum, perr := worker.ParseReembedSummary(msg); perr == nil && sum.Error != "" {
				msg = sum.Error
			}
			sw.Phase = memoryv1alpha1.SwitchFailed
			sw.Message = fmt.Sprintf("Job %s failed: %s; the store serves %s. Delete the Job to try again (it resumes), or set spec.embedder back",
				job.Name, orDefault(msg, c.Message), modelName(store.Status.Embedding.Serving))
			store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionFalse, memoryv1alpha1.ReasonSwitchFailed, sw.Message)
			return 0, nil
		}
	}
	return r.runSwitch(ctx, sc, job)
}

// runSwitch moves a switch that is neither suspended nor failed along: its Job (job,
// when it exists), its progress, the cutover.
func (r *MemoryStoreReconciler) runSwitch(ctx context.Context, sc switchCtx, job *batchv1.Job) (time.Duration, error) {
	store, sw := sc.store, sc.store.Status.Embedding.Switch
	if job == nil && sw.CutoverAt != nil {
		// The Job is deleted once it completed after the cutover. A reconcile that
		// did so and then lost its status (a conflicting write) finds no Job: the
		// database says whether anything is left for one.
		done, err := r.cutoverOwesNothing(ctx, sc)
		if err != nil {
			return 0, err
		}
		if done {
			return r.completeSwitch(ctx, sc)
		}
	}
	job, err := r.ensureReembedJob(ctx, sc, job)
	if err != nil {
		return 0, err
	}
	if job == nil { // Milvus has yet to apply the store's grants
		return milvusTenantRecheck, nil
	}
	sw.Job = job.Name
	if sw.Phase == memoryv1alpha1.SwitchFailed || sw.Phase == memoryv1alpha1.SwitchSuspended {
		sw.Phase = memoryv1alpha1.SwitchReembedding
	}
	g, err := r.recordProgress(ctx, sc)
	if err != nil {
		return 0, err
	}
	if sw.CutoverAt == nil {
		if g.VerifiedAt.IsZero() || sw.Backlog > switchMaxBacklog {
			if !g.VerifiedAt.IsZero() {
				sw.Message = fmt.Sprintf("The new index passed its check; the cutover waits for the Job to catch up on %d changes (writes faster than %s embeds hold it back)",
					sw.Backlog, modelName(sw.To))
			}
			store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionTrue, memoryv1alpha1.ReasonReembedding, sw.Message)
			return switchRecheck, nil
		}
		return r.beginCutover(ctx, sc)
	}
	return r.finishCutover(ctx, sc, job)
}

// recordProgress copies the generation's progress into status.embedding.switch.
func (r *MemoryStoreReconciler) recordProgress(ctx context.Context, sc switchCtx) (pgstore.Generation, error) {
	sw := sc.store.Status.Embedding.Switch
	var g pgstore.Generation
	err := withAdmin(ctx, sc.rb.postgres, func(admin adminPool) error {
		s := pgstore.New(admin, sc.names.Schema)
		var err error
		if g, err = s.GenerationByNumber(ctx, int(sw.To.Generation)); err != nil {
			return err
		}
		if sw.Total, err = s.IndexedCount(ctx); err != nil {
			return err
		}
		sw.Backlog, err = s.GenerationBacklog(ctx, g.Number)
		return err
	})
	if err != nil {
		return g, err
	}
	sw.Embedded = min(g.Embedded, sw.Total)
	if g.BackfillDone {
		sw.Embedded = sw.Total
	}
	sw.Rate, sw.ETA = "", nil
	if g.Rate > 0 && !g.BackfillDone {
		sw.Rate = strconv.FormatFloat(g.Rate, 'f', 1, 64)
		sw.ETA = &metav1.Duration{Duration: time.Duration(float64(max(sw.Total-sw.Embedded, 0)) / g.Rate * float64(time.Second)).Round(time.Second)}
	}
	if !g.VerifiedAt.IsZero() {
		sw.VerifiedAt = &metav1.Time{Time: g.VerifiedAt}
		sw.Recall = recallText(g.Recall)
		sw.ServingRecall = recallText(g.ServingRecall)
	}
	switch {
	case sw.CutoverAt != nil:
	case !g.VerifiedAt.IsZero():
		sw.Message = fmt.Sprintf("Index generation %d holds all %d memories and passed its check (self-recall %s, serving model %s)", g.Number, sw.Total, sw.Recall, sw.ServingRecall)
	case g.BackfillDone:
		sw.Message = fmt.Sprintf("Re-embedded all %d memories; catching up on %d changes and checking the new index", sw.Total, sw.Backlog)
	default:
		sw.Message = fmt.Sprintf("Re-embedding with %s (dimension %d): %d of %d memories", modelName(sw.To), sw.To.Dimension, sw.Embedded, sw.Total)
		if sw.ETA != nil {
			sw.Message += fmt.Sprintf(", %s a second, about %s left", sw.Rate, sw.ETA.Duration)
		}
	}
	return g, nil
}

func recallText(v float64) string {
	if v < 0 {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// beginCutover moves the store to the verified generation: it waits for the restore
// and archival Jobs that write the store with the serving configuration, retains
// the serving generation (changes are recorded for both from now on) and makes the
// new one the store's serving generation in status, which the gateway and later Jobs
// follow.
func (r *MemoryStoreReconciler) beginCutover(ctx context.Context, sc switchCtx) (time.Duration, error) {
	store, emb := sc.store, sc.store.Status.Embedding
	sw := emb.Switch
	if busy, err := r.storeWriters(ctx, store, nil); err != nil || busy != "" {
		if busy != "" {
			sw.Message = "The new index passed its check; the cutover waits for " + busy + " to end"
			store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionTrue, memoryv1alpha1.ReasonReembedding, sw.Message)
		}
		return switchRecheck, err
	}
	err := withAdmin(ctx, sc.rb.postgres, func(admin adminPool) error {
		if err := pgstore.BeginCutover(ctx, admin, sc.names.Schema, int(sw.To.Generation)); err != nil {
			return err
		}
		// The schema's recorded vector shape is the serving index's.
		return pgindex.ReplaceSpec(ctx, admin, sc.names.Schema, vectorSpec(store, sw.To.Dimension))
	})
	if err != nil {
		return 0, err
	}
	now := metav1.NewTime(sc.now)
	old := emb.Serving
	old.Calibration = store.Status.Embedder.DeepCopy()
	emb.Previous = &memoryv1alpha1.PreviousGeneration{EmbeddingGeneration: old, RetiredAt: now,
		RetainedUntil: metav1.NewTime(sc.now.Add(retainPrevious(store)))}
	emb.Serving = *sw.To.DeepCopy()
	store.Status.Embedder = sw.To.Calibration.DeepCopy()
	sw.Phase, sw.CutoverAt = memoryv1alpha1.SwitchCuttingOver, &now
	sw.Message = fmt.Sprintf("Cutting over to index generation %d: the gateway moves to %s", sw.To.Generation, modelName(sw.To))
	store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionTrue, memoryv1alpha1.ReasonCuttingOver, sw.Message)
	r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "EmbeddingCutoverStarted", "Switch", "%s", sw.Message)
	return switchRecheck, nil
}

// finishCutover ends the cutover once no writer with the previous configuration is
// left: every gateway pod serves the new generation (and those replaced had their
// grace period to end), and no restore or archival Job started before the cutover
// still runs. Then the new generation serves; the switch is over when its Job has
// caught up and ended.
func (r *MemoryStoreReconciler) finishCutover(ctx context.Context, sc switchCtx, job *batchv1.Job) (time.Duration, error) {
	store, emb := sc.store, sc.store.Status.Embedding
	sw := emb.Switch
	if sw.GatewayMovedAt == nil {
		moved, err := r.gatewayServes(ctx, store)
		if err != nil || !moved {
			return switchRecheck, err
		}
		now := metav1.NewTime(sc.now)
		sw.GatewayMovedAt = &now
	}
	grace := r.CutoverGrace
	if grace == 0 {
		grace = time.Duration(gatewayTerminationGrace) * time.Second
	}
	if wait := sw.GatewayMovedAt.Add(grace).Sub(sc.now); wait > 0 {
		sw.Message = "Every gateway pod serves the new index; waiting for replaced pods to end"
		return wait, nil
	}
	if busy, err := r.storeWriters(ctx, store, sw.CutoverAt); err != nil || busy != "" {
		if busy != "" {
			sw.Message = "Waiting for " + busy + ", started with the previous index, to end"
		}
		return switchRecheck, err
	}
	err := withAdmin(ctx, sc.rb.postgres, func(admin adminPool) error {
		return pgstore.CutOver(ctx, admin, sc.names.Schema, int(sw.To.Generation))
	})
	if err != nil {
		return 0, err
	}
	if c := jobFinished(job); c == nil || c.Type != batchv1.JobComplete {
		sw.Message = fmt.Sprintf("Index generation %d serves; Job %s finishes the changes recorded before", sw.To.Generation, job.Name)
		store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionTrue, memoryv1alpha1.ReasonCuttingOver, sw.Message)
		return switchRecheck, nil
	}
	return r.completeSwitch(ctx, sc)
}

// cutoverOwesNothing reports whether the switch's generation serves and owes no
// change recorded before the cutover: nothing is left for a Job to do.
func (r *MemoryStoreReconciler) cutoverOwesNothing(ctx context.Context, sc switchCtx) (bool, error) {
	n := int(sc.store.Status.Embedding.Switch.To.Generation)
	var done bool
	err := withAdmin(ctx, sc.rb.postgres, func(admin adminPool) error {
		s := pgstore.New(admin, sc.names.Schema)
		g, err := s.GenerationByNumber(ctx, n)
		if err != nil || g.State != pgstore.GenerationServing {
			return err
		}
		backlog, err := s.GenerationBacklog(ctx, n)
		done = backlog == 0
		return err
	})
	return done, err
}

// completeSwitch ends a switch whose generation serves and whose Job did all it had
// to: the Job goes, the status says how it ended.
func (r *MemoryStoreReconciler) completeSwitch(ctx context.Context, sc switchCtx) (time.Duration, error) {
	store, emb := sc.store, sc.store.Status.Embedding
	sw := emb.Switch
	// Its work is done; its logs are the pod's, which goes with it.
	if err := r.deleteReembedJob(ctx, store, sw); err != nil {
		return 0, err
	}
	msg := fmt.Sprintf("Switched to %s (dimension %d, index generation %d) in %s; %s (dimension %d) is kept until %s for a rollback",
		modelName(sw.To), sw.To.Dimension, sw.To.Generation, sc.now.Sub(sw.StartedAt.Time).Round(time.Second),
		modelName(emb.Previous.EmbeddingGeneration), emb.Previous.Dimension, emb.Previous.RetainedUntil.UTC().Format(time.RFC3339))
	emb.Switch, emb.LastSwitch = nil, msg
	store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionFalse, memoryv1alpha1.ReasonSwitchCompleted, msg)
	r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "EmbeddingSwitchCompleted", "Switch", "%s", msg)
	return r.expirePrevious(ctx, sc)
}

// gatewayServes reports whether the store's gateway runs the serving generation on
// every pod: its Deployment rolled out, with the serving index and model. A store
// without a gateway has nothing to wait for.
func (r *MemoryStoreReconciler) gatewayServes(ctx context.Context, store *memoryv1alpha1.MemoryStore) (bool, error) {
	if !store.GatewayEnabled() {
		return true, nil
	}
	var d appsv1.Deployment
	if err := r.Get(ctx, client.ObjectKey{Namespace: store.Namespace, Name: store.GatewayName()}, &d); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if len(d.Spec.Template.Spec.Containers) == 0 {
		return false, nil
	}
	cfg, err := gateway.ParseArgs(d.Spec.Template.Spec.Containers[0].Args[1:], io.Discard)
	if err != nil {
		return false, nil //nolint:nilerr // a Deployment of another version: not ours to judge, wait for the update
	}
	serving := store.Status.Embedding.Serving
	want := storeVectors(store, "")
	if cfg.Dimension != int(serving.Dimension) || cfg.VectorTable != want.VectorTable || cfg.Collection != want.Collection {
		return false, nil
	}
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == replicas && st.Replicas == replicas && st.AvailableReplicas == replicas, nil
}

// storeWriters names a restore or archival Job that writes into the store and still
// runs (started before since, when given), or "" when there is none.
func (r *MemoryStoreReconciler) storeWriters(ctx context.Context, store *memoryv1alpha1.MemoryStore, since *metav1.Time) (string, error) {
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(store.Namespace), client.MatchingLabels{memoryv1alpha1.LabelStore: store.Name}); err != nil {
		return "", err
	}
	for _, j := range jobs.Items {
		switch j.Labels["app.kubernetes.io/component"] {
		case restoreContainer, archiveContainer:
		default:
			continue
		}
		if jobFinished(&j) != nil || (since != nil && !j.CreationTimestamp.Before(since)) {
			continue
		}
		return "Job " + j.Name, nil
	}
	return "", nil
}

// abandonSwitch stops a switch before its cutover: its Job goes, and the generation
// it was filling (unless it is the retained previous one, which stays for its time).
func (r *MemoryStoreReconciler) abandonSwitch(ctx context.Context, sc switchCtx, why string) error {
	emb := sc.store.Status.Embedding
	sw := emb.Switch
	if err := r.deleteReembedJob(ctx, sc.store, sw); err != nil {
		return err
	}
	if !sw.Rollback {
		if err := r.dropGeneration(ctx, sc, sw.To); err != nil {
			return err
		}
	}
	msg := fmt.Sprintf("Abandoned the switch to %s (%s); the store serves %s", modelName(sw.To), why, modelName(emb.Serving))
	emb.Switch, emb.LastSwitch = nil, msg
	sc.store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionFalse, memoryv1alpha1.ReasonSwitchAbandoned, msg)
	r.Recorder.Eventf(sc.store, nil, corev1.EventTypeNormal, "EmbeddingSwitchAbandoned", "Switch", "%s", msg)
	return nil
}

// expirePrevious drops the previous generation once its time is up, and says when
// to look again otherwise.
func (r *MemoryStoreReconciler) expirePrevious(ctx context.Context, sc switchCtx) (time.Duration, error) {
	emb := sc.store.Status.Embedding
	p := emb.Previous
	if p == nil || emb.Switch != nil {
		return 0, nil
	}
	// The spec's retention as it is now, from when the generation stopped serving.
	p.RetainedUntil = metav1.NewTime(p.RetiredAt.Add(retainPrevious(sc.store)))
	if left := p.RetainedUntil.Sub(sc.now); left > 0 {
		return left, nil
	}
	if err := r.dropGeneration(ctx, sc, p.EmbeddingGeneration); err != nil {
		return 0, err
	}
	emb.Previous = nil
	r.Recorder.Eventf(sc.store, nil, corev1.EventTypeNormal, "PreviousGenerationDropped", "Switch",
		"Dropped index generation %d (%s, %s): its time for a rollback ended", p.Generation, modelName(p.EmbeddingGeneration), p.Index)
	return 0, nil
}

// dropGeneration forgets a generation that does not serve and drops its vectors.
// Only vectors go: every memory is in the store's tables, and any generation can be
// made again from them, so no snapshot precedes it.
func (r *MemoryStoreReconciler) dropGeneration(ctx context.Context, sc switchCtx, g memoryv1alpha1.EmbeddingGeneration) error {
	if g.Generation == sc.store.Status.Embedding.Serving.Generation {
		return fmt.Errorf("refusing to drop index generation %d: it serves", g.Generation)
	}
	err := withAdmin(ctx, sc.rb.postgres, func(admin adminPool) error {
		return pgstore.DropGeneration(ctx, admin, sc.names.Schema, int(g.Generation))
	})
	if err != nil {
		return err
	}
	if sc.eng == provision.EngineMilvus {
		return provision.DropMilvusGeneration(ctx, *sc.rb.milvus, servingNames(sc.store, sc.names), g.Index, ownerOf(sc.store))
	}
	return provision.DropGenerationTable(ctx, sc.rb.postgres, sc.names, sc.eng, int(g.Generation))
}

// ensureGenerationIndex makes generation g's index beside the serving one: a table
// in the store's schema (Postgres, PGVector), or a collection marked as the store's
// that its Milvus role may use (Milvus).
func (r *MemoryStoreReconciler) ensureGenerationIndex(ctx context.Context, sc switchCtx, g memoryv1alpha1.EmbeddingGeneration) error {
	spec := vectorSpec(sc.store, g.Dimension)
	if sc.eng == provision.EngineMilvus {
		return provision.EnsureMilvusGeneration(ctx, *sc.rb.milvus, sc.names, g.Index, ownerOf(sc.store), spec)
	}
	return provision.EnsureGenerationTable(ctx, sc.rb.postgres, sc.names, sc.eng, int(g.Generation), spec, pgvectorParams(sc.store))
}

// ensureReembedJob returns the switch's Job, job when it exists, else a new one once
// the store's logins may use the new generation's index; until then it returns no
// Job (and says why in status).
func (r *MemoryStoreReconciler) ensureReembedJob(ctx context.Context, sc switchCtx, job *batchv1.Job) (*batchv1.Job, error) {
	if job != nil {
		return job, nil
	}
	sw := sc.store.Status.Embedding.Switch
	pending, err := r.generationGrantsPending(ctx, sc, sw.To)
	if err != nil {
		return nil, err
	}
	if pending != "" {
		sw.Message = "Waiting for Milvus to apply the store's privileges on the new collection: " + pending
		sc.store.SetCondition(memoryv1alpha1.ConditionSwitching, metav1.ConditionTrue, memoryv1alpha1.ReasonReembedding, sw.Message)
		return nil, nil
	}
	return r.createReembedJob(ctx, sc)
}

// generationGrantsPending says why the store's Milvus user cannot use generation
// g's collection yet ("" once it can, or when the server has no users): Milvus
// applies grants seconds late, and a Job started before would fail on them.
func (r *MemoryStoreReconciler) generationGrantsPending(ctx context.Context, sc switchCtx, g memoryv1alpha1.EmbeddingGeneration) (string, error) {
	if sc.eng != provision.EngineMilvus || sc.rb.milvus.Username == "" || sc.store.Status.Vector == nil || sc.store.Status.Vector.MilvusUser == "" {
		return "", nil
	}
	password, err := r.secretPassword(ctx, sc.store, sc.store.WorkerSecretName(), keyMilvusPassword)
	if err != nil {
		return "", err
	}
	login := provision.MilvusConn{Address: sc.rb.milvus.Address, Username: sc.store.Status.Vector.MilvusUser, Password: password}
	err = provision.MilvusGenerationWorks(ctx, login, sc.names, g.Index)
	if errors.Is(err, provision.ErrMilvusTenantPending) {
		return err.Error(), nil
	}
	return "", err
}

// reembedJobName names the re-embed Job of generation n.
func reembedJobName(store *memoryv1alpha1.MemoryStore, n int32) string {
	return suffixedJobName(store, fmt.Sprintf("-reembed-g%d", n))
}

// reembedJob is the switch's Job, if it exists.
func (r *MemoryStoreReconciler) reembedJob(ctx context.Context, store *memoryv1alpha1.MemoryStore, sw *memoryv1alpha1.EmbeddingSwitch) (*batchv1.Job, error) {
	var job batchv1.Job
	err := r.Get(ctx, client.ObjectKey{Namespace: store.Namespace, Name: reembedJobName(store, sw.To.Generation)}, &job)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(&job, store) {
		return nil, fmt.Errorf("the Job %s exists and is not this store's", job.Name)
	}
	return &job, nil
}

func (r *MemoryStoreReconciler) deleteReembedJob(ctx context.Context, store *memoryv1alpha1.MemoryStore, sw *memoryv1alpha1.EmbeddingSwitch) error {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: reembedJobName(store, sw.To.Generation)}}
	err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return client.IgnoreNotFound(err)
}

// createReembedJob creates the switch's Job.
func (r *MemoryStoreReconciler) createReembedJob(ctx context.Context, sc switchCtx) (*batchv1.Job, error) {
	job := buildReembedJob(sc.store, r.GatewayImage, sc.rb.milvusAddress())
	if err := r.Create(ctx, job); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return job, nil
		}
		return nil, err
	}
	return job, nil
}

// reembedConfig is the worker's configuration for the store's switch: the new
// generation's index and model, the serving one's to compare with.
func reembedConfig(store *memoryv1alpha1.MemoryStore, milvusAddress string) worker.ReembedConfig {
	emb := store.Status.Embedding
	sw := emb.Switch
	cfg := worker.ReembedConfig{
		StoreNamespace: store.Namespace, StoreName: store.Name, Tenant: store.Spec.Tenant,
		Generation: int(sw.To.Generation),
		Vectors:    generationVectors(store, sw.To, milvusAddress),
		Embedder:   embedderSettings(store, sw.To),
		Rate:       memoryv1alpha1.DefaultSwitchMaxRate,
		Follow:     true,
		Serving:    &worker.ServingIndex{Vectors: storeVectors(store, milvusAddress), Embedder: embedderSettings(store, emb.Serving)},
	}
	if pg := store.Status.Postgres; pg != nil {
		cfg.Schema = pg.Schema
	}
	if s := store.Spec.EmbeddingSwitch; s != nil {
		if s.MaxRate != nil {
			cfg.Rate = float64(*s.MaxRate)
		}
		if s.Tolerance != "" {
			cfg.Tolerance, _ = strconv.ParseFloat(s.Tolerance, 64)
		}
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance, _ = strconv.ParseFloat(memoryv1alpha1.DefaultSwitchTolerance, 64)
	}
	return cfg
}

// generationVectors locates generation g's index as the store's serving one is
// located (storeVectors), with g's table or collection.
func generationVectors(store *memoryv1alpha1.MemoryStore, g memoryv1alpha1.EmbeddingGeneration, milvusAddress string) engine.Vectors {
	v := storeVectors(store, milvusAddress)
	switch v.VectorEngine {
	case engine.Milvus:
		v.Collection = g.Index
	case engine.Postgres, engine.PGVector:
		v.VectorTable = generationTable(g.Index)
	}
	return v
}

// embedderSettings is generation g's embedder as a worker takes it.
func embedderSettings(store *memoryv1alpha1.MemoryStore, g memoryv1alpha1.EmbeddingGeneration) worker.EmbedderSettings {
	maxBytes, overflow := g.Embedder.InputLimitOrDefault()
	s := worker.EmbedderSettings{Type: string(memoryv1alpha1.EmbedderHashing), Model: g.Embedder.Model, Dimension: int(g.Dimension),
		Metric: string(store.MetricOrDefault()), Roles: calibratedRoles(g.Calibration), MaxInputBytes: int(maxBytes), Overflow: string(overflow)}
	if g.Embedder.Type == memoryv1alpha1.EmbedderOpenAI {
		s.Type, s.Endpoint = string(g.Embedder.Type), g.Embedder.Endpoint
	}
	return s
}

// buildReembedJob is the Job running `memory-operator reembed --follow` for the
// store's switch: owned by the store, the worker login and the embedders' tokens by
// reference, retried (each run resumes where the last one stopped), no deadline
// beyond a week unless spec.embeddingSwitch.job sets one.
func buildReembedJob(store *memoryv1alpha1.MemoryStore, image, milvusAddress string) *batchv1.Job {
	cfg := reembedConfig(store, milvusAddress)
	emb := store.Status.Embedding
	env := []corev1.EnvVar{secretEnv(worker.EnvPostgresURI, store.Status.WorkerSecret, keyURI)}
	env = append(env, milvusLoginEnv(store, store.Status.WorkerSecret)...)
	if e := emb.Switch.To.Embedder; e.Type == memoryv1alpha1.EmbedderOpenAI && e.APIKeySecret != nil {
		env = append(env, secretEnv(worker.EnvEmbedderAPIKey, e.APIKeySecret.Name, e.APIKeySecret.Key))
	}
	env = append(env, embedderAPIKeyEnv(store, worker.EnvServingEmbedderAPIKey)...)
	labels := map[string]string{}
	setLabelIfValid(labels, memoryv1alpha1.LabelStore, store.Name)
	opts := memoryv1alpha1.JobOptions{ActiveDeadlineSeconds: ptr.To(reembedDeadline)}
	if s := store.Spec.EmbeddingSwitch; s != nil && s.Job != nil {
		opts = *s.Job.DeepCopy()
		if opts.ActiveDeadlineSeconds == nil {
			opts.ActiveDeadlineSeconds = ptr.To(reembedDeadline)
		}
	}
	return buildWorkerJob(workerJobSpec{
		Owner: store, Kind: "MemoryStore", Name: reembedJobName(store, emb.Switch.To.Generation), Command: reembedContainer,
		Image: image, Args: cfg.Args(), Env: env, Labels: labels, Options: opts,
	})
}

// modelName is the model a generation's vectors are of, as its embedder names it.
func modelName(g memoryv1alpha1.EmbeddingGeneration) string {
	if g.Calibration != nil && g.Calibration.Model != "" {
		return g.Calibration.Model
	}
	if g.Embedder.Type == memoryv1alpha1.EmbedderOpenAI {
		return g.Embedder.Model
	}
	return embedHashingModel
}

// reasonOf is the condition reason an error carries, BackendError when none.
func reasonOf(err error) string {
	var se *stepError
	var pe *provision.Error
	switch {
	case errors.As(err, &se):
		return se.reason
	case errors.As(err, &pe):
		return string(pe.Reason)
	}
	return memoryv1alpha1.ReasonBackendError
}

// milvusAddress is the backend's Milvus server, "" without one.
func (rb *resolvedBackend) milvusAddress() string {
	if rb.milvus == nil {
		return ""
	}
	return rb.milvus.Address
}

// vectorSpec is the store's vector shape at dimension dim.
func vectorSpec(store *memoryv1alpha1.MemoryStore, dim int32) vector.Spec {
	return vector.Spec{Dimension: int(dim), Metric: vector.Metric(store.MetricOrDefault())}
}

// adminPool is the store's PostgreSQL as the backend's admin.
type adminPool = *pgxpool.Pool

// withAdmin runs f with a pool of the backend's admin, closed afterwards.
func withAdmin(ctx context.Context, c provision.PostgresConn, f func(adminPool) error) error {
	pool, err := provision.OpenPool(ctx, c)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(pool)
}

// findCondition is the store's condition of type t, or nil.
func findCondition(store *memoryv1alpha1.MemoryStore, t string) *metav1.Condition {
	return meta.FindStatusCondition(store.Status.Conditions, t)
}

// conditionReason is the reason of the store's condition of type t ("" without one).
func conditionReason(store *memoryv1alpha1.MemoryStore, t string) string {
	if c := findCondition(store, t); c != nil {
		return c.Reason
	}
	return ""
}

// embedHashingModel is the hashing embedder's model name (any dimension).
var embedHashingModel = embed.NewHashing(vector.MinDimension).Model()
