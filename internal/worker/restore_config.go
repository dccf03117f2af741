package worker

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/importer"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// Environment variables of the restore worker besides EnvPostgresURI (which holds the
// TARGET store's connection URI: its own role, allowed to write memories, vectors and
// tombstones). The Job fills them from Secrets by reference.
const (
	// EnvSourceS3AccessKey and EnvSourceS3SecretKey reach the package's object storage;
	// the worker also writes the restore's detail object with them.
	EnvSourceS3AccessKey = "MEMORY_SOURCE_S3_ACCESS_KEY"
	EnvSourceS3SecretKey = "MEMORY_SOURCE_S3_SECRET_KEY"
	// EnvSourceKey is the package's 32-byte key (raw, hex or base64); unset for an
	// unencrypted package.
	EnvSourceKey = "MEMORY_SOURCE_KEY"
	// EnvEmbedderAPIKey is the bearer token of the target's OpenAI-compatible embedder,
	// when it has one.
	EnvEmbedderAPIKey = "MEMORY_EMBEDDER_API_KEY"
)

// MappingDir is where a restore Job mounts a scope map kept in a ConfigMap or Secret;
// RestoreConfig.MapFile is a file in it.
const MappingDir = "/etc/memory-operator/mapping"

// Scope map formats (RestoreConfig.MapFormat).
const (
	MapFormatCSV        = "csv"
	MapFormatJSONLines  = "jsonl"
	restoreDetailSuffix = "detail.jsonl.zst"
)

// The restore policies, spelled as the MemoryRestore API spells them.
var (
	unmappedPolicies   = []string{"Keep", "Skip", "Fail"}
	conflictPolicies   = []string{"KeepNewer", "Overwrite", "Skip"}
	embeddingsPolicies = []string{"Reuse", "Reembed", "Defer"}
	embedderTypes      = []string{"Hashing", "OpenAI"}
	mapFormats         = []string{MapFormatCSV, MapFormatJSONLines}
)

// ScopeRule renames From to To: a whole scope (exact rules) or its start (prefix rules).
type ScopeRule struct {
	From, To string
}

// RestoreConfig is everything `memory-operator restore` needs besides its secrets.
//
// Mapping order: an exact rule (ScopeMap, or an entry of the large map in MapFile or
// MapObject), else the longest matching prefix rule (PrefixMap); a scope none of them
// maps follows Unmapped. Denylist is matched against the package's scopes, before
// mapping.
type RestoreConfig struct {
	// RestoreNamespace and RestoreName name the MemoryRestore (for the audit log), and
	// RestoreUID tells it apart from another of the same name: the target records it
	// with the package once the restore completed.
	RestoreNamespace, RestoreName, RestoreUID string

	// Source is the package; its Prefix (the folder holding manifest.json) ends in '/'.
	Source Destination
	// Unencrypted reads a plaintext package; otherwise the key is in EnvSourceKey.
	Unencrypted bool
	// ExpectManifestSHA256, when set, is the hex SHA-256 the stored manifest must have
	// (the MemorySnapshot recorded it): a package replaced since is refused.
	ExpectManifestSHA256 string

	// Target store, as its status describes it.
	TargetNamespace, TargetName, Tenant string
	// Schema is the target's PostgreSQL schema.
	Schema string
	// Vectors is where the target's vectors go (cfg.VectorEngine, cfg.MilvusAddress…).
	engine.Vectors
	// EmbeddingModel and Dimension are the target's: package vectors are reused only
	// when they match.
	EmbeddingModel string
	Dimension      int
	Metric         string
	// Embedder is Hashing or OpenAI (at EmbedderEndpoint, model EmbeddingModel, token in
	// EnvEmbedderAPIKey): what re-embedding uses.
	Embedder, EmbedderEndpoint string
	// EmbedderMaxInputBytes and EmbedderOverflow are the target store's limit on the
	// text sent to its embedder (0: none; Truncate or Refuse), as its gateway applies it.
	EmbedderMaxInputBytes int
	EmbedderOverflow      string
	// EmbedderRoles is the target's resolved roles convention (status.embedder.roles):
	// re-embedding uses it, and package vectors are reused only when they were made
	// with it.
	EmbedderRoles embed.Roles

	ScopeMap  []ScopeRule
	PrefixMap []ScopeRule
	// MapFile is a local file (MappingDir/<key>); MapObject an object key, in MapBucket
	// (default Source.Bucket) at the source endpoint. At most one of them is set, and
	// MapFormat (csv or jsonl) with it.
	MapFile, MapObject, MapBucket string
	MapFormat                     string
	// Unmapped is Keep, Skip or Fail.
	Unmapped string

	// Denylist holds exact scopes and prefixes ending in '*'.
	Denylist []string
	Types    []string
	// ConflictPolicy is KeepNewer, Overwrite or Skip; Embeddings is Reuse, Reembed or Defer.
	ConflictPolicy, Embeddings string
	// DryRun writes nothing to the target; the detail object and summary are written.
	DryRun bool
	// IndexBuildMemory is the memory PostgreSQL may use to build the PGVector
	// engine's HNSW index after a bulk load (maintenance_work_mem, e.g. "1GB"; empty:
	// the server's setting).
	IndexBuildMemory string
	// Rehydrate brings the package's archived memories back live (restore.Options.Rehydrate).
	Rehydrate bool
	// AllowMerge lets the mapping send several package scopes to one target scope
	// (restore.Options.AllowMerge); without it such a restore is refused.
	AllowMerge bool
	// IntoExisting lets the mapping rename package scopes onto target scopes that
	// hold memories of their own (restore.Options.IntoExisting).
	IntoExisting bool
	// AllowRepeat restores the package even when the target already received it from
	// another restore; without it such a restore writes nothing (RestoreSummary
	// .AlreadyRestored says from which).
	AllowRepeat bool
	// SkipSessions leaves out the live sessions a package carries; otherwise they
	// go to the target's short-term tier, which Sessions locates.
	SkipSessions bool
	Sessions     SessionsConfig

	// DetailKey is the object, in Source.Bucket, that receives the per-scope detail
	// (zstd-compressed JSON lines).
	DetailKey string

	// Import, when set, makes the restore an import from a framework (see
	// ImportConfig); Source.Prefix is then unused.
	Import *ImportConfig
}

// RestoreDetailKey is where a restore's per-scope detail goes: next to the package, in
// a folder of the restore's own ("<name>-<uid prefix>").
func RestoreDetailKey(packagePrefix, restoreFolder string) string {
	return packagePrefix + "restores/" + strings.TrimSuffix(restoreFolder, "/") + "/" + restoreDetailSuffix
}

// Args renders the configuration as the worker's command-line arguments (after the
// subcommand). ParseRestoreArgs(c.Args()) gives c back.
func (c RestoreConfig) Args() []string {
	args := []string{
		"--restore-namespace=" + c.RestoreNamespace,
		"--restore-name=" + c.RestoreName,
		"--source-endpoint=" + c.Source.Endpoint,
		"--source-bucket=" + c.Source.Bucket,
		"--source-prefix=" + c.Source.Prefix,
		"--target-namespace=" + c.TargetNamespace,
		"--target-name=" + c.TargetName,
		"--tenant=" + c.Tenant,
		"--schema=" + c.Schema,
		"--embedding-model=" + c.EmbeddingModel,
		fmt.Sprintf("--dimension=%d", c.Dimension),
		"--metric=" + c.Metric,
		"--embedder=" + c.Embedder,
		"--unmapped=" + c.Unmapped,
		"--conflict-policy=" + c.ConflictPolicy,
		"--embeddings=" + c.Embeddings,
		"--detail-key=" + c.DetailKey,
	}
	opt := func(flag, v string) {
		if v != "" {
			args = append(args, flag+"="+v)
		}
	}
	opt("--source-region", c.Source.Region)
	if c.Source.Insecure {
		args = append(args, "--source-insecure")
	}
	if c.Unencrypted {
		args = append(args, "--unencrypted")
	}
	opt("--expect-manifest-sha256", c.ExpectManifestSHA256)
	opt("--index-build-memory", c.IndexBuildMemory)
	args = append(args, c.Vectors.Args()...)
	opt("--embedder-endpoint", c.EmbedderEndpoint)
	if c.EmbedderMaxInputBytes > 0 {
		args = append(args, fmt.Sprintf("--embedder-max-input-bytes=%d", c.EmbedderMaxInputBytes))
	}
	opt("--embedder-overflow", c.EmbedderOverflow)
	args = append(args, embed.RolesArgs(c.EmbedderRoles)...)
	opt("--map-scopes", joinRules(c.ScopeMap))
	opt("--map-prefixes", joinRules(c.PrefixMap))
	opt("--map-file", c.MapFile)
	opt("--map-object", c.MapObject)
	opt("--map-bucket", c.MapBucket)
	opt("--map-format", c.MapFormat)
	opt("--denylist", strings.Join(c.Denylist, ","))
	opt("--types", strings.Join(c.Types, ","))
	if c.DryRun {
		args = append(args, "--dry-run")
	}
	if c.Rehydrate {
		args = append(args, "--rehydrate")
	}
	if c.IntoExisting {
		args = append(args, "--into-existing")
	}
	if c.AllowMerge {
		args = append(args, "--allow-merge")
	}
	if c.AllowRepeat {
		args = append(args, "--allow-repeat")
	}
	if c.SkipSessions {
		args = append(args, "--skip-sessions")
	}
	args = append(args, c.Sessions.Args()...)
	opt("--restore-uid", c.RestoreUID)
	return append(args, c.Import.args()...)
}

// ParseRestoreArgs parses the worker's arguments and checks them.
func ParseRestoreArgs(args []string, stderr io.Writer) (RestoreConfig, error) {
	var c RestoreConfig
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	finish := registerRestoreFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := finish(); err != nil {
		return c, err
	}
	return c, c.check()
}

// registerRestoreFlags adds a restore's flags to fs, parsed into c; the function it
// returns completes c from them once fs has parsed (without checking c as a whole).
func registerRestoreFlags(fs *flag.FlagSet, c *RestoreConfig) func() error {
	var scopeMap, prefixMap, denylist, types string
	fs.StringVar(&c.RestoreNamespace, "restore-namespace", "", "namespace of the MemoryRestore")
	fs.StringVar(&c.RestoreName, "restore-name", "", "name of the MemoryRestore")
	fs.StringVar(&c.Source.Endpoint, "source-endpoint", "", "S3 endpoint host:port of the package")
	fs.StringVar(&c.Source.Region, "source-region", "", "S3 region of the package")
	fs.BoolVar(&c.Source.Insecure, "source-insecure", false, "use plain HTTP")
	fs.StringVar(&c.Source.Bucket, "source-bucket", "", "bucket of the package")
	fs.StringVar(&c.Source.Prefix, "source-prefix", "", "package prefix, ending in '/'")
	fs.BoolVar(&c.Unencrypted, "unencrypted", false, "read a plaintext package")
	fs.StringVar(&c.ExpectManifestSHA256, "expect-manifest-sha256", "", "refuse a package whose manifest has another SHA-256")
	fs.StringVar(&c.TargetNamespace, "target-namespace", "", "namespace of the target MemoryStore")
	fs.StringVar(&c.TargetName, "target-name", "", "name of the target MemoryStore")
	fs.StringVar(&c.Tenant, "tenant", "", "tenant of the target store")
	fs.StringVar(&c.Schema, "schema", "", "PostgreSQL schema of the target store")
	c.Register(fs)
	fs.StringVar(&c.EmbeddingModel, "embedding-model", "", "the target's embedding model")
	fs.IntVar(&c.Dimension, "dimension", 0, "the target's vector dimension")
	fs.StringVar(&c.Metric, "metric", "COSINE", "vector metric")
	fs.StringVar(&c.Embedder, "embedder", "Hashing", "Hashing or OpenAI")
	fs.StringVar(&c.EmbedderEndpoint, "embedder-endpoint", "", "base URL of an OpenAI-compatible embedder")
	fs.IntVar(&c.EmbedderMaxInputBytes, "embedder-max-input-bytes", 0, "the target's limit on the text sent to its embedder, in bytes (0: none)")
	fs.StringVar(&c.EmbedderOverflow, "embedder-overflow", "", "over the limit: Truncate (embed the text's first bytes) or Refuse (the memory is not restored)")
	fs.StringVar(&scopeMap, "map-scopes", "", "comma-separated from=to scope renames")
	fs.StringVar(&prefixMap, "map-prefixes", "", "comma-separated from=to scope prefix renames")
	fs.StringVar(&c.MapFile, "map-file", "", "scope map file (CSV or JSON lines)")
	fs.StringVar(&c.MapObject, "map-object", "", "scope map object key at the source endpoint")
	fs.StringVar(&c.MapBucket, "map-bucket", "", "bucket of --map-object (default: the package's)")
	fs.StringVar(&c.MapFormat, "map-format", "", "csv or jsonl")
	fs.StringVar(&c.Unmapped, "unmapped", "Keep", "Keep, Skip or Fail scopes no rule maps")
	fs.StringVar(&denylist, "denylist", "", "comma-separated scopes never restored; 'user:*' is a prefix")
	fs.StringVar(&types, "types", "", "comma-separated memory types")
	fs.StringVar(&c.ConflictPolicy, "conflict-policy", "KeepNewer", "KeepNewer, Overwrite or Skip")
	fs.StringVar(&c.Embeddings, "embeddings", "Reuse", "Reuse, Reembed or Defer")
	fs.BoolVar(&c.DryRun, "dry-run", false, "write nothing to the target")
	fs.StringVar(&c.IndexBuildMemory, "index-build-memory", "", "PostgreSQL memory for building the HNSW index after a bulk load (PGVector engine), e.g. 1GB")
	fs.BoolVar(&c.Rehydrate, "rehydrate", false, "bring the package's archived memories back live")
	fs.BoolVar(&c.AllowMerge, "allow-merge", false, "let the mapping merge several package scopes into one target scope")
	fs.BoolVar(&c.IntoExisting, "into-existing", false, "let the mapping rename package scopes onto target scopes that hold memories of their own")
	fs.BoolVar(&c.AllowRepeat, "allow-repeat", false, "restore the package even if the target already received it from another restore")
	fs.BoolVar(&c.SkipSessions, "skip-sessions", false, "leave out the live sessions the package carries")
	c.Sessions.Register(fs)
	fs.StringVar(&c.RestoreUID, "restore-uid", "", "UID of the MemoryRestore, recorded by the target with the package")
	fs.StringVar(&c.DetailKey, "detail-key", "", "object key of the per-scope detail")
	finishImport := ImportFlags(fs)
	var importObject, historyObject, chromaObject string
	fs.StringVar(&importObject, "import-object", "", "object key of the import's source file in --source-bucket (LangGraphSQLite, LettaAgentFile, Mem0's chroma.sqlite3, CrewAI's long_term_memory_storage.db)")
	fs.StringVar(&historyObject, "import-history-object", "", "object key of mem0's history.db in --source-bucket (Mem0)")
	fs.StringVar(&chromaObject, "import-chroma-object", "", "object key of CrewAI's chroma.sqlite3 in --source-bucket (CrewAI)")
	var roles embed.RolesFlags
	roles.Register(fs, "")
	return func() error {
		var err error
		if c.EmbedderRoles, err = jobRoles(&roles); err != nil {
			return err
		}
		if c.Import, err = finishImport(); err != nil {
			return err
		}
		if err := c.Sessions.validate(); err != nil {
			return err
		}
		if c.Import != nil {
			c.Import.Object, c.Import.HistoryObject, c.Import.ChromaObject = importObject, historyObject, chromaObject
			if c.Import.NeedsFile() && importObject == "" {
				return fmt.Errorf("--import-kind %s needs --import-object", c.Import.Kind)
			}
		}
		c.Denylist = splitList(denylist)
		c.Types = splitList(types)
		if c.ScopeMap, err = parseRules("--map-scopes", scopeMap); err != nil {
			return err
		}
		c.PrefixMap, err = parseRules("--map-prefixes", prefixMap)
		return err
	}
}

func (c RestoreConfig) check() error { return c.checkWith(true) }

// checkWith checks c as a whole; a restore needs a detail key (requireDetail), a
// drill writes no detail.
func (c RestoreConfig) checkWith(requireDetail bool) error {
	if err := c.checkRequired(requireDetail); err != nil {
		return err
	}
	for _, e := range []struct {
		flag, value string
		allowed     []string
	}{
		{"--unmapped", c.Unmapped, unmappedPolicies},
		{"--conflict-policy", c.ConflictPolicy, conflictPolicies},
		{"--embeddings", c.Embeddings, embeddingsPolicies},
		{"--embedder", c.Embedder, embedderTypes},
	} {
		if !slices.Contains(e.allowed, e.value) {
			return fmt.Errorf("%s %q is not one of %s", e.flag, e.value, strings.Join(e.allowed, ", "))
		}
	}
	for _, t := range c.Types {
		if err := memory.Type(t).Validate(); err != nil {
			return fmt.Errorf("--types: %w", err)
		}
	}
	if c.Dimension < 1 {
		return fmt.Errorf("--dimension %d: the target's vector dimension is required", c.Dimension)
	}
	if c.ExpectManifestSHA256 != "" {
		if b, err := hex.DecodeString(c.ExpectManifestSHA256); err != nil || len(b) != 32 {
			return errors.New("--expect-manifest-sha256 is not a hex SHA-256")
		}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Embedder == "OpenAI" && (c.EmbedderEndpoint == "" || c.EmbeddingModel == "") {
		return errors.New("the OpenAI embedder needs --embedder-endpoint and --embedding-model")
	}
	if err := c.embedLimit().Validate(); err != nil {
		return fmt.Errorf("--embedder-max-input-bytes, --embedder-overflow: %w", err)
	}
	return c.checkMap()
}

// checkRequired checks the flags every restore needs (a package restore also its prefix).
func (c RestoreConfig) checkRequired(requireDetail bool) error {
	var missing []string
	required := map[string]string{"schema": c.Schema, "source-endpoint": c.Source.Endpoint,
		"source-bucket": c.Source.Bucket}
	if requireDetail {
		required["detail-key"] = c.DetailKey
	}
	if c.Import == nil {
		required["source-prefix"] = c.Source.Prefix
	}
	for name, v := range required {
		if v == "" {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required flags: %s", strings.Join(slices.Sorted(slices.Values(missing)), ", "))
	}
	if c.Import == nil && !strings.HasSuffix(c.Source.Prefix, "/") {
		return errors.New("--source-prefix must end in '/'")
	}
	return nil
}

func (c RestoreConfig) checkMap() error {
	switch {
	case c.MapFile != "" && c.MapObject != "":
		return errors.New("set at most one of --map-file and --map-object")
	case c.MapBucket != "" && c.MapObject == "":
		return errors.New("--map-bucket needs --map-object")
	case (c.MapFile != "" || c.MapObject != "") && !slices.Contains(mapFormats, c.MapFormat):
		return fmt.Errorf("--map-format %q is not one of %s", c.MapFormat, strings.Join(mapFormats, ", "))
	case c.MapFile == "" && c.MapObject == "" && c.MapFormat != "":
		return errors.New("--map-format needs --map-file or --map-object")
	}
	return nil
}

func joinRules(rules []ScopeRule) string {
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = r.From + "=" + r.To
	}
	return strings.Join(parts, ",")
}

// parseRules reads "from=to,from=to". Scopes never hold ',' or '='.
func parseRules(flag, s string) ([]ScopeRule, error) {
	var rules []ScopeRule
	for _, p := range splitList(s) {
		from, to, ok := strings.Cut(p, "=")
		if !ok || from == "" || to == "" || strings.Contains(to, "=") {
			return nil, fmt.Errorf("%s: %q is not from=to", flag, p)
		}
		rules = append(rules, ScopeRule{From: from, To: to})
	}
	return rules, nil
}

// RestoreSecrets is what the restore worker reads from its environment.
type RestoreSecrets struct {
	// PostgresURI is the target store's connection URI.
	PostgresURI                          string
	SourceS3AccessKey, SourceS3SecretKey string
	// SourceKey is the package key; empty for an unencrypted package.
	SourceKey      string
	EmbedderAPIKey string
	// ImportPostgresURI is the import source's database (LangGraphPostgres).
	ImportPostgresURI string
	// Milvus is the target store's own Milvus user (engine.EnvMilvusUsername/Password).
	Milvus engine.Login
	// RedisPassword is the target store's Redis user's (EnvRedisPassword).
	RedisPassword string
}

// RestoreSecretsFromEnv reads the restore worker's secrets from the process environment.
func RestoreSecretsFromEnv() RestoreSecrets { return RestoreSecretsFrom(os.Getenv) }

// RestoreSecretsFrom reads the restore worker's secrets through getenv.
func RestoreSecretsFrom(getenv func(string) string) RestoreSecrets {
	return RestoreSecrets{
		PostgresURI:       getenv(EnvPostgresURI),
		SourceS3AccessKey: getenv(EnvSourceS3AccessKey),
		SourceS3SecretKey: getenv(EnvSourceS3SecretKey),
		SourceKey:         getenv(EnvSourceKey),
		EmbedderAPIKey:    getenv(EnvEmbedderAPIKey),
		ImportPostgresURI: getenv(EnvImportPostgresURI),
		Milvus:            engine.Login{Username: getenv(engine.EnvMilvusUsername), Password: getenv(engine.EnvMilvusPassword)},
		RedisPassword:     getenv(EnvRedisPassword),
	}
}

// MaxTerminationMessage is the most Kubernetes keeps of a container's termination
// message: a RestoreSummary must fit in it.
const MaxTerminationMessage = 4096

// RestoreSummary is what a restore worker writes to its termination log and the
// controller copies into status: counts only; per-scope results go to the detail
// object. A restore that failed after writing part of the package writes one too,
// with Error set and the counts of what it wrote; one that failed before writing
// anything writes only its error. Read = Restored + Unchanged + the skipped ones.
type RestoreSummary struct {
	// Verification of the package.
	ManifestSHA256 string `json:"manifestSHA256"`
	FormatVersion  int    `json:"formatVersion"`
	PackageID      string `json:"packageId"`
	// Shards read, every one verified against its checksum.
	Shards int `json:"shards"`

	DryRun bool `json:"dryRun,omitempty"`
	// Embeddings is the policy that applied (Reuse falls back to Reembed).
	Embeddings string `json:"embeddings"`

	// Read is the number of the package's memories read.
	Read int64 `json:"read"`
	// Restored memories (in a dry run: would be), in total and by type; Unchanged
	// ones were already in the target with the same value.
	Restored       int64            `json:"restored"`
	RestoredByType map[string]int64 `json:"restoredByType,omitempty"`
	Unchanged      int64            `json:"unchanged"`
	// Scopes is the number of target scopes that hold the package's memories;
	// MappedScopes the number of package scopes restored under another name.
	Scopes       int64 `json:"scopes"`
	MappedScopes int64 `json:"mappedScopes"`
	// Tombstones of the package new to the target; Forgotten memories of the target
	// they covered, deleted.
	Tombstones int64 `json:"tombstones,omitempty"`
	Forgotten  int64 `json:"forgotten,omitempty"`
	// Vectors written, reused or computed.
	Vectors int64 `json:"vectors"`
	// Rehydrated archived memories are live again (Rehydrate).
	Rehydrated int64 `json:"rehydrated,omitempty"`
	// Sessions: the live sessions the package carried and what became of them.
	Sessions *restore.SessionsResult `json:"sessions,omitempty"`
	Skipped  SkippedCount            `json:"skipped"`
	// FirstInvalid describes the first memory skipped as invalid (at most
	// maxFirstInvalid bytes).
	FirstInvalid string `json:"firstInvalid,omitempty"`

	// DetailKey is the detail object as written (in the package's bucket); empty when
	// it could not be written.
	DetailKey string `json:"detailKey,omitempty"`
	// Import counts the source units of an import (threads read, skipped as inactive,
	// zombie, ..., store items) and its first problem.
	Import *importer.Stats `json:"import,omitempty"`
	// Error is why the restore failed, when it failed after writing part of the
	// package (at most maxSummaryError bytes).
	Error string `json:"error,omitempty"`
	// AlreadyRestored, when set, is the earlier restore from which the target had
	// received the package: nothing was read past the manifest, nothing written.
	AlreadyRestored *PriorRestore `json:"alreadyRestored,omitempty"`
}

// PriorRestore is a restore the target store had received.
type PriorRestore struct {
	// Name is the MemoryRestore's namespace/name.
	Name        string    `json:"name"`
	UID         string    `json:"uid"`
	CompletedAt time.Time `json:"completedAt"`
}

// SkippedCount counts memories of the package that were not restored, by reason.
type SkippedCount struct {
	Denylisted int64 `json:"denylisted,omitempty"`
	Tombstoned int64 `json:"tombstoned,omitempty"`
	Unmapped   int64 `json:"unmapped,omitempty"`
	Expired    int64 `json:"expired,omitempty"`
	Type       int64 `json:"type,omitempty"`
	Conflict   int64 `json:"conflict,omitempty"`
	Invalid    int64 `json:"invalid,omitempty"`
	// IDInUseByOtherScope: the memory's ID is another scope's memory in the target.
	IDInUseByOtherScope int64 `json:"idInUseByOtherScope,omitempty"`
	// TextTooLong: over the target's embedder input limit, with overflow Refuse.
	TextTooLong int64 `json:"textTooLong,omitempty"`
}

// maxFirstInvalid and maxSummaryError bound RestoreSummary.FirstInvalid and Error, so
// the summary always fits in a termination message.
const (
	maxFirstInvalid = 256
	maxSummaryError = 1024
)

// TerminationMessage encodes the summary for the termination log, refusing one that
// would not fit.
func (s RestoreSummary) TerminationMessage() ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxTerminationMessage {
		return nil, fmt.Errorf("restore summary is %d bytes; a termination message holds %d", len(b), MaxTerminationMessage)
	}
	return b, nil
}

// ParseRestoreSummary reads a termination message written by TerminationMessage and
// checks that it is one.
func ParseRestoreSummary(msg string) (RestoreSummary, error) {
	var s RestoreSummary
	dec := json.NewDecoder(bytes.NewReader([]byte(strings.TrimSpace(msg))))
	if err := dec.Decode(&s); err != nil {
		return RestoreSummary{}, fmt.Errorf("restore summary: %w", err)
	}
	if dec.More() {
		return RestoreSummary{}, errors.New("restore summary: trailing data after the JSON object")
	}
	if b, err := hex.DecodeString(s.ManifestSHA256); err != nil || len(b) != 32 {
		return RestoreSummary{}, errors.New("restore summary: manifestSHA256 is not a hex SHA-256")
	}
	if s.FormatVersion < 1 {
		return RestoreSummary{}, fmt.Errorf("restore summary: formatVersion %d", s.FormatVersion)
	}
	if !slices.Contains(embeddingsPolicies, s.Embeddings) {
		return RestoreSummary{}, fmt.Errorf("restore summary: embeddings %q is not one of %s", s.Embeddings, strings.Join(embeddingsPolicies, ", "))
	}
	counts := []int64{s.Read, s.Restored, s.Unchanged, s.Tombstones, s.Forgotten, s.Scopes, s.MappedScopes, s.Vectors, s.Rehydrated, int64(s.Shards), s.Skipped.Denylisted,
		s.Skipped.Tombstoned, s.Skipped.Unmapped, s.Skipped.Expired, s.Skipped.Type, s.Skipped.Conflict, s.Skipped.Invalid, s.Skipped.IDInUseByOtherScope, s.Skipped.TextTooLong}
	for t, n := range s.RestoredByType {
		if !memory.Type(t).Valid() {
			return RestoreSummary{}, fmt.Errorf("restore summary: unknown memory type %q", t)
		}
		counts = append(counts, n)
	}
	if slices.Min(counts) < 0 {
		return RestoreSummary{}, errors.New("restore summary: a negative count")
	}
	return s, nil
}

// embedLimit is the target's embedder input limit.
func (c RestoreConfig) embedLimit() embed.Limit {
	return embed.Limit{MaxInputBytes: c.EmbedderMaxInputBytes, Overflow: embed.Overflow(c.EmbedderOverflow)}
}
