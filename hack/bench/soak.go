package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// The soak (make soak): concurrent clients write, update, search and forget across
// many scopes through a `memory-operator gateway` process for a fixed time, on one
// vector engine (-soak-engine): Milvus (the server with authentication, the gateway
// logged in as the store's own Milvus user) while Toxiproxy cuts PostgreSQL once and
// takes Milvus away for a while; PGVector (PostgreSQL 16) while Toxiproxy cuts
// PostgreSQL once and then cuts every connection after some kilobytes for a while
// (the index is in PostgreSQL there: its faults are PostgreSQL's). Each scope belongs
// to one client, so what it should hold is known exactly. At the end: every
// acknowledged write is stored exactly once (with its last acknowledged content),
// nothing of a forgotten scope's past comes back (also after the pending index
// drains), searches find the surviving memories, refusals were only 429/503 with
// Retry-After, and the gateway's RSS stayed flat.

const (
	soakClients         = 8
	soakScopesPerClient = 12
	soakDim             = 64
)

// soakScope is what one scope must hold: the memories acknowledged since its last
// acknowledged forget, with their last acknowledged text (several when an update's
// outcome is unknown), and the ids forgotten before.
type soakScope struct {
	name      string
	live      map[string][]string // id -> acceptable texts
	forgotten map[string]bool
	// The scope's session (session:<scope's id>, owned by the scope): turns
	// appended and not yet promoted, turns an acknowledged end promoted (each must be
	// stored once), turns whose fate an error left unknown, and turns of the scope's
	// past that an acknowledged forget covered (none may be stored).
	turns, kept, maybe, gone map[string]bool
	// unknown: a forget was still unacknowledged when the run ended, so what the
	// scope holds is not known; it is left out of the checks.
	unknown bool
}

type soakCounts struct {
	writes, updates, searches, forgets, refused, bad int
	turns, ends                                      int
	// stale counts search results that were forgotten or superseded when the
	// search began (must be 0, with the query cache answering most searches).
	stale int
	codes map[int]int
}

// sessionPath is the scope's session in the API.
func (s *soakScope) sessionPath() string {
	return "/v1/sessions/session:" + strings.TrimPrefix(s.name, "user:")
}

func (c *soakCounts) add(o soakCounts) {
	c.writes += o.writes
	c.updates += o.updates
	c.searches += o.searches
	c.forgets += o.forgets
	c.refused += o.refused
	c.bad += o.bad
	c.turns += o.turns
	c.ends += o.ends
	c.stale += o.stale
	for k, v := range o.codes {
		c.codes[k] += v
	}
}

// soakEngines parses -soak-engine: a comma-separated list of Milvus and PGVector.
func soakEngines(list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		switch s = strings.TrimSpace(s); s {
		case engine.Milvus, engine.PGVector:
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		default:
			return nil, fmt.Errorf("-soak-engine %q: want Milvus or PGVector (or both, comma-separated)", s)
		}
	}
	return out, nil
}

func (e *env) soak(ctx context.Context, d time.Duration, eng string) error {
	toxAddr := os.Getenv("MEMORY_TEST_TOXIPROXY_ADDR")
	if toxAddr == "" {
		return fmt.Errorf("MEMORY_TEST_TOXIPROXY_ADDR unset: run through `make soak`")
	}
	fmt.Printf("\nSoak: %d clients x %d scopes for %s through the gateway (%s index); PostgreSQL cut once, %s\n\n",
		soakClients, soakScopesPerClient, d, eng, soakSecondFault(eng, min(time.Minute, d/4)))
	st, err := e.soakStore(ctx, eng)
	if err != nil {
		return err
	}
	defer st.drop()
	admin, names := st.admin, st.names
	tox := toxiproxy.NewClient("http://" + toxAddr)
	pgProxy, err := tox.CreateProxy("soak-pg", "127.0.0.1:0", fmt.Sprintf("%s:%d", admin.Host, admin.Port))
	if err != nil {
		return err
	}
	defer func() { _ = pgProxy.Delete() }()
	var milvusProxy *toxiproxy.Proxy
	vectors := engine.Vectors{VectorEngine: eng}
	if eng == engine.Milvus {
		if milvusProxy, err = tox.CreateProxy("soak-milvus", "127.0.0.1:0", st.milvus.Address); err != nil {
			return err
		}
		defer func() { _ = milvusProxy.Delete() }()
		vectors.MilvusAddress, vectors.Collection = milvusProxy.Listen, names.Collection
	}
	agent := admin
	agent.User, agent.Password = names.Role, st.pw.Agent
	host, port, _ := net.SplitHostPort(pgProxy.Listen)
	agent.Host = host
	if agent.Port, err = strconv.Atoi(port); err != nil {
		return err
	}

	g, err := e.startSoakGateway(ctx, names, agent.URL(nil), vectors, st.login)
	if err != nil {
		return err
	}
	defer g.stop()
	rssStart := g.rssKB()

	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	faultLog := soakFaults(runCtx, d, g.started, pgProxy, milvusProxy)
	var rssPeak atomic.Int64
	go func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case <-time.After(time.Second):
				if v := g.rssKB(); v > rssPeak.Load() {
					rssPeak.Store(v)
				}
			}
		}
	}()

	hc := &http.Client{Timeout: 30 * time.Second}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		scopes []*soakScope
		total  = soakCounts{codes: map[int]int{}}
	)
	for c := range soakClients {
		wg.Go(func() {
			mine := make([]*soakScope, soakScopesPerClient)
			for i := range mine {
				mine[i] = &soakScope{name: fmt.Sprintf("user:soak-%d-%d", c, i), live: map[string][]string{}, forgotten: map[string]bool{},
					turns: map[string]bool{}, kept: map[string]bool{}, maybe: map[string]bool{}, gone: map[string]bool{}}
			}
			counts := soakClient(runCtx, hc, g, mine, mrand.New(mrand.NewPCG(uint64(c), 7)))
			mu.Lock()
			defer mu.Unlock()
			scopes = append(scopes, mine...)
			total.add(counts)
		})
	}
	wg.Wait()
	rssEnd := g.rssKB()
	for _, l := range faultLog() {
		fmt.Println(l)
	}

	// Drain: the pending index work of the Milvus outage is done in the background.
	pool, err := pgxpool.New(ctx, admin.URL(nil))
	if err != nil {
		return err
	}
	defer pool.Close()
	drainStart := time.Now()
	for {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{names.Schema, "index_pending"}.Sanitize()).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if time.Since(drainStart) > 3*time.Minute {
			return fmt.Errorf("%d pending index entries left 3 minutes after the run", n)
		}
		time.Sleep(500 * time.Millisecond)
	}
	drained := time.Since(drainStart)
	return soakVerify(ctx, pool, hc, g, names.Schema, scopes, total, drained, rssStart, max(rssPeak.Load(), rssEnd), rssEnd)
}

// soakSecondFault says what soakFaults does after the PostgreSQL cut on eng.
func soakSecondFault(eng string, away time.Duration) string {
	if eng == engine.PGVector {
		return fmt.Sprintf("every PostgreSQL connection cut after 24 KiB for %s", away)
	}
	return fmt.Sprintf("Milvus (authentication on, the store's own user) away for %s", away)
}

// soakBackends is the soak's store as provisioned: its PostgreSQL server's admin
// login, names and passwords, on Milvus the server (admin login) and the store's own
// user; drop removes it all.
type soakBackends struct {
	admin  provision.PostgresConn
	names  provision.Names
	pw     provision.Passwords
	milvus *provision.MilvusConn
	login  engine.Login
	drop   func()
}

// soakStore provisions the soak's store as the operator does: schema and roles on
// the PostgreSQL 15 server and a collection with the store's own user and role on
// the Milvus server with authentication (Milvus), or schema, roles and the HNSW
// index on the PostgreSQL 16 server (PGVector).
func (e *env) soakStore(ctx context.Context, eng string) (*soakBackends, error) {
	const owner = "soak/gateway"
	dsn := e.dsn
	st := &soakBackends{drop: func() {}, pw: provision.Passwords{Agent: "soak-agent-pw", Worker: "soak-worker-pw"}}
	switch eng {
	case engine.PGVector:
		if dsn = os.Getenv("MEMORY_TEST_PGVECTOR_DSN"); dsn == "" {
			return st, fmt.Errorf("MEMORY_TEST_PGVECTOR_DSN unset: run through `make soak`")
		}
	case engine.Milvus:
		addr := os.Getenv("MEMORY_TEST_MILVUS_AUTH_ADDR")
		if addr == "" {
			return st, fmt.Errorf("MEMORY_TEST_MILVUS_AUTH_ADDR unset: run through `make soak`")
		}
		st.milvus = &provision.MilvusConn{Address: addr, Username: os.Getenv("MEMORY_TEST_MILVUS_AUTH_USER"), Password: os.Getenv("MEMORY_TEST_MILVUS_AUTH_PASSWORD")}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return st, err
	}
	st.admin = provision.PostgresConn{Host: cfg.ConnConfig.Host, Port: int(cfg.ConnConfig.Port), Database: cfg.ConnConfig.Database,
		SSLMode: "disable", User: cfg.ConnConfig.User, Password: cfg.ConnConfig.Password}
	if st.names, err = provision.NamesFor("soak", ""); err != nil {
		return st, err
	}
	admin, names, mc := st.admin, st.names, st.milvus
	remove := func(ctx context.Context) {
		if mc != nil {
			_ = provision.DeleteMilvusTenant(ctx, *mc, names, milvus.Owner{ID: owner})
			_ = provision.DeleteVectors(ctx, admin, mc, names, milvus.Owner{ID: owner})
		}
		_ = provision.DeletePostgres(ctx, admin, names, owner)
	}
	remove(ctx) // a soak that was interrupted left its store
	st.drop = func() { remove(context.Background()) }
	if _, err := provision.EnsurePostgres(ctx, admin, names, owner, st.pw); err != nil {
		return st, err
	}
	spec := vector.Spec{Dimension: soakDim, Metric: vector.Cosine}
	if eng == engine.PGVector {
		_, err = provision.EnsurePGVector(ctx, admin, names, spec, pgvector.Params{})
		return st, err
	}
	if _, err := provision.EnsureVectors(ctx, admin, mc, names, milvus.Owner{ID: owner}, spec); err != nil {
		return st, err
	}
	st.login = engine.Login{Username: names.MilvusUser, Password: "soak-milvus-pw-0123"}
	// The server applies a new user's role in the background: provisioning is retried
	// (as the operator's requeues do) until it has.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		err := provision.EnsureMilvusTenant(ctx, *mc, names, owner, st.login.Password, st.login.Password)
		if err == nil || !errors.Is(err, provision.ErrMilvusTenantPending) || time.Now().After(deadline) {
			return st, err
		}
	}
}

// soakFaults cuts PostgreSQL for 5 s after a fifth of the run, then takes Milvus away
// for a quarter of it (at most a minute), or without Milvus (nil: PGVector) cuts
// every PostgreSQL connection after 24 KiB for as long; the log it returns says when.
func soakFaults(ctx context.Context, d time.Duration, started time.Time, pg, milvus *toxiproxy.Proxy) (log func() []string) {
	var mu sync.Mutex
	var lines []string
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf("%6.1fs  ", time.Since(started).Seconds())+fmt.Sprintf(format, args...))
	}
	setEnabled := func(p *toxiproxy.Proxy, on bool) {
		p.Enabled = on
		if err := p.Save(); err != nil {
			note("toxiproxy: %v", err)
		}
	}
	sleep := func(t time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(t):
			return true
		}
	}
	go func() {
		if !sleep(d / 5) {
			return
		}
		note("PostgreSQL cut (5 s)")
		setEnabled(pg, false)
		sleep(5 * time.Second)
		setEnabled(pg, true)
		note("PostgreSQL back")
		if !sleep(d / 10) {
			return
		}
		away := min(time.Minute, d/4)
		if milvus == nil {
			note("PostgreSQL connections cut after 24 KiB (%s)", away)
			if _, err := pg.AddToxic("soak-limit", "limit_data", "downstream", 1, toxiproxy.Attributes{"bytes": 24 << 10}); err != nil {
				note("toxiproxy: %v", err)
			}
			sleep(away)
			if err := pg.RemoveToxic("soak-limit"); err != nil {
				note("toxiproxy: %v", err)
			}
			note("PostgreSQL connections whole again")
			return
		}
		note("Milvus away (%s)", away)
		setEnabled(milvus, false)
		sleep(away)
		setEnabled(milvus, true)
		note("Milvus back")
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

// soakClient runs one client's mix on its own scopes until ctx ends.
func soakClient(ctx context.Context, hc *http.Client, g *gwProcess, mine []*soakScope, r *mrand.Rand) soakCounts {
	counts := soakCounts{codes: map[int]int{}}
	call := func(method, path string, body, out any) (int, bool) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), method, g.url+path, bytes.NewReader(b))
		req.Header.Set("X-Api-Key", g.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			counts.bad++
			return 0, false
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		counts.codes[resp.StatusCode]++
		if resp.StatusCode < 300 {
			if out != nil {
				_ = json.Unmarshal(raw, out)
			}
			return resp.StatusCode, true
		}
		if (resp.StatusCode == 503 || resp.StatusCode == 429) && resp.Header.Get("Retry-After") != "" {
			counts.refused++
		} else {
			counts.bad++
		}
		return resp.StatusCode, false
	}
	n := 0
	for ctx.Err() == nil {
		s := mine[r.IntN(len(mine))]
		n++
		switch p := r.IntN(100); {
		case p < 9:
			s.sessionStep(call, r, n, p < 7, &counts)
		case p < 55:
			text := fmt.Sprintf("%s note %d: %s", s.name, n, gwText(r, 8))
			var w gateway.WriteResponse
			if _, ok := call("POST", "/v1/memories", gateway.NewMemory{Scope: s.name, MemoryType: memory.Episodic,
				Content: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text))}, &w); ok {
				counts.writes++
				s.live[w.MemoryID] = []string{text}
			}
		case p < 65 && len(s.live) > 0:
			id := anyKey(s.live, r)
			text := fmt.Sprintf("%s updated %d: %s", s.name, n, gwText(r, 8))
			if code, ok := call("PATCH", "/v1/memories/"+id, gateway.UpdateRequest{Content: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text))}, nil); ok {
				counts.updates++
				s.live[id] = []string{text}
			} else if code == 0 || code >= 500 {
				s.live[id] = append(s.live[id], text) // it may or may not have happened
			}
		case p < 95:
			// A few questions a scope, asked again and again: the query cache
			// answers most, and every answer is held to what was acknowledged
			// before it was asked (this client is the scope's only writer).
			counts.searches++
			var sr gateway.SearchResponse
			if _, ok := call("POST", "/v1/search", gateway.SearchRequest{Scope: s.name, Query: gwWords[r.IntN(4)], TopK: 5}, &sr); ok {
				counts.stale += s.staleResults(sr)
			}
		default:
			// A forget is retried until acknowledged: only then is the scope's past known.
			s.unknown = true
			for ctx.Err() == nil {
				if _, ok := call("POST", "/v1/forget", gateway.ForgetRequest{Scope: s.name}, nil); ok {
					counts.forgets++
					s.forgot()
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	return counts
}

// staleResults counts the results of a search that were forgotten or superseded
// when it began.
func (s *soakScope) staleResults(sr gateway.SearchResponse) int {
	n := 0
	for _, res := range sr.Results {
		var c struct{ Text string }
		_ = json.Unmarshal(res.Memory.Content, &c)
		if texts, live := s.live[res.Memory.MemoryID]; s.forgotten[res.Memory.MemoryID] || (live && !slices.Contains(texts, c.Text)) {
			n++
		}
	}
	return n
}

// forgot records an acknowledged forget: everything of the scope's past is gone.
func (s *soakScope) forgot() {
	for id := range s.live {
		s.forgotten[id] = true
	}
	s.live = map[string][]string{}
	for _, m := range []map[string]bool{s.turns, s.kept, s.maybe} {
		maps.Copy(s.gone, m)
		clear(m)
	}
	s.unknown = false
}

// sessionStep appends a turn to the scope's session, or (when not appending and
// there are turns) ends it with promotion, and records what the client was told.
func (s *soakScope) sessionStep(call func(method, path string, body, out any) (int, bool), r *mrand.Rand, n int, appending bool, counts *soakCounts) {
	unknown := func(code int) bool { return code == 0 || code >= 500 }
	if appending {
		text := fmt.Sprintf("%s turn %d: %s", s.name, n, gwText(r, 8))
		code, ok := call("POST", s.sessionPath()+"/turns", gateway.AppendRequest{Owner: s.name,
			Turns: []gateway.TurnIn{{Role: "user", Content: gateway.JSONValue(fmt.Sprintf("%q", text))}}}, nil)
		switch {
		case ok:
			counts.turns++
			s.turns[text] = true
		case unknown(code):
			s.maybe[text] = true
		}
		return
	}
	if len(s.turns) == 0 {
		return
	}
	code, ok := call("DELETE", s.sessionPath()+"?promote=true", nil, nil)
	switch {
	case ok:
		counts.ends++
		maps.Copy(s.kept, s.turns)
	case unknown(code):
		maps.Copy(s.maybe, s.turns)
	default:
		return
	}
	clear(s.turns)
}

func anyKey(m map[string][]string, r *mrand.Rand) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys[r.IntN(len(keys))]
}

func soakVerify(ctx context.Context, pool *pgxpool.Pool, hc *http.Client, g *gwProcess, schema string, scopes []*soakScope,
	total soakCounts, drained time.Duration, rssStart, rssPeak, rssEnd int64) error {
	// Promoted turns (source "session") are checked by their text, the others by ID.
	rows, err := pool.Query(ctx, `SELECT memory_id, scope, coalesce(content->>'text', content->>'content'), source = 'session' FROM `+pgx.Identifier{schema, "memories"}.Sanitize())
	if err != nil {
		return err
	}
	stored := map[string][]soakRow{}
	turns := map[string]int{}
	for rows.Next() {
		var id string
		var r soakRow
		var promoted bool
		if err := rows.Scan(&id, &r.scope, &r.text, &promoted); err != nil {
			return err
		}
		if promoted {
			turns[r.text]++
			continue
		}
		stored[id] = append(stored[id], r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	v := checkStored(scopes, stored)
	v.checkTurns(scopes, turns)
	v.searched, v.notFound, err = checkSearches(ctx, hc, g, scopes, stored)
	if err != nil {
		return err
	}
	fmt.Printf(`
| | |
|---|---|
| writes / updates / searches / forgets acknowledged | %d / %d / %d / %d |
| query cache: hit rate / forgotten or superseded results served (must be 0) | %.0f%% / %d |
| refusals (503 or 429 with Retry-After) | %d |
| other errors (must be 0) | %d |
| status codes | %v |
| memories that must survive (scopes left out: a forget unacknowledged at the end) | %d (%d) |
| lost / stored twice / wrong content (must be 0) | %d / %d / %d |
| session turns appended / sessions ended with promotion | %d / %d |
| promoted turns that must be stored: lost / stored twice (must be 0) | %d: %d / %d |
| forgotten memories back, promoted turns of a forgotten past included (must be 0) | %d |
| stored without an acknowledgement (the client saw an error) | %d |
| survivors not found by their own text (sample of %d; must be 0) | %d |
| pending index drained after the run in | %s |
| gateway RSS start / peak / end | %d / %d / %d MiB |
`, total.writes, total.updates, total.searches, total.forgets, cacheHitRate(g), total.stale, total.refused, total.bad, total.codes, v.live, v.unknownScopes,
		v.lost, v.duplicated, v.wrongText, total.turns, total.ends, v.keptTurns, v.lostTurns, v.duplicatedTurns, v.resurrected, v.unacknowledged, v.searched, v.notFound, drained.Round(100*time.Millisecond),
		rssStart>>10, rssPeak>>10, rssEnd>>10)
	if total.bad > 0 || total.stale > 0 || v.lost > 0 || v.duplicated > 0 || v.wrongText > 0 || v.resurrected > 0 || v.notFound > 0 ||
		v.lostTurns > 0 || v.duplicatedTurns > 0 {
		return fmt.Errorf("the soak broke a guarantee (see the table)")
	}
	return nil
}

// soakVerdict counts what the end state says about the guarantees.
type soakVerdict struct {
	live, unknownScopes                                      int
	lost, duplicated, wrongText, resurrected, unacknowledged int
	searched, notFound                                       int
	keptTurns, lostTurns, duplicatedTurns                    int
}

// checkTurns compares the promoted turns stored (text -> rows) with what the clients
// were told: each turn an acknowledged end promoted is stored once, and none of a
// past an acknowledged forget covered is stored at all.
func (v *soakVerdict) checkTurns(scopes []*soakScope, stored map[string]int) {
	for _, s := range scopes {
		if s.unknown {
			continue
		}
		for t := range s.kept {
			v.keptTurns++
			switch n := stored[t]; {
			case n == 0:
				v.lostTurns++
			case n > 1:
				v.duplicatedTurns++
			}
		}
		for t := range s.gone {
			if stored[t] > 0 {
				v.resurrected++
			}
		}
	}
}

type soakRow struct{ scope, text string }

// checkStored compares what PostgreSQL holds with what the clients were told.
func checkStored(scopes []*soakScope, stored map[string][]soakRow) soakVerdict {
	var v soakVerdict
	acked := map[string]bool{}
	for _, s := range scopes {
		if s.unknown {
			v.unknownScopes++
			for id := range s.live {
				acked[id] = true
			}
			continue
		}
		for id, texts := range s.live {
			acked[id] = true
			v.live++
			got := stored[id]
			switch {
			case len(got) == 0:
				v.lost++
			case len(got) > 1:
				v.duplicated++
			case !slices.Contains(texts, got[0].text):
				v.wrongText++
			}
		}
		for id := range s.forgotten {
			acked[id] = true
			if len(stored[id]) > 0 {
				v.resurrected++
			}
		}
	}
	for id := range stored {
		if !acked[id] {
			v.unacknowledged++
		}
	}
	return v
}

// checkSearches searches one survivor of every scope by its stored text: it must come
// back, and nothing forgotten with it.
func checkSearches(ctx context.Context, hc *http.Client, g *gwProcess, scopes []*soakScope, stored map[string][]soakRow) (searched, notFound int, err error) {
	for _, s := range scopes {
		for id := range s.live {
			if s.unknown || len(stored[id]) != 1 {
				continue
			}
			searched++
			var sr gateway.SearchResponse
			b, _ := json.Marshal(gateway.SearchRequest{Scope: s.name, Query: stored[id][0].text, TopK: 5})
			req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/search", bytes.NewReader(b))
			req.Header.Set("X-Api-Key", g.key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return searched, notFound, err
			}
			_ = json.NewDecoder(resp.Body).Decode(&sr)
			_ = resp.Body.Close()
			found := false
			for _, r := range sr.Results {
				found = found || r.Memory.MemoryID == id
				if s.forgotten[r.Memory.MemoryID] {
					notFound++ // a forgotten memory came back: as bad as a lost one
				}
			}
			if !found {
				notFound++
			}
			break
		}
	}
	return searched, notFound, nil
}

// startSoakGateway runs the gateway process on the store's engine (on Milvus logged
// in as login), near-duplicate detection off (every write is a memory of its own).
func (e *env) startSoakGateway(ctx context.Context, names provision.Names, uri string, vectors engine.Vectors, login engine.Login) (*gwProcess, error) {
	var environ []string
	if login.Username != "" {
		environ = []string{engine.EnvMilvusUsername + "=" + login.Username, engine.EnvMilvusPassword + "=" + login.Password}
	}
	return e.startGatewayProcessEnv(ctx, uri, environ, gateway.Config{StoreNamespace: "soak", StoreName: names.Tenant, Schema: names.Schema,
		Vectors: vectors, Dimension: soakDim, Metric: "COSINE",
		Embedder: "Hashing", DedupThreshold: 0, RateLimit: 1e9, RateBurst: 1 << 30,
		MaxBodyBytes: gateway.DefaultMaxBodyBytes, ShutdownGrace: 5 * time.Second,
		QueryCache: gateway.QueryCache{QueryCacheTTL: 5 * time.Minute}})
}

// cacheHitRate is the soak gateway's query cache hit rate, in percent (-1: unknown).
func cacheHitRate(g *gwProcess) float64 {
	var st gateway.StatsResponse
	if err := (&gwCaller{url: g.url, key: g.key, hc: http.DefaultClient}).call(context.Background(), "GET", "/v1/stats", nil, &st); err != nil || st.QueryCache == nil {
		return -1
	}
	return 100 * st.QueryCache.HitRate
}
