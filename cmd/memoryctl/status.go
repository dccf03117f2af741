package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"text/tabwriter"

	"github.com/amemory/memory-operator/internal/gateway"
)

// memoryctl status: how a store's gateway is doing (GET /v1/stats): where sessions
// are kept, and the query cache's counters and hit rate.

var statusHelp = help{
	synopsis: "status [-o table|json] [--gateway-url URL]",
	about: `Shows how a store's gateway is doing: where its sessions are kept (Redis or
PostgreSQL) and, while spec.gateway.queryCache is on, the query cache's backend,
TTL, hits, semantic hits, misses, invalidations and hit rate since the gateway
(the replica that answered) started. The gateway comes from --gateway-url or
$MEMORYCTL_GATEWAY_URL, its API key from $MEMORYCTL_GATEWAY_KEY.`,
	examples: `export MEMORYCTL_GATEWAY_URL=https://acme-gateway.agents:8080 MEMORYCTL_GATEWAY_KEY=…
memoryctl status
memoryctl status -o json`,
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusHelp, stderr)
	c := gatewayClient{key: os.Getenv(envGatewayKey)}
	fs.StringVar(&c.base, "gateway-url", os.Getenv(envGatewayURL), "the store's gateway, e.g. https://acme-gateway.agents:8080 (default $"+envGatewayURL+")")
	output := fs.String("o", "table", "output: table or json")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return fmt.Errorf("status takes no arguments besides its flags (got %q)", rest[0])
	case *output != "table" && *output != "json":
		return fmt.Errorf("-o %q: want table or json", *output)
	}
	if err := c.check(); err != nil {
		return err
	}
	var st gateway.StatsResponse
	if err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &st); err != nil {
		return err
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "short-term\t%s\n", st.ShortTerm)
	if qc := st.QueryCache; qc != nil {
		fmt.Fprintf(tw, "query cache\t%s, ttl %gs\n", qc.Backend, qc.TTLSeconds)
		fmt.Fprintf(tw, "  hit rate\t%.1f%%\n", 100*qc.HitRate)
		fmt.Fprintf(tw, "  hits\t%d\n  semantic hits\t%d\n  misses\t%d\n  invalidations\t%d\n", qc.Hits, qc.SemanticHits, qc.Misses, qc.Invalidations)
		if qc.Unavailable > 0 {
			fmt.Fprintf(tw, "  unavailable\t%d (Redis did not answer in time)\n", qc.Unavailable)
		}
	} else {
		fmt.Fprintf(tw, "query cache\toff\n")
	}
	return tw.Flush()
}
