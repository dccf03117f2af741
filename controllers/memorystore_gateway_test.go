package controllers

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/gateway"
)

// The gateway as the operator builds it on a real API server: the Deployment, Service
// and keys Secret, the connection Secret's gateway entries, rotation, removal, TLS and
// the conditions. No kubelet runs, so no gateway pod starts: tests play the Deployment
// controller's part by writing the Deployment's status.

// gatewayStore is a store on PostgreSQL alone (vectors in PostgreSQL) with the gateway
// enabled and labels and annotations a GitOps tool puts on what it applies.
func (f backendFixture) gatewayStore(namespace, name string, mutate func(*memoryv1alpha1.GatewaySpec)) *memoryv1alpha1.MemoryStore {
	s := f.inlineStore(namespace, name, newTenant(), 8, false)
	s.Spec.Backend.ObjectStorage = nil
	s.Labels = map[string]string{"app.kubernetes.io/instance": "agents-app", "kustomize.toolkit.fluxcd.io/name": "agents"}
	s.Annotations = map[string]string{"argocd.argoproj.io/tracking-id": "agents:memory.amemory.io/MemoryStore:" + namespace + "/" + name}
	s.Spec.Gateway = &memoryv1alpha1.GatewaySpec{Enabled: true}
	if mutate != nil {
		mutate(s.Spec.Gateway)
	}
	return s
}

// setGateway changes the store's spec.gateway (creating it when absent; mutate may set
// it to nil through the store) and returns the store's new generation.
func setGateway(t *testing.T, key client.ObjectKey, mutate func(*memoryv1alpha1.MemoryStore)) int64 {
	t.Helper()
	var gen int64
	NewWithT(t).Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &memoryv1alpha1.MemoryStore{}
		if err := k8sClient.Get(context.Background(), key, s); err != nil {
			return err
		}
		if s.Spec.Gateway == nil {
			s.Spec.Gateway = &memoryv1alpha1.GatewaySpec{}
		}
		mutate(s)
		if err := k8sClient.Update(context.Background(), s); err != nil {
			return err
		}
		gen = s.Generation
		return nil
	})).To(Succeed())
	return gen
}

// waitGatewayDeployment waits for the store's gateway Deployment to exist and, when
// check is set, to satisfy it.
func waitGatewayDeployment(t *testing.T, store *memoryv1alpha1.MemoryStore, check func(Gomega, *appsv1.Deployment)) *appsv1.Deployment {
	t.Helper()
	dep := &appsv1.Deployment{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: store.Namespace, Name: store.Name + "-gateway"}, dep)).To(Succeed())
		if check != nil {
			check(g, dep)
		}
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	return dep
}

// waitAbsent waits until obj no longer exists.
func waitAbsent(t *testing.T, obj client.Object) {
	t.Helper()
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(BeTrue(), "%T %s still exists", obj, obj.GetName())
}

// gatewayKeys returns the keys Secret's plaintext keys by name and its keys.json.
func gatewayKeys(t *testing.T, g Gomega, store *memoryv1alpha1.MemoryStore) (*corev1.Secret, map[string]string, gateway.KeyFile) {
	t.Helper()
	s := &corev1.Secret{}
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: store.Namespace, Name: store.Name + "-gateway-keys"}, s)).To(Succeed())
	plain := map[string]string{}
	var file gateway.KeyFile
	for k, v := range s.Data {
		if k == gateway.KeysFileName {
			dec := json.NewDecoder(strings.NewReader(string(v)))
			dec.DisallowUnknownFields()
			g.Expect(dec.Decode(&file)).To(Succeed())
			continue
		}
		plain[k] = string(v)
	}
	g.Expect(file.Validate()).To(Succeed())
	return s, plain, file
}

// keyEntry returns the keys.json entry of name.
func keyEntry(file gateway.KeyFile, name string) *gateway.KeyEntry {
	for i := range file.Keys {
		if file.Keys[i].Name == name {
			return &file.Keys[i]
		}
	}
	return nil
}

// rollOut plays the Deployment controller and the kubelet: every replica up to date
// and ready.
func rollOut(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	NewWithT(t).Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(dep), d); err != nil {
			return err
		}
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
		return k8sClient.Status().Update(context.Background(), d)
	})).To(Succeed())
}

func TestGatewayDeploymentServiceAndKeys(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.gatewayStore(ns, "support-bot", func(gw *memoryv1alpha1.GatewaySpec) {
		gw.Keys = []memoryv1alpha1.GatewayKey{
			{Name: "agents"},
			{Name: "support", Scopes: []memoryv1alpha1.GatewayScopePattern{"agent:support", "user:*"}, ReadOnly: true},
		}
	})
	create(t, store)
	key := client.ObjectKeyFromObject(store)

	// The store is Ready without waiting for gateway pods; the gateway rolls out.
	got := waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing)
	g := NewWithT(t)
	g.Expect(got.IsReady()).To(BeTrue())
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseReady))
	g.Expect(meta.FindStatusCondition(got.Status.Conditions, memoryv1alpha1.ConditionReconciling)).To(BeNil(), "a rolling gateway is not the store's work")

	ours := map[string]string{
		"app.kubernetes.io/name": "memory-operator", "app.kubernetes.io/component": "gateway",
		"app.kubernetes.io/managed-by": "memory-operator", "memory.amemory.io/store": "support-bot",
	}
	dep := waitGatewayDeployment(t, store, nil)
	g.Expect(metav1.IsControlledBy(dep, got)).To(BeTrue())
	g.Expect(dep.Labels).To(Equal(ours), "only the operator's labels, never the store's")
	g.Expect(dep.Annotations).To(HaveKey(gatewaySpecHashAnnotation))
	g.Expect(dep.Annotations).NotTo(HaveKey("argocd.argoproj.io/tracking-id"))
	g.Expect(dep.Spec.Template.Labels).To(Equal(ours))
	g.Expect(dep.Spec.Template.Annotations).To(HaveKey(gatewayConfigHashAnnotation))
	g.Expect(*dep.Spec.Replicas).To(Equal(int32(1)))

	// The pod: the store's own role through the connection Secret's uri, nothing else.
	pod := dep.Spec.Template.Spec
	g.Expect(pod.Containers).To(HaveLen(1))
	c := pod.Containers[0]
	g.Expect(c.Image).To(Equal(testWorkerImage))
	g.Expect(c.Args[0]).To(Equal("gateway"))
	cfg, err := gateway.ParseArgs(c.Args[1:], io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Schema).To(Equal(got.Status.Postgres.Schema))
	g.Expect(cfg.VectorEngine).To(Equal("Postgres"))
	g.Expect(cfg.Dimension).To(Equal(8))
	g.Expect(cfg.KeysFile).To(Equal("/etc/memory-gateway/keys/keys.json"))
	g.Expect(cfg.TLSCertFile).To(BeEmpty())
	g.Expect(c.Env).To(Equal([]corev1.EnvVar{{Name: gateway.EnvPostgresURI, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "support-bot-memory"}, Key: "uri"}}}}))
	g.Expect(c.EnvFrom).To(BeEmpty())
	podJSON, _ := json.Marshal(pod)
	for _, other := range []string{got.Status.WorkerSecret, "pg-admin", "s3-creds", f.pg.Password} {
		g.Expect(string(podJSON)).NotTo(ContainSubstring(other))
	}
	// Runs as non-root on a read-only root filesystem, with no token and no privileges.
	g.Expect(pod.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
	g.Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
	g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(c.SecurityContext.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}))
	// Of the keys Secret only keys.json, read-only.
	var secretVolumes []corev1.Volume
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secretVolumes = append(secretVolumes, v)
		}
	}
	g.Expect(secretVolumes).To(HaveLen(1))
	g.Expect(secretVolumes[0].Secret.SecretName).To(Equal("support-bot-gateway-keys"))
	g.Expect(secretVolumes[0].Secret.Items).To(Equal([]corev1.KeyToPath{{Key: "keys.json", Path: "keys.json"}}))
	g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "keys", MountPath: "/etc/memory-gateway/keys", ReadOnly: true}))
	g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
	g.Expect(c.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))

	// The API server's Pod Security admission accepts the pod under "restricted".
	restricted := newNamespace(t)
	rns := &corev1.Namespace{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: restricted}, rns)).To(Succeed())
	rns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	g.Expect(k8sClient.Update(ctx, rns)).To(Succeed())
	create(t, &corev1.ServiceAccount{ObjectMeta: objectMeta(restricted, "default")})
	trial := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: restricted, Name: "gateway-trial"}, Spec: *pod.DeepCopy()}
	g.Expect(k8sClient.Create(ctx, trial, client.DryRunAll)).To(Succeed())
	trial = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: restricted, Name: "gateway-trial"}, Spec: *pod.DeepCopy()}
	trial.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
	g.Expect(apierrors.IsForbidden(k8sClient.Create(ctx, trial, client.DryRunAll))).To(BeTrue(), "the admission check is live")

	// The Service.
	svc := &corev1.Service{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "support-bot-gateway"}, svc)).To(Succeed())
	g.Expect(metav1.IsControlledBy(svc, got)).To(BeTrue())
	g.Expect(svc.Labels).To(Equal(ours))
	g.Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeClusterIP))
	g.Expect(svc.Spec.Selector).To(Equal(ours))
	g.Expect(svc.Spec.Ports).To(ConsistOf(
		And(HaveField("Name", "http"), HaveField("Port", int32(8080)), HaveField("TargetPort", intstr.FromString("api"))),
		And(HaveField("Name", "metrics"), HaveField("Port", int32(9090)), HaveField("TargetPort", intstr.FromString("metrics"))),
		And(HaveField("Name", "grpc"), HaveField("Port", int32(8081)), HaveField("TargetPort", intstr.FromString("grpc")))))

	// The keys: plaintext per name in the keys Secret, hashes in keys.json; the
	// connection Secret has the URL and the first key.
	keysSecret, plain, file := gatewayKeys(t, g, got)
	g.Expect(metav1.IsControlledBy(keysSecret, got)).To(BeTrue())
	g.Expect(keysSecret.Labels).To(Equal(ours))
	g.Expect(plain).To(HaveLen(2))
	g.Expect(plain["agents"]).To(HavePrefix(gateway.KeyPrefix))
	g.Expect(keyEntry(file, "agents")).To(Equal(&gateway.KeyEntry{Name: "agents", SHA256: gateway.HashKey(plain["agents"]), Scopes: []string{"*"}}))
	g.Expect(keyEntry(file, "support")).To(Equal(&gateway.KeyEntry{Name: "support", SHA256: gateway.HashKey(plain["support"]),
		Scopes: []string{"agent:support", "user:*"}, ReadOnly: true}))
	data := connectionSecret(t, got)
	g.Expect(data).To(HaveKeyWithValue("gatewayURL", "http://support-bot-gateway."+ns+".svc:8080"))
	g.Expect(data).To(HaveKeyWithValue("gatewayGRPCAddress", "support-bot-gateway."+ns+".svc:8081"))
	g.Expect(data).To(HaveKeyWithValue("gatewayKey", plain["agents"]))
	g.Expect(gateway.HashKey(data["gatewayKey"])).To(Equal(keyEntry(file, "agents").SHA256))
	g.Expect(data).To(HaveKeyWithValue("username", got.Status.Postgres.Role), "the rest of the connection Secret is as before")

	// status.gateway names what there is, never a key.
	got = getStore(g, key)
	g.Expect(got.Status.Gateway).To(Equal(&memoryv1alpha1.GatewayStatus{
		URL: "http://support-bot-gateway." + ns + ".svc:8080", GRPCAddress: "support-bot-gateway." + ns + ".svc:8081", Replicas: 1, ReadyReplicas: 0,
		Keys: []string{"agents", "support"}, ConnectionKey: "agents",
		KeysSecret: &memoryv1alpha1.SecretVersion{Name: "support-bot-gateway-keys", Version: keysSecret.ResourceVersion},
	}))

	// The pods become ready: GatewayReady=True, and status.gateway counts them.
	rollOut(t, dep)
	got = waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionTrue, memoryv1alpha1.ReasonDeployed)
	g.Expect(got.Status.Gateway.ReadyReplicas).To(Equal(int32(1)))
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements("GatewayCreated", "GatewayServiceCreated", "GatewayKeyCreated", "GatewayReady"))

	// A converged gateway is not rewritten, by this operator or a restarted one.
	dep = waitGatewayDeployment(t, store, nil)
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	restarted := newReconciler(k8sClient, k8sClient)
	for i := 0; i < 2; i++ {
		res, err := restarted.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res).To(Equal(reconcile.Result{}))
	}
	after := getStore(g, key)
	g.Expect(after.ResourceVersion).To(Equal(got.ResourceVersion), "the store's status")
	depAfter := waitGatewayDeployment(t, store, nil)
	g.Expect(depAfter.ResourceVersion).To(Equal(dep.ResourceVersion), "the Deployment")
	svcAfter := &corev1.Service{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(svc), svcAfter)).To(Succeed())
	g.Expect(svcAfter.ResourceVersion).To(Equal(svc.ResourceVersion), "the Service")
	keysAfter, plainAfter, _ := gatewayKeys(t, g, got)
	g.Expect(keysAfter.ResourceVersion).To(Equal(keysSecret.ResourceVersion), "the keys Secret")
	g.Expect(plainAfter).To(Equal(plain))
	g.Expect(connectionSecret(t, got)).To(Equal(data))

	// Someone edits the Deployment: the operator puts its spec back.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = "evil.example/gateway:latest"
		return k8sClient.Update(ctx, d)
	})).To(Succeed())
	waitGatewayDeployment(t, store, func(g Gomega, d *appsv1.Deployment) {
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(testWorkerImage))
	})
}

func TestGatewayKeyRotation(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.gatewayStore(ns, "rotate", nil)
	create(t, store)
	key := client.ObjectKeyFromObject(store)
	waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing)
	dep := waitGatewayDeployment(t, store, nil)
	rollOut(t, dep)
	waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionTrue, memoryv1alpha1.ReasonDeployed)
	dep = waitGatewayDeployment(t, store, nil)
	g := NewWithT(t)

	// The default: one key named "default" for every scope, in the connection Secret.
	got := getStore(g, key)
	g.Expect(got.Spec.Gateway.Keys).To(Equal([]memoryv1alpha1.GatewayKey{{Name: "default", Scopes: []memoryv1alpha1.GatewayScopePattern{"*"}}}), "CRD defaults")
	_, plain, file := gatewayKeys(t, g, got)
	old := plain["default"]
	g.Expect(old).NotTo(BeEmpty())
	g.Expect(keyEntry(file, "default").Scopes).To(Equal([]string{"*"}))
	g.Expect(connectionSecret(t, got)["gatewayKey"]).To(Equal(old))

	// Add a key: both are valid, the old one unchanged, the pods untouched.
	setGateway(t, key, func(s *memoryv1alpha1.MemoryStore) {
		s.Spec.Gateway.Keys = append(s.Spec.Gateway.Keys, memoryv1alpha1.GatewayKey{Name: "v2"})
	})
	var v2 string
	g.Eventually(func(g Gomega) {
		_, plain, file := gatewayKeys(t, g, got)
		g.Expect(plain).To(HaveLen(2))
		g.Expect(plain["default"]).To(Equal(old))
		g.Expect(keyEntry(file, "default").SHA256).To(Equal(gateway.HashKey(old)))
		g.Expect(keyEntry(file, "v2")).NotTo(BeNil())
		g.Expect(keyEntry(file, "v2").SHA256).To(Equal(gateway.HashKey(plain["v2"])))
		v2 = plain["v2"]
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(v2).NotTo(Equal(old))
	waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionTrue, memoryv1alpha1.ReasonDeployed)
	same := waitGatewayDeployment(t, store, nil)
	g.Expect(same.Generation).To(Equal(dep.Generation), "key rotation must not restart the gateway")
	g.Expect(same.Spec.Template).To(Equal(dep.Spec.Template))

	// Move the connection Secret to the new key, then remove the old one.
	setGateway(t, key, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Gateway.ConnectionKey = "v2" })
	g.Eventually(func() string { return connectionSecret(t, got)["gatewayKey"] }).WithTimeout(waitTimeout).Should(Equal(v2))
	setGateway(t, key, func(s *memoryv1alpha1.MemoryStore) {
		s.Spec.Gateway.Keys = []memoryv1alpha1.GatewayKey{{Name: "v2"}}
	})
	g.Eventually(func(g Gomega) {
		_, plain, file := gatewayKeys(t, g, got)
		g.Expect(plain).To(Equal(map[string]string{"v2": v2}))
		g.Expect(file.Keys).To(HaveLen(1))
		g.Expect(keyEntry(file, "default")).To(BeNil())
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	got = waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionTrue, memoryv1alpha1.ReasonDeployed)
	g.Expect(got.Status.Gateway.Keys).To(Equal([]string{"v2"}))
	g.Expect(got.Status.Gateway.ConnectionKey).To(Equal("v2"))
	same = waitGatewayDeployment(t, store, nil)
	g.Expect(same.Generation).To(Equal(dep.Generation))
	g.Expect(same.Spec.Template).To(Equal(dep.Spec.Template))
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements("GatewayKeyCreated", "GatewayKeyRemoved"))
}

func TestGatewayRefusesInvalidScopePattern(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	// "team:*" has the shape admission checks, but no such scope kind exists.
	store := f.gatewayStore(ns, "scoped", func(gw *memoryv1alpha1.GatewaySpec) {
		gw.Keys = []memoryv1alpha1.GatewayKey{{Name: "teams", Scopes: []memoryv1alpha1.GatewayScopePattern{"user:*", "team:*"}}}
	})
	create(t, store)
	key := client.ObjectKeyFromObject(store)
	got := waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonInvalidScopePattern)
	g := NewWithT(t)
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionGatewayReady)).To(And(
		ContainSubstring("spec.gateway.keys[0].scopes[1] (key teams)"), ContainSubstring(`"team:*"`)))
	g.Expect(got.IsReady()).To(BeTrue(), "a gateway setting never makes the store unready")
	g.Expect(meta.FindStatusCondition(got.Status.Conditions, memoryv1alpha1.ConditionStalled)).To(BeNil())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "scoped-gateway"}, &appsv1.Deployment{}))).To(BeTrue())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "scoped-gateway-keys"}, &corev1.Secret{}))).To(BeTrue())
	g.Expect(connectionSecret(t, got)).NotTo(HaveKey("gatewayKey"))
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement(memoryv1alpha1.ReasonInvalidScopePattern))

	// Fixed, the gateway is deployed with the key limited to its scopes.
	setGateway(t, key, func(s *memoryv1alpha1.MemoryStore) {
		s.Spec.Gateway.Keys[0].Scopes = []memoryv1alpha1.GatewayScopePattern{"user:*", "agent:support"}
	})
	waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing)
	dep := waitGatewayDeployment(t, store, nil)
	keysSecret, plain, file := gatewayKeys(t, g, got)
	g.Expect(keyEntry(file, "teams").Scopes).To(Equal([]string{"user:*", "agent:support"}))

	// Broken again: what runs is left as it is, the condition says why.
	setGateway(t, key, func(s *memoryv1alpha1.MemoryStore) {
		s.Spec.Gateway.Keys = append(s.Spec.Gateway.Keys, memoryv1alpha1.GatewayKey{Name: "bad", Scopes: []memoryv1alpha1.GatewayScopePattern{"user:"}})
	})
	got = waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonInvalidScopePattern)
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionGatewayReady)).To(ContainSubstring("spec.gateway.keys[1].scopes[0] (key bad)"))
	again := waitGatewayDeployment(t, store, nil)
	g.Expect(again.ResourceVersion).To(Equal(dep.ResourceVersion))
	keysAgain, plainAgain, _ := gatewayKeys(t, g, got)
	g.Expect(keysAgain.ResourceVersion).To(Equal(keysSecret.ResourceVersion))
	g.Expect(plainAgain).To(Equal(plain))
	g.Expect(connectionSecret(t, got)["gatewayKey"]).To(Equal(plain["teams"]), "the connection Secret keeps the key in use")
}

func TestGatewayDisableRemovesEverything(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.gatewayStore(ns, "fleeting", nil)
	create(t, store)
	key := client.ObjectKeyFromObject(store)
	waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing)
	dep := waitGatewayDeployment(t, store, nil)
	g := NewWithT(t)
	g.Eventually(func() map[string]string { return connectionSecret(t, store) }).WithTimeout(waitTimeout).Should(HaveKey("gatewayKey"))

	for _, disable := range []struct {
		name string
		do   func(*memoryv1alpha1.MemoryStore)
	}{
		{"enabled: false", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Gateway.Enabled = false }},
		{"no spec.gateway", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Gateway = nil }},
	} {
		t.Run(disable.name, func(t *testing.T) {
			g := NewWithT(t)
			setGateway(t, key, disable.do)
			waitAbsent(t, &appsv1.Deployment{ObjectMeta: objectMeta(ns, "fleeting-gateway")})
			waitAbsent(t, &corev1.Service{ObjectMeta: objectMeta(ns, "fleeting-gateway")})
			waitAbsent(t, &corev1.Secret{ObjectMeta: objectMeta(ns, "fleeting-gateway-keys")})
			g.Eventually(func() map[string]string { return connectionSecret(t, store) }).WithTimeout(waitTimeout).
				ShouldNot(Or(HaveKey("gatewayURL"), HaveKey("gatewayKey"), HaveKey("gatewayGRPCAddress")))
			g.Eventually(func(g Gomega) {
				s := getStore(g, key)
				g.Expect(s.Status.Gateway).To(BeNil())
				g.Expect(meta.FindStatusCondition(s.Status.Conditions, memoryv1alpha1.ConditionGatewayReady)).To(BeNil())
				g.Expect(s.IsReady()).To(BeTrue())
			}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
			g.Expect(connectionSecret(t, store)).To(HaveKey("uri"))
			g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
				Should(ContainElement("GatewayRemoved"))

			// Enabled again: a new gateway with new keys.
			setGateway(t, key, func(s *memoryv1alpha1.MemoryStore) { s.Spec.Gateway.Enabled = true })
			again := waitGatewayDeployment(t, store, nil)
			g.Expect(again.UID).NotTo(Equal(dep.UID))
			g.Eventually(func() map[string]string { return connectionSecret(t, store) }).WithTimeout(waitTimeout).Should(HaveKey("gatewayKey"))
		})
	}
	// Deleting the store takes the gateway with it.
	deleteAndWaitGone(t, store)
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleeting-gateway-keys"}, &corev1.Secret{}))).To(BeTrue())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleeting-gateway"}, &appsv1.Deployment{}))).To(BeTrue())
}

func TestGatewayTLS(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.gatewayStore(ns, "secure", func(gw *memoryv1alpha1.GatewaySpec) {
		gw.TLS = &memoryv1alpha1.GatewayTLS{SecretName: "secure-gateway-tls"}
	})
	create(t, store)
	key := client.ObjectKeyFromObject(store)

	got := waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonTLSSecretMissing)
	g := NewWithT(t)
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionGatewayReady)).To(ContainSubstring(ns + "/secure-gateway-tls"))
	g.Expect(got.IsReady()).To(BeTrue())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "secure-gateway"}, &appsv1.Deployment{}))).To(BeTrue(),
		"a pod whose certificate Secret is missing would never start")

	// The Secret appears without its key (the Secret watch brings it in at once).
	tls := &corev1.Secret{ObjectMeta: objectMeta(ns, "secure-gateway-tls"), Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("cert"), "tls.key": nil}}
	g.Expect(k8sClient.Create(ctx, tls)).To(Succeed())
	got = waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonTLSSecretInvalid)
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionGatewayReady)).To(ContainSubstring("tls.key"))

	tls.Data["tls.key"] = []byte("key")
	g.Expect(k8sClient.Update(ctx, tls)).To(Succeed())
	dep := waitGatewayDeployment(t, store, nil)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	cfg, err := gateway.ParseArgs(c.Args[1:], io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.TLSCertFile).To(Equal("/etc/memory-gateway/tls/tls.crt"))
	g.Expect(cfg.TLSKeyFile).To(Equal("/etc/memory-gateway/tls/tls.key"))
	g.Expect(c.ReadinessProbe.HTTPGet.Scheme).To(Equal(corev1.URISchemeHTTPS))
	g.Expect(c.LivenessProbe.HTTPGet.Scheme).To(Equal(corev1.URISchemeHTTPS))
	g.Expect(pod.Volumes).To(ContainElement(HaveField("Secret", And(Not(BeNil()),
		HaveField("SecretName", "secure-gateway-tls"),
		HaveField("Items", []corev1.KeyToPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}})))))
	g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "tls", MountPath: "/etc/memory-gateway/tls", ReadOnly: true}))
	// The reconcile that made the Deployment makes the Service next.
	svc := &corev1.Service{}
	g.Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "secure-gateway"}, svc)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(svc.Spec.Ports[0].Name).To(Equal("https"))

	g.Eventually(func(g Gomega) {
		s := getStore(g, key)
		g.Expect(s.Status.Gateway).NotTo(BeNil())
		g.Expect(s.Status.Gateway.URL).To(Equal("https://secure-gateway." + ns + ".svc:8080"))
		g.Expect(s.Status.Gateway.TLSSecret).To(Equal(&memoryv1alpha1.SecretVersion{Name: "secure-gateway-tls", Version: tls.ResourceVersion}))
		g.Expect(connectionSecret(t, s)["gatewayURL"]).To(HavePrefix("https://"))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())

	// A renewed certificate is observed, and needs no restart.
	tls.Data["tls.crt"] = []byte("renewed")
	g.Expect(k8sClient.Update(ctx, tls)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getStore(g, key).Status.Gateway.TLSSecret.Version).To(Equal(tls.ResourceVersion))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(waitGatewayDeployment(t, store, nil).Generation).To(Equal(dep.Generation))
}

func TestGatewayWaitsForTheStore(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	store := f.gatewayStore(ns, "early", nil)
	create(t, store)
	key := client.ObjectKeyFromObject(store)
	waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretNotFound)
	got := waitForCondition(t, key, memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonStoreNotReady)
	NewWithT(t).Expect(got.Status.Gateway).To(BeNil())

	f.adminSecrets(t, ns)
	waitReady(t, key)
	waitGatewayDeployment(t, store, nil)
}

func TestGatewayAdmission(t *testing.T) {
	ns := newNamespace(t)
	withGateway := func(name string, mutate func(*memoryv1alpha1.GatewaySpec)) *memoryv1alpha1.MemoryStore {
		s := validStore(ns, name)
		s.Spec.Gateway = &memoryv1alpha1.GatewaySpec{Enabled: true}
		mutate(s.Spec.Gateway)
		return s
	}
	cases := []struct {
		name  string
		store *memoryv1alpha1.MemoryStore
		want  string
	}{
		{"scope with a space", withGateway("a", func(g *memoryv1alpha1.GatewaySpec) {
			g.Keys = []memoryv1alpha1.GatewayKey{{Name: "k", Scopes: []memoryv1alpha1.GatewayScopePattern{"user:a b"}}}
		}), "a scope pattern is"},
		{"scope with an emoji", withGateway("e", func(g *memoryv1alpha1.GatewaySpec) {
			g.Keys = []memoryv1alpha1.GatewayKey{{Name: "k", Scopes: []memoryv1alpha1.GatewayScopePattern{"user:😀"}}}
		}), "a scope pattern is"},
		{"scope without a kind", withGateway("b", func(g *memoryv1alpha1.GatewaySpec) {
			g.Keys = []memoryv1alpha1.GatewayKey{{Name: "k", Scopes: []memoryv1alpha1.GatewayScopePattern{"user*"}}}
		}), "a scope pattern is"},
		{"key name", withGateway("c", func(g *memoryv1alpha1.GatewaySpec) {
			g.Keys = []memoryv1alpha1.GatewayKey{{Name: "Keys.json"}}
		}), "spec.gateway.keys[0].name"},
		{"repeated key name", withGateway("d", func(g *memoryv1alpha1.GatewaySpec) {
			g.Keys = []memoryv1alpha1.GatewayKey{{Name: "k"}, {Name: "k"}}
		}), "Duplicate value"},
		{"connection key of no key", withGateway("f", func(g *memoryv1alpha1.GatewaySpec) { g.ConnectionKey = "other" }),
			"connectionKey must name one of keys"},
		{"threshold above 1", withGateway("g", func(g *memoryv1alpha1.GatewaySpec) { g.DedupThreshold = "1.5" }),
			"dedupThreshold must be a decimal number from 0 to 1"},
		{"min similarity above 1", withGateway("ms", func(g *memoryv1alpha1.GatewaySpec) { g.MinSimilarity = "1.2" }),
			"minSimilarity must be a decimal number from -1 to 1"},
		{"negative replicas", withGateway("h", func(g *memoryv1alpha1.GatewaySpec) { g.Replicas = ptr.To[int32](-1) }), "spec.gateway.replicas"},
		{"service type", withGateway("i", func(g *memoryv1alpha1.GatewaySpec) {
			g.Service = &memoryv1alpha1.GatewayServiceSpec{Type: corev1.ServiceTypeExternalName}
		}), "spec.gateway.service.type"},
		{"the operator's pod labels", withGateway("j", func(g *memoryv1alpha1.GatewaySpec) {
			g.Template = &memoryv1alpha1.GatewayPodTemplate{Metadata: memoryv1alpha1.GatewayPodMetadata{
				Labels: map[string]string{"memory.amemory.io/store": "other"}}}
		}), "are the operator's"},
		{"store name too long for a Service", withGateway("a-store-whose-name-is-much-too-long-for-its-gateway-service", func(*memoryv1alpha1.GatewaySpec) {}),
			"a store with a gateway needs a name of at most 55"},
		{"embedder input limit too small", withEmbedder(withGateway("k", func(*memoryv1alpha1.GatewaySpec) {}), func(e *memoryv1alpha1.EmbedderSpec) { e.MaxInputBytes = 16 }),
			"spec.embedder.maxInputBytes"},
		{"embedder input limit too large", withEmbedder(withGateway("l", func(*memoryv1alpha1.GatewaySpec) {}), func(e *memoryv1alpha1.EmbedderSpec) { e.MaxInputBytes = 1 << 30 }),
			"spec.embedder.maxInputBytes"},
		{"embedder overflow", withEmbedder(withGateway("m", func(*memoryv1alpha1.GatewaySpec) {}), func(e *memoryv1alpha1.EmbedderSpec) { e.Overflow = "Cut" }),
			"spec.embedder.overflow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := k8sClient.Create(context.Background(), tc.store)
			g := NewWithT(t)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}

	// What admission accepts, with the defaults filled in.
	s := withGateway("fine", func(g *memoryv1alpha1.GatewaySpec) {
		g.Keys = []memoryv1alpha1.GatewayKey{{Name: "reader", ReadOnly: true, Scopes: []memoryv1alpha1.GatewayScopePattern{"user:*", "agent:support", "user:用户*", "session:zoë/ユーザー"}}, {Name: "all"}}
	})
	create(t, s)
	got := getStore(NewWithT(t), client.ObjectKeyFromObject(s))
	g := NewWithT(t)
	g.Expect(*got.Spec.Gateway.Replicas).To(Equal(int32(1)))
	g.Expect(got.Spec.Gateway.DedupThreshold).To(BeEmpty(), "no default: the calibrated threshold applies")
	g.Expect(got.Spec.Gateway.Keys[1].Scopes).To(Equal([]memoryv1alpha1.GatewayScopePattern{"*"}))
	g.Expect(got.Spec.Gateway.ConnectionKeyOrDefault()).To(Equal("reader"))
	// The embedder's input limit defaults in, also under the embedder's own default.
	g.Expect(got.Spec.Embedder.MaxInputBytes).To(Equal(int32(memoryv1alpha1.DefaultMaxInputBytes)))
	g.Expect(got.Spec.Embedder.Overflow).To(Equal(memoryv1alpha1.OverflowTruncate))
	g.Expect(memoryv1alpha1.DefaultMaxInputBytes).To(Equal(gateway.DefaultMaxInputBytes), "the CRD's default is the gateway's")
	// A long name is fine without a gateway.
	create(t, validStore(ns, "a-store-whose-name-is-much-too-long-for-its-gateway-service"))
}

// withEmbedder changes the store's spec.embedder.
func withEmbedder(s *memoryv1alpha1.MemoryStore, mutate func(*memoryv1alpha1.EmbedderSpec)) *memoryv1alpha1.MemoryStore {
	mutate(&s.Spec.Embedder)
	return s
}

// The samples' gateways are accepted as they are and mean what their comments say.
func TestGatewaySampleIsValid(t *testing.T) {
	for _, file := range []string{"memory_v1alpha1_memorystore.yaml", "memory_v1alpha1_memorystore_clusterbackend.yaml"} {
		t.Run(file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("..", "config", "samples", file))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			sample := &memoryv1alpha1.MemoryStore{}
			if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(sample); err != nil {
				t.Fatal(err)
			}
			sample.Namespace = newNamespace(t)
			create(t, sample)
			g := NewWithT(t)
			got := getStore(g, client.ObjectKeyFromObject(sample))
			g.Expect(got.GatewayEnabled()).To(BeTrue())
			g.Expect(validateGatewaySpec(got)).To(Succeed())
			// As provisioning would describe the store.
			got.Status.Postgres = &memoryv1alpha1.PostgresStatus{Schema: "mem_" + got.Spec.Tenant}
			got.Status.Vector = &memoryv1alpha1.VectorStatus{Engine: "Milvus", Collection: "mem_" + got.Spec.Tenant,
				Dimension: got.Spec.Vector.Dimension, Metric: string(got.MetricOrDefault()), EmbeddingModel: got.Spec.Embedder.Model}
			// Not calibrated yet: no configuration, rather than an uncalibrated threshold.
			if got.Spec.Gateway.DedupThreshold == "" {
				_, err := gatewayConfig(got, "milvus.example:19530")
				g.Expect(err).To(MatchError(ContainSubstring("not calibrated")))
			}
			got.Status.Embedder = &memoryv1alpha1.EmbedderStatus{Model: got.Spec.Embedder.Model, DedupThreshold: "0.9843", CalibratedFor: embedderDigest(got.Spec.Embedder, got.Spec.Vector.Dimension)}
			cfg, err := gatewayConfig(got, "milvus.example:19530")
			g.Expect(err).NotTo(HaveOccurred())
			want := 0.9843
			if o := got.Spec.Gateway.DedupThreshold; o != "" {
				want, _ = strconv.ParseFloat(o, 64)
			}
			g.Expect(cfg.DedupThreshold).To(Equal(want))
			if got.Name != "acme" {
				g.Expect(got.Spec.Gateway.KeysOrDefault()).To(Equal([]memoryv1alpha1.GatewayKey{{Name: "default", Scopes: []memoryv1alpha1.GatewayScopePattern{"*"}}}))
				return
			}
			g.Expect(cfg.TLSCertFile).NotTo(BeEmpty())
			g.Expect(got.Spec.Gateway.ConnectionKeyOrDefault()).To(Equal("agents"))
			g.Expect(got.Spec.Gateway.Keys[1]).To(Equal(memoryv1alpha1.GatewayKey{Name: "support-dashboard",
				Scopes: []memoryv1alpha1.GatewayScopePattern{"agent:support", "user:*"}, ReadOnly: true}))
			d := buildGatewayDeployment(got, cfg, gatewayInputs{Image: "img"})
			g.Expect(*d.Spec.Replicas).To(Equal(int32(2)))
			spread := d.Spec.Template.Spec.TopologySpreadConstraints
			g.Expect(spread).To(HaveLen(1))
			sel, err := metav1.LabelSelectorAsSelector(spread[0].LabelSelector)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sel.Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue(), "the sample's spread selects the gateway's pods")
		})
	}
}
