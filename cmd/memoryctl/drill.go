package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/worker"
)

// envDrillURI is the PostgreSQL login `verify --restore` makes its scratch schema with:
// one that may create a schema in its database (never an argument: it holds a password).
const envDrillURI = "MEMORYCTL_DRILL_URI"

var errNotS3Drill = errors.New("--restore reads the package from object storage as a restore does: give an s3://BUCKET/PREFIX/ location")

// drillFlags are the flags of `memoryctl verify --restore`.
type drillFlags struct {
	restore      bool
	dimension    int
	recallScopes int
}

func (d *drillFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.restore, "restore", false, "also restore the package into a scratch schema on $"+envDrillURI+"'s database and check it there, as a restore drill does; the schema is dropped at the end")
	fs.IntVar(&d.dimension, "dimension", 0, "with --restore, for a package without vectors: the dimension the built-in hashing embedder embeds it at")
	fs.IntVar(&d.recallScopes, "recall-scopes", 0, fmt.Sprintf("with --restore: scopes the recall sample searches (default %d)", worker.DefaultDrillScopes))
}

// check refuses, before anything is opened, a drill of a package that is not in
// object storage.
func (d drillFlags) check(where string) error {
	if d.restore && !strings.HasPrefix(where, "s3://") {
		return errNotS3Drill
	}
	return nil
}

// runDrill is `memoryctl verify --restore`: the restore drill by hand. The package is
// restored into a schema of its own (drill_memoryctl_<random>) with PostgreSQL-embedded,
// exact vectors, checked, and the schema is dropped whatever happened, also on an
// interrupt. Only an s3:// package: the drill reads it as a restore Job does.
func runDrill(ctx context.Context, where string, of objectFlags, df drillFlags, m *snapshot.Manifest, stdout, stderr io.Writer) error {
	rest, ok := strings.CutPrefix(where, "s3://")
	if !ok {
		return errNotS3Drill
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	uri := os.Getenv(envDrillURI)
	if uri == "" {
		return fmt.Errorf("--restore needs $%s: a PostgreSQL login allowed to create a schema in its database", envDrillURI)
	}
	cfg := worker.DrillConfig{RecallScopes: df.recallScopes, RestoreConfig: worker.RestoreConfig{
		RestoreNamespace: "memoryctl", RestoreName: "verify",
		Source:          worker.Destination{Endpoint: of.endpoint, Region: of.region, Insecure: of.insecure, Bucket: bucket, Prefix: prefix},
		Unencrypted:     m.Encryption == nil,
		TargetNamespace: "memoryctl", TargetName: "verify", Tenant: "memoryctl",
		Vectors:  engine.Vectors{VectorEngine: engine.Postgres},
		Embedder: "Hashing", Metric: "COSINE",
	}}
	// Vectors the package carries are reused as they are; a package without them is
	// embedded with the built-in embedder, which needs no model server.
	if e := m.Embedding; e != nil {
		cfg.EmbeddingModel, cfg.Dimension, cfg.Metric = e.Model, e.Dimension, strings.ToUpper(e.Metric)
		cfg.EmbedderRoles = e.EmbedRoles()
	} else if df.dimension > 0 {
		cfg.EmbeddingModel, cfg.Dimension = embed.HashingModel, df.dimension
	} else {
		return errors.New("the package carries no vectors: give --dimension for the built-in hashing embedder to embed it at")
	}
	key := ""
	if of.keyFile != "" {
		b, err := os.ReadFile(of.keyFile)
		if err != nil {
			return err
		}
		key = strings.TrimSpace(string(b))
	}

	pool, err := pgxpool.New(ctx, uri)
	if err != nil {
		return fmt.Errorf("$%s: %w", envDrillURI, err)
	}
	defer pool.Close()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	cfg.Schema = worker.ScratchSchemaPrefix + "memoryctl_" + hex.EncodeToString(suffix)
	defer func() {
		// The scratch schema goes whatever happened, interrupts included.
		drop, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := pool.Exec(drop, `DROP SCHEMA IF EXISTS `+pgx.Identifier{cfg.Schema}.Sanitize()+` CASCADE`); err != nil {
			fmt.Fprintf(stderr, "memoryctl: dropping the scratch schema %s: %v (drop it by hand)\n", cfg.Schema, err)
		}
	}()
	if _, err := pgstore.Migrate(ctx, pool, cfg.Schema); err != nil {
		return fmt.Errorf("making the scratch schema %s: %w", cfg.Schema, err)
	}
	spec := vector.Spec{Dimension: cfg.Dimension, Metric: vector.Metric(cfg.Metric)}
	if err := pgindex.Ensure(ctx, pool, cfg.Schema, spec); err != nil {
		return fmt.Errorf("making the scratch schema %s: %w", cfg.Schema, err)
	}
	fmt.Fprintf(stderr, "restoring into scratch schema %s\n", cfg.Schema)
	sum, err := worker.RunDrill(ctx, cfg, worker.RestoreSecrets{PostgresURI: uri, SourceS3AccessKey: os.Getenv(envAccessKey),
		SourceS3SecretKey: os.Getenv(envSecretKey), SourceKey: key}, worker.RunOptions{Now: time.Now(), Progress: stderr})
	fmt.Fprintf(stdout, "restore drill of package %s (cut %s): %d of %d memories and %d of %d tombstones came back, %d forgotten came back, %d shards verified\n",
		sum.PackageID, sum.CreatedAt.Format(time.RFC3339), sum.Memories, sum.Items, sum.ScratchTombstones, sum.Tombstones, sum.Covered, sum.Shards)
	r := sum.Recall
	fmt.Fprintf(stdout, "recall sample: %d searches in %d scopes, recall@10 mean %.3f, min %.3f (exact search: every search must find the exact top 10)\n",
		r.Queries, r.Scopes, r.Mean, r.Min)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "drill passed in %s\n", sum.Duration)
	return nil
}
