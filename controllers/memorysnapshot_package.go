package controllers

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/worker"
)

// PackageAccess is how the operator reaches one package. It holds credentials: it is
// never logged (String leaves them out) and never stored.
type PackageAccess struct {
	Endpoint, Region string
	Insecure         bool
	Bucket           string
	// Prefix of the package, ending in '/'.
	Prefix               string
	AccessKey, SecretKey string
	// Key opens an encrypted package (reading its manifest); nil for an unencrypted
	// one, and not needed to delete a package.
	Key *snapshot.Key
}

// String describes the location without the credentials.
func (a PackageAccess) String() string {
	return fmt.Sprintf("s3://%s/%s at %s", a.Bucket, a.Prefix, a.Endpoint)
}

// PackageSummary is what the controller records in status from a package's manifest.
type PackageSummary struct {
	FormatVersion int
	// StoreNamespace and StoreName are the source store the manifest names.
	StoreNamespace, StoreName string
	Items                     int64
	ItemsByType               map[string]int64
	Scopes                    int64
	Bytes                     int64
	Shards                    int32
	EmbeddingModel            string
	// ManifestSHA256 is the hex SHA-256 of the manifest object as stored.
	ManifestSHA256 string
}

// PackageStore reads and removes snapshot packages; the controllers never touch object
// storage otherwise.
type PackageStore interface {
	// Summary reads the package's manifest. A prefix without one (a writer that failed
	// or still runs) is incomplete: the error matches snapshot.ErrIncomplete; a
	// manifest that cannot be read as one matches snapshot.ErrCorrupt.
	Summary(ctx context.Context, a PackageAccess) (PackageSummary, error)
	// Delete removes every object under the package prefix.
	Delete(ctx context.Context, a PackageAccess) error
}

// packageResolver finds how to reach snapshot packages, for both reconcilers.
type packageResolver struct {
	// client reads Jobs, stores and ClusterMemoryBackends (cached).
	client client.Reader
	// secrets reads Secrets straight from the API server.
	secrets client.Reader
}

// access resolves how to reach the snapshot's package: the location recorded in status,
// with TLS, region, credentials (and, withKey, the encryption key) as the Job that wrote
// it had them (exactly what the worker used) or, once the Job is gone, as the spec and
// the store say. job may be nil.
func (p packageResolver) access(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot, job *batchv1.Job, withKey bool) (PackageAccess, error) {
	loc, err := packageLocation(snap)
	if err != nil {
		return PackageAccess{}, err
	}
	a := PackageAccess{Endpoint: loc.Endpoint, Bucket: loc.Bucket, Prefix: loc.Prefix}
	refs, err := p.refs(ctx, snap, job)
	if err != nil {
		return PackageAccess{}, err
	}
	a.Region, a.Insecure = refs.region, refs.insecure

	values, err := secretValues(ctx, p.secrets, snap.Namespace, refs.creds.Name, refs.creds.AccessKeyIDKey, refs.creds.SecretAccessKeyKey)
	if err != nil {
		return PackageAccess{}, err
	}
	a.AccessKey, a.SecretKey = string(values[0]), string(values[1])
	if withKey && refs.key != nil {
		if a.Key, err = readPackageKey(ctx, p.secrets, snap.Namespace, refs.key); err != nil {
			return PackageAccess{}, err
		}
	}
	return a, nil
}

// packageLocation is where the snapshot's package is, as status records it. The prefix
// comes from status, which others can write: nothing but the snapshot's own folder is
// accepted.
func packageLocation(snap *memoryv1alpha1.MemorySnapshot) (*memoryv1alpha1.SnapshotLocation, error) {
	loc := snap.Status.Location
	if loc == nil || loc.Bucket == "" || loc.Endpoint == "" {
		return nil, fmt.Errorf("snapshot %s has no package location", snap.Name)
	}
	if !strings.HasSuffix(loc.Prefix, packageFolder(snap)) {
		return nil, fmt.Errorf("status.location.prefix %q is not the folder of snapshot %s; not touching it", loc.Prefix, snap.Name)
	}
	return loc, nil
}

// refs resolves how the snapshot's package is reached, Secrets by reference: as the Job
// that wrote it had it (job, or the one status names), or once the Job is gone as the
// spec and the store say. job may be nil.
func (p packageResolver) refs(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot, job *batchv1.Job) (accessRefs, error) {
	if job == nil && snap.Status.JobName != "" {
		j := &batchv1.Job{}
		err := p.client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: snap.Status.JobName}, j)
		switch {
		case err == nil && j.DeletionTimestamp.IsZero():
			job = j
		case err != nil && !apierrors.IsNotFound(err):
			return accessRefs{}, err
		}
	}
	if refs, ok := jobAccessRefs(job); ok {
		return refs, nil
	}
	loc, err := packageLocation(snap)
	if err != nil {
		return accessRefs{}, err
	}
	plan, err := p.planFromSpec(ctx, snap, loc)
	if err != nil {
		return accessRefs{}, err
	}
	refs := accessRefs{region: plan.Destination.Region, insecure: plan.Destination.Insecure, creds: plan.Credentials}
	if enc := snap.Spec.Encryption; !enc.Unencrypted {
		refs.key = enc.KeySecret
	}
	return refs, nil
}

// accessRefs is how a package is reached, with Secrets by reference.
type accessRefs struct {
	region   string
	insecure bool
	creds    memoryv1alpha1.ObjectStorageCredentials
	key      *corev1.SecretKeySelector // nil: unencrypted
}

// jobAccessRefs reads them off the snapshot Job: its arguments and the Secrets its
// environment references. ok is false without a (parseable) Job.
func jobAccessRefs(job *batchv1.Job) (accessRefs, bool) {
	if job == nil {
		return accessRefs{}, false
	}
	cfg, err := jobSnapshotConfig(job)
	if err != nil {
		return accessRefs{}, false
	}
	refs := accessRefs{region: cfg.Destination.Region, insecure: cfg.Destination.Insecure}
	refs.creds.Name, refs.creds.AccessKeyIDKey, _ = jobSecretRef(job, snapshotContainer, worker.EnvS3AccessKey)
	_, refs.creds.SecretAccessKeyKey, _ = jobSecretRef(job, snapshotContainer, worker.EnvS3SecretKey)
	if name, key, ok := jobSecretRef(job, snapshotContainer, worker.EnvEncryptionKey); ok {
		refs.key = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	}
	return refs, true
}

// readPackageKey reads a package key from its Secret and checks it is a usable AES-256
// key. The error names the Secret, the key and the length found, never the value.
func readPackageKey(ctx context.Context, reader client.Reader, namespace string, ref *corev1.SecretKeySelector) (*snapshot.Key, error) {
	v, err := secretValues(ctx, reader, namespace, ref.Name, ref.Key)
	if err != nil {
		return nil, err
	}
	k, err := snapshot.ParseKey(v[0])
	if err != nil {
		return nil, stepErrorf(memoryv1alpha1.ReasonInvalidKey,
			"Secret %s/%s key %q holds no usable encryption key: %v", namespace, ref.Name, ref.Key, err)
	}
	return &k, nil
}

// planFromSpec plans the destination again from the spec and the store, for a snapshot
// whose Job is gone. When the store is gone too, only spec.destination can say how to
// reach the package.
func (p packageResolver) planFromSpec(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot, loc *memoryv1alpha1.SnapshotLocation) (destinationPlan, error) {
	store := &memoryv1alpha1.MemoryStore{}
	err := p.client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: snap.Spec.StoreRef.Name}, store)
	switch {
	case apierrors.IsNotFound(err):
		d := snap.Spec.Destination
		if d == nil || d.CredentialsSecret == nil {
			return destinationPlan{}, stepErrorf(memoryv1alpha1.ReasonStoreNotFound,
				"cannot reach the package %s: its Job and MemoryStore %s are gone, and spec.destination names no credentialsSecret",
				loc.Prefix, snap.Spec.StoreRef.Name)
		}
		plan := destinationPlan{Destination: worker.Destination{Region: d.Region}, Credentials: *d.CredentialsSecret}
		if d.Insecure != nil {
			plan.Destination.Insecure = *d.Insecure
		}
		plan.Credentials.AccessKeyIDKey = orDefault(plan.Credentials.AccessKeyIDKey, "accessKeyID")
		plan.Credentials.SecretAccessKeyKey = orDefault(plan.Credentials.SecretAccessKeyKey, "secretAccessKey")
		return plan, nil
	case err != nil:
		return destinationPlan{}, err
	}
	backend, err := storeBackend(ctx, p.client, store)
	if err != nil {
		return destinationPlan{}, err
	}
	return planDestination(snap, store, backend.objectStorage)
}

// effectiveBackend is the part of a store's backends a snapshot Job needs.
type effectiveBackend struct {
	objectStorage *memoryv1alpha1.ObjectStorageSpec
	milvusAddress string
}

// storeBackend returns the store's object storage and Milvus: its inline spec, or its
// ClusterMemoryBackend's (whose Secrets are never used here).
func storeBackend(ctx context.Context, c client.Reader, store *memoryv1alpha1.MemoryStore) (effectiveBackend, error) {
	b := store.Spec.Backend
	if b.ClusterBackend == "" {
		out := effectiveBackend{objectStorage: b.ObjectStorage}
		if b.Milvus != nil {
			out.milvusAddress = b.Milvus.Address
		}
		return out, nil
	}
	cb := &memoryv1alpha1.ClusterMemoryBackend{}
	if err := c.Get(ctx, types.NamespacedName{Name: b.ClusterBackend}, cb); err != nil {
		if apierrors.IsNotFound(err) {
			return effectiveBackend{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady,
				"ClusterMemoryBackend %q of MemoryStore %s not found", b.ClusterBackend, store.Name)
		}
		return effectiveBackend{}, err
	}
	out := effectiveBackend{objectStorage: cb.Spec.ObjectStorage}
	if cb.Spec.Milvus != nil {
		out.milvusAddress = cb.Spec.Milvus.Address
	}
	return out, nil
}

// secretValues returns the values of keys in a Secret, read straight from the API
// server. Errors name the Secret and the key, never a value.
func secretValues(ctx context.Context, reader client.Reader, namespace, name string, keys ...string) ([][]byte, error) {
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, stepErrorf(memoryv1alpha1.ReasonSecretNotFound, "Secret %s/%s not found", namespace, name)
		}
		return nil, err
	}
	values := make([][]byte, len(keys))
	for i, k := range keys {
		v, ok := secret.Data[k]
		if !ok || len(v) == 0 {
			return nil, stepErrorf(memoryv1alpha1.ReasonSecretKeyMissing, "Secret %s/%s has no key %q", namespace, name, k)
		}
		values[i] = v
	}
	return values, nil
}
