package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/amemory/memory-operator/internal/gateway"
)

// memoryctl pending: the store's pending index work through its gateway (GET
// /v1/index/pending, POST /v1/index/retry): what the background indexer still owes
// the vector index, and the work it parked because it kept failing.

// Environment variables of the pending commands: the gateway's address and an API
// key (never an argument: it is a secret). The store's connection Secret holds both
// (gatewayURL, gatewayKey).
const (
	envGatewayURL = "MEMORYCTL_GATEWAY_URL"
	envGatewayKey = "MEMORYCTL_GATEWAY_KEY"
)

const pendingUsage = `memoryctl pending list [--scope S] [--parked] [-o table|json]   the pending index work, parked work included
memoryctl pending retry [--scope S] [MEMORY_ID...]                put parked work back in the queue

The gateway comes from --gateway-url or $MEMORYCTL_GATEWAY_URL, its API key from
$MEMORYCTL_GATEWAY_KEY (a key allowed every scope, "*", may leave out --scope).
`

var pendingHelp = map[string]help{
	"list": {
		synopsis: "pending list [--scope S] [--parked] [-o table|json] [--gateway-url URL]",
		about: `Lists what a store's gateway still owes its vector index, and the work it parked
because it kept failing (--parked: only that). The gateway comes from --gateway-url or
$MEMORYCTL_GATEWAY_URL, its API key from $MEMORYCTL_GATEWAY_KEY; a key allowed every
scope ("*") may leave out --scope.`,
		examples: `export MEMORYCTL_GATEWAY_URL=https://acme-gateway.agents:8080 MEMORYCTL_GATEWAY_KEY=…
memoryctl pending list --parked
memoryctl pending list --scope user:1024 -o json`,
	},
	"retry": {
		synopsis: "pending retry [--scope S] [MEMORY_ID...] [--gateway-url URL]",
		about: `Puts parked index work back in the queue with its attempts reset: a scope's, or just
the memories named. The gateway and its key come as for pending list.`,
		examples: `export MEMORYCTL_GATEWAY_URL=https://acme-gateway.agents:8080 MEMORYCTL_GATEWAY_KEY=…
memoryctl pending retry --scope user:1024
memoryctl pending retry 06h37… 06h38…`,
	},
}

func runPending(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("pending needs a verb\n\n%s", pendingUsage)
	}
	verb, args := args[0], args[1:]
	h, ok := pendingHelp[verb]
	if !ok {
		if verb == "help" || verb == "-h" || verb == "--help" {
			fmt.Fprint(stdout, pendingUsage)
			return nil
		}
		return fmt.Errorf("unknown verb %q\n\n%s", verb, pendingUsage)
	}
	fs := newFlagSet("pending "+verb, h, stderr)
	c := gatewayClient{key: os.Getenv(envGatewayKey)}
	fs.StringVar(&c.base, "gateway-url", os.Getenv(envGatewayURL), "the store's gateway, e.g. https://acme-gateway.agents:8080 (default $"+envGatewayURL+")")
	scope := fs.String("scope", "", "one scope's work (required unless the key allows every scope)")
	parked := new(bool)
	output := new(string)
	if verb == "list" {
		fs.BoolVar(parked, "parked", false, "only parked work (failed for good)")
		fs.StringVar(output, "o", "table", "output: table or json")
	}
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if verb == "list" && len(ids) > 0 {
		return fmt.Errorf("pending list takes no arguments besides its flags (got %q)", ids[0])
	}
	if err := c.check(); err != nil {
		return err
	}
	if verb == "list" {
		return listPending(ctx, c, *scope, *parked, *output, stdout)
	}
	var resp gateway.RetryResponse
	if err := c.do(ctx, http.MethodPost, "/v1/index/retry", gateway.RetryRequest{Scope: *scope, MemoryIDs: ids}, &resp); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requeued %d\n", resp.Requeued)
	return nil
}

// listPending prints every page of the pending work.
func listPending(ctx context.Context, c gatewayClient, scope string, parked bool, output string, stdout io.Writer) error {
	if output != "table" && output != "json" {
		return fmt.Errorf("-o %q: want table or json", output)
	}
	all := []gateway.PendingWork{}
	for after := ""; ; {
		q := url.Values{"limit": {"1000"}}
		for k, v := range map[string]string{"scope": scope, "after": after} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if parked {
			q.Set("parked", "true")
		}
		var page gateway.PendingResponse
		if err := c.do(ctx, http.MethodGet, "/v1/index/pending?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		all = append(all, page.Pending...)
		if page.NextAfter == "" {
			break
		}
		after = page.NextAfter
	}
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMORY ID\tSCOPE\tSTATE\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR")
	for _, w := range all {
		state, next := "waiting", "-"
		if w.Parked {
			state = "parked"
		} else if w.NextAttemptAt != nil {
			next = w.NextAttemptAt.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", w.MemoryID, orDash(w.Scope), state, w.Attempts, next, orDash(oneLine(w.LastError)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table row on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// gatewayClient calls a store's gateway with an API key.
type gatewayClient struct {
	base, key string
}

func (c gatewayClient) check() error {
	switch {
	case c.base == "":
		return fmt.Errorf("no gateway: give --gateway-url or set %s", envGatewayURL)
	case c.key == "":
		return fmt.Errorf("no API key: set %s (the connection Secret's gatewayKey)", envGatewayKey)
	}
	return nil
}

// do sends the request and decodes a 2xx answer into out; an error answer becomes
// an error with the gateway's code and message.
func (c gatewayClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.base, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-Api-Key", c.key)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if resp.StatusCode >= 300 {
		var eb gateway.ErrorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
			return fmt.Errorf("gateway: %s %s: %s", resp.Status, eb.Error.Code, eb.Error.Message)
		}
		return fmt.Errorf("gateway: %s", resp.Status)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return errors.Join(fmt.Errorf("gateway: the answer to %s %s is not what memoryctl expects", method, path), err)
	}
	return nil
}
