package testutil

import (
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// Faults puts Toxiproxy proxies between the code under test and a backend: tests
// dial the proxy's address and inject latency, bandwidth limits, resets after N
// bytes, timeouts and outages into it (hack/services.sh starts Toxiproxy's server).
type Faults struct {
	t      testing.TB
	client *toxiproxy.Client
}

// NewFaults connects to the Toxiproxy server (MEMORY_TEST_TOXIPROXY_ADDR).
func NewFaults(t testing.TB) *Faults {
	t.Helper()
	addr := requireEnv(t, "MEMORY_TEST_TOXIPROXY_ADDR", "Toxiproxy")
	return &Faults{t: t, client: toxiproxy.NewClient("http://" + addr)}
}

// Proxy creates a proxy to upstream (host:port) on a free loopback port, removed when
// the test ends, and returns it with the address to dial instead of upstream.
func (f *Faults) Proxy(name, upstream string) (*toxiproxy.Proxy, string) {
	f.t.Helper()
	p, err := f.client.CreateProxy(UniqueName(name+"-"), "127.0.0.1:0", upstream)
	if err != nil {
		f.t.Fatalf("toxiproxy: creating a proxy to %s: %v", upstream, err)
	}
	f.t.Cleanup(func() { _ = p.Delete() })
	return p, p.Listen
}
