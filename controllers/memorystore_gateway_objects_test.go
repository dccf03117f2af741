package controllers

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// Pure tests of the gateway's builders: no API server.

// gatewayBuilderStore is a Ready store (see builderStore) with spec.gateway enabled.
func gatewayBuilderStore(engine string, mutate func(*memoryv1alpha1.GatewaySpec)) *memoryv1alpha1.MemoryStore {
	s := builderStore(engine, nil)
	s.UID = testUID
	s.Labels = map[string]string{"app.kubernetes.io/instance": "argo-app", "team": "support"}
	s.Annotations = map[string]string{"argocd.argoproj.io/tracking-id": "app:memory.amemory.io/MemoryStore:team-a/support-bot"}
	s.Spec.Gateway = &memoryv1alpha1.GatewaySpec{Enabled: true}
	if mutate != nil {
		mutate(s.Spec.Gateway)
	}
	return s
}

func TestGatewayDeploymentBuilder(t *testing.T) {
	cases := []struct {
		name     string
		engine   string
		milvus   string
		store    func(*memoryv1alpha1.MemoryStore)
		gw       func(*memoryv1alpha1.GatewaySpec)
		wantCfg  func(*gateway.Config)
		wantEnv  map[string][2]string
		wantVols map[string][]string // volume → the Secret and its items
		check    func(Gomega, *appsv1.Deployment)
	}{
		{
			name: "the store's resolved roles and no calibration override", engine: "Postgres",
			store: func(s *memoryv1alpha1.MemoryStore) {
				s.Status.Embedder.Roles = memoryv1alpha1.ResolvedRoles{Convention: memoryv1alpha1.RolesPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "}
				s.Status.Embedder.DedupThreshold = "0.9843"
			},
			wantCfg: func(c *gateway.Config) {
				c.EmbedderRoles = embed.Roles{Convention: embed.ConventionPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "}
				c.DedupThreshold = 0.9843
			},
			wantEnv:  map[string][2]string{gateway.EnvPostgresURI: {"support-bot-memory", "uri"}},
			wantVols: map[string][]string{"keys": {"support-bot-gateway-keys", "keys.json"}},
			check: func(g Gomega, d *appsv1.Deployment) {
				// The prefixes reach the gateway exactly, trailing spaces included.
				g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElements(
					"--embedder-roles=prefix", "--embedder-query-prefix=query: ", "--embedder-passage-prefix=passage: ", "--dedup-threshold=0.9843"))
			},
		},
		{
			name: "defaults, vectors in PostgreSQL", engine: "Postgres",
			wantCfg:  func(*gateway.Config) {},
			wantEnv:  map[string][2]string{gateway.EnvPostgresURI: {"support-bot-memory", "uri"}},
			wantVols: map[string][]string{"keys": {"support-bot-gateway-keys", "keys.json"}},
			check: func(g Gomega, d *appsv1.Deployment) {
				c := d.Spec.Template.Spec.Containers[0]
				g.Expect(*d.Spec.Replicas).To(Equal(int32(1)))
				g.Expect(c.ReadinessProbe.HTTPGet).To(Equal(&corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("api"), Scheme: corev1.URISchemeHTTP}))
				g.Expect(c.LivenessProbe.HTTPGet).To(Equal(&corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("api"), Scheme: corev1.URISchemeHTTP}))
				g.Expect(c.Resources).To(Equal(corev1.ResourceRequirements{}))
				g.Expect(d.Spec.Template.Spec.Affinity).To(BeNil())
			},
		},
		{
			name: "Milvus, an OpenAI embedder with a token, TLS and every override", engine: "Milvus", milvus: "milvus.db:19530",
			store: func(s *memoryv1alpha1.MemoryStore) {
				s.Spec.Embedder = memoryv1alpha1.EmbedderSpec{Type: memoryv1alpha1.EmbedderOpenAI, Endpoint: "http://tei:8080", Model: "e5-small",
					APIKeySecret:  &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "tei-token"}, Key: "token"},
					MaxInputBytes: 2048, Overflow: memoryv1alpha1.OverflowRefuse}
				s.Status.Vector.EmbeddingModel = "e5-small"
			},
			gw: func(g *memoryv1alpha1.GatewaySpec) {
				g.Replicas = ptr.To[int32](3)
				g.TLS = &memoryv1alpha1.GatewayTLS{SecretName: "gw-cert"}
				g.DedupThreshold = "0.85"
				g.MinSimilarity = "0.7"
				g.QueryCache = &memoryv1alpha1.QueryCacheSpec{TTL: &metav1.Duration{Duration: time.Minute}, SemanticThreshold: "0.97"}
				g.RateLimit = &memoryv1alpha1.GatewayRateLimit{RequestsPerSecond: 10, Burst: 20}
				g.LangGraph = &memoryv1alpha1.LangGraphSpec{Namespaces: []memoryv1alpha1.LangGraphNamespaceRule{
					{Namespace: []string{"tenant", "{user}", "*"}, Scope: "user:{user}"}}}
				g.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}
				g.Template = &memoryv1alpha1.GatewayPodTemplate{
					Metadata: memoryv1alpha1.GatewayPodMetadata{
						Labels:      map[string]string{"tier": "platform"},
						Annotations: map[string]string{"prometheus.io/scrape": "true"},
					},
					NodeSelector:      map[string]string{"pool": "agents"},
					Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
					Affinity:          &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}},
					PriorityClassName: "memory-critical",
				}
			},
			wantCfg: func(c *gateway.Config) {
				c.VectorEngine, c.MilvusAddress, c.Collection = "Milvus", "milvus.db:19530", "mem_acme"
				c.Embedder, c.EmbedderEndpoint, c.EmbeddingModel = "OpenAI", "http://tei:8080", "e5-small"
				c.MaxInputBytes, c.InputOverflow = 2048, "Refuse"
				c.TLSCertFile, c.TLSKeyFile = "/etc/memory-gateway/tls/tls.crt", "/etc/memory-gateway/tls/tls.key"
				c.DedupThreshold, c.RateLimit, c.RateBurst = 0.85, 10, 20
				c.MinSimilarity = ptr.To(0.7)
				c.QueryCacheTTL, c.QueryCacheSemantic = time.Minute, 0.97
				c.NamespaceRules = []gateway.NamespaceRule{{Namespace: []string{"tenant", "{user}", "*"}, Scope: "user:{user}"}}
			},
			wantEnv: map[string][2]string{
				gateway.EnvPostgresURI:    {"support-bot-memory", "uri"},
				gateway.EnvEmbedderAPIKey: {"tei-token", "token"},
			},
			wantVols: map[string][]string{
				"keys": {"support-bot-gateway-keys", "keys.json"},
				"tls":  {"gw-cert", "tls.crt", "tls.key"},
			},
			check: func(g Gomega, d *appsv1.Deployment) {
				pod := d.Spec.Template.Spec
				c := pod.Containers[0]
				g.Expect(*d.Spec.Replicas).To(Equal(int32(3)))
				g.Expect(c.ReadinessProbe.HTTPGet.Scheme).To(Equal(corev1.URISchemeHTTPS))
				g.Expect(c.LivenessProbe.HTTPGet.Scheme).To(Equal(corev1.URISchemeHTTPS))
				g.Expect(c.Resources.Limits.Memory().String()).To(Equal("128Mi"))
				g.Expect(pod.NodeSelector).To(Equal(map[string]string{"pool": "agents"}))
				g.Expect(pod.Tolerations).To(HaveLen(1))
				g.Expect(pod.Affinity).NotTo(BeNil())
				g.Expect(pod.PriorityClassName).To(Equal("memory-critical"))
				g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue("tier", "platform"))
				g.Expect(d.Spec.Template.Annotations).To(HaveKeyWithValue("prometheus.io/scrape", "true"))
				g.Expect(d.Labels).NotTo(HaveKey("tier"), "template labels go on the pods only")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			store := gatewayBuilderStore(tc.engine, tc.gw)
			if tc.store != nil {
				tc.store(store)
			}
			g.Expect(validateGatewaySpec(store)).To(Succeed())
			cfg, err := gatewayConfig(store, tc.milvus)
			g.Expect(err).NotTo(HaveOccurred())
			d := buildGatewayDeployment(store, cfg, gatewayInputs{Image: "registry.example/memory-operator:v1.2.3", SecretDigest: "d1"})

			// Identity, ownership and labels: the operator's own, never the store's.
			ours := map[string]string{
				"app.kubernetes.io/name": "memory-operator", "app.kubernetes.io/component": "gateway",
				"app.kubernetes.io/managed-by": "memory-operator", "memory.amemory.io/store": "support-bot",
			}
			g.Expect(d.Namespace).To(Equal("team-a"))
			g.Expect(d.Name).To(Equal("support-bot-gateway"))
			g.Expect(d.OwnerReferences).To(Equal([]metav1.OwnerReference{{
				APIVersion: "memory.amemory.io/v1alpha1", Kind: "MemoryStore", Name: "support-bot", UID: testUID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}}))
			g.Expect(d.Labels).To(Equal(ours))
			g.Expect(d.Annotations).To(BeEmpty())
			g.Expect(d.Spec.Selector.MatchLabels).To(Equal(ours))
			g.Expect(labels.SelectorFromSet(ours).Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
			g.Expect(ManagedGatewaySelector().Matches(labels.Set(d.Labels))).To(BeTrue())
			for k := range store.Labels {
				if _, own := ours[k]; !own {
					g.Expect(d.Spec.Template.Labels).NotTo(HaveKey(k))
				}
			}
			g.Expect(d.Spec.Template.Annotations).NotTo(HaveKey("argocd.argoproj.io/tracking-id"))
			g.Expect(d.Spec.Template.Annotations).To(HaveKey(gatewayConfigHashAnnotation))

			// The command, parsed back with the gateway's own parser.
			pod := d.Spec.Template.Spec
			g.Expect(pod.Containers).To(HaveLen(1))
			c := pod.Containers[0]
			g.Expect(c.Image).To(Equal("registry.example/memory-operator:v1.2.3"))
			g.Expect(c.Command).To(Equal([]string{"/memory-operator"}))
			g.Expect(c.Args[0]).To(Equal("gateway"))
			parsed, err := gateway.ParseArgs(c.Args[1:], io.Discard)
			g.Expect(err).NotTo(HaveOccurred())
			want := gateway.Config{
				StoreNamespace: "team-a", StoreName: "support-bot", Listen: ":8080", MetricsListen: ":9090", GRPCListen: ":8081",
				Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: tc.engine}, Dimension: 384, Metric: "COSINE",
				Embedder: "Hashing", EmbeddingModel: "all-MiniLM-L6-v2",
				KeysFile: "/etc/memory-gateway/keys/keys.json", DedupThreshold: 0.9712, RateLimit: 50, RateBurst: 100,
				MaxBodyBytes: gateway.DefaultMaxBodyBytes, ShutdownGrace: 20 * time.Second,
				RequestTimeout: 30 * time.Second, MaxInputBytes: 8192, InputOverflow: "Truncate",
				EmbedderTimeout: 10 * time.Second, EmbedderConcurrency: 4,
				ShortTerm: gateway.ShortTerm{SessionTTL: 30 * time.Minute, SessionMaxTurns: 2000, Promote: gateway.PromoteOnEnd},
			}
			tc.wantCfg(&want)
			g.Expect(parsed).To(Equal(want))
			g.Expect(c.Ports).To(ConsistOf(
				corev1.ContainerPort{Name: "api", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
				corev1.ContainerPort{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
				corev1.ContainerPort{Name: "grpc", ContainerPort: 8081, Protocol: corev1.ProtocolTCP}))

			// Secrets only by reference, and only the store role's (never the worker's
			// or an admin's).
			gotEnv := map[string][2]string{}
			for _, e := range c.Env {
				g.Expect(e.Value).To(BeEmpty(), "env %s has a literal value", e.Name)
				g.Expect(e.ValueFrom.SecretKeyRef).NotTo(BeNil(), "env %s is not from a Secret", e.Name)
				gotEnv[e.Name] = [2]string{e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key}
			}
			g.Expect(gotEnv).To(Equal(tc.wantEnv))
			g.Expect(c.EnvFrom).To(BeEmpty())
			spec, _ := json.Marshal(pod)
			g.Expect(string(spec)).NotTo(Or(ContainSubstring("-worker"), ContainSubstring("pg-admin")))

			// Of the keys Secret only keys.json, read-only; no other Secret but TLS.
			gotVols := map[string][]string{}
			for _, v := range pod.Volumes {
				if v.Secret == nil {
					g.Expect(v.EmptyDir).NotTo(BeNil(), "volume %s", v.Name)
					continue
				}
				got := []string{v.Secret.SecretName}
				for _, item := range v.Secret.Items {
					g.Expect(item.Path).To(Equal(item.Key))
					got = append(got, item.Key)
				}
				g.Expect(*v.Secret.DefaultMode).To(Equal(int32(0o444)))
				gotVols[v.Name] = got
			}
			g.Expect(gotVols).To(Equal(tc.wantVols))
			for _, m := range c.VolumeMounts {
				g.Expect(m.SubPath).To(BeEmpty(), "a subPath mount is never updated in place")
				if m.Name != "tmp" {
					g.Expect(m.ReadOnly).To(BeTrue(), "mount %s", m.Name)
				}
			}

			// Least privilege: the restricted pod security profile.
			g.Expect(pod.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
			g.Expect(pod.EnableServiceLinks).To(Equal(ptr.To(false)))
			g.Expect(pod.SecurityContext).To(Equal(&corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}))
			g.Expect(c.SecurityContext).To(Equal(&corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}))
			tc.check(g, d)
		})
	}
}

func TestGatewayConfigHashIgnoresKeys(t *testing.T) {
	g := NewWithT(t)
	build := func(store *memoryv1alpha1.MemoryStore, digest string) *appsv1.Deployment {
		cfg, err := gatewayConfig(store, "")
		g.Expect(err).NotTo(HaveOccurred())
		return buildGatewayDeployment(store, cfg, gatewayInputs{Image: "img:1", SecretDigest: digest})
	}
	base := build(gatewayBuilderStore("Postgres", nil), "d1")
	rotated := build(gatewayBuilderStore("Postgres", func(gw *memoryv1alpha1.GatewaySpec) {
		gw.Keys = []memoryv1alpha1.GatewayKey{{Name: "v2", Scopes: []memoryv1alpha1.GatewayScopePattern{"user:*"}, ReadOnly: true}}
		gw.ConnectionKey = "v2"
	}), "d1")
	g.Expect(rotated.Spec).To(Equal(base.Spec), "keys are files the gateway re-reads: rotating them changes nothing in the Deployment")

	token := build(gatewayBuilderStore("Postgres", nil), "d2")
	g.Expect(token.Spec.Template.Annotations[gatewayConfigHashAnnotation]).NotTo(Equal(base.Spec.Template.Annotations[gatewayConfigHashAnnotation]),
		"a secret read from the environment changed: the pods must restart")
	tuned := build(gatewayBuilderStore("Postgres", func(gw *memoryv1alpha1.GatewaySpec) { gw.DedupThreshold = "0" }), "d1")
	g.Expect(tuned.Spec.Template.Annotations[gatewayConfigHashAnnotation]).NotTo(Equal(base.Spec.Template.Annotations[gatewayConfigHashAnnotation]))
	g.Expect(secretDigest("a", "b")).NotTo(Equal(secretDigest("ab")))
	g.Expect(secretDigest("postgres://u:hunter2@db/x")).NotTo(ContainSubstring("hunter2"))
}

func TestGatewayService(t *testing.T) {
	g := NewWithT(t)
	plain := gatewayBuilderStore("Postgres", nil)
	g.Expect(gatewayURL(plain)).To(Equal("http://support-bot-gateway.team-a.svc:8080"))
	g.Expect(gatewayServicePorts(plain)).To(Equal([]corev1.ServicePort{
		{Name: "http", Port: 8080, TargetPort: intstr.FromString("api"), Protocol: corev1.ProtocolTCP},
		{Name: "metrics", Port: 9090, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP},
		{Name: "grpc", Port: 8081, TargetPort: intstr.FromString("grpc"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("kubernetes.io/h2c")},
	}))
	g.Expect(gatewayGRPCAddress(plain)).To(Equal("support-bot-gateway.team-a.svc:8081"))
	tls := gatewayBuilderStore("Postgres", func(gw *memoryv1alpha1.GatewaySpec) { gw.TLS = &memoryv1alpha1.GatewayTLS{SecretName: "c"} })
	g.Expect(gatewayURL(tls)).To(Equal("https://support-bot-gateway.team-a.svc:8080"))
	g.Expect(gatewayServicePorts(tls)[0].Name).To(Equal("https"))
	g.Expect(gatewayServicePorts(tls)[2].AppProtocol).To(BeNil()) // HTTP/2 over TLS: no cleartext h2c

	// Annotations from the spec are applied; the ones it drops go, others' stay.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"metallb.universe.tf/ip-allocated-from-pool": "p"}}}
	applyManagedAnnotations(svc, map[string]string{"a": "1", "b": "2"})
	g.Expect(svc.Annotations).To(Equal(map[string]string{"metallb.universe.tf/ip-allocated-from-pool": "p", "a": "1", "b": "2",
		gatewayServiceAnnotationsKey: "a,b"}))
	applyManagedAnnotations(svc, map[string]string{"b": "3"})
	g.Expect(svc.Annotations).To(Equal(map[string]string{"metallb.universe.tf/ip-allocated-from-pool": "p", "b": "3",
		gatewayServiceAnnotationsKey: "b"}))
	applyManagedAnnotations(svc, nil)
	g.Expect(svc.Annotations).To(Equal(map[string]string{"metallb.universe.tf/ip-allocated-from-pool": "p"}))
}

func TestGatewayKeyData(t *testing.T) {
	n := 0
	generate := func() (string, error) {
		n++
		return fmt.Sprintf("%s%043d", gateway.KeyPrefix, n), nil
	}
	key := func(name string, readOnly bool, scopes ...memoryv1alpha1.GatewayScopePattern) memoryv1alpha1.GatewayKey {
		return memoryv1alpha1.GatewayKey{Name: name, Scopes: scopes, ReadOnly: readOnly}
	}
	g := NewWithT(t)

	// A new Secret: every key generated, keys.json with hashes only.
	first, change, err := gatewayKeyData([]memoryv1alpha1.GatewayKey{key("default", false, "*"), key("support", true, "agent:support", "user:*")}, nil, generate)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(change).To(Equal(gatewayKeyChange{Added: []string{"default", "support"}}))
	g.Expect(first).To(HaveLen(3))
	var file gateway.KeyFile
	g.Expect(json.Unmarshal(first["keys.json"], &file)).To(Succeed())
	g.Expect(file.Validate()).To(Succeed())
	g.Expect(file.Keys).To(Equal([]gateway.KeyEntry{
		{Name: "default", SHA256: gateway.HashKey(string(first["default"])), Scopes: []string{"*"}},
		{Name: "support", SHA256: gateway.HashKey(string(first["support"])), Scopes: []string{"agent:support", "user:*"}, ReadOnly: true},
	}))
	g.Expect(string(first["keys.json"])).NotTo(Or(ContainSubstring(string(first["default"])), ContainSubstring(string(first["support"]))))

	// Rotation: a key added is generated, the others kept; a key removed is dropped.
	second, change, err := gatewayKeyData([]memoryv1alpha1.GatewayKey{key("default", false, "*"), key("support", true, "agent:support", "user:*"), key("v2", false, "*")}, first, generate)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(change).To(Equal(gatewayKeyChange{Added: []string{"v2"}}))
	g.Expect(second["default"]).To(Equal(first["default"]))
	g.Expect(second["support"]).To(Equal(first["support"]))
	third, change, err := gatewayKeyData([]memoryv1alpha1.GatewayKey{key("v2", false, "*")}, second, generate)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(change).To(Equal(gatewayKeyChange{Removed: []string{"default", "support"}}))
	g.Expect(third).To(HaveLen(2))
	g.Expect(third["v2"]).To(Equal(second["v2"]))

	// Unchanged keys give byte-identical data: no write, no event.
	again, change, err := gatewayKeyData([]memoryv1alpha1.GatewayKey{key("v2", false, "*")}, third, generate)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(change).To(Equal(gatewayKeyChange{}))
	g.Expect(again).To(Equal(third))

	// A value that is not one of ours (edited, or copied from another name) is replaced.
	edited := map[string][]byte{"a": []byte("password1"), "b": third["v2"], "v2": third["v2"]}
	fixed, change, err := gatewayKeyData([]memoryv1alpha1.GatewayKey{key("v2", false, "*"), key("a", false, "*"), key("b", false, "*")}, edited, generate)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(change.Added).To(Equal([]string{"a", "b"}))
	g.Expect(fixed["v2"]).To(Equal(third["v2"]))
	g.Expect(fixed["b"]).NotTo(Equal(third["v2"]))
	g.Expect(json.Unmarshal(fixed["keys.json"], &file)).To(Succeed())
	g.Expect(file.Validate()).To(Succeed())
}

func TestGatewaySpecValidation(t *testing.T) {
	cases := []struct {
		name       string
		mutate     func(*memoryv1alpha1.MemoryStore)
		wantReason string
		wantIn     string
	}{
		{"defaults", func(*memoryv1alpha1.MemoryStore) {}, "", ""},
		{"unknown scope kind", func(s *memoryv1alpha1.MemoryStore) {
			s.Spec.Gateway.Keys = []memoryv1alpha1.GatewayKey{{Name: "ok", Scopes: []memoryv1alpha1.GatewayScopePattern{"*"}},
				{Name: "team", Scopes: []memoryv1alpha1.GatewayScopePattern{"user:*", "team:*"}}}
		}, memoryv1alpha1.ReasonInvalidScopePattern, `spec.gateway.keys[1].scopes[1] (key team): scope pattern "team:*"`},
		{"empty scope id", func(s *memoryv1alpha1.MemoryStore) {
			s.Spec.Gateway.Keys = []memoryv1alpha1.GatewayKey{{Name: "k", Scopes: []memoryv1alpha1.GatewayScopePattern{"user:"}}}
		}, memoryv1alpha1.ReasonInvalidScopePattern, "scope id is empty"},
		{"star in the middle", func(s *memoryv1alpha1.MemoryStore) {
			s.Spec.Gateway.Keys = []memoryv1alpha1.GatewayKey{{Name: "k", Scopes: []memoryv1alpha1.GatewayScopePattern{"user:*x"}}}
		}, memoryv1alpha1.ReasonInvalidScopePattern, "'*' goes only at the end"},
		{"repeated name", func(s *memoryv1alpha1.MemoryStore) {
			s.Spec.Gateway.Keys = []memoryv1alpha1.GatewayKey{{Name: "k"}, {Name: "k"}}
		}, memoryv1alpha1.ReasonInvalidGatewayConfig, `name "k" is repeated`},
		{"connection key of no key", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Gateway.ConnectionKey = "nope" },
			memoryv1alpha1.ReasonInvalidGatewayConfig, `connectionKey "nope"`},
		{"store name unfit for a Service", func(s *memoryv1alpha1.MemoryStore) { s.Name = "1-bot" },
			memoryv1alpha1.ReasonInvalidGatewayConfig, "DNS label"},
		{"keys Secret is the connection Secret", func(s *memoryv1alpha1.MemoryStore) { s.Spec.ConnectionSecretName = "support-bot-gateway-keys" },
			memoryv1alpha1.ReasonInvalidGatewayConfig, "connectionSecretName"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := gatewayBuilderStore("Postgres", nil)
			tc.mutate(s)
			err := validateGatewaySpec(s)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var se *stepError
			g.Expect(err).To(BeAssignableToTypeOf(se))
			se = err.(*stepError)
			g.Expect(se.reason).To(Equal(tc.wantReason))
			g.Expect(se.message).To(ContainSubstring(tc.wantIn))
		})
	}

	// What the gateway's own checks refuse.
	g := NewWithT(t)
	bad := gatewayBuilderStore("Postgres", func(gw *memoryv1alpha1.GatewaySpec) {
		gw.LangGraph = &memoryv1alpha1.LangGraphSpec{Namespaces: []memoryv1alpha1.LangGraphNamespaceRule{
			{Namespace: []string{"memories", "{user}"}, Scope: "user:{id}"}}}
	})
	_, err := gatewayConfig(bad, "")
	g.Expect(err).To(MatchError(ContainSubstring("does not capture")))
	g.Expect(err.(*stepError).reason).To(Equal(memoryv1alpha1.ReasonInvalidGatewayConfig))
	_, err = gatewayConfig(gatewayBuilderStore("Postgres", func(gw *memoryv1alpha1.GatewaySpec) { gw.DedupThreshold = "1.5" }), "")
	g.Expect(err).To(MatchError(ContainSubstring("dedupThreshold")))
	_, err = gatewayConfig(gatewayBuilderStore("Milvus", nil), "")
	g.Expect(err).To(MatchError(ContainSubstring("milvus-address")), "a Milvus store without its address")
	_, err = gatewayConfig(gatewayBuilderStore("Postgres", func(gw *memoryv1alpha1.GatewaySpec) {
		gw.QueryCache = &memoryv1alpha1.QueryCacheSpec{SemanticThreshold: "1.5"}
	}), "")
	g.Expect(err).To(MatchError(ContainSubstring("semanticThreshold")))
	// An empty queryCache is the cache with its default TTL (what admission fills
	// in), and exact queries only.
	cfg, err := gatewayConfig(gatewayBuilderStore("Postgres", func(gw *memoryv1alpha1.GatewaySpec) { gw.QueryCache = &memoryv1alpha1.QueryCacheSpec{} }), "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.QueryCache).To(Equal(gateway.QueryCache{QueryCacheTTL: 300 * time.Second}))
}

func TestGatewayReadiness(t *testing.T) {
	dep := func(gen, observed int64, replicas, updated, ready int32, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "bot-gateway", Generation: gen},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated,
				ReadyReplicas: ready, AvailableReplicas: ready, Conditions: conds}}
	}
	stuck := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
		Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "bot-gateway-1" has timed out progressing.`}
	cases := []struct {
		name   string
		dep    *appsv1.Deployment
		want   int32
		status metav1.ConditionStatus
		reason string
	}{
		{"just created", dep(1, 0, 0, 0, 0), 1, metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing},
		{"pods starting", dep(1, 1, 2, 2, 1), 2, metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing},
		{"rolling: old pod left", dep(2, 2, 3, 2, 2), 2, metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing},
		{"spec not yet seen", dep(3, 2, 2, 2, 2), 2, metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing},
		{"rolled out", dep(2, 2, 2, 2, 2), 2, metav1.ConditionTrue, memoryv1alpha1.ReasonDeployed},
		{"scaled to zero", dep(2, 2, 0, 0, 0), 0, metav1.ConditionFalse, memoryv1alpha1.ReasonScaledToZero},
		{"stuck", dep(2, 2, 2, 1, 1, stuck), 2, metav1.ConditionFalse, memoryv1alpha1.ReasonRolloutStuck},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, reason, message := gatewayReadiness(tc.dep, tc.want, "http://bot-gateway.ns.svc:8080")
			g := NewWithT(t)
			g.Expect(status).To(Equal(tc.status), message)
			g.Expect(reason).To(Equal(tc.reason), message)
			g.Expect(strings.TrimSpace(message)).NotTo(BeEmpty())
		})
	}
}
