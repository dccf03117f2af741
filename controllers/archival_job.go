package controllers

import (
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/worker"
)

// The archive worker Job. Everything here is pure: a store, its slot and what the
// controller resolved in, a Job out. The arguments come from worker.ArchiveConfig, the
// contract the worker parses, and every secret reaches the pod by reference.
const (
	archiveContainer = "archive"
	// archiveJobInfix sits between the store's name and the slot in a Job's name.
	archiveJobInfix = "-archive-"
	// slotFormat is a slot in UTC to the minute: parseSchedule accepts nothing finer.
	slotFormat = "200601021504"
)

// archiveJobName is the name of a store's archive Job for a slot:
// "<store>-archive-<yyyymmddhhmm>". The name is the lock: one slot never gets two Jobs,
// whatever restarts happen. A store name too long for a Job name is cut and followed by
// the store's UID prefix, so two long names sharing a start do not collide.
func archiveJobName(store *memoryv1alpha1.MemoryStore, slot time.Time) string {
	return slotJobName(store, archiveJobInfix, slot)
}

// slotJobName is "<store><infix><yyyymmddhhmm>", cut as archiveJobName says.
func slotJobName(store *memoryv1alpha1.MemoryStore, infix string, slot time.Time) string {
	return suffixedJobName(store, infix+slot.UTC().Format(slotFormat))
}

// suffixedJobName is the store's name with suffix, shortened (with a piece of the
// store's UID) to fit a Job name.
func suffixedJobName(store *memoryv1alpha1.MemoryStore, suffix string) string {
	name := store.Name
	if len(name)+len(suffix) > maxJobName {
		uid := "-" + uidPrefix(store)
		name = strings.TrimRight(name[:maxJobName-len(suffix)-len(uid)], ".-") + uid
	}
	return name + suffix
}

// coldPlan is where a run's cold package goes and the Secrets, in the store's namespace,
// that write it.
type coldPlan struct {
	// Destination's Prefix is the run's own folder: <store prefix>archive/<job name>/.
	Destination worker.Destination
	Credentials memoryv1alpha1.ObjectStorageCredentials
	// Key is the package key's Secret; nil writes a plaintext package.
	Key *corev1.SecretKeySelector
}

// planCold resolves spec.archival.coldStorage against the store: its own bucket and
// prefix (status.objectStorage), TLS and region from its object-storage spec, and the
// credentials from coldStorage.credentialsSecret or, for an inline store, the store's
// own. A store on a ClusterMemoryBackend has none to lend. storeObjects is the store's
// object-storage spec, nil when it has none.
func planCold(store *memoryv1alpha1.MemoryStore, storeObjects *memoryv1alpha1.ObjectStorageSpec, jobName string) (*coldPlan, error) {
	cs := store.Spec.Archival.ColdStorage
	own := store.Status.ObjectStorage
	if own == nil || own.Endpoint == "" || own.Bucket == "" || own.Prefix == "" {
		return nil, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing,
			"MemoryStore %s has no object storage for cold packages; disable archival.coldStorage or give the store objectStorage", store.Name)
	}
	dest := worker.Destination{Endpoint: own.Endpoint, Bucket: own.Bucket,
		Prefix: strings.TrimSuffix(own.Prefix, "/") + "/" + worker.ArchiveFolder + jobName + "/"}
	if storeObjects != nil {
		dest.Region, dest.Insecure = storeObjects.Region, storeObjects.Insecure
	}
	var creds memoryv1alpha1.ObjectStorageCredentials
	switch {
	case cs.CredentialsSecret != nil:
		creds = *cs.CredentialsSecret
	case store.Spec.Backend.ClusterBackend != "":
		return nil, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing,
			"MemoryStore %s uses ClusterMemoryBackend %s, whose object-storage credentials never leave the operator's namespace; "+
				"set archival.coldStorage.credentialsSecret to a Secret in namespace %s", store.Name, store.Spec.Backend.ClusterBackend, store.Namespace)
	case storeObjects == nil:
		return nil, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing,
			"MemoryStore %s has no object-storage credentials; set archival.coldStorage.credentialsSecret", store.Name)
	default:
		creds = storeObjects.CredentialsSecret
	}
	creds.AccessKeyIDKey = orDefault(creds.AccessKeyIDKey, "accessKeyID")
	creds.SecretAccessKeyKey = orDefault(creds.SecretAccessKeyKey, "secretAccessKey")
	plan := &coldPlan{Destination: dest, Credentials: creds}
	if enc := cs.Encryption; enc != nil && !enc.Unencrypted {
		plan.Key = enc.KeySecret
	}
	return plan, nil
}

// archivalParameters parses the threshold and merges the declared half-lives over
// memory.DefaultHalfLives. Admission checks both; an error here means it did not (a CRD
// installed without its validations), and names the field.
func archivalParameters(spec *memoryv1alpha1.ArchivalSpec) (float64, memory.HalfLives, error) {
	threshold, err := strconv.ParseFloat(spec.Threshold, 64)
	if err != nil || threshold < 0 || math.IsInf(threshold, 0) || math.IsNaN(threshold) {
		return 0, nil, stepErrorf(memoryv1alpha1.ReasonInvalidSpec,
			"archival.threshold %q is not a non-negative decimal number", spec.Threshold)
	}
	halfLives := memory.DefaultHalfLives()
	for t, v := range spec.HalfLives {
		if !memory.Type(t).Valid() {
			return 0, nil, stepErrorf(memoryv1alpha1.ReasonInvalidSpec, "archival.halfLives: %q is not a memory type", t)
		}
		d, err := time.ParseDuration(string(v))
		if err != nil || d <= 0 {
			return 0, nil, stepErrorf(memoryv1alpha1.ReasonInvalidSpec, "archival.halfLives.%s: %q is not a positive duration", t, v)
		}
		halfLives[memory.Type(t)] = d
	}
	return threshold, halfLives, nil
}

// archiveJobInputs is what the controller resolved for the Job besides the store.
type archiveJobInputs struct {
	// Image is the operator's own image.
	Image string
	// Name is the Job's name (archiveJobName) and Slot the slot it runs for.
	Name string
	Slot time.Time
	// Now is the run's clock, fixed when the Job is created, so that a retried pod
	// makes the same decisions.
	Now       time.Time
	Threshold float64
	HalfLives memory.HalfLives
	// MilvusAddress is the store's Milvus server, when its vectors live there.
	MilvusAddress string
	// Cold is nil without cold storage.
	Cold *coldPlan
}

// archiveConfig is the worker's configuration: the store as its status describes it,
// the archival spec and what the controller resolved.
func archiveConfig(store *memoryv1alpha1.MemoryStore, in archiveJobInputs) worker.ArchiveConfig {
	spec := store.Spec.Archival
	cfg := worker.ArchiveConfig{
		StoreNamespace: store.Namespace,
		StoreName:      store.Name,
		Tenant:         store.Spec.Tenant,
		RunName:        in.Name,
		Now:            in.Now.UTC(),
		Threshold:      in.Threshold,
		HalfLives:      maps.Clone(in.HalfLives),
		DryRun:         spec.DryRun,
	}
	if pg := store.Status.Postgres; pg != nil {
		cfg.Schema = pg.Schema
	}
	cfg.EmbedderRoles = storeRoles(store) // recorded with the vectors
	if v := store.Status.Vector; v != nil {
		cfg.Vectors, cfg.EmbeddingModel = storeVectors(store, in.MilvusAddress), v.EmbeddingModel
		cfg.Dimension, cfg.Metric = int(v.Dimension), v.Metric
	}
	if in.Cold != nil {
		dest := in.Cold.Destination
		cfg.Cold = &dest
		cfg.Unencrypted = in.Cold.Key == nil
		if d := spec.ColdStorage.DeleteAfter; d != nil {
			cfg.DeleteAfter = d.Duration
		}
	}
	return cfg
}

// buildArchiveJob is the Job that runs `memory-operator archive` for one slot of the
// store: owned by the store (deleted with it), named after the slot, least privilege
// (see buildWorkerJob) and secrets only as SecretKeyRefs: the store's connection Secret
// and, with cold storage, the S3 keys and the package key.
func buildArchiveJob(store *memoryv1alpha1.MemoryStore, in archiveJobInputs) *batchv1.Job {
	cfg := archiveConfig(store, in)
	env := []corev1.EnvVar{secretEnv(worker.EnvPostgresURI, store.Status.WorkerSecret, keyURI)}
	env = append(env, milvusLoginEnv(store, store.Status.WorkerSecret)...)
	if c := in.Cold; c != nil {
		env = append(env,
			secretEnv(worker.EnvS3AccessKey, c.Credentials.Name, c.Credentials.AccessKeyIDKey),
			secretEnv(worker.EnvS3SecretKey, c.Credentials.Name, c.Credentials.SecretAccessKeyKey))
		if c.Key != nil {
			env = append(env, secretEnv(worker.EnvEncryptionKey, c.Key.Name, c.Key.Key))
		}
	}
	labels := map[string]string{}
	setLabelIfValid(labels, memoryv1alpha1.LabelStore, store.Name)
	job := buildWorkerJob(workerJobSpec{
		Owner: store, Kind: "MemoryStore", Name: in.Name, Command: archiveContainer, Image: in.Image,
		Args: cfg.Args(), Env: env, Labels: labels, Options: store.Spec.Archival.Job,
	})
	// History pruning orders a store's archive Jobs by their slot.
	job.Annotations = map[string]string{memoryv1alpha1.AnnotationScheduledAt: in.Slot.UTC().Format(time.RFC3339)}
	return job
}

// jobArchiveConfig parses the worker configuration back out of an archive Job.
func jobArchiveConfig(job *batchv1.Job) (worker.ArchiveConfig, error) {
	args, err := jobWorkerArgs(job, archiveContainer)
	if err != nil {
		return worker.ArchiveConfig{}, err
	}
	cfg, err := worker.ParseArchiveArgs(args, io.Discard)
	if err != nil {
		return worker.ArchiveConfig{}, fmt.Errorf("job %s: %w", job.Name, err)
	}
	return cfg, nil
}

// jobSlot is the slot an archive Job ran for, or its creation time when the annotation
// is missing or malformed.
func jobSlot(job *batchv1.Job) time.Time {
	if v, ok := job.Annotations[memoryv1alpha1.AnnotationScheduledAt]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return t
		}
	}
	return job.CreationTimestamp.Time
}
