package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/importer"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// openedPackage is what a restore reads: a package, with the SHA-256 of its manifest,
// and for an import the counts of the conversion and the cleanup of its scratch files.
type openedPackage struct {
	reader      *snapshot.Reader
	manifestSHA string
	imported    *importer.Stats
	cleanup     func()
}

// openPackage opens the package under Source.Prefix, or, for an import, converts the
// source into a package in scratch space and opens that. Nothing is written to the
// target before the restore engine has verified the whole package either way.
func openPackage(ctx context.Context, cfg RestoreConfig, sec RestoreSecrets, objects snapshot.Objects, client *minio.Client) (*openedPackage, error) {
	if cfg.Import != nil {
		return importPackage(ctx, cfg, sec, client)
	}
	key, err := sourceKey(cfg, sec)
	if err != nil {
		return nil, err
	}
	sha, err := manifestDigest(ctx, objects, cfg.Source.Prefix)
	if err != nil {
		return nil, err
	}
	if cfg.ExpectManifestSHA256 != "" && !strings.EqualFold(sha, cfg.ExpectManifestSHA256) {
		return nil, fmt.Errorf("the package at %s changed since its snapshot completed: manifest SHA-256 %s, expected %s",
			cfg.Source.Prefix, sha, cfg.ExpectManifestSHA256)
	}
	reader, err := snapshot.Open(ctx, objects, cfg.Source.Prefix, key)
	if err != nil {
		return nil, err
	}
	return &openedPackage{reader: reader, manifestSHA: sha, cleanup: func() {}}, nil
}

// importPrefix is where an import's package goes in its scratch directory.
const importPrefix = "package/"

func importPackage(ctx context.Context, cfg RestoreConfig, sec RestoreSecrets, client *minio.Client) (*openedPackage, error) {
	ic := cfg.Import
	base := ic.Dir
	if base == "" {
		base = os.TempDir()
	}
	work, err := os.MkdirTemp(base, "import-")
	if err != nil {
		return nil, fmt.Errorf("import: scratch space: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(work) }
	filePath := ""
	if slices.Contains(fileKinds, ic.Kind) {
		filePath = filepath.Join(work, "source")
		if err := client.FGetObject(ctx, cfg.Source.Bucket, ic.Object, filePath, minio.GetObjectOptions{}); err != nil {
			cleanup()
			return nil, fmt.Errorf("source file s3://%s/%s: %w", cfg.Source.Bucket, ic.Object, err)
		}
	}
	objects := snapshot.DirObjects{Root: work}
	st, _, err := BuildImportPackage(ctx, ic, ImportSource{PostgresURI: sec.ImportPostgresURI, FilePath: filePath},
		importer.PackageOptions{Objects: objects, Prefix: importPrefix, Unencrypted: true, SpillDir: work})
	if err != nil {
		cleanup()
		return nil, err
	}
	// The summary must fit in the termination message.
	st.FirstProblem = truncateUTF8(st.FirstProblem, maxFirstInvalid)
	sha, err := manifestDigest(ctx, objects, importPrefix)
	if err == nil {
		var reader *snapshot.Reader
		if reader, err = snapshot.Open(ctx, objects, importPrefix, nil); err == nil {
			return &openedPackage{reader: reader, manifestSHA: sha, imported: &st, cleanup: cleanup}, nil
		}
	}
	cleanup()
	return nil, fmt.Errorf("import: reading the converted package: %w", err)
}

// ImportSource is where an import reads from: a database (LangGraphPostgres,
// LangChainPostgresHistory) or a local file (LangGraphSQLite, LettaAgentFile).
type ImportSource struct {
	PostgresURI string
	// PostgresURIVar names the environment variable PostgresURI comes from, for the
	// error when it is empty (EnvImportPostgresURI when unset).
	PostgresURIVar string
	FilePath       string
}

// BuildImportPackage converts the source into a package written with po (the
// restore worker's scratch package; memoryctl import's --out). po.Source is filled in
// when empty.
func BuildImportPackage(ctx context.Context, ic *ImportConfig, in ImportSource, po importer.PackageOptions) (importer.Stats, *snapshot.Manifest, error) {
	src, sourceName, closeSrc, err := openImportSource(ctx, ic, in)
	if err != nil {
		return importer.Stats{}, nil, err
	}
	defer closeSrc()
	rules := importer.Rules{UserMetadataKey: ic.UserMetadataKey, ScopeTemplate: ic.ScopeTemplate, InactiveAfter: ic.InactiveAfter,
		SkipZombies: ic.SkipZombies, KeepWorking: ic.KeepWorking, WorkingWindow: ic.WorkingWindow, Source: sourceName, Now: time.Now()}
	if ic.UserPattern != "" {
		rules.UserPattern = regexp.MustCompile(ic.UserPattern) // checked when parsed
	}
	if po.Source == (snapshot.SourceInfo{}) {
		po.Source = snapshot.SourceInfo{Store: sourceName}
	}
	st, m, err := importer.WritePackage(ctx, po, func(fn func(memory.Item) error) (importer.Stats, error) {
		return importer.ImportLangGraph(ctx, src, importer.LangGraphOptions{Rules: rules, Namespaces: ic.Namespaces, SkipStore: ic.SkipStore}, fn)
	})
	if err != nil {
		return st, nil, fmt.Errorf("import from %s: %w", ic.Kind, err)
	}
	return st, m, nil
}

// openImportSource opens the framework's data and names it for the memories' source.
func openImportSource(ctx context.Context, ic *ImportConfig, in ImportSource) (importer.LangGraphSource, string, func(), error) {
	switch ic.Kind {
	case ImportLangGraphPostgres, ImportLangChainPostgresHistory:
		if in.PostgresURI == "" {
			return nil, "", nil, fmt.Errorf("no source database: set %s", cmp.Or(in.PostgresURIVar, EnvImportPostgresURI))
		}
		pool, err := pgxpool.New(ctx, in.PostgresURI)
		if err != nil {
			return nil, "", nil, errors.New("source database: the connection URI does not parse") // never echo it
		}
		if ic.Kind == ImportLangChainPostgresHistory {
			src, err := importer.OpenLangChainPostgresHistory(ctx, pool, ic.Schema, ic.Table)
			if err != nil {
				pool.Close()
				return nil, "", nil, fmt.Errorf("source database: %w", err)
			}
			return src, "langchain-postgres", pool.Close, nil
		}
		src, err := importer.OpenLangGraphPostgres(ctx, pool, ic.Schema)
		if err != nil {
			pool.Close()
			return nil, "", nil, fmt.Errorf("source database: %w", err)
		}
		return src, fmt.Sprintf("langgraph-checkpoint-postgres@schema-v%d", src.MigrationVersion), pool.Close, nil
	case ImportLangGraphSQLite:
		src, err := importer.OpenLangGraphSQLite(ctx, in.FilePath)
		if err != nil {
			return nil, "", nil, err
		}
		return src, "langgraph-checkpoint-sqlite", func() { _ = src.Close() }, nil
	case ImportLettaAgentFile:
		src, err := importer.OpenLettaAgentFile(in.FilePath)
		if err != nil {
			return nil, "", nil, err
		}
		return src, "letta-agent-file", func() {}, nil
	}
	return nil, "", nil, fmt.Errorf("import kind %q is not supported", ic.Kind)
}
