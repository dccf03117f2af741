// Package worker holds what the operator's Jobs run: the contract between the Job a
// controller builds (arguments and environment) and the worker subcommand that parses
// them, and the workers themselves. Keeping both sides here means they cannot drift.
package worker

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// Environment variables a worker reads its secrets from; the Job fills them from
// Secrets by reference, so no secret value is ever an argument or in the Job spec.
const (
	EnvPostgresURI   = "MEMORY_PG_URI"        // the store's connection Secret, key "uri"
	EnvS3AccessKey   = "MEMORY_S3_ACCESS_KEY" // destination credentials
	EnvS3SecretKey   = "MEMORY_S3_SECRET_KEY"
	EnvEncryptionKey = "MEMORY_SNAPSHOT_KEY" // 32-byte key (raw, hex or base64)
)

// Destination is an S3-compatible location.
type Destination struct {
	Endpoint string
	Region   string
	Insecure bool
	Bucket   string
	// Prefix of the package, ending in '/'.
	Prefix string
}

// SnapshotConfig is everything `memory-operator snapshot` needs besides its secrets.
type SnapshotConfig struct {
	// Source store, for the manifest.
	StoreNamespace, StoreName, Tenant string
	SnapshotName                      string
	// Schema is the store's PostgreSQL schema.
	Schema string
	// Vectors is where the store's vectors are (cfg.VectorEngine, cfg.MilvusAddress…).
	engine.Vectors
	EmbeddingModel string
	Dimension      int
	Metric         string
	// EmbedderRoles is the store's resolved roles convention (status.embedder.roles),
	// recorded with the vectors in the package.
	EmbedderRoles embed.Roles

	Destination Destination

	// Selection.
	Scopes            []string // exact, or prefix when ending in '*'
	Types             []string
	ActiveWithin      time.Duration
	IncludeEmbeddings bool

	CompressionLevel int
	Unencrypted      bool
	// ShardTargetBytes is the uncompressed size after which a shard is cut at the next
	// scope boundary (0: the package writer's default).
	ShardTargetBytes int64
	// IncludeSessions carries the store's live short-term sessions in the package,
	// read from where Sessions says it keeps them.
	IncludeSessions bool
	// Sessions locates the store's short-term tier.
	Sessions SessionsConfig
}

// Args renders the configuration as the worker's command-line arguments (after the
// subcommand). ParseSnapshotArgs(c.Args()) gives c back.
func (c SnapshotConfig) Args() []string {
	args := []string{
		"--store-namespace=" + c.StoreNamespace,
		"--store-name=" + c.StoreName,
		"--tenant=" + c.Tenant,
		"--snapshot-name=" + c.SnapshotName,
		"--schema=" + c.Schema,
		"--embedding-model=" + c.EmbeddingModel,
		fmt.Sprintf("--dimension=%d", c.Dimension),
		"--metric=" + c.Metric,
		"--s3-endpoint=" + c.Destination.Endpoint,
		"--bucket=" + c.Destination.Bucket,
		"--prefix=" + c.Destination.Prefix,
		fmt.Sprintf("--compression-level=%d", c.CompressionLevel),
	}
	args = append(args, c.Vectors.Args()...)
	if c.Destination.Region != "" {
		args = append(args, "--s3-region="+c.Destination.Region)
	}
	if c.Destination.Insecure {
		args = append(args, "--s3-insecure")
	}
	if len(c.Scopes) > 0 {
		args = append(args, "--scopes="+strings.Join(c.Scopes, ","))
	}
	if len(c.Types) > 0 {
		args = append(args, "--types="+strings.Join(c.Types, ","))
	}
	if c.ActiveWithin > 0 {
		args = append(args, "--active-within="+c.ActiveWithin.String())
	}
	if c.IncludeEmbeddings {
		args = append(args, "--include-embeddings")
	}
	if c.Unencrypted {
		args = append(args, "--unencrypted")
	}
	if c.ShardTargetBytes > 0 {
		args = append(args, fmt.Sprintf("--shard-bytes=%d", c.ShardTargetBytes))
	}
	if c.IncludeSessions {
		args = append(args, "--include-sessions")
		args = append(args, c.Sessions.Args()...)
	}
	return append(args, embed.RolesArgs(c.EmbedderRoles)...)
}

// ParseSnapshotArgs parses the worker's arguments and checks them.
func ParseSnapshotArgs(args []string, stderr io.Writer) (SnapshotConfig, error) {
	var c SnapshotConfig
	var scopes, types string
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.StoreNamespace, "store-namespace", "", "namespace of the MemoryStore")
	fs.StringVar(&c.StoreName, "store-name", "", "name of the MemoryStore")
	fs.StringVar(&c.Tenant, "tenant", "", "tenant of the store")
	fs.StringVar(&c.SnapshotName, "snapshot-name", "", "name of the MemorySnapshot")
	fs.StringVar(&c.Schema, "schema", "", "PostgreSQL schema of the store")
	c.Register(fs)
	fs.StringVar(&c.EmbeddingModel, "embedding-model", "", "model the store's vectors were made with")
	fs.IntVar(&c.Dimension, "dimension", 0, "vector dimension")
	fs.StringVar(&c.Metric, "metric", "COSINE", "vector metric")
	fs.StringVar(&c.Destination.Endpoint, "s3-endpoint", "", "S3 endpoint host:port")
	fs.StringVar(&c.Destination.Region, "s3-region", "", "S3 region")
	fs.BoolVar(&c.Destination.Insecure, "s3-insecure", false, "use plain HTTP")
	fs.StringVar(&c.Destination.Bucket, "bucket", "", "bucket")
	fs.StringVar(&c.Destination.Prefix, "prefix", "", "package prefix, ending in '/'")
	fs.StringVar(&scopes, "scopes", "", "comma-separated scopes; 'user:*' selects a prefix")
	fs.StringVar(&types, "types", "", "comma-separated memory types")
	fs.DurationVar(&c.ActiveWithin, "active-within", 0, "leave out scopes not updated within this window")
	fs.BoolVar(&c.IncludeEmbeddings, "include-embeddings", false, "export vectors too")
	fs.IntVar(&c.CompressionLevel, "compression-level", 1, "zstd level 1..19")
	fs.BoolVar(&c.Unencrypted, "unencrypted", false, "write a plaintext package")
	fs.Int64Var(&c.ShardTargetBytes, "shard-bytes", 0, "cut shards after this many uncompressed bytes (0: default)")
	fs.BoolVar(&c.IncludeSessions, "include-sessions", false, "carry the store's live short-term sessions in the package")
	c.Sessions.Register(fs)
	var roles embed.RolesFlags
	roles.Register(fs, "")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.EmbedderRoles, err = jobRoles(&roles); err != nil {
		return c, err
	}
	c.Scopes = splitList(scopes)
	c.Types = splitList(types)

	var missing []string
	for name, v := range map[string]string{"schema": c.Schema, "s3-endpoint": c.Destination.Endpoint,
		"bucket": c.Destination.Bucket, "prefix": c.Destination.Prefix} {
		if v == "" {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("missing required flags: %s", strings.Join(slices.Sorted(slices.Values(missing)), ", "))
	}
	if !strings.HasSuffix(c.Destination.Prefix, "/") {
		return c, errors.New("--prefix must end in '/'")
	}
	// Without vectors, a snapshot never reads the index: it need not say where it is.
	check := c.ValidateEngine
	if c.IncludeEmbeddings {
		check = c.Validate
	}
	if err := check(); err != nil {
		return c, err
	}
	if c.CompressionLevel < 1 || c.CompressionLevel > 19 {
		return c, fmt.Errorf("--compression-level %d is outside 1..19", c.CompressionLevel)
	}
	if err := c.Sessions.validate(); err != nil {
		return c, err
	}
	return c, nil
}

// jobRoles is the roles convention a Job was given: explicit (the operator resolves
// Auto when it provisions the store), so that the Job embeds, and records, exactly
// what the store's gateway does. None when not given.
func jobRoles(f *embed.RolesFlags) (embed.Roles, error) {
	r, err := f.Roles()
	if err != nil {
		return r, err
	}
	if r.Convention == embed.ConventionAuto {
		return embed.Roles{}, errors.New("--embedder-roles=auto: a Job takes the store's resolved convention")
	}
	return r, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
