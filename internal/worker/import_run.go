package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/importer"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// openedPackage is what a restore reads: a package, with the SHA-256 of its manifest
// (for an import, the digest of the converted memories), and for an import the
// counts of the conversion and the cleanup of its scratch files.
type openedPackage struct {
	reader      restore.Package
	manifestSHA string
	imported    *importer.Stats
	cleanup     func()
}

// openPackage opens the package under Source.Prefix, or, for an import, converts the
// whole source into sorted memories in scratch space (importer.Converted). Nothing
// is written to the target before the restore engine has verified the whole package,
// or before the whole source is converted.
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
	// fetch brings an object of the source bucket into the scratch space as local; an
	// unset key is no file ("").
	fetch := func(key, local string) (string, error) {
		if key == "" {
			return "", nil
		}
		local = filepath.Join(work, local)
		if err := client.FGetObject(ctx, cfg.Source.Bucket, key, local, minio.GetObjectOptions{}); err != nil {
			return "", fmt.Errorf("source file s3://%s/%s: %w", cfg.Source.Bucket, key, err)
		}
		return local, nil
	}
	var filePath, historyPath, chromaPath string
	if slices.Contains(fileKinds, ic.Kind) {
		filePath, err = fetch(ic.Object, "source")
	}
	if err == nil {
		historyPath, err = fetch(ic.HistoryObject, "history")
	}
	if err == nil {
		chromaPath, err = fetch(ic.ChromaObject, "chroma.sqlite3")
	}
	if err != nil {
		cleanup()
		return nil, err
	}
	var converted *importer.Converted
	name := strings.TrimSuffix(path.Base(ic.Object), ".json")
	st, err := runImport(ctx, ic, ImportSource{PostgresURI: sec.ImportPostgresURI, FilePath: filePath, HistoryPath: historyPath, ChromaPath: chromaPath, Name: name}, nil, func(src snapshot.SourceInfo, produce importProducer) (importer.Stats, error) {
		st, c, err := importer.Convert(ctx, importer.PackageOptions{Source: src, SpillDir: work}, produce)
		converted = c
		return st, err
	})
	if err != nil {
		cleanup()
		return nil, err
	}
	// The summary must fit in the termination message.
	st.FirstProblem = truncateUTF8(st.FirstProblem, maxFirstInvalid)
	st.LeftOut = boundLeftOut(st.LeftOut)
	return &openedPackage{reader: converted, manifestSHA: converted.Digest(), imported: &st,
		cleanup: func() { converted.Close(); cleanup() }}, nil
}

// Bounds of the import's left-out counts in a restore's termination message: a source
// names what it left out (state channel names are the app's own), so the kinds are
// cut short and the last ones counted together.
const (
	maxLeftOutKinds = 10
	maxLeftOutWhat  = 120
)

// boundLeftOut keeps the first maxLeftOutKinds kinds, each named in at most
// maxLeftOutWhat bytes, and counts the rest together.
func boundLeftOut(l []importer.LeftOut) []importer.LeftOut {
	out := make([]importer.LeftOut, 0, min(len(l), maxLeftOutKinds+1))
	for i, k := range l {
		if i == maxLeftOutKinds {
			out = append(out, importer.LeftOut{What: fmt.Sprintf("%d more kinds of source data (see memoryctl import's summary)", len(l)-i)})
		}
		if i >= maxLeftOutKinds {
			out[maxLeftOutKinds].Count += k.Count
			continue
		}
		out = append(out, importer.LeftOut{What: truncateUTF8(k.What, maxLeftOutWhat), Count: k.Count})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ImportSource is where an import reads from: a database (LangGraphPostgres,
// LangChainPostgresHistory) or a local file (LangGraphSQLite, LettaAgentFile).
type ImportSource struct {
	PostgresURI string
	// PostgresURIVar names the environment variable PostgresURI comes from, for the
	// error when it is empty (EnvImportPostgresURI when unset).
	PostgresURIVar string
	FilePath       string
	// HistoryPath is mem0's history.db (Mem0; optional).
	HistoryPath string
	// ChromaPath is CrewAI's chroma.sqlite3 beside the long-term database in FilePath
	// (CrewAI; optional).
	ChromaPath string
	// Name names the source file's one thread (AutoGenState: the file's name without
	// its extension, as it was in object storage; "" for FilePath's).
	Name string
}

// BuildImportPackage converts the source into a package written with po
// (memoryctl import's --out). po.Source is filled in when empty. progress, when not
// nil, gets the counts so far after each thread (importer.LangGraphOptions.Progress).
func BuildImportPackage(ctx context.Context, ic *ImportConfig, in ImportSource, po importer.PackageOptions, progress func(importer.Stats)) (importer.Stats, *snapshot.Manifest, error) {
	var m *snapshot.Manifest
	st, err := runImport(ctx, ic, in, progress, func(src snapshot.SourceInfo, produce importProducer) (importer.Stats, error) {
		if po.Source == (snapshot.SourceInfo{}) {
			po.Source = src
		}
		st, man, err := importer.WritePackage(ctx, po, produce)
		m = man
		return st, err
	})
	return st, m, err
}

// importProducer runs the conversion, handing every memory to its callback.
type importProducer = func(fn func(memory.Item) error) (importer.Stats, error)

// runImport opens the source and runs the conversion through sink (which writes a
// package, or sorts the memories for the restore engine).
func runImport(ctx context.Context, ic *ImportConfig, in ImportSource, progress func(importer.Stats),
	sink func(src snapshot.SourceInfo, produce importProducer) (importer.Stats, error)) (importer.Stats, error) {
	src, sourceName, closeSrc, err := openImportSource(ctx, ic, in)
	if err != nil {
		return importer.Stats{}, err
	}
	defer closeSrc()
	rules := importer.Rules{UserMetadataKey: ic.UserMetadataKey, ScopeTemplate: ic.ScopeTemplate, InactiveAfter: ic.InactiveAfter,
		SkipZombies: ic.SkipZombies, KeepWorking: ic.KeepWorking, WorkingWindow: ic.WorkingWindow, Source: sourceName, Now: time.Now(),
		StateChannels: ic.StateChannels}
	if ic.UserPattern != "" {
		rules.UserPattern = regexp.MustCompile(ic.UserPattern) // checked when parsed
	}
	st, err := sink(snapshot.SourceInfo{Store: sourceName}, func(fn func(memory.Item) error) (importer.Stats, error) {
		return importer.ImportLangGraph(ctx, src, importer.LangGraphOptions{Rules: rules, Namespaces: ic.Namespaces, SkipStore: ic.SkipStore, Progress: progress}, fn)
	})
	if err != nil {
		return st, fmt.Errorf("import from %s: %w", ic.Kind, err)
	}
	return st, nil
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
	case ImportLlamaIndexChatStore:
		src, err := importer.OpenLlamaIndexChatStore(ctx, in.FilePath, ic.Table)
		if err != nil {
			return nil, "", nil, err
		}
		return src, src.Source(), func() { _ = src.Close() }, nil
	case ImportAutoGenState:
		src, err := importer.OpenAutoGenState(in.FilePath, in.Name)
		if err != nil {
			return nil, "", nil, err
		}
		return src, src.Source(), func() {}, nil
	case ImportMem0:
		src, err := importer.OpenMem0(ctx, in.FilePath, in.HistoryPath, ic.Collection)
		if err != nil {
			return nil, "", nil, err
		}
		return src, "mem0", func() { _ = src.Close() }, nil
	case ImportCrewAI:
		src, err := importer.OpenCrewAI(ctx, in.FilePath, in.ChromaPath)
		if err != nil {
			return nil, "", nil, err
		}
		return src, "crewai", func() { _ = src.Close() }, nil
	}
	return nil, "", nil, fmt.Errorf("import kind %q is not supported", ic.Kind)
}
