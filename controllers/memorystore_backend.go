package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
)

// stepError is a failure to report on a condition with a precise reason. Its message
// names objects and keys, never secret values.
type stepError struct {
	reason  string
	message string
}

func (e *stepError) Error() string { return e.message }

func stepErrorf(reason, format string, args ...any) *stepError {
	return &stepError{reason: reason, message: fmt.Sprintf(format, args...)}
}

// resolvedBackend is a store's backends with credentials read from their Secrets.
type resolvedBackend struct {
	spec     memoryv1alpha1.BackendSpec
	postgres provision.PostgresConn
	milvus   *provision.MilvusConn
	s3       *provision.S3Conn
	redis    *provision.RedisConn
}

// resolveBackend finds the store's backends (its ClusterMemoryBackend, whose Secrets
// live in the operator's namespace, or its inline spec, whose Secrets live in the
// store's namespace) and reads their credentials.
func (r *MemoryStoreReconciler) resolveBackend(ctx context.Context, store *memoryv1alpha1.MemoryStore) (*resolvedBackend, error) {
	return resolveStoreBackend(ctx, r.Client, r.APIReader, r.OperatorNamespace, store)
}

// resolveStoreBackend is resolveBackend for any controller: c reads the
// ClusterMemoryBackend, secrets the Secrets (straight from the API server), and a
// ClusterMemoryBackend's Secrets are in operatorNS.
func resolveStoreBackend(ctx context.Context, c, secrets client.Reader, operatorNS string, store *memoryv1alpha1.MemoryStore) (*resolvedBackend, error) {
	var spec memoryv1alpha1.BackendSpec
	secretNS := store.Namespace
	if name := store.Spec.Backend.ClusterBackend; name != "" {
		cb := &memoryv1alpha1.ClusterMemoryBackend{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, cb); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, stepErrorf(memoryv1alpha1.ReasonBackendNotFound, "ClusterMemoryBackend %q not found", name)
			}
			return nil, err
		}
		if !cb.AllowsNamespace(store.Namespace) {
			return nil, stepErrorf(memoryv1alpha1.ReasonBackendNotAllowed,
				"ClusterMemoryBackend %q does not allow namespace %q", name, store.Namespace)
		}
		spec = cb.Spec.BackendSpec
		secretNS = operatorNS
	} else {
		spec = memoryv1alpha1.BackendSpec{
			Postgres:      *store.Spec.Backend.Postgres,
			Milvus:        store.Spec.Backend.Milvus,
			ObjectStorage: store.Spec.Backend.ObjectStorage,
			Redis:         store.Spec.Backend.Redis,
		}
	}

	return resolveBackendSpec(ctx, secrets, spec, secretNS)
}

// resolveBackendSpec reads the credentials of a backend spec from its Secrets in
// secretNS (straight from the API server through reader).
func resolveBackendSpec(ctx context.Context, reader client.Reader, spec memoryv1alpha1.BackendSpec, secretNS string) (*resolvedBackend, error) {
	rb := &resolvedBackend{spec: spec}
	pg := spec.Postgres
	creds, err := secretStrings(ctx, reader, secretNS, pg.AdminSecret.Name,
		orDefault(pg.AdminSecret.UsernameKey, "username"), orDefault(pg.AdminSecret.PasswordKey, "password"))
	if err != nil {
		return nil, err
	}
	rb.postgres = provision.PostgresConn{
		Host:     pg.Host,
		Port:     int(pg.Port),
		Database: orDefault(pg.Database, "postgres"),
		SSLMode:  orDefault(pg.SSLMode, "prefer"),
		User:     creds[0],
		Password: creds[1],
	}
	if rb.postgres.Port == 0 {
		rb.postgres.Port = 5432
	}

	if m := spec.Milvus; m != nil {
		rb.milvus = &provision.MilvusConn{Address: m.Address}
		if ref := m.CredentialsSecret; ref != nil {
			creds, err := secretStrings(ctx, reader, secretNS, ref.Name,
				orDefault(ref.UsernameKey, "username"), orDefault(ref.PasswordKey, "password"))
			if err != nil {
				return nil, err
			}
			rb.milvus.Username, rb.milvus.Password = creds[0], creds[1]
		}
	}

	if rd := spec.Redis; rd != nil {
		ref := rd.CredentialsSecret
		creds, err := secretStrings(ctx, reader, secretNS, ref.Name,
			orDefault(ref.UsernameKey, "username"), orDefault(ref.PasswordKey, "password"))
		if err != nil {
			return nil, err
		}
		rb.redis = &provision.RedisConn{Address: rd.Address, Username: creds[0], Password: creds[1]}
	}

	if o := spec.ObjectStorage; o != nil {
		ref := o.CredentialsSecret
		creds, err := secretStrings(ctx, reader, secretNS, ref.Name,
			orDefault(ref.AccessKeyIDKey, "accessKeyID"), orDefault(ref.SecretAccessKeyKey, "secretAccessKey"))
		if err != nil {
			return nil, err
		}
		rb.s3 = &provision.S3Conn{
			Endpoint:     o.Endpoint,
			Region:       o.Region,
			Secure:       !o.Insecure,
			AccessKey:    creds[0],
			SecretKey:    creds[1],
			Bucket:       o.Bucket,
			CreateBucket: o.CreateBucket,
		}
	}
	return rb, nil
}

// basePrefix is the object-storage prefix under which the store gets its own.
func (rb *resolvedBackend) basePrefix() string {
	if rb.spec.ObjectStorage == nil {
		return ""
	}
	return orDefault(rb.spec.ObjectStorage.Prefix, "memory-operator")
}

// secretStrings returns the values of keys in a Secret, as strings.
func secretStrings(ctx context.Context, reader client.Reader, namespace, name string, keys ...string) ([]string, error) {
	values, err := secretValues(ctx, reader, namespace, name, keys...)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
