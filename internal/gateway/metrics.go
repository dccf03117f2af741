package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus metrics (prefix memory_gateway_).
type metrics struct {
	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	writes          *prometheus.CounterVec
	notIndexed      prometheus.Counter
	rateLimited     *prometheus.CounterVec
	keys            prometheus.Gauge
	keyReloadErrors prometheus.Counter
	pending         prometheus.Gauge
	pendingOldest   prometheus.Gauge
	pendingParked   prometheus.Gauge
	drained         *prometheus.CounterVec
	mcpUnanswered   prometheus.Counter
}

// newMetrics creates the metrics and registers them with reg (nil: not registered).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memory_gateway_requests_total",
			Help: "API requests by route and HTTP status."}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "memory_gateway_request_duration_seconds",
			Help: "API request latency by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"route"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memory_gateway_writes_total",
			Help: "Memories written, by outcome (inserted, superseded, unchanged, reinforced)."}, []string{"outcome"}),
		notIndexed: prometheus.NewCounter(prometheus.CounterOpts{Name: "memory_gateway_writes_not_indexed_total",
			Help: "Acknowledged writes whose vector write failed and was left to background indexing."}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memory_gateway_rate_limited_total",
			Help: "Requests refused with 429, by key name."}, []string{"key"}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{Name: "memory_gateway_keys",
			Help: "API keys in use."}),
		keyReloadErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "memory_gateway_key_reload_errors_total",
			Help: "Keys file reloads refused (the keys in use stay)."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "memory_gateway_pending_index",
			Help: "Memories whose index work is pending (the background indexing backlog, parked work not included)."}),
		pendingParked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "memory_gateway_pending_index_parked",
			Help: "Memories whose index work failed for good and is parked until retried (GET /v1/index/pending?parked=true)."}),
		pendingOldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "memory_gateway_pending_index_oldest_seconds",
			Help: "Age of the oldest pending index work."}),
		drained: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memory_gateway_index_drained_total",
			Help: "Pending index work finished in the background, by result (done, failed, parked)."}, []string{"result"}),
		mcpUnanswered: prometheus.NewCounter(prometheus.CounterOpts{Name: "memory_gateway_mcp_unanswered_total",
			Help: "MCP calls the SDK left without an answer in time, answered with a JSON-RPC timeout error."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.writes, m.notIndexed, m.rateLimited, m.keys,
			m.keyReloadErrors, m.pending, m.pendingOldest, m.pendingParked, m.drained, m.mcpUnanswered)
	}
	return m
}
