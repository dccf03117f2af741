package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
	"github.com/amemory/memory-operator/internal/worker"
)

// Connection Secret keys of the store's Redis login (its short-term tier in Redis).
const (
	keyRedisAddress   = "redisAddress"
	keyRedisUsername  = "redisUsername"
	keyRedisPassword  = "redisPassword"
	keyRedisKeyPrefix = "redisKeyPrefix"
)

// redisLogin is the store's own Redis login, when its sessions are in Redis.
type redisLogin struct {
	address, user, password, prefix string
}

// ensureShortTerm provisions the store's short-term tier: on Redis, the store's own
// user limited to its key prefix (provision.EnsureRedisTenant), with the password
// kept in the connection Secret and renewed on a rotation; on PostgreSQL, nothing
// beyond the schema (its sessions tables). It records the status and condition.
func (r *MemoryStoreReconciler) ensureShortTerm(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend, names provision.Names) (*redisLogin, error) {
	where := store.ShortTermStoreFor(rb.spec)
	if where != memoryv1alpha1.ShortTermRedis {
		store.Status.ShortTerm = &memoryv1alpha1.ShortTermStatus{Store: memoryv1alpha1.ShortTermPostgres}
		store.SetCondition(memoryv1alpha1.ConditionShortTermReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned,
			"Sessions in PostgreSQL, schema "+names.Schema)
		return nil, nil
	}
	if rb.redis == nil {
		return nil, provision.Failf(provision.ReasonEngineUnavailable,
			"spec.shortTerm.store is Redis, and the backend declares no redis")
	}
	previous, err := r.secretPassword(ctx, store, store.ConnectionSecretNameOrDefault(), keyRedisPassword)
	if err != nil {
		return nil, err
	}
	password := previous
	if store.RotationRequested() != "" {
		if password, err = newPassword(); err != nil {
			return nil, err
		}
	}
	if err := provision.EnsureRedisTenant(ctx, *rb.redis, names, ownerOf(store), password, previous); err != nil {
		return nil, err
	}
	login := &redisLogin{address: rb.redis.Address, user: names.RedisUser, password: password, prefix: redisstore.Prefix(names.Tenant)}
	store.Status.ShortTerm = &memoryv1alpha1.ShortTermStatus{Store: memoryv1alpha1.ShortTermRedis,
		RedisAddress: login.address, RedisUser: login.user, KeyPrefix: login.prefix}
	store.SetCondition(memoryv1alpha1.ConditionShortTermReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned,
		fmt.Sprintf("Sessions in Redis %s under %s*; the gateway logs in as Redis user %s", login.address, login.prefix, login.user))
	return login, nil
}

// addTo puts the store's Redis login in a Secret's data, when it has one.
func (l *redisLogin) addTo(data map[string]string) {
	if l == nil {
		return
	}
	data[keyRedisAddress], data[keyRedisUsername], data[keyRedisPassword], data[keyRedisKeyPrefix] = l.address, l.user, l.password, l.prefix
}

// shortTermConfig is the gateway's short-term settings from the store's spec and
// status.
func shortTermConfig(store *memoryv1alpha1.MemoryStore) gateway.ShortTerm {
	c := gateway.ShortTerm{SessionTTL: store.SessionTTLOrDefault(), Promote: string(store.PromoteOrDefault())}
	if st := store.Status.ShortTerm; st != nil && st.Store == memoryv1alpha1.ShortTermRedis {
		c.RedisAddress, c.RedisUser, c.RedisTenant = st.RedisAddress, st.RedisUser, store.Spec.Tenant
	}
	return c
}

// sessionsConfig is where a Job finds the store's sessions (a snapshot that carries
// them, a restore that writes them back).
func sessionsConfig(store *memoryv1alpha1.MemoryStore) worker.SessionsConfig {
	st := shortTermConfig(store)
	return worker.SessionsConfig{SessionTTL: st.SessionTTL, RedisAddress: st.RedisAddress, RedisUser: st.RedisUser, RedisTenant: st.RedisTenant}
}

// jobRedisEnv is a Job's Redis password (the store's one Redis user's), from the
// connection Secret, when the store keeps its sessions in Redis.
func jobRedisEnv(store *memoryv1alpha1.MemoryStore) []corev1.EnvVar {
	if st := store.Status.ShortTerm; st == nil || st.RedisUser == "" {
		return nil
	}
	return []corev1.EnvVar{secretEnv(worker.EnvRedisPassword, store.ConnectionSecretNameOrDefault(), keyRedisPassword)}
}

// redisLoginEnv is the gateway's Redis password, from the connection Secret.
func redisLoginEnv(store *memoryv1alpha1.MemoryStore, secret string) []corev1.EnvVar {
	if st := store.Status.ShortTerm; st == nil || st.RedisUser == "" {
		return nil
	}
	return []corev1.EnvVar{secretEnv(gateway.EnvRedisPassword, secret, keyRedisPassword)}
}
