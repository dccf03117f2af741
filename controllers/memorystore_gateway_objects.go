package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/querycache"
)

// The gateway's Deployment, Service and keys. Everything here is pure: a store and
// what the controller resolved in, objects out. The arguments come from
// gateway.Config, the contract the gateway parses, and every secret reaches the pod by
// reference: the store's own role through the connection Secret's "uri", the keys
// through a mount of keys.json alone (hashes, never the keys).
const (
	gatewayContainer             = "gateway"
	gatewayAPIPort         int32 = 8080
	gatewayMetricsPort     int32 = 9090
	gatewayGRPCPort        int32 = 8081
	gatewayAPIPortName           = "api"
	gatewayGRPCPortName          = "grpc"
	gatewayMetricsPortName       = "metrics"
	gatewayKeysVolume            = "keys"
	gatewayTLSVolume             = "tls"
	gatewayKeysDir               = "/etc/memory-gateway/keys"
	gatewayTLSDir                = "/etc/memory-gateway/tls"
	// gatewayShutdownGrace is how long in-flight requests get on SIGTERM; the pod's
	// termination grace period leaves room after it.
	gatewayShutdownGrace         = 20 * time.Second
	gatewayTerminationGrace      = int64(30)
	gatewayComponent             = "gateway"
	labelName                    = "app.kubernetes.io/name"
	labelComponent               = "app.kubernetes.io/component"
	appName                      = "memory-operator"
	gatewayConfigHashAnnotation  = "memory.amemory.io/gateway-config-hash"
	gatewaySpecHashAnnotation    = "memory.amemory.io/spec-hash"
	gatewayServiceAnnotationsKey = "memory.amemory.io/service-annotations"
	// Keys the connection Secret gains while the gateway is enabled.
	keyGatewayURL  = "gatewayURL"
	keyGatewayKey  = "gatewayKey"
	keyGatewayGRPC = "gatewayGRPCAddress"
	// minKeyLength is the length of a generated key (prefix and 32 random bytes in
	// base64); a shorter value in the keys Secret is not one of ours and is replaced.
	minKeyLength = len(gateway.KeyPrefix) + 43
)

// gatewayLabels are the labels of everything the gateway consists of, and the
// selector of its pods: the operator's own, never the store's.
func gatewayLabels(store *memoryv1alpha1.MemoryStore) map[string]string {
	return map[string]string{
		labelName:                 appName,
		labelComponent:            gatewayComponent,
		labelManagedBy:            managedBy,
		memoryv1alpha1.LabelStore: store.Name,
	}
}

// ManagedGatewaySelector selects the gateways' Deployments and Services; the manager
// restricts its caches of those kinds to them, so it does not hold every Deployment and
// Service in the cluster.
func ManagedGatewaySelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy, labelComponent: gatewayComponent})
}

// gatewayURL is the gateway's address inside the cluster.
func gatewayURL(store *memoryv1alpha1.MemoryStore) string {
	scheme := "http"
	if store.Spec.Gateway != nil && store.Spec.Gateway.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s.%s.svc:%d", scheme, store.GatewayName(), store.Namespace, gatewayAPIPort)
}

// queryCacheConfig is the gateway's query cache as spec.gateway.queryCache declares
// it (nil: none).
func queryCacheConfig(qc *memoryv1alpha1.QueryCacheSpec) (gateway.QueryCache, error) {
	if qc == nil {
		return gateway.QueryCache{}, nil
	}
	c := gateway.QueryCache{QueryCacheTTL: querycache.DefaultTTL}
	if qc.TTL != nil {
		c.QueryCacheTTL = qc.TTL.Duration
	}
	if qc.SemanticThreshold != "" {
		f, err := strconv.ParseFloat(qc.SemanticThreshold, 64)
		if err != nil || math.IsNaN(f) || f <= 0 || f >= 1 {
			return c, stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig,
				"spec.gateway.queryCache.semanticThreshold %q is not a decimal number between 0 and 1", qc.SemanticThreshold)
		}
		c.QueryCacheSemantic = f
	}
	return c, nil
}

// gatewayGRPCAddress is the gateway's gRPC API inside the cluster (host:port; TLS
// as the HTTP API).
func gatewayGRPCAddress(store *memoryv1alpha1.MemoryStore) string {
	return fmt.Sprintf("%s.%s.svc:%d", store.GatewayName(), store.Namespace, gatewayGRPCPort)
}

func ownerRef(store *memoryv1alpha1.MemoryStore) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(store, memoryv1alpha1.GroupVersion.WithKind("MemoryStore"))}
}

// validateGatewaySpec checks what admission cannot: scope patterns as the gateway
// reads them (the kinds, the id's characters), and, as a backstop for a CRD installed
// without its validations, the key names, the connection key and the store's name.
func validateGatewaySpec(store *memoryv1alpha1.MemoryStore) error {
	g := store.Spec.Gateway
	if errs := validation.IsDNS1035Label(store.GatewayName()); len(errs) > 0 {
		return stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig,
			"the gateway's Service name %q is not a DNS label (%s): a store with a gateway needs a name of at most 55 lowercase letters, digits and '-', starting with a letter",
			store.GatewayName(), strings.Join(errs, "; "))
	}
	if n := store.GatewayKeysSecretName(); n == store.ConnectionSecretNameOrDefault() || n == store.WorkerSecretName() {
		return stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig,
			"the gateway's keys Secret %s would be the store's connection or worker Secret; choose another connectionSecretName", n)
	}
	names := map[string]bool{}
	for i, k := range g.KeysOrDefault() {
		if errs := validation.IsDNS1123Label(k.Name); len(errs) > 0 {
			return stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig, "spec.gateway.keys[%d]: name %q: %s", i, k.Name, strings.Join(errs, "; "))
		}
		if names[k.Name] {
			return stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig, "spec.gateway.keys[%d]: name %q is repeated", i, k.Name)
		}
		names[k.Name] = true
		for j, p := range k.Scopes {
			if err := gateway.ValidateScopePattern(string(p)); err != nil {
				return stepErrorf(memoryv1alpha1.ReasonInvalidScopePattern, "spec.gateway.keys[%d].scopes[%d] (key %s): %v", i, j, k.Name, err)
			}
		}
	}
	if c := g.ConnectionKeyOrDefault(); !names[c] {
		return stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig, "spec.gateway.connectionKey %q names none of the keys", c)
	}
	return nil
}

// gatewayConfig is the gateway's configuration: the store as its status describes it
// (schema, vector index, embedding model, the same way the Jobs get them), the
// embedder its spec declares, and spec.gateway's settings. milvusAddress is the
// store's Milvus server, when its vectors live there.
func gatewayConfig(store *memoryv1alpha1.MemoryStore, milvusAddress string) (gateway.Config, error) {
	g := store.Spec.Gateway
	// The override, or the threshold calibrated for the store's embedder: never an
	// uncalibrated one (provision calibrates before it gets here).
	dedup := store.DedupThresholdFor()
	if dedup == "" {
		return gateway.Config{}, stepErrorf(memoryv1alpha1.ReasonCalibrationFailed,
			"the near-duplicate threshold is not calibrated for the store's embedder yet")
	}
	threshold, err := strconv.ParseFloat(dedup, 64)
	if err != nil || math.IsNaN(threshold) || threshold < 0 || threshold > 1 {
		return gateway.Config{}, stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig,
			"spec.gateway.dedupThreshold %q is not a decimal number from 0 to 1", g.DedupThreshold)
	}
	var minSim *float64
	if g.MinSimilarity != "" {
		f, err := strconv.ParseFloat(g.MinSimilarity, 64)
		if err != nil || math.IsNaN(f) || f < -1 || f > 1 {
			return gateway.Config{}, stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig,
				"spec.gateway.minSimilarity %q is not a decimal number from -1 to 1", g.MinSimilarity)
		}
		minSim = &f
	}
	rate, burst := g.RateLimitOrDefault()
	maxInput, overflow := servingEmbedder(store).InputLimitOrDefault()
	cfg := gateway.Config{
		StoreNamespace: store.Namespace,
		StoreName:      store.Name,
		Listen:         fmt.Sprintf(":%d", gatewayAPIPort),
		MetricsListen:  fmt.Sprintf(":%d", gatewayMetricsPort),
		GRPCListen:     fmt.Sprintf(":%d", gatewayGRPCPort),
		Embedder:       string(memoryv1alpha1.EmbedderHashing),
		KeysFile:       gatewayKeysDir + "/" + gateway.KeysFileName,
		DedupThreshold: threshold,
		MinSimilarity:  minSim,
		RateLimit:      float64(rate),
		RateBurst:      int(burst),
		MaxBodyBytes:   gateway.DefaultMaxBodyBytes,
		ShutdownGrace:  gatewayShutdownGrace,

		RequestTimeout:      gateway.DefaultRequestTimeout,
		MaxInputBytes:       int(maxInput),
		InputOverflow:       embed.Overflow(overflow),
		EmbedderRoles:       storeRoles(store),
		EmbedderTimeout:     gateway.DefaultEmbedderTimeout,
		EmbedderConcurrency: gateway.DefaultEmbedderConcurrency,
	}
	if cfg.QueryCache, err = queryCacheConfig(g.QueryCache); err != nil {
		return gateway.Config{}, err
	}
	if g.TLS != nil {
		cfg.TLSCertFile = gatewayTLSDir + "/" + corev1.TLSCertKey
		cfg.TLSKeyFile = gatewayTLSDir + "/" + corev1.TLSPrivateKeyKey
	}
	if pg := store.Status.Postgres; pg != nil {
		cfg.Schema = pg.Schema
	}
	if v := store.Status.Vector; v != nil {
		cfg.Vectors, cfg.EmbeddingModel = storeVectors(store, milvusAddress), v.EmbeddingModel
		cfg.Dimension, cfg.Metric = int(v.Dimension), v.Metric
	}
	if e := servingEmbedder(store); e.Type == memoryv1alpha1.EmbedderOpenAI {
		cfg.Embedder, cfg.EmbedderEndpoint = string(e.Type), e.Endpoint
	}
	cfg.ShortTerm = shortTermConfig(store)
	if lg := g.LangGraph; lg != nil {
		for _, rule := range lg.Namespaces {
			cfg.NamespaceRules = append(cfg.NamespaceRules, gateway.NamespaceRule{
				Namespace: append([]string(nil), rule.Namespace...), Scope: rule.Scope})
		}
	}
	if err := cfg.Validate(); err != nil {
		return gateway.Config{}, stepErrorf(memoryv1alpha1.ReasonInvalidGatewayConfig, "the gateway would refuse its configuration: %v", err)
	}
	return cfg, nil
}

// gatewayInputs is what the controller resolved for the Deployment besides the store
// and the configuration.
type gatewayInputs struct {
	// Image is the operator's own image.
	Image string
	// SecretDigest is a digest of the secret values the pod reads from its
	// environment (the store role's URI, the embedder's token), which the pod reads
	// only when it starts: a changed value rolls the pods. The keys and the
	// certificate are files the gateway re-reads and are not in it.
	SecretDigest string
}

// configHash is the rollout annotation of the pod template: the configuration, the
// image and the secret digest. A key added or removed changes none of them, so key
// rotation never restarts the gateway.
func configHash(cfg gateway.Config, in gatewayInputs) string {
	h := sha256.New()
	for _, part := range append([]string{in.Image, in.SecretDigest}, cfg.Args()...) {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// secretDigest is a digest of secret values, never reversible to them.
func secretDigest(values ...string) string {
	h := sha256.New()
	for _, v := range values {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// buildGatewayDeployment is the Deployment that runs `memory-operator gateway` for
// the store: owned by it, labelled only with the operator's labels, least privilege (no
// service-account token, the restricted pod security profile, a read-only root
// filesystem), the store's own role by reference to the connection Secret's "uri",
// and of the keys Secret only keys.json, read-only.
func buildGatewayDeployment(store *memoryv1alpha1.MemoryStore, cfg gateway.Config, in gatewayInputs) *appsv1.Deployment {
	g := store.Spec.Gateway
	labels := gatewayLabels(store)
	podLabels := map[string]string{}
	podAnnotations := map[string]string{}
	var tpl memoryv1alpha1.GatewayPodTemplate
	if g.Template != nil {
		tpl = *g.Template.DeepCopy()
		maps.Copy(podLabels, tpl.Metadata.Labels)
		maps.Copy(podAnnotations, tpl.Metadata.Annotations)
	}
	maps.Copy(podLabels, labels) // ours win: they select the pods
	podAnnotations[gatewayConfigHashAnnotation] = configHash(cfg, in)
	if v := store.Status.CredentialsRotation; v != "" {
		// The pods read their logins from the Secrets at start: new logins, new pods.
		podAnnotations[memoryv1alpha1.AnnotationRotateCredentials] = v
	}

	env := []corev1.EnvVar{secretEnv(gateway.EnvPostgresURI, store.ConnectionSecretNameOrDefault(), keyURI)}
	env = append(env, milvusLoginEnv(store, store.ConnectionSecretNameOrDefault())...)
	env = append(env, redisLoginEnv(store, store.ConnectionSecretNameOrDefault())...)
	env = append(env, embedderAPIKeyEnv(store, gateway.EnvEmbedderAPIKey)...)
	var resources corev1.ResourceRequirements
	if g.Resources != nil {
		resources = *g.Resources.DeepCopy()
	}
	scheme := corev1.URISchemeHTTP
	if g.TLS != nil {
		scheme = corev1.URISchemeHTTPS
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString(gatewayAPIPortName), Scheme: scheme}},
			TimeoutSeconds: 2, PeriodSeconds: period, SuccessThreshold: 1, FailureThreshold: 3,
		}
	}
	readOnly := int32(0o444)
	volumes := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: gatewayKeysVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  store.GatewayKeysSecretName(),
			Items:       []corev1.KeyToPath{{Key: gateway.KeysFileName, Path: gateway.KeysFileName}},
			DefaultMode: ptr.To(readOnly),
		}}},
	}
	// No subPath: the kubelet then updates the files in place, and the gateway picks
	// up rotated keys and a renewed certificate without a restart.
	mounts := []corev1.VolumeMount{
		{Name: "tmp", MountPath: "/tmp"},
		{Name: gatewayKeysVolume, MountPath: gatewayKeysDir, ReadOnly: true},
	}
	if g.TLS != nil {
		volumes = append(volumes, corev1.Volume{Name: gatewayTLSVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: g.TLS.SecretName,
			Items: []corev1.KeyToPath{
				{Key: corev1.TLSCertKey, Path: corev1.TLSCertKey},
				{Key: corev1.TLSPrivateKeyKey, Path: corev1.TLSPrivateKeyKey},
			},
			DefaultMode: ptr.To(readOnly),
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: gatewayTLSVolume, MountPath: gatewayTLSDir, ReadOnly: true})
	}

	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       store.Namespace,
			Name:            store.GatewayName(),
			Labels:          labels,
			OwnerReferences: ownerRef(store),
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(g.ReplicasOrDefault()),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(gatewayTerminationGrace),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(workerUID),
						RunAsGroup:     ptr.To(workerUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:    gatewayContainer,
						Image:   in.Image,
						Command: []string{workerCommand},
						Args:    append([]string{gatewayComponent}, cfg.Args()...),
						Env:     env,
						Ports: []corev1.ContainerPort{
							{Name: gatewayAPIPortName, ContainerPort: gatewayAPIPort, Protocol: corev1.ProtocolTCP},
							{Name: gatewayMetricsPortName, ContainerPort: gatewayMetricsPort, Protocol: corev1.ProtocolTCP},
							{Name: gatewayGRPCPortName, ContainerPort: gatewayGRPCPort, Protocol: corev1.ProtocolTCP},
						},
						ReadinessProbe: probe("/readyz", 5),
						LivenessProbe:  probe("/healthz", 10),
						Resources:      resources,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							RunAsNonRoot:             ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						VolumeMounts:             mounts,
					}},
					Volumes:                   volumes,
					NodeSelector:              tpl.NodeSelector,
					Tolerations:               tpl.Tolerations,
					Affinity:                  tpl.Affinity,
					TopologySpreadConstraints: tpl.TopologySpreadConstraints,
					PriorityClassName:         tpl.PriorityClassName,
				},
			},
		},
	}
}

// gatewayServicePorts are the Service's ports: the API ("http", or "https" with TLS),
// the metrics, and the gRPC API ("grpc"; cleartext HTTP/2, kubernetes.io/h2c, unless
// the store has TLS).
func gatewayServicePorts(store *memoryv1alpha1.MemoryStore) []corev1.ServicePort {
	api := "http"
	grpcProtocol := ptr.To("kubernetes.io/h2c")
	if store.Spec.Gateway.TLS != nil {
		api, grpcProtocol = "https", nil
	}
	return []corev1.ServicePort{
		{Name: api, Port: gatewayAPIPort, TargetPort: intstr.FromString(gatewayAPIPortName), Protocol: corev1.ProtocolTCP},
		{Name: gatewayMetricsPortName, Port: gatewayMetricsPort, TargetPort: intstr.FromString(gatewayMetricsPortName), Protocol: corev1.ProtocolTCP},
		{Name: gatewayGRPCPortName, Port: gatewayGRPCPort, TargetPort: intstr.FromString(gatewayGRPCPortName), Protocol: corev1.ProtocolTCP,
			AppProtocol: grpcProtocol},
	}
}

// specHash is the Deployment's record of what the operator last asked of it.
func specHash(obj any) string {
	b, _ := json.Marshal(obj) // API types: cannot fail
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])[:32]
}

// gatewayKeyChange is what gatewayKeyData changed, for events.
type gatewayKeyChange struct {
	Added, Removed []string
}

// gatewayKeyData is the keys Secret's data for the declared keys: one entry per key
// name holding the key, and keys.json, the gateway's KeyFile (hashes, scopes,
// read-only). A key already in existing is kept, a new name gets a new key from
// generate, and the names no longer declared are dropped. A value that is not a key of
// ours (too short, or a copy of another name's) is replaced.
func gatewayKeyData(keys []memoryv1alpha1.GatewayKey, existing map[string][]byte, generate func() (string, error)) (map[string][]byte, gatewayKeyChange, error) {
	data := map[string][]byte{}
	var change gatewayKeyChange
	var file gateway.KeyFile
	used := map[string]bool{}
	for _, k := range keys {
		value := string(existing[k.Name])
		if len(value) < minKeyLength || !strings.HasPrefix(value, gateway.KeyPrefix) || used[value] {
			v, err := generate()
			if err != nil {
				return nil, change, err
			}
			value = v
			change.Added = append(change.Added, k.Name)
		}
		used[value] = true
		data[k.Name] = []byte(value)
		entry := gateway.KeyEntry{Name: k.Name, SHA256: gateway.HashKey(value), ReadOnly: k.ReadOnly, Scopes: []string{}}
		for _, p := range k.Scopes {
			entry.Scopes = append(entry.Scopes, string(p))
		}
		file.Keys = append(file.Keys, entry)
	}
	for name := range existing {
		if _, ok := data[name]; !ok && name != gateway.KeysFileName {
			change.Removed = append(change.Removed, name)
		}
	}
	slices.Sort(change.Removed)
	b, err := json.Marshal(file)
	if err != nil {
		return nil, change, err
	}
	data[gateway.KeysFileName] = b
	return data, change, nil
}
