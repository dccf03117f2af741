package worker

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// Reembed defaults.
const (
	// DefaultReembedBatch is how many memories a page of the backfill reads, embeds
	// and writes at a time, and the most texts one embedding call carries.
	DefaultReembedBatch = 256
	// DefaultReembedPoll is how often a following worker looks for new changes.
	DefaultReembedPoll = 2 * time.Second
	// DefaultSwitchTolerance is how much lower the new model's self-recall@10 on the
	// sample may be than the serving model's before the check fails.
	DefaultSwitchTolerance = 0.05
)

// EmbedderSettings is one embedding model and the index shape of its vectors, as a
// worker that embeds for an index generation takes them.
type EmbedderSettings struct {
	// Type is Hashing or OpenAI; Endpoint, the OpenAI server's base URL.
	Type, Endpoint string
	Model          string
	Dimension      int
	Metric         string
	// Roles is the resolved roles convention (a Job never probes: the operator did).
	Roles embed.Roles
	// MaxInputBytes and Overflow are the input limit (0: none).
	MaxInputBytes int
	Overflow      string
}

// register adds the settings' flags to fs, after prefix; the returned function
// completes them once fs has parsed.
func (e *EmbedderSettings) register(fs *flag.FlagSet, prefix string) func() error {
	fs.StringVar(&e.Type, prefix+"embedder", "Hashing", "Hashing or OpenAI")
	fs.StringVar(&e.Endpoint, prefix+"embedder-endpoint", "", "base URL of an OpenAI-compatible embedder")
	fs.StringVar(&e.Model, prefix+"embedding-model", "", "the embedding model")
	fs.IntVar(&e.Dimension, prefix+"dimension", 0, "vector dimension")
	fs.StringVar(&e.Metric, prefix+"metric", "COSINE", "vector metric")
	fs.IntVar(&e.MaxInputBytes, prefix+"embedder-max-input-bytes", 0, "limit on the text sent to the embedder, in bytes (0: none)")
	fs.StringVar(&e.Overflow, prefix+"embedder-overflow", "", "over the limit: Truncate or Refuse")
	var roles embed.RolesFlags
	roles.RegisterPrefixed(fs, prefix, "")
	return func() error {
		var err error
		e.Roles, err = jobRoles(&roles)
		return err
	}
}

func (e EmbedderSettings) args(prefix string) []string {
	args := []string{
		"--" + prefix + "embedder=" + e.Type,
		"--" + prefix + "embedding-model=" + e.Model,
		fmt.Sprintf("--%sdimension=%d", prefix, e.Dimension),
		"--" + prefix + "metric=" + e.Metric,
	}
	if e.Endpoint != "" {
		args = append(args, "--"+prefix+"embedder-endpoint="+e.Endpoint)
	}
	if e.MaxInputBytes > 0 {
		args = append(args, fmt.Sprintf("--%sembedder-max-input-bytes=%d", prefix, e.MaxInputBytes))
	}
	if e.Overflow != "" {
		args = append(args, "--"+prefix+"embedder-overflow="+e.Overflow)
	}
	return append(args, embed.RolesArgsPrefixed(prefix, e.Roles)...)
}

func (e EmbedderSettings) check(prefix string) error {
	switch e.Type {
	case "Hashing":
	case "OpenAI":
		if e.Endpoint == "" || e.Model == "" {
			return fmt.Errorf("the OpenAI embedder needs --%sembedder-endpoint and --%sembedding-model", prefix, prefix)
		}
	default:
		return fmt.Errorf("--%sembedder %q: want Hashing or OpenAI", prefix, e.Type)
	}
	if err := e.spec().Validate(); err != nil {
		return fmt.Errorf("--%sdimension/--%smetric: %w", prefix, prefix, err)
	}
	return e.limit().Validate()
}

func (e EmbedderSettings) spec() vector.Spec {
	return vector.Spec{Dimension: e.Dimension, Metric: vector.Metric(strings.ToUpper(e.Metric))}
}

func (e EmbedderSettings) limit() embed.Limit {
	return embed.Limit{MaxInputBytes: e.MaxInputBytes, Overflow: embed.Overflow(e.Overflow)}
}

// embedder builds the embedder; apiKey is the OpenAI server's bearer token.
func (e EmbedderSettings) embedder(apiKey string) (embed.Embedder, error) {
	if e.Type == "OpenAI" {
		return embed.NewOpenAI(embed.Config{BaseURL: e.Endpoint, Model: e.Model, Dimension: e.Dimension, APIKey: apiKey, Roles: e.Roles})
	}
	return embed.NewHashing(e.Dimension), nil
}

// modelName is the model as a generation records it (the hashing embedder names
// itself).
func (e EmbedderSettings) modelName() string {
	if e.Type == "Hashing" {
		return embed.NewHashing(max(e.Dimension, vector.MinDimension)).Model()
	}
	return e.Model
}

// ReembedConfig is everything `memory-operator reembed` needs besides its secrets:
// the store, the index generation to fill (pgstore's generations.go) with where its
// vectors go and the model that makes them, and optionally the serving generation to
// compare the new one with.
type ReembedConfig struct {
	StoreNamespace, StoreName, Tenant string
	Schema                            string
	Generation                        int
	// Vectors locates the generation's index (its table or collection).
	engine.Vectors
	Embedder EmbedderSettings

	// Rate is the most memories embedded a second (0: no limit); Batch the memories
	// per page and per embedding call.
	Rate  float64
	Batch int
	// Follow keeps the worker catching up on changes after the backfill until the
	// generation serves (the operator cut over) or is dropped.
	Follow bool
	Poll   time.Duration
	// IndexBuildMemory is the memory PostgreSQL may use to build a PGVector
	// generation's HNSW index once the backfill filled its table ("": the server's
	// maintenance_work_mem).
	IndexBuildMemory string

	// Serving, when set, is the serving generation: the sample check compares the
	// new model's self-recall with it (SampleScopes scopes, SampleQueries memories
	// each; Tolerance below it is accepted).
	Serving                     *ServingIndex
	SampleScopes, SampleQueries int
	Tolerance                   float64
}

// ServingIndex is the serving generation: its index and its model.
type ServingIndex struct {
	engine.Vectors
	Embedder EmbedderSettings
}

// servingPrefix starts the serving generation's flags.
const servingPrefix = "serving-"

// Args renders the configuration as the worker's arguments; ParseReembedArgs gives it
// back.
func (c ReembedConfig) Args() []string {
	args := []string{
		"--store-namespace=" + c.StoreNamespace,
		"--store-name=" + c.StoreName,
		"--tenant=" + c.Tenant,
		"--schema=" + c.Schema,
		fmt.Sprintf("--generation=%d", c.Generation),
	}
	args = append(args, c.Vectors.Args()...)
	args = append(args, c.Embedder.args("")...)
	if c.Rate > 0 {
		args = append(args, fmt.Sprintf("--rate=%g", c.Rate))
	}
	if c.Batch > 0 {
		args = append(args, fmt.Sprintf("--batch=%d", c.Batch))
	}
	if c.Follow {
		args = append(args, "--follow")
	}
	if c.Poll > 0 {
		args = append(args, "--poll="+c.Poll.String())
	}
	if c.IndexBuildMemory != "" {
		args = append(args, "--index-build-memory="+c.IndexBuildMemory)
	}
	if c.Serving != nil {
		args = append(args, "--compare-serving")
		args = append(args, c.Serving.ArgsPrefixed(servingPrefix)...)
		args = append(args, c.Serving.Embedder.args(servingPrefix)...)
	}
	if c.SampleScopes > 0 {
		args = append(args, fmt.Sprintf("--sample-scopes=%d", c.SampleScopes))
	}
	if c.SampleQueries > 0 {
		args = append(args, fmt.Sprintf("--sample-queries=%d", c.SampleQueries))
	}
	if c.Tolerance > 0 {
		args = append(args, fmt.Sprintf("--tolerance=%g", c.Tolerance))
	}
	return args
}

// ParseReembedArgs parses and checks the reembed worker's arguments.
func ParseReembedArgs(args []string, stderr io.Writer) (ReembedConfig, error) {
	var c ReembedConfig
	var serving ServingIndex
	var compare bool
	fs := flag.NewFlagSet("reembed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.StoreNamespace, "store-namespace", "", "namespace of the MemoryStore")
	fs.StringVar(&c.StoreName, "store-name", "", "name of the MemoryStore")
	fs.StringVar(&c.Tenant, "tenant", "", "tenant of the store")
	fs.StringVar(&c.Schema, "schema", "", "PostgreSQL schema of the store")
	fs.IntVar(&c.Generation, "generation", 0, "the index generation to fill")
	c.Register(fs)
	finish := c.Embedder.register(fs, "")
	fs.Float64Var(&c.Rate, "rate", 0, "most memories embedded a second (0: no limit)")
	fs.IntVar(&c.Batch, "batch", DefaultReembedBatch, "memories per page and per embedding call")
	fs.BoolVar(&c.Follow, "follow", false, "after the backfill, keep catching up on changes until the generation serves")
	fs.DurationVar(&c.Poll, "poll", DefaultReembedPoll, "how often a following worker looks for changes")
	fs.StringVar(&c.IndexBuildMemory, "index-build-memory", "", "PostgreSQL memory for building the HNSW index after the backfill (PGVector engine), e.g. 1GB")
	fs.BoolVar(&compare, "compare-serving", false, "compare the new model's self-recall on a sample with the serving generation's")
	serving.RegisterPrefixed(fs, servingPrefix)
	finishServing := serving.Embedder.register(fs, servingPrefix)
	fs.IntVar(&c.SampleScopes, "sample-scopes", DefaultDrillScopes, "scopes of the self-recall sample")
	fs.IntVar(&c.SampleQueries, "sample-queries", DefaultDrillQueries, "memories of each sampled scope that search for themselves")
	fs.Float64Var(&c.Tolerance, "tolerance", DefaultSwitchTolerance, "how much lower than the serving model's the new model's self-recall may be")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := errors.Join(finish(), finishServing()); err != nil {
		return c, err
	}
	if compare {
		c.Serving = &serving
	}
	return c, c.check()
}

func (c ReembedConfig) check() error {
	switch {
	case c.Schema == "":
		return errors.New("--schema is required")
	case c.Generation < 1:
		return errors.New("--generation must be 1 or more")
	case c.Rate < 0 || c.Batch < 1 || c.Poll <= 0:
		return errors.New("--rate must not be negative, --batch and --poll must be positive")
	case c.Tolerance < 0 || c.Tolerance > 1 || c.SampleScopes < 0 || c.SampleQueries < 0:
		return errors.New("--tolerance must be within [0, 1], the sample sizes not negative")
	}
	if err := pgstore.ValidateSchema(c.Schema); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if err := c.Embedder.check(""); err != nil {
		return err
	}
	if c.Serving != nil {
		if err := c.Serving.Validate(); err != nil {
			return fmt.Errorf("the serving generation: %w", err)
		}
		if err := c.Serving.Embedder.check(servingPrefix); err != nil {
			return err
		}
	}
	return nil
}

// ReembedSecrets is what the reembed worker reads from its environment: the store's
// worker login, its Milvus user, and the embedders' bearer tokens.
type ReembedSecrets struct {
	PostgresURI           string
	Milvus                engine.Login
	EmbedderAPIKey        string
	ServingEmbedderAPIKey string
}

// EnvServingEmbedderAPIKey is the serving embedder's bearer token, when it is
// another server's than the new one (EnvEmbedderAPIKey).
const EnvServingEmbedderAPIKey = "MEMORY_SERVING_EMBEDDER_API_KEY"

// ReembedSecretsFromEnv reads the reembed worker's secrets from the environment.
func ReembedSecretsFromEnv() ReembedSecrets {
	return ReembedSecrets{
		PostgresURI: os.Getenv(EnvPostgresURI), Milvus: engine.LoginFromEnv(),
		EmbedderAPIKey: os.Getenv(EnvEmbedderAPIKey), ServingEmbedderAPIKey: os.Getenv(EnvServingEmbedderAPIKey),
	}
}
