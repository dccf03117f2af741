package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// ownerOf identifies a store in the marks it leaves on backends. Namespace and name (not
// UID) so that a store deleted with Retain and created again adopts its data.
func ownerOf(store *memoryv1alpha1.MemoryStore) string { return store.Namespace + "/" + store.Name }

// milvusTenantRecheck is how soon provisioning looks again while Milvus has not yet
// applied the store's new user or role.
const milvusTenantRecheck = 3 * time.Second

// vectorOwner is the store's claim on its Milvus collection. A collection made before
// collections carried owner marks is adopted only when this store's status already
// records it as its own (a store that met another's collection never got that far);
// provisioning also wants the store's schema to carry its mark (EnsureVectors).
func vectorOwner(store *memoryv1alpha1.MemoryStore, names provision.Names) milvus.Owner {
	v := store.Status.Vector
	return milvus.Owner{ID: ownerOf(store), AdoptUnmarked: v != nil && v.Engine == provision.EngineMilvus && v.Collection == names.Collection}
}

// provision runs the ordered steps and records a condition for each. It stops at the
// first failure: later steps depend on earlier ones (the role needs the schema, the
// Secret needs everything).
func (r *MemoryStoreReconciler) provision(ctx context.Context, store *memoryv1alpha1.MemoryStore) (ctrl.Result, error) {
	store.Status.ObservedGeneration = store.Generation
	if meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionReady) == nil {
		store.SetCondition(memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonProvisioning, "Provisioning backends")
	}

	rb, err := r.resolveBackend(ctx, store)
	if err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionReady, err)
	}
	names, err := provision.NamesFor(store.Spec.Tenant, rb.basePrefix())
	if err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionReady, err)
	}
	// Before anything is made: an engine the backend cannot serve, or one other than
	// the store's vectors are in, changes nothing.
	eng, err := desiredEngine(store, rb.spec)
	if err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionVectorReady, err)
	}
	passwords, err := r.rolePasswords(ctx, store)
	if err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionReady, err)
	}

	if wait, err := r.ensureSchema(ctx, store, rb, names, passwords); err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionPostgresReady, err)
	} else if wait {
		return ctrl.Result{RequeueAfter: preChangeRecheck}, nil
	}

	switchAgain, switchErr := r.servingGeneration(ctx, store, rb, names, string(eng))
	// On Milvus the serving generation's collection is the store's from here on.
	names = servingNames(store, names)

	embedder, err := r.embedder(ctx, store)
	if err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionEmbedderReady, err)
	}
	spec := vectorSpec(store, servingDimension(store))
	vec, err := r.ensureVectors(ctx, store, rb, names, eng, spec)
	if errors.Is(err, provision.ErrMilvusTenantPending) {
		// Milvus applies users and grants a few seconds late: wait, it is no failure.
		store.SetCondition(memoryv1alpha1.ConditionVectorReady, metav1.ConditionFalse, memoryv1alpha1.ReasonProvisioning, err.Error())
		return ctrl.Result{RequeueAfter: milvusTenantRecheck}, nil
	}
	if err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionVectorReady, err)
	}
	if vec.Engine == provision.EnginePostgres {
		vec.Collection = names.Schema + "." + store.Status.Embedding.Serving.Index
	}
	store.Status.Vector = &memoryv1alpha1.VectorStatus{
		Engine: vec.Engine, Collection: vec.Collection, Dimension: servingDimension(store),
		Metric: string(spec.Metric), EmbeddingModel: embedder.Model(), MilvusUser: vec.milvusUser, Extension: vec.Extension,
	}
	message := fmt.Sprintf("%s index %s, dimension %d, metric %s", vec.Engine, vec.Collection, spec.Dimension, spec.Metric)
	if vec.milvusUser != "" {
		message += "; the gateway and the Jobs log in as Milvus user " + vec.milvusUser
	}
	if vec.SearchIndexDeferredSince != "" {
		message += "; a restore has held the HNSW index back since " + vec.SearchIndexDeferredSince +
			" (searches are exact, and slower, until it completes and builds it)"
	}
	store.SetCondition(memoryv1alpha1.ConditionVectorReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned, message)
	if vec.Created {
		r.Recorder.Eventf(store, nil, "Normal", "CollectionCreated", "Provision", "Created %s index %s", vec.Engine, vec.Collection)
	}

	if err := r.ensureObjectStore(ctx, store, rb, names); err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionObjectStoreReady, err)
	}

	redisLogin, err := r.ensureShortTerm(ctx, store, rb, names)
	if err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionShortTermReady, err)
	}

	info := connectionInfo{backend: rb, names: names, passwords: passwords, engine: vec.Engine, model: embedder.Model(),
		milvusUser: vec.milvusUser, milvusPassword: vec.milvusPassword, redis: redisLogin}
	if err := r.ensureConnectionSecret(ctx, store, info); err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionReady, err)
	}
	store.Status.ConnectionSecret = store.ConnectionSecretNameOrDefault()
	if err := r.ensureWorkerSecret(ctx, store, info); err != nil {
		return r.stepFailed(store, memoryv1alpha1.ConditionReady, err)
	}
	store.Status.WorkerSecret = store.WorkerSecretName()
	if token := store.RotationRequested(); token != "" {
		now := metav1.Now()
		store.Status.CredentialsRotation, store.Status.CredentialsRotatedAt = token, &now
		r.Recorder.Eventf(store, nil, "Normal", "CredentialsRotated", "Provision",
			"Gave roles %s and %s%s new passwords (rotate-credentials %q); the gateway restarts with them",
			names.Role, names.WorkerRole, milvusUserNote(info.milvusUser), token)
	}

	store.SetCondition(memoryv1alpha1.ConditionDegraded, metav1.ConditionFalse, memoryv1alpha1.ReasonNoConflict, "Backends match the spec")
	store.SetCondition(memoryv1alpha1.ConditionReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned,
		fmt.Sprintf("Memory store for tenant %s is ready; agents mount Secret %s", store.Spec.Tenant, store.Status.ConnectionSecret))
	res, err := r.reconcileGateway(ctx, store, info)
	return withSwitch(res, err, switchAgain, switchErr)
}

// ensureSchema makes the store's schema, migrated, and its roles (EnsurePostgres),
// and records them. When an operator upgrade must migrate the schema, that waits
// for a snapshot of it first (snapshotBeforeMigration): wait says so.
func (r *MemoryStoreReconciler) ensureSchema(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend,
	names provision.Names, passwords provision.Passwords) (wait bool, err error) {
	if wait, err := r.snapshotBeforeMigration(ctx, store, rb, names); wait || err != nil {
		return wait, err
	}
	pg, err := provision.EnsurePostgres(ctx, rb.postgres, names, ownerOf(store), passwords)
	if err != nil {
		return false, err
	}
	store.Status.Postgres = &memoryv1alpha1.PostgresStatus{
		Database: rb.postgres.Database, Schema: names.Schema, Role: names.Role, WorkerRole: names.WorkerRole, SchemaVersion: pg.SchemaVersion,
	}
	store.Status.LastRestore = receivedRestore(pg.LastRestore)
	store.SetCondition(memoryv1alpha1.ConditionPostgresReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned,
		fmt.Sprintf("Schema %s at version %d, roles %s (agents) and %s (Jobs)", names.Schema, pg.SchemaVersion, names.Role, names.WorkerRole))
	return false, nil
}

// ensureObjectStore reserves the store's object-storage prefix when its backend
// has object storage, and records it.
func (r *MemoryStoreReconciler) ensureObjectStore(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend, names provision.Names) error {
	if rb.s3 == nil {
		store.Status.ObjectStorage = nil
		meta.RemoveStatusCondition(&store.Status.Conditions, memoryv1alpha1.ConditionObjectStoreReady)
		return nil
	}
	if err := provision.EnsureObjectStore(ctx, *rb.s3, names, ownerOf(store)); err != nil {
		return err
	}
	store.Status.ObjectStorage = &memoryv1alpha1.ObjectStorageStatus{
		Endpoint: rb.s3.Endpoint, Bucket: rb.s3.Bucket, Prefix: names.Prefix,
	}
	store.SetCondition(memoryv1alpha1.ConditionObjectStoreReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned,
		fmt.Sprintf("Prefix %s reserved in bucket %s", names.Prefix, rb.s3.Bucket))
	return nil
}

// receivedRestore is the store's record of a restore, for status.
func receivedRestore(r *pgstore.ReceivedRestore) *memoryv1alpha1.ReceivedRestore {
	if r == nil {
		return nil
	}
	name := r.Name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:] // recorded as namespace/name; the restore is in the store's namespace
	}
	return &memoryv1alpha1.ReceivedRestore{Name: name, UID: types.UID(r.UID), PackageID: r.PackageID,
		ManifestSHA256: r.ManifestSHA256, Source: r.Source, CompletedAt: metav1.NewTime(r.CompletedAt)}
}

// embedder builds the store's embedder with its resolved roles, and calibrates the
// near-duplicate threshold for it when the embedder spec changed (status.embedder).
// An OpenAI-compatible endpoint is asked for one embedding to prove it answers with
// the declared dimension; Auto roles are probed (embed.DetectRoles) only when the
// spec changed, and reused from status otherwise. A failure to probe or calibrate
// stops provisioning with CalibrationFailed: the gateway keeps what it had and is
// never given an uncalibrated threshold.
func (r *MemoryStoreReconciler) embedder(ctx context.Context, store *memoryv1alpha1.MemoryStore) (embed.Embedder, error) {
	e, dim := servingEmbedder(store), servingDimension(store)
	emb, cal, err := r.embedderFor(ctx, store, e, dim, store.Status.Embedder)
	if err != nil {
		return nil, err
	}
	store.Status.Embedder = cal
	if e.Type == memoryv1alpha1.EmbedderOpenAI {
		store.SetCondition(memoryv1alpha1.ConditionEmbedderReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned,
			fmt.Sprintf("Model %s answers with dimension %d; roles %s; dedup threshold %s", e.Model, dim, emb.Roles(), cal.DedupThreshold))
	} else {
		meta.RemoveStatusCondition(&store.Status.Conditions, memoryv1alpha1.ConditionEmbedderReady)
	}
	return emb, nil
}

// embedderFor builds the embedder spec e makes at dimension dim, with its roles
// resolved, and returns it with its calibration: cal when that was made for the same
// spec, a fresh one otherwise.
func (r *MemoryStoreReconciler) embedderFor(ctx context.Context, store *memoryv1alpha1.MemoryStore, e memoryv1alpha1.EmbedderSpec, dim32 int32,
	cal *memoryv1alpha1.EmbedderStatus) (embed.Embedder, *memoryv1alpha1.EmbedderStatus, error) {
	dim := int(dim32)
	digest := embedderDigest(e, dim32)
	fresh := cal != nil && cal.CalibratedFor == digest
	var emb embed.Embedder
	if e.Type == "" || e.Type == memoryv1alpha1.EmbedderHashing {
		emb = embed.NewHashing(dim)
	} else {
		var apiKey string
		if ref := e.APIKeySecret; ref != nil {
			v, err := secretStrings(ctx, r.APIReader, store.Namespace, ref.Name, ref.Key)
			if err != nil {
				return nil, nil, err
			}
			apiKey = v[0]
		}
		cfg := embed.Config{BaseURL: e.Endpoint, Model: e.Model, Dimension: dim, APIKey: apiKey}
		// The readiness check sends no roles, which every server accepts: an endpoint
		// that is down or answers another dimension is EmbedderFailed, before any
		// probing.
		plain, err := embed.NewOpenAI(cfg)
		if err != nil {
			return nil, nil, stepErrorf(memoryv1alpha1.ReasonEmbedderFailed, "embedder: %v", err)
		}
		if _, err := plain.Embed(ctx, embed.Passage, []string{"memory-operator readiness check"}); err != nil {
			return nil, nil, stepErrorf(memoryv1alpha1.ReasonEmbedderFailed, "embedder %s at %s: %v", e.Model, e.Endpoint, err)
		}
		switch cfg.Roles = declaredRoles(e); {
		case fresh:
			cfg.Roles = calibratedRoles(cal)
		case cfg.Roles.Convention == embed.ConventionAuto:
			roles, err := embed.DetectRoles(ctx, cfg)
			if err != nil {
				return nil, nil, stepErrorf(memoryv1alpha1.ReasonCalibrationFailed, "embedder %s at %s: %v", e.Model, e.Endpoint, err)
			}
			cfg.Roles = roles
		}
		if emb, err = embed.NewOpenAI(cfg); err != nil {
			return nil, nil, stepErrorf(memoryv1alpha1.ReasonEmbedderFailed, "embedder: %v", err)
		}
	}
	if !fresh {
		var err error
		if cal, err = r.calibrate(ctx, store, emb, digest); err != nil {
			return nil, nil, err
		}
	}
	return emb, cal, nil
}

// stepFailed records a failed step on its condition and on Ready. Conflicts that only a
// human can resolve mark the store Degraded and are re-checked slowly; everything else
// is returned as an error so the work queue retries it with exponential backoff.
func (r *MemoryStoreReconciler) stepFailed(store *memoryv1alpha1.MemoryStore, condType string, err error) (ctrl.Result, error) {
	reason, message := memoryv1alpha1.ReasonBackendError, err.Error()
	var se *stepError
	var pe *provision.Error
	switch {
	case errors.As(err, &se):
		reason = se.reason
	case errors.As(err, &pe):
		reason = string(pe.Reason)
	}
	if condType != memoryv1alpha1.ConditionReady {
		store.SetCondition(condType, metav1.ConditionFalse, reason, message)
	}
	store.SetCondition(memoryv1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)

	if pe != nil && pe.Permanent() {
		store.SetCondition(memoryv1alpha1.ConditionDegraded, metav1.ConditionTrue, reason,
			message+"; nothing was changed or dropped")
		return ctrl.Result{RequeueAfter: conflictRecheck}, nil
	}
	return ctrl.Result{}, err
}
