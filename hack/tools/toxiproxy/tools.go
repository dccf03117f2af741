//go:build tools

// Package tools pins Toxiproxy's server for the fault-injection tests: a TCP proxy put
// between the workers or the gateway and each backend, driven from the tests through
// its client (latency, bandwidth limits, resets after N bytes, timeouts, outages).
package tools

import _ "github.com/Shopify/toxiproxy/v2/cmd/server"
