package controllers

import (
	"fmt"
	"io"
	"maps"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/worker"
)

// The snapshot worker Job, and what every worker Job (snapshot, restore) shares.
// Everything here is pure: a snapshot, its store and the resolved destination in, a Job
// out. The arguments come from worker.SnapshotConfig, the contract the worker parses,
// and every secret reaches the pod by reference.
const (
	snapshotContainer = "snapshot"
	// workerCommand is the operator's binary in its image; a Job runs its "snapshot" or
	// "restore" subcommand.
	workerCommand = "/memory-operator"
	// workerBackoffLimit allows one retry of a pod that failed: the snapshot worker
	// removes a partial package when it fails, so a retry starts clean, and a restore is
	// idempotent, so a retry only does what the first try did not.
	workerBackoffLimit int32 = 1
	// defaultActiveDeadline mirrors the CRD default of spec.job.activeDeadlineSeconds.
	defaultActiveDeadline int64 = 3600
	// workerUID is the non-root user of the operator's image (distroless "nonroot").
	workerUID int64 = 65532
	// maxJobName keeps the Job's name usable as the label value its pods carry.
	maxJobName = validation.LabelValueMaxLength
)

// Labels on every worker Job (and its pods). The manager caches only Jobs with the
// managed-by label: see ManagedJobSelector.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "memory-operator"
)

// ManagedJobSelector selects the Jobs the operator creates; the manager restricts its
// Job cache to them, so it does not hold every Job in the cluster.
func ManagedJobSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy})
}

// uidPrefix is the first 8 characters of the object's UID: it tells apart snapshots (or
// restores) that had the same name at different times.
func uidPrefix(obj metav1.Object) string {
	uid := string(obj.GetUID())
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return uid
}

// runFolder is "<name>-<uid prefix>/": the folder of one snapshot's package, or of one
// restore's detail.
func runFolder(obj metav1.Object) string {
	return obj.GetName() + "-" + uidPrefix(obj) + "/"
}

// packageFolder is the snapshot's own folder under the destination prefix.
func packageFolder(snap *memoryv1alpha1.MemorySnapshot) string {
	return runFolder(snap)
}

// workerJobName is "<name>-<uid prefix>" for the Job of a snapshot or restore, the name
// shortened when the whole would exceed 63 characters. The UID part means an object
// deleted and created again under the same name never finds the old one's Job.
func workerJobName(obj metav1.Object) string {
	suffix := "-" + uidPrefix(obj)
	name := obj.GetName()
	if len(name)+len(suffix) > maxJobName {
		name = strings.TrimRight(name[:maxJobName-len(suffix)], ".-")
	}
	return name + suffix
}

// destinationPlan is where the package goes and the Secret, in the snapshot's
// namespace, whose keys the worker uses to write it.
type destinationPlan struct {
	Destination worker.Destination
	Credentials memoryv1alpha1.ObjectStorageCredentials
}

// planDestination resolves spec.destination against the store: unset endpoint and
// bucket are the store's; TLS and region follow the store's object storage only when
// the package goes to the same endpoint; the prefix is the destination's (or the
// store's prefix + "snapshots/") followed by the snapshot's own folder. Credentials are
// the destination's Secret, or an inline store's own; a store on a ClusterMemoryBackend
// has none to lend (they never leave the operator's namespace). store may be nil (it was
// deleted), and storeObjects is the store's object-storage spec, nil when it has none.
func planDestination(snap *memoryv1alpha1.MemorySnapshot, store *memoryv1alpha1.MemoryStore,
	storeObjects *memoryv1alpha1.ObjectStorageSpec) (destinationPlan, error) {
	d := memoryv1alpha1.SnapshotDestination{}
	if snap.Spec.Destination != nil {
		d = *snap.Spec.Destination
	}
	var own memoryv1alpha1.ObjectStorageStatus
	if store != nil && store.Status.ObjectStorage != nil {
		own = *store.Status.ObjectStorage
	}
	storeName := snap.Spec.StoreRef.Name

	dest := worker.Destination{Endpoint: orDefault(d.Endpoint, own.Endpoint), Bucket: orDefault(d.Bucket, own.Bucket)}
	if dest.Endpoint == "" || dest.Bucket == "" {
		return destinationPlan{}, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing,
			"MemoryStore %s has no object storage; set spec.destination.endpoint, bucket and credentialsSecret", storeName)
	}
	sameEndpoint := storeObjects != nil && dest.Endpoint == storeObjects.Endpoint
	if sameEndpoint {
		dest.Insecure, dest.Region = storeObjects.Insecure, storeObjects.Region
	}
	if d.Insecure != nil {
		dest.Insecure = *d.Insecure
	}
	if d.Region != "" {
		dest.Region = d.Region
	}

	base := own.Prefix
	if base == "" && store != nil {
		names, err := provision.NamesFor(store.Spec.Tenant, "memory-operator")
		if err != nil {
			return destinationPlan{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady, "MemoryStore %s: %v", storeName, err)
		}
		base = names.Prefix
	}
	base += provision.SnapshotsFolder
	if d.Prefix != "" {
		base = strings.TrimSuffix(d.Prefix, "/") + "/"
	}
	dest.Prefix = base + packageFolder(snap)

	var creds memoryv1alpha1.ObjectStorageCredentials
	switch {
	case d.CredentialsSecret != nil:
		creds = *d.CredentialsSecret
	case store != nil && store.Spec.Backend.ClusterBackend != "":
		return destinationPlan{}, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing,
			"MemoryStore %s uses ClusterMemoryBackend %s, whose object-storage credentials never leave the operator's namespace; "+
				"set spec.destination.credentialsSecret to a Secret in namespace %s", storeName, store.Spec.Backend.ClusterBackend, snap.Namespace)
	case !sameEndpoint:
		return destinationPlan{}, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing,
			"spec.destination.endpoint %s is not MemoryStore %s's object storage; set spec.destination.credentialsSecret", dest.Endpoint, storeName)
	default:
		creds = storeObjects.CredentialsSecret
	}
	creds.AccessKeyIDKey = orDefault(creds.AccessKeyIDKey, "accessKeyID")
	creds.SecretAccessKeyKey = orDefault(creds.SecretAccessKeyKey, "secretAccessKey")
	return destinationPlan{Destination: dest, Credentials: creds}, nil
}

// snapshotJobInputs is what the controller resolved for the Job besides the snapshot
// and its store.
type snapshotJobInputs struct {
	// Image is the operator's own image.
	Image string
	Plan  destinationPlan
	// MilvusAddress is the store's Milvus server, when its vectors live there.
	MilvusAddress string
}

// snapshotConfig is the worker's configuration: the store as its status describes it,
// the selection and options of the snapshot's spec, and the planned destination.
func snapshotConfig(snap *memoryv1alpha1.MemorySnapshot, store *memoryv1alpha1.MemoryStore, in snapshotJobInputs) worker.SnapshotConfig {
	p := snap.Spec.SnapshotParameters
	cfg := worker.SnapshotConfig{
		StoreNamespace:    store.Namespace,
		StoreName:         store.Name,
		Tenant:            store.Spec.Tenant,
		SnapshotName:      snap.Name,
		Destination:       in.Plan.Destination,
		Scopes:            p.Selection.Scopes,
		IncludeEmbeddings: p.IncludeEmbeddings,
		CompressionLevel:  int(p.CompressionLevel),
		Unencrypted:       p.Encryption.Unencrypted,
		IncludeSessions:   p.IncludeSessions,
	}
	if p.IncludeSessions {
		cfg.Sessions = sessionsConfig(store)
	}
	if cfg.CompressionLevel == 0 {
		cfg.CompressionLevel = 1
	}
	for _, t := range p.Selection.EffectiveTypes() {
		cfg.Types = append(cfg.Types, string(t))
	}
	if p.Selection.ActiveWithin != nil {
		cfg.ActiveWithin = p.Selection.ActiveWithin.Duration
	}
	if pg := store.Status.Postgres; pg != nil {
		cfg.Schema = pg.Schema
	}
	cfg.EmbedderRoles = storeRoles(store) // recorded with the vectors
	if v := store.Status.Vector; v != nil {
		cfg.Vectors, cfg.EmbeddingModel = storeVectors(store, in.MilvusAddress), v.EmbeddingModel
		cfg.Dimension, cfg.Metric = int(v.Dimension), v.Metric
	}
	return cfg
}

// buildSnapshotJob is the Job that runs `memory-operator snapshot` for the snapshot:
// owned by it, least privilege (see buildWorkerJob) and secrets only as SecretKeyRefs.
func buildSnapshotJob(snap *memoryv1alpha1.MemorySnapshot, store *memoryv1alpha1.MemoryStore, in snapshotJobInputs) *batchv1.Job {
	cfg := snapshotConfig(snap, store, in)
	creds := in.Plan.Credentials
	env := []corev1.EnvVar{
		secretEnv(worker.EnvPostgresURI, store.Status.WorkerSecret, keyURI),
		secretEnv(worker.EnvS3AccessKey, creds.Name, creds.AccessKeyIDKey),
		secretEnv(worker.EnvS3SecretKey, creds.Name, creds.SecretAccessKeyKey),
	}
	if cfg.IncludeEmbeddings {
		env = append(env, milvusLoginEnv(store, store.Status.WorkerSecret)...)
	}
	if cfg.IncludeSessions {
		env = append(env, jobRedisEnv(store)...)
	}
	if enc := snap.Spec.Encryption; !enc.Unencrypted && enc.KeySecret != nil {
		env = append(env, secretEnv(worker.EnvEncryptionKey, enc.KeySecret.Name, enc.KeySecret.Key))
	}
	labels := map[string]string{}
	setLabelIfValid(labels, memoryv1alpha1.LabelSnapshot, snap.Name)
	setLabelIfValid(labels, memoryv1alpha1.LabelStore, store.Name)
	return buildWorkerJob(workerJobSpec{
		Owner: snap, Kind: "MemorySnapshot", Command: snapshotContainer, Image: in.Image,
		Args: cfg.Args(), Env: env, Labels: labels, Options: snap.Spec.Job,
	})
}

// workerJobSpec is what tells the operator's worker Jobs apart.
type workerJobSpec struct {
	// Owner is the snapshot, restore or store the Job runs for, of kind Kind.
	Owner metav1.Object
	Kind  string
	// Name of the Job; empty names it after its owner (workerJobName). Archive Jobs are
	// named after their slot instead: a store has one per run.
	Name string
	// Command is the worker subcommand ("snapshot", "restore", "archive"), which also names the
	// container and the Job's component label.
	Command string
	Image   string
	// Args follow the subcommand.
	Args []string
	// Env holds only SecretKeyRefs.
	Env []corev1.EnvVar
	// Labels are added to the common ones.
	Labels  map[string]string
	Options memoryv1alpha1.JobOptions
	// Volumes and VolumeMounts are added to the writable /tmp every worker has.
	Volumes      []corev1.Volume
	VolumeMounts []corev1.VolumeMount
}

// buildWorkerJob is a Job running `memory-operator <command>` for its owner: owned by it
// (and named after it unless spec.Name is set), one try more after a failure (the
// workers are idempotent or clean up after themselves), least privilege (no
// service-account token, the restricted pod security profile, a read-only root
// filesystem) and the worker's last error, or its result, as the termination message.
func buildWorkerJob(spec workerJobSpec) *batchv1.Job {
	opts := spec.Options
	deadline := defaultActiveDeadline
	if opts.ActiveDeadlineSeconds != nil {
		deadline = *opts.ActiveDeadlineSeconds
	}
	var resources corev1.ResourceRequirements
	if opts.Resources != nil {
		resources = *opts.Resources.DeepCopy()
	}
	jobLabels := map[string]string{
		"app.kubernetes.io/name":      "memory-operator",
		"app.kubernetes.io/component": spec.Command,
		labelManagedBy:                managedBy,
	}
	maps.Copy(jobLabels, spec.Labels)

	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       spec.Owner.GetNamespace(),
			Name:            orDefault(spec.Name, workerJobName(spec.Owner)),
			Labels:          jobLabels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(spec.Owner, memoryv1alpha1.GroupVersion.WithKind(spec.Kind))},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To(workerBackoffLimit),
			ActiveDeadlineSeconds: ptr.To(deadline),
			// A replacement pod starts only once the failed one is gone: two workers never
			// run at the same time.
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: jobLabels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(workerUID),
						RunAsGroup:     ptr.To(workerUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:    spec.Command,
						Image:   spec.Image,
						Command: []string{workerCommand},
						Args:    append([]string{spec.Command}, spec.Args...),
						Env:     spec.Env,
						// The worker's last error (or a restore's summary) becomes the pod's
						// termination message.
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						Resources:                resources,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							RunAsNonRoot:             ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
						VolumeMounts: append([]corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}, spec.VolumeMounts...),
					}},
					Volumes: append([]corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
						spec.Volumes...),
					NodeSelector: opts.NodeSelector,
					Tolerations:  opts.Tolerations,
				},
			},
		},
	}
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
	}}}
}

// setLabelIfValid sets the label when the value fits a label (a name longer than 63
// characters does not); the label is a convenience, ownership never depends on it.
func setLabelIfValid(labels map[string]string, key, value string) {
	if len(validation.IsValidLabelValue(value)) == 0 {
		labels[key] = value
	}
}

// jobLocation recovers where a Job writes its package from the Job's own arguments, for
// a Job whose creation was not recorded in status (the operator stopped in between).
func jobLocation(job *batchv1.Job) (*memoryv1alpha1.SnapshotLocation, error) {
	cfg, err := jobSnapshotConfig(job)
	if err != nil {
		return nil, err
	}
	d := cfg.Destination
	return &memoryv1alpha1.SnapshotLocation{Endpoint: d.Endpoint, Bucket: d.Bucket, Prefix: d.Prefix}, nil
}

// jobSnapshotConfig parses the worker configuration back out of a snapshot Job.
func jobSnapshotConfig(job *batchv1.Job) (worker.SnapshotConfig, error) {
	args, err := jobWorkerArgs(job, snapshotContainer)
	if err != nil {
		return worker.SnapshotConfig{}, err
	}
	return worker.ParseSnapshotArgs(args, io.Discard)
}

// jobWorkerArgs returns the arguments (after the subcommand) of a worker Job's container
// for the command.
func jobWorkerArgs(job *batchv1.Job, command string) ([]string, error) {
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == command && len(c.Args) > 0 && c.Args[0] == command {
			return c.Args[1:], nil
		}
	}
	return nil, fmt.Errorf("job %s has no %s container", job.Name, command)
}

// jobSecretRef returns the Secret and key an environment variable of a worker Job's
// container (snapshotContainer, restoreContainer) is filled from.
func jobSecretRef(job *batchv1.Job, container, env string) (name, key string, ok bool) {
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, e := range c.Env {
			if e.Name == env && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				return e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, true
			}
		}
	}
	return "", "", false
}
