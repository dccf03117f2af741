package controllers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
)

// Keys of the connection Secret that agents mount (documented in docs/memorystore.md).
const (
	keyHost           = "host"
	keyPort           = "port"
	keyDatabase       = "database"
	keySchema         = "schema"
	keyUsername       = "username"
	keyPassword       = "password"
	keySSLMode        = "sslmode"
	keyURI            = "uri"
	keyVectorEngine   = "vectorEngine"
	keyMilvusAddress  = "milvusAddress"
	keyCollection     = "collection"
	keyDimension      = "vectorDimension"
	keyMetric         = "vectorMetric"
	keyEmbedderType   = "embedderType"
	keyEmbedderURL    = "embedderEndpoint"
	keyEmbeddingModel = "embeddingModel"
	keyS3Endpoint     = "objectStorageEndpoint"
	keyBucket         = "bucket"
	keyPrefix         = "prefix"
)

// rolePassword returns the password in the store's Secret name, or a new one when
// there is no Secret yet. Reusing it keeps agents and Jobs connected across reconciles
// and operator restarts; EnsurePostgres sets the role to whatever this returns.
func (r *MemoryStoreReconciler) rolePassword(ctx context.Context, store *memoryv1alpha1.MemoryStore, name string) (string, error) {
	return r.secretPassword(ctx, store, name, keyPassword)
}

// secretPassword returns the value of key in the store's Secret name, or a new
// password when there is none yet.
func (r *MemoryStoreReconciler) secretPassword(ctx context.Context, store *memoryv1alpha1.MemoryStore, name, key string) (string, error) {
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: store.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return newPassword()
	case err != nil:
		return "", err
	case !metav1.IsControlledBy(secret, store):
		return "", stepErrorf(memoryv1alpha1.ReasonSecretConflict,
			"Secret %s/%s exists and is not managed by this MemoryStore; choose another connectionSecretName", store.Namespace, secret.Name)
	}
	if pw := secret.Data[key]; len(pw) > 0 {
		return string(pw), nil
	}
	return newPassword()
}

// rolePasswords are the passwords of the store's two roles: new ones when a rotation is
// requested (store.RotationRequested), else those in its Secrets.
func (r *MemoryStoreReconciler) rolePasswords(ctx context.Context, store *memoryv1alpha1.MemoryStore) (provision.Passwords, error) {
	if store.RotationRequested() != "" {
		agent, err := newPassword()
		if err != nil {
			return provision.Passwords{}, err
		}
		worker, err := newPassword()
		return provision.Passwords{Agent: agent, Worker: worker}, err
	}
	agent, err := r.rolePassword(ctx, store, store.ConnectionSecretNameOrDefault())
	if err != nil {
		return provision.Passwords{}, err
	}
	worker, err := r.rolePassword(ctx, store, store.WorkerSecretName())
	return provision.Passwords{Agent: agent, Worker: worker}, err
}

func newPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// connectionInfo is what goes into the connection and worker Secrets.
type connectionInfo struct {
	backend   *resolvedBackend
	names     provision.Names
	passwords provision.Passwords
	engine    string
	model     string
	// milvusUser and milvusPassword are the store's own Milvus login, when its
	// engine is Milvus on a server with authentication.
	milvusUser, milvusPassword string
	// redis is the store's own Redis login, when its sessions are in Redis.
	redis *redisLogin
}

// ensureConnectionSecret creates or updates the Secret agents mount. It carries the
// store's own role, never admin credentials, and no object-storage keys.
func (r *MemoryStoreReconciler) ensureConnectionSecret(ctx context.Context, store *memoryv1alpha1.MemoryStore, info connectionInfo) error {
	agent := info.backend.postgres
	agent.User, agent.Password = info.names.Role, info.passwords.Agent
	data := map[string]string{
		keyHost:           agent.Host,
		keyPort:           strconv.Itoa(agent.Port),
		keyDatabase:       agent.Database,
		keySchema:         info.names.Schema,
		keyUsername:       agent.User,
		keyPassword:       agent.Password,
		keySSLMode:        agent.SSLMode,
		keyURI:            agentURI(info),
		keyVectorEngine:   info.engine,
		keyDimension:      strconv.Itoa(int(servingDimension(store))),
		keyMetric:         string(store.MetricOrDefault()),
		keyEmbedderType:   orDefault(string(servingEmbedder(store).Type), string(memoryv1alpha1.EmbedderHashing)),
		keyEmbedderURL:    servingEmbedder(store).Endpoint,
		keyEmbeddingModel: info.model,
	}
	if m := info.backend.milvus; m != nil && info.engine == provision.EngineMilvus {
		data[keyMilvusAddress] = m.Address
		data[keyCollection] = info.names.Collection
		info.addMilvusLogin(data)
	}
	info.redis.addTo(data)
	if s := info.backend.s3; s != nil {
		data[keyS3Endpoint] = s.Endpoint
		data[keyBucket] = s.Bucket
		data[keyPrefix] = info.names.Prefix
	}

	// The gateway entries are the gateway step's (setGatewayConnection): kept as they
	// are while the gateway is enabled, dropped otherwise.
	var keep []string
	if store.GatewayEnabled() {
		keep = []string{keyGatewayURL, keyGatewayKey, keyGatewayGRPC}
	}
	return r.ensureSecret(ctx, store, store.ConnectionSecretNameOrDefault(), "connection", data, keep...)
}

// agentURI is the store role's connection URI, the connection Secret's "uri".
func agentURI(info connectionInfo) string {
	agent := info.backend.postgres
	agent.User, agent.Password = info.names.Role, info.passwords.Agent
	return agent.URL(url.Values{"options": {"-c search_path=" + info.names.Schema}})
}

// ensureWorkerSecret creates or updates the Secret the store's Jobs read: the worker
// role's login, nothing else.
func (r *MemoryStoreReconciler) ensureWorkerSecret(ctx context.Context, store *memoryv1alpha1.MemoryStore, info connectionInfo) error {
	w := info.backend.postgres
	w.User, w.Password = info.names.WorkerRole, info.passwords.Worker
	data := map[string]string{
		keyHost:     w.Host,
		keyPort:     strconv.Itoa(w.Port),
		keyDatabase: w.Database,
		keySchema:   info.names.Schema,
		keyUsername: w.User,
		keyPassword: w.Password,
		keySSLMode:  w.SSLMode,
		keyURI:      w.URL(url.Values{"options": {"-c search_path=" + info.names.Schema}}),
	}
	info.addMilvusLogin(data)
	return r.ensureSecret(ctx, store, store.WorkerSecretName(), "worker", data)
}

// addMilvusLogin puts the store's Milvus login in a Secret's data, when it has one.
func (info connectionInfo) addMilvusLogin(data map[string]string) {
	if info.milvusUser != "" {
		data[keyMilvusUsername] = info.milvusUser
		data[keyMilvusPassword] = info.milvusPassword
	}
}

// ensureSecret creates or updates one of the store's Secrets, owned by the store. The
// keys in keep are left as they are (another step writes them).
func (r *MemoryStoreReconciler) ensureSecret(ctx context.Context, store *memoryv1alpha1.MemoryStore, name, kind string, data map[string]string, keep ...string) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: name}}
	op, err := controllerutil.CreateOrPatch(ctx, r.Client, secret, func() error {
		if secret.Labels == nil {
			secret.Labels = map[string]string{}
		}
		secret.Labels["app.kubernetes.io/managed-by"] = "memory-operator"
		secret.Labels["memory.amemory.io/store"] = store.Name
		secret.Type = corev1.SecretTypeOpaque
		previous := secret.Data
		secret.Data = map[string][]byte{}
		for _, k := range keep {
			if v, ok := previous[k]; ok {
				secret.Data[k] = v
			}
		}
		for k, v := range data {
			if v != "" {
				secret.Data[k] = []byte(v)
			}
		}
		return controllerutil.SetControllerReference(store, secret, r.Scheme)
	})
	if err != nil {
		return err
	}
	if op == controllerutil.OperationResultCreated {
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "SecretCreated", "Provision", "Created %s Secret %s", kind, secret.Name)
	}
	return nil
}
