package controllers

import (
	"io"
	"path"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/worker"
)

// The restore worker Job. Everything here is pure: a restore, its target store and the
// resolved source in, a Job out. The arguments come from worker.RestoreConfig, the
// contract the worker parses; every secret reaches the pod by reference, and a scope
// map kept in a ConfigMap or Secret is mounted as a file, never read by the operator.
const (
	restoreContainer = "restore"
	// mappingVolume holds a ConfigMap or Secret scope map at worker.MappingDir.
	mappingVolume = "mapping"
)

// restoreSourcePlan is the package a restore reads and the Secrets, in the restore's
// namespace, that open it. For an import (planImport) it is the object storage the Job
// reads its file from, or only writes its per-scope detail to.
type restoreSourcePlan struct {
	// Package is the package's location; its Prefix ends in '/' (empty for an import).
	Package     worker.Destination
	Credentials memoryv1alpha1.ObjectStorageCredentials
	// Key is the package key's Secret; nil for an unencrypted package.
	Key *corev1.SecretKeySelector
	// Snapshot is the MemorySnapshot read ("" for a location), and ManifestSHA256 the
	// manifest it recorded, which the worker insists on.
	Snapshot       string
	ManifestSHA256 string
	// ImportObject is an import's file, in Package.Bucket ("" for a database).
	ImportObject string
	// DetailKey is where an import's per-scope detail goes, in Package.Bucket; a
	// package's goes next to it.
	DetailKey string
}

// planLocation is the source plan of a restore from a location: the spec as it is, with
// the credentials' default keys.
func planLocation(restore *memoryv1alpha1.MemoryRestore) restoreSourcePlan {
	src := restore.Spec.Source
	loc := src.Location
	creds := loc.CredentialsSecret
	creds.AccessKeyIDKey = orDefault(creds.AccessKeyIDKey, "accessKeyID")
	creds.SecretAccessKeyKey = orDefault(creds.SecretAccessKeyKey, "secretAccessKey")
	return restoreSourcePlan{
		Package: worker.Destination{Endpoint: loc.Endpoint, Region: loc.Region, Insecure: loc.Insecure,
			Bucket: loc.Bucket, Prefix: loc.PackagePrefix()},
		Credentials: creds,
		Key:         packageKeyRef(src),
	}
}

// packageKeyRef is the source's key Secret, nil when the package is read unencrypted.
func packageKeyRef(src memoryv1alpha1.RestoreSource) *corev1.SecretKeySelector {
	if src.Unencrypted {
		return nil
	}
	return src.KeySecret
}

// restoreJobInputs is what the controller resolved for the Job besides the restore and
// its target.
type restoreJobInputs struct {
	// Image is the operator's own image.
	Image  string
	Source restoreSourcePlan
	// MilvusAddress is the target's Milvus server, when its vectors live there.
	MilvusAddress string
}

// mapFormat is the worker's format of a large scope map: the declared one, or the one
// its key's extension names. ok is false when neither says (the CRD prevents it).
func mapFormat(src *memoryv1alpha1.MappingSource) (format string, ok bool) {
	switch src.Format {
	case memoryv1alpha1.MappingCSV:
		return worker.MapFormatCSV, true
	case memoryv1alpha1.MappingJSONLines:
		return worker.MapFormatJSONLines, true
	}
	switch path.Ext(mappingKey(src)) {
	case ".csv":
		return worker.MapFormatCSV, true
	case ".jsonl", ".ndjson":
		return worker.MapFormatJSONLines, true
	}
	return "", false
}

// mappingKey is the key (ConfigMap or Secret) or object key holding the map.
func mappingKey(src *memoryv1alpha1.MappingSource) string {
	switch {
	case src.ConfigMapKeyRef != nil:
		return src.ConfigMapKeyRef.Key
	case src.SecretKeyRef != nil:
		return src.SecretKeyRef.Key
	case src.Object != nil:
		return src.Object.Key
	}
	return ""
}

// restoreConfig is the worker's configuration: the restore's spec, the resolved source,
// and the target as its status describes it.
func restoreConfig(restore *memoryv1alpha1.MemoryRestore, target *memoryv1alpha1.MemoryStore, in restoreJobInputs) worker.RestoreConfig {
	spec := &restore.Spec
	cfg := worker.RestoreConfig{
		RestoreNamespace:     restore.Namespace,
		RestoreName:          restore.Name,
		RestoreUID:           string(restore.UID),
		Source:               in.Source.Package,
		Unencrypted:          spec.Source.Unencrypted,
		ExpectManifestSHA256: in.Source.ManifestSHA256,
		TargetNamespace:      target.Namespace,
		TargetName:           target.Name,
		Tenant:               target.Spec.Tenant,
		Embedder:             string(memoryv1alpha1.EmbedderHashing),
		Unmapped:             string(spec.UnmappedOrDefault()),
		Denylist:             spec.Denylist,
		ConflictPolicy:       string(spec.ConflictPolicyOrDefault()),
		Embeddings:           string(spec.EmbeddingsOrDefault()),
		DryRun:               spec.DryRun,
		Rehydrate:            spec.Rehydrate,
		AllowMerge:           spec.Mapping != nil && spec.Mapping.AllowMerge,
		IntoExisting:         spec.Mapping != nil && spec.Mapping.IntoExisting,
		AllowRepeat:          spec.AllowRepeat,
		DetailKey:            in.Source.DetailKey,
		SkipSessions:         spec.SkipSessions,
	}
	if !spec.SkipSessions && spec.Source.ImportFrom == nil {
		// Where the target keeps its sessions, for a package that carries some (an
		// import's never does).
		cfg.Sessions = sessionsConfig(target)
	}
	if cfg.DetailKey == "" {
		cfg.DetailKey = worker.RestoreDetailKey(in.Source.Package.Prefix, runFolder(restore))
	}
	if imp := spec.Source.ImportFrom; imp != nil {
		cfg.Import = importConfig(imp, in.Source.ImportObject)
	}
	for _, t := range spec.EffectiveTypes() {
		cfg.Types = append(cfg.Types, string(t))
	}
	if pg := target.Status.Postgres; pg != nil {
		cfg.Schema = pg.Schema
	}
	if v := target.Status.Vector; v != nil {
		cfg.Vectors, cfg.EmbeddingModel = storeVectors(target, in.MilvusAddress), v.EmbeddingModel
		cfg.Dimension, cfg.Metric = int(v.Dimension), v.Metric
	}
	if e := servingEmbedder(target); e.Type == memoryv1alpha1.EmbedderOpenAI {
		cfg.Embedder, cfg.EmbedderEndpoint = string(e.Type), e.Endpoint
	}
	// The store's embedder input limit, as its gateway applies it.
	maxBytes, overflow := servingEmbedder(target).InputLimitOrDefault()
	cfg.EmbedderMaxInputBytes, cfg.EmbedderOverflow = int(maxBytes), string(overflow)
	cfg.EmbedderRoles = storeRoles(target)
	if m := spec.Mapping; m != nil {
		for _, s := range m.Scopes {
			cfg.ScopeMap = append(cfg.ScopeMap, worker.ScopeRule{From: s.From, To: s.To})
		}
		for _, p := range m.Prefixes {
			cfg.PrefixMap = append(cfg.PrefixMap, worker.ScopeRule{From: p.From, To: p.To})
		}
		if src := m.From; src != nil {
			cfg.MapFormat, _ = mapFormat(src)
			switch {
			case src.Object != nil:
				cfg.MapObject, cfg.MapBucket = src.Object.Key, src.Object.Bucket
			default:
				cfg.MapFile = worker.MappingDir + "/" + mappingKey(src)
			}
		}
	}
	return cfg
}

// mappingMount is the volume that puts a ConfigMap or Secret scope map at
// worker.MappingDir/<key>, read-only; none for an object map or no map.
func mappingMount(restore *memoryv1alpha1.MemoryRestore) ([]corev1.Volume, []corev1.VolumeMount) {
	m := restore.Spec.Mapping
	if m == nil || m.From == nil {
		return nil, nil
	}
	var source corev1.VolumeSource
	switch src := m.From; {
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		source.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: ref.LocalObjectReference,
			Items: []corev1.KeyToPath{{Key: ref.Key, Path: ref.Key}}}
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		source.Secret = &corev1.SecretVolumeSource{SecretName: ref.Name,
			Items: []corev1.KeyToPath{{Key: ref.Key, Path: ref.Key}}}
	default:
		return nil, nil
	}
	return []corev1.Volume{{Name: mappingVolume, VolumeSource: source}},
		[]corev1.VolumeMount{{Name: mappingVolume, MountPath: worker.MappingDir, ReadOnly: true}}
}

// buildRestoreJob is the Job that runs `memory-operator restore` for the restore: owned
// by it, least privilege (see buildWorkerJob), the target's own connection Secret (its
// store role writes memories, vectors and tombstones, nothing else) and the source's
// Secrets only as SecretKeyRefs. An import converts its source in the Job's /tmp
// emptyDir (importScratchDir); its database URI, like every Secret, reaches the pod by
// reference only.
func buildRestoreJob(restore *memoryv1alpha1.MemoryRestore, target *memoryv1alpha1.MemoryStore, in restoreJobInputs) *batchv1.Job {
	cfg := restoreConfig(restore, target, in)
	creds := in.Source.Credentials
	env := []corev1.EnvVar{
		secretEnv(worker.EnvPostgresURI, target.Status.WorkerSecret, keyURI),
		secretEnv(worker.EnvSourceS3AccessKey, creds.Name, creds.AccessKeyIDKey),
		secretEnv(worker.EnvSourceS3SecretKey, creds.Name, creds.SecretAccessKeyKey),
	}
	env = append(env, milvusLoginEnv(target, target.Status.WorkerSecret)...)
	if cfg.Sessions.RedisAddress != "" {
		env = append(env, jobRedisEnv(target)...)
	}
	if k := in.Source.Key; k != nil {
		env = append(env, secretEnv(worker.EnvSourceKey, k.Name, k.Key))
	}
	if imp := restore.Spec.Source.ImportFrom; imp != nil && imp.Postgres != nil {
		ref := imp.Postgres.URISecret
		env = append(env, secretEnv(worker.EnvImportPostgresURI, ref.Name, ref.Key))
	}
	env = append(env, embedderAPIKeyEnv(target, worker.EnvEmbedderAPIKey)...)
	labels := map[string]string{}
	setLabelIfValid(labels, memoryv1alpha1.LabelRestore, restore.Name)
	setLabelIfValid(labels, memoryv1alpha1.LabelStore, target.Name)
	if in.Source.Snapshot != "" {
		setLabelIfValid(labels, memoryv1alpha1.LabelSnapshot, in.Source.Snapshot)
	}
	volumes, mounts := mappingMount(restore)
	return buildWorkerJob(workerJobSpec{
		Owner: restore, Kind: "MemoryRestore", Command: restoreContainer, Image: in.Image,
		Args: cfg.Args(), Env: env, Labels: labels, Options: restore.Spec.Job,
		Volumes: volumes, VolumeMounts: mounts,
	})
}

// jobRestoreConfig parses the worker configuration back out of a restore Job.
func jobRestoreConfig(job *batchv1.Job) (worker.RestoreConfig, error) {
	args, err := jobWorkerArgs(job, restoreContainer)
	if err != nil {
		return worker.RestoreConfig{}, err
	}
	return worker.ParseRestoreArgs(args, io.Discard)
}

// jobPackage recovers the package a restore Job reads from its arguments, for a Job
// whose creation was not recorded in status (the operator stopped in between).
func jobPackage(job *batchv1.Job) (*memoryv1alpha1.SnapshotLocation, error) {
	cfg, err := jobRestoreConfig(job)
	if err != nil {
		return nil, err
	}
	return &memoryv1alpha1.SnapshotLocation{Endpoint: cfg.Source.Endpoint, Bucket: cfg.Source.Bucket, Prefix: cfg.Source.Prefix}, nil
}

// packageURL is "s3://<bucket>/<prefix>", for messages.
func packageURL(loc *memoryv1alpha1.SnapshotLocation) string {
	return "s3://" + loc.Bucket + "/" + strings.TrimPrefix(loc.Prefix, "/")
}
