package controllers

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
	"github.com/amemory/memory-operator/internal/testutil"
)

// TestMemoryStoreShortTermInRedis: a store on a backend that declares Redis keeps its
// sessions there: it gets a Redis user of its own, limited to its prefix, whose login
// (never the admin's) is in its connection Secret and its gateway's environment; a
// rotation gives it a new password; deletion removes the user and its keys. A store
// that asks for Redis on a backend without one says so and stops.
func TestMemoryStoreShortTermInRedis(t *testing.T) {
	f := services(t)
	rs := testutil.RedisServer(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	createSecret(t, ns, "redis-admin", map[string]string{"username": rs.User, "password": rs.Password})
	tenant := newTenant()
	store := f.inlineStore(ns, "sessions", tenant, 8, false)
	store.Spec.Backend.Redis = &memoryv1alpha1.RedisSpec{Address: rs.Addr, CredentialsSecret: memoryv1alpha1.CredentialsSecretRef{Name: "redis-admin"}}
	store.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
	store.Spec.ShortTerm = &memoryv1alpha1.ShortTermSpec{Promote: memoryv1alpha1.PromoteOnRequest}
	store.Spec.Gateway = &memoryv1alpha1.GatewaySpec{Enabled: true, Keys: []memoryv1alpha1.GatewayKey{{Name: "agent"}}}
	create(t, store)
	key := client.ObjectKeyFromObject(store)
	got := waitReady(t, key)

	g := NewWithT(t)
	names, err := provision.NamesFor(tenant, "memory-operator")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status.ShortTerm).To(Equal(&memoryv1alpha1.ShortTermStatus{Store: memoryv1alpha1.ShortTermRedis,
		RedisAddress: rs.Addr, RedisUser: names.RedisUser, KeyPrefix: redisstore.Prefix(tenant)}))
	c := meta.FindStatusCondition(got.Status.Conditions, memoryv1alpha1.ConditionShortTermReady)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	conn := connectionSecret(t, got)
	g.Expect(conn).To(HaveKeyWithValue("redisUsername", names.RedisUser))
	first := conn["redisPassword"]
	g.Expect(first).NotTo(BeEmpty())
	for k, v := range conn {
		g.Expect(v).NotTo(Equal(rs.Password), "key %s holds the Redis admin's password", k)
	}
	ping := func(password string) error {
		rc := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: names.RedisUser, Password: password})
		defer func() { _ = rc.Close() }()
		return rc.RPush(ctx, redisstore.Prefix(tenant)+"t:session:x", "turn").Err()
	}
	g.Expect(ping(first)).To(Succeed())

	// The gateway: the login by reference, the settings as arguments.
	var dep appsv1.Deployment
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.GatewayName()}, &dep)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	ctr := dep.Spec.Template.Spec.Containers[0]
	var passwordRef string
	for _, e := range ctr.Env {
		if e.Name == gateway.EnvRedisPassword && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			passwordRef = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	g.Expect(passwordRef).To(Equal(got.ConnectionSecretNameOrDefault() + "/redisPassword"))
	args := strings.Join(ctr.Args, " ")
	for _, want := range []string{"--redis-address=" + rs.Addr, "--redis-user=" + names.RedisUser, "--redis-tenant=" + tenant, "--promote=OnRequest"} {
		g.Expect(args).To(ContainSubstring(want))
	}

	// Rotation: a new password, the old one refused after the next reconcile.
	got.Annotations = map[string]string{memoryv1alpha1.AnnotationRotateCredentials: "2026-12-06"}
	g.Expect(k8sClient.Update(ctx, got)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getStore(g, key).Status.CredentialsRotation).To(Equal("2026-12-06"))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	rotated := connectionSecret(t, got)["redisPassword"]
	g.Expect(rotated).NotTo(Equal(first))
	g.Expect(ping(rotated)).To(Succeed())

	// Deletion removes the user and the keys.
	deleteAndWaitGone(t, got)
	g.Expect(ping(rotated)).To(HaveOccurred())
	admin := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: rs.User, Password: rs.Password})
	defer func() { _ = admin.Close() }()
	left, err := admin.Keys(ctx, redisstore.Prefix(tenant)+"*").Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty())

	// Redis asked for on a backend without one.
	bare := f.inlineStore(ns, "no-redis", newTenant(), 8, false)
	bare.Spec.ShortTerm = &memoryv1alpha1.ShortTermSpec{Store: memoryv1alpha1.ShortTermRedis}
	create(t, bare)
	g.Eventually(func(g Gomega) {
		s := getStore(g, client.ObjectKeyFromObject(bare))
		c := meta.FindStatusCondition(s.Status.Conditions, memoryv1alpha1.ConditionShortTermReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(string(provision.ReasonEngineUnavailable)))
		g.Expect(c.Message).To(ContainSubstring("declares no redis"))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
}
