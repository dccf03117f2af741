package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// Environment variables the gateway reads its secrets from; the Deployment fills them
// from Secrets by reference, so no secret value is an argument or in the Pod spec.
const (
	// EnvPostgresURI is the store's own (agent) role: the connection Secret's "uri".
	EnvPostgresURI = "MEMORY_PG_URI"
	// EnvEmbedderAPIKey is the bearer token of an OpenAI-compatible embedder.
	EnvEmbedderAPIKey = "MEMORY_EMBEDDER_API_KEY"
)

// Defaults of the gateway's settings.
const (
	DefaultListen        = ":8080"
	DefaultMetricsListen = ":9090"
	DefaultRateLimit     = 50  // requests per second per key
	DefaultRateBurst     = 100 // requests
	DefaultMaxBodyBytes  = 8 << 20
	// MaxBatch is the largest batch one remember call accepts.
	MaxBatch = 1000
	// DefaultRequestTimeout is the time every request gets, on every door.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultEmbedderTimeout bounds one embedder call (a search query, or up to 32
	// texts of a write).
	DefaultEmbedderTimeout = embed.DefaultCallTimeout
	// DefaultEmbedderConcurrency is how many embedder calls one key may have in flight.
	DefaultEmbedderConcurrency = embed.DefaultPerCaller
	// DefaultMaxInputBytes and DefaultInputOverflow are the embedder input limit of a
	// store that declares none (see embed.Limit).
	DefaultMaxInputBytes = embed.DefaultMaxInputBytes
	DefaultInputOverflow = embed.Truncate
)

// NamespaceRule maps LangGraph namespaces to scopes (see langgraphns.Rule).
type NamespaceRule = langgraphns.Rule

// DefaultNamespaceRules are the rules used when none are declared.
func DefaultNamespaceRules() []NamespaceRule { return langgraphns.DefaultRules() }

// Config is everything `memory-operator gateway` needs besides its secrets.
type Config struct {
	// Store, for logs and metrics.
	StoreNamespace, StoreName string
	// Listen is the API's address; MetricsListen serves /metrics (empty: off).
	Listen, MetricsListen string
	// GRPCListen serves the gRPC API, memory.v1.MemoryService, with the same TLS as
	// the HTTP API (empty: off).
	GRPCListen string
	// TLSCertFile and TLSKeyFile, when set, serve the API over TLS; both files are
	// re-read when they change (a rotated certificate needs no restart).
	TLSCertFile, TLSKeyFile string

	// Schema is the store's PostgreSQL schema.
	Schema string
	// Vectors is where the store's vectors are (cfg.VectorEngine, cfg.MilvusAddress…).
	engine.Vectors
	Dimension int
	Metric    string
	// Embedder is Hashing or OpenAI (at EmbedderEndpoint, model EmbeddingModel,
	// token in EnvEmbedderAPIKey).
	Embedder, EmbedderEndpoint, EmbeddingModel string
	// MaxInputBytes and InputOverflow limit the text of one input sent to the
	// embedder (a memory, a query): over it, refuse with 413 text_too_long or embed a
	// truncation (see embed.Limit). The store's spec.embedder sets them.
	MaxInputBytes int
	InputOverflow embed.Overflow
	// EmbedderRoles is how queries and passages reach the model (see embed.Roles).
	// The operator passes the store's resolved convention; a standalone gateway may
	// ask for Auto, resolved at startup (embed.DetectRoles). The zero Roles is None.
	EmbedderRoles embed.Roles
	// EmbedderTimeout bounds one embedder call; EmbedderConcurrency is how many calls
	// one key (and the background indexer) may have in flight at once.
	EmbedderTimeout     time.Duration
	EmbedderConcurrency int

	// KeysFile is the API keys file (see KeyFile), re-read when it changes.
	KeysFile string
	// DedupThreshold: a write at least this similar to a memory of the same scope and
	// type reinforces it instead of adding a copy; 0 turns near-duplicate detection off.
	DedupThreshold float64
	// DedupAuto calibrates DedupThreshold at startup (embed.Calibrate with the
	// configured embedder) instead; the flag's default for a standalone gateway. The
	// operator passes the store's calibrated threshold instead.
	DedupAuto bool
	// MinSimilarity, when set, is the least similarity a search result may have
	// (seed 003, 7.1 uses 0.7 for its model); a request's min_similarity overrides it.
	MinSimilarity *float64
	// RateLimit (requests per second) and RateBurst apply per API key.
	RateLimit float64
	RateBurst int
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// RequestTimeout is the time every request gets, on every door (/v1, /store, /mcp).
	RequestTimeout time.Duration
	// NamespaceRules map LangGraph namespaces to scopes (empty: DefaultNamespaceRules).
	NamespaceRules []NamespaceRule
	// ShutdownGrace is how long in-flight requests get on SIGTERM.
	ShutdownGrace time.Duration
	// ShortTerm is the short-term tier: sessions (sessions.go).
	ShortTerm
	// QueryCache is the search results cache (cache.go).
	QueryCache
}

// Args renders the configuration as the command's arguments (after the subcommand).
// ParseArgs(c.Args()) gives c back, with the defaults in place of the limits left
// zero (see WithDefaults).
func (c Config) Args() []string {
	args := []string{
		"--store-namespace=" + c.StoreNamespace,
		"--store-name=" + c.StoreName,
		"--listen=" + c.Listen,
		"--metrics-listen=" + c.MetricsListen,
		"--schema=" + c.Schema,
		"--dimension=" + strconv.Itoa(c.Dimension),
		"--metric=" + c.Metric,
		"--embedder=" + c.Embedder,
		"--keys-file=" + c.KeysFile,
		"--dedup-threshold=" + c.dedupArg(),
		"--rate-limit=" + strconv.FormatFloat(c.RateLimit, 'g', -1, 64),
		"--rate-burst=" + strconv.Itoa(c.RateBurst),
		"--max-body-bytes=" + strconv.FormatInt(c.MaxBodyBytes, 10),
		"--shutdown-grace=" + c.ShutdownGrace.String(),
	}
	opt := func(name, v string) {
		if v != "" && v != "0" && v != "0s" {
			args = append(args, name+"="+v)
		}
	}
	if c.MinSimilarity != nil {
		args = append(args, "--min-similarity="+strconv.FormatFloat(*c.MinSimilarity, 'g', -1, 64))
	}
	// Unset (zero) limits are left out: the gateway takes its defaults.
	opt("--request-timeout", c.RequestTimeout.String())
	opt("--embedder-max-input-bytes", strconv.Itoa(c.MaxInputBytes))
	opt("--embedder-overflow", string(c.InputOverflow))
	// The roles are always explicit: the flag's default is auto.
	if c.EmbedderRoles.Normalized() == (embed.Roles{}) {
		args = append(args, "--embedder-roles=none")
	} else {
		args = append(args, embed.RolesArgs(c.EmbedderRoles)...)
	}
	opt("--embedder-timeout", c.EmbedderTimeout.String())
	opt("--embedder-concurrency-per-key", strconv.Itoa(c.EmbedderConcurrency))
	args = append(args, c.Vectors.Args()...)
	args = append(args, c.ShortTerm.Args()...)
	args = append(args, c.QueryCache.Args()...)
	opt("--embedder-endpoint", c.EmbedderEndpoint)
	opt("--embedding-model", c.EmbeddingModel)
	opt("--grpc-listen", c.GRPCListen)
	opt("--tls-cert-file", c.TLSCertFile)
	opt("--tls-key-file", c.TLSKeyFile)
	if len(c.NamespaceRules) > 0 {
		b, _ := json.Marshal(c.NamespaceRules) // plain strings: cannot fail
		args = append(args, "--namespace-rules="+string(b))
	}
	return args
}

// dedupArg is --dedup-threshold's value: "auto" or the number.
func (c Config) dedupArg() string {
	if c.DedupAuto {
		return dedupAuto
	}
	return strconv.FormatFloat(c.DedupThreshold, 'g', -1, 64)
}

const dedupAuto = "auto"

// ParseArgs parses the command's arguments and checks them.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	var c Config
	var rules, overflow, dedup string
	var roles embed.RolesFlags
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.StoreNamespace, "store-namespace", "", "namespace of the MemoryStore")
	fs.StringVar(&c.StoreName, "store-name", "", "name of the MemoryStore")
	fs.StringVar(&c.Listen, "listen", DefaultListen, "address of the API")
	fs.StringVar(&c.MetricsListen, "metrics-listen", DefaultMetricsListen, "address of /metrics (empty: off)")
	fs.StringVar(&c.GRPCListen, "grpc-listen", "", "address of the gRPC API, memory.v1.MemoryService (empty: off)")
	fs.StringVar(&c.TLSCertFile, "tls-cert-file", "", "serve TLS with this certificate (PEM), on the HTTP and gRPC APIs")
	fs.StringVar(&c.TLSKeyFile, "tls-key-file", "", "private key of --tls-cert-file (PEM)")
	fs.StringVar(&c.Schema, "schema", "", "PostgreSQL schema of the store")
	c.Vectors.Register(fs)
	c.ShortTerm.Register(fs)
	c.QueryCache.Register(fs)
	fs.IntVar(&c.Dimension, "dimension", 0, "vector dimension")
	fs.StringVar(&c.Metric, "metric", "COSINE", "vector metric")
	fs.StringVar(&c.Embedder, "embedder", "Hashing", "Hashing or OpenAI")
	fs.StringVar(&c.EmbedderEndpoint, "embedder-endpoint", "", "base URL of an OpenAI-compatible embedder")
	fs.StringVar(&c.EmbeddingModel, "embedding-model", "", "embedding model name")
	fs.StringVar(&c.KeysFile, "keys-file", "", "API keys file (JSON), re-read when it changes")
	fs.StringVar(&dedup, "dedup-threshold", dedupAuto, "near-duplicate similarity from 0 to 1 (0: off), or auto: calibrated at startup with the embedder")
	fs.Func("min-similarity", "least similarity of a search result (default: none)", func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%q is not a finite number", v)
		}
		c.MinSimilarity = &f
		return nil
	})
	fs.Float64Var(&c.RateLimit, "rate-limit", DefaultRateLimit, "requests per second per key")
	fs.IntVar(&c.RateBurst, "rate-burst", DefaultRateBurst, "burst per key")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", DefaultMaxBodyBytes, "largest request body")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", DefaultRequestTimeout, "time every request gets")
	fs.IntVar(&c.MaxInputBytes, "embedder-max-input-bytes", DefaultMaxInputBytes, "largest text of one input sent to the embedder, in bytes")
	fs.StringVar(&overflow, "embedder-overflow", string(DefaultInputOverflow), "what happens to a longer text: Truncate (embed its first bytes) or Refuse (413 text_too_long)")
	fs.DurationVar(&c.EmbedderTimeout, "embedder-timeout", DefaultEmbedderTimeout, "time one embedder call gets")
	fs.IntVar(&c.EmbedderConcurrency, "embedder-concurrency-per-key", DefaultEmbedderConcurrency, "embedder calls one key may have in flight")
	fs.StringVar(&rules, "namespace-rules", "", "LangGraph namespace rules (JSON list of {namespace, scope})")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 20*time.Second, "time in-flight requests get on SIGTERM")
	roles.Register(fs, embed.ConventionAuto)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	c.InputOverflow = embed.Overflow(overflow)
	var err error
	if c.EmbedderRoles, err = roles.Roles(); err != nil {
		return c, err
	}
	if dedup == dedupAuto {
		c.DedupAuto = true
	} else if c.DedupThreshold, err = strconv.ParseFloat(dedup, 64); err != nil || math.IsNaN(c.DedupThreshold) {
		return c, fmt.Errorf("--dedup-threshold %q: want auto or a number from 0 to 1", dedup)
	}
	if rules != "" {
		dec := json.NewDecoder(strings.NewReader(rules))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c.NamespaceRules); err != nil {
			return c, fmt.Errorf("--namespace-rules: %w", err)
		}
	}
	return c, c.Validate()
}

// WithDefaults is c with the defaults in place of the limits left zero: the request
// and embedder timeouts, the embedder concurrency and input limit, the session TTL,
// turn limit and promotion.
func (c Config) WithDefaults() Config {
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	c.EmbedderTimeout = cmp.Or(c.EmbedderTimeout, DefaultEmbedderTimeout)
	c.EmbedderConcurrency = cmp.Or(c.EmbedderConcurrency, DefaultEmbedderConcurrency)
	c.MaxInputBytes = cmp.Or(c.MaxInputBytes, DefaultMaxInputBytes)
	c.InputOverflow = cmp.Or(c.InputOverflow, DefaultInputOverflow)
	c.SessionTTL = cmp.Or(c.SessionTTL, shortterm.DefaultTTL)
	c.SessionMaxTurns = cmp.Or(c.SessionMaxTurns, shortterm.DefaultMaxTurns)
	c.Promote = cmp.Or(c.Promote, PromoteOnEnd)
	return c
}

// InputLimit is the store's limit on the text of one embedder input.
func (c Config) InputLimit() embed.Limit {
	return embed.Limit{MaxInputBytes: c.MaxInputBytes, Overflow: c.InputOverflow}
}

// validateBackends checks the vector engine and embedder settings.
func (c Config) validateBackends() error {
	if err := c.Vectors.Validate(); err != nil {
		return err
	}
	switch {
	case c.Embedder != "Hashing" && c.Embedder != "OpenAI":
		return fmt.Errorf("--embedder %q: want Hashing or OpenAI", c.Embedder)
	case c.Embedder == "OpenAI" && (c.EmbedderEndpoint == "" || c.EmbeddingModel == ""):
		return errors.New("the OpenAI embedder needs --embedder-endpoint and --embedding-model")
	}
	return nil
}

// validateRolesAndDedup checks the roles convention (Auto is resolved at startup),
// that the threshold is either auto or a number, and the short-term settings.
func (c Config) validateRolesAndDedup() error {
	if c.DedupAuto && c.DedupThreshold != 0 {
		return errors.New("--dedup-threshold is either auto or a number")
	}
	if c.EmbedderRoles.Convention != embed.ConventionAuto {
		if err := c.EmbedderRoles.Validate(); err != nil {
			return fmt.Errorf("--embedder-roles: %w", err)
		}
	}
	if err := c.ShortTerm.Validate(); err != nil {
		return err
	}
	return c.QueryCache.Validate()
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var missing []string
	for name, v := range map[string]string{"schema": c.Schema, "keys-file": c.KeysFile, "listen": c.Listen} {
		if v == "" {
			missing = append(missing, "--"+name)
		}
	}
	if c.Dimension <= 0 {
		missing = append(missing, "--dimension")
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("missing required flags: %s", strings.Join(missing, ", "))
	}
	if err := c.validateBackends(); err != nil {
		return err
	}
	switch {
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("--tls-cert-file and --tls-key-file go together")
	case c.DedupThreshold < 0 || c.DedupThreshold > 1:
		return fmt.Errorf("--dedup-threshold %v is outside [0, 1]", c.DedupThreshold)
	case c.RateLimit <= 0 || c.RateBurst < 1:
		return errors.New("--rate-limit must be > 0 and --rate-burst >= 1")
	case c.MaxBodyBytes < 1024:
		return errors.New("--max-body-bytes must be at least 1024")
	case c.RequestTimeout < 0 || c.EmbedderTimeout < 0:
		return errors.New("--request-timeout and --embedder-timeout must be positive")
	case c.EmbedderConcurrency < 0 || c.MaxInputBytes < 0:
		return errors.New("--embedder-concurrency-per-key and --embedder-max-input-bytes must be at least 1")
	}
	if err := c.validateRolesAndDedup(); err != nil {
		return err
	}
	if c.InputOverflow != "" {
		if _, err := embed.ParseOverflow(string(c.InputOverflow)); err != nil {
			return fmt.Errorf("--embedder-overflow: %w", err)
		}
	}
	if _, err := langgraphns.New(c.NamespaceRules); err != nil {
		return fmt.Errorf("--namespace-rules: %w", err)
	}
	return nil
}
