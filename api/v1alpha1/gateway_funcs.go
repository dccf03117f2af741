package v1alpha1

import corev1 "k8s.io/api/core/v1"

// Defaults of spec.gateway, as the CRD declares them, for objects that reached the
// operator without them (a CRD installed without defaults, tests building objects).
const (
	DefaultGatewayReplicas  int32 = 1
	DefaultGatewayKeyName         = "default"
	DefaultGatewayRateLimit int32 = 50
	DefaultGatewayRateBurst int32 = 100
)

// GatewayEnabled reports whether the store asks for a gateway.
func (s *MemoryStore) GatewayEnabled() bool {
	return s.Spec.Gateway != nil && s.Spec.Gateway.Enabled
}

// GatewayName is the name of the gateway's Deployment and Service: "<store>-gateway".
func (s *MemoryStore) GatewayName() string { return s.Name + "-gateway" }

// GatewayKeysSecretName is the name of the Secret with the gateway's API keys.
func (s *MemoryStore) GatewayKeysSecretName() string { return s.Name + "-gateway-keys" }

// ReplicasOrDefault is spec.gateway.replicas with its default applied.
func (g *GatewaySpec) ReplicasOrDefault() int32 {
	if g.Replicas == nil {
		return DefaultGatewayReplicas
	}
	return *g.Replicas
}

// KeysOrDefault is spec.gateway.keys with the defaults applied: one key named
// "default" for every scope when none is declared, and "*" for a key without scopes.
func (g *GatewaySpec) KeysOrDefault() []GatewayKey {
	if len(g.Keys) == 0 {
		return []GatewayKey{{Name: DefaultGatewayKeyName, Scopes: []GatewayScopePattern{"*"}}}
	}
	keys := make([]GatewayKey, len(g.Keys))
	for i, k := range g.Keys {
		keys[i] = *k.DeepCopy()
		if len(keys[i].Scopes) == 0 {
			keys[i].Scopes = []GatewayScopePattern{"*"}
		}
	}
	return keys
}

// ConnectionKeyOrDefault is the name of the key that goes into the connection Secret:
// spec.gateway.connectionKey, or the first key.
func (g *GatewaySpec) ConnectionKeyOrDefault() string {
	if g.ConnectionKey != "" {
		return g.ConnectionKey
	}
	return g.KeysOrDefault()[0].Name
}

// ServiceTypeOrDefault is spec.gateway.service.type with its default, ClusterIP.
func (g *GatewaySpec) ServiceTypeOrDefault() corev1.ServiceType {
	if g.Service == nil || g.Service.Type == "" {
		return corev1.ServiceTypeClusterIP
	}
	return g.Service.Type
}

// DedupThresholdFor is the gateway's near-duplicate threshold: spec.gateway
// .dedupThreshold when set, else the threshold calibrated for the store's embedder
// (status.embedder), else "" (not calibrated yet: the gateway waits for it).
func (s *MemoryStore) DedupThresholdFor() string {
	if g := s.Spec.Gateway; g != nil && g.DedupThreshold != "" {
		return g.DedupThreshold
	}
	if e := s.Status.Embedder; e != nil {
		return e.DedupThreshold
	}
	return ""
}

// RateLimitOrDefault is the rate (requests per second) and burst per key.
func (g *GatewaySpec) RateLimitOrDefault() (rate, burst int32) {
	rate, burst = DefaultGatewayRateLimit, DefaultGatewayRateBurst
	if r := g.RateLimit; r != nil {
		if r.RequestsPerSecond > 0 {
			rate = r.RequestsPerSecond
		}
		if r.Burst > 0 {
			burst = r.Burst
		}
	}
	return rate, burst
}
