// Command memoryctl works with memory packages outside the cluster: it converts a
// framework's memory into a package for review before anything is written
// (import), and reads any package (inspect, verify). It also shows a store's pending
// index work through its gateway, and retries what was parked (pending). Installed as
// kubectl-memory it is also a kubectl plugin (`kubectl memory inspect ...`).
//
//	memoryctl import --import-kind=LangGraphPostgres --import-user-metadata-key=user_id --out ./pkg --unencrypted
//	memoryctl inspect ./pkg
//	memoryctl verify s3://bucket/prefix/ --key-file key.hex
//	MEMORYCTL_GATEWAY_KEY=... memoryctl pending list --gateway-url https://acme-gateway:8080 --parked
//
// The source database comes from MEMORYCTL_SOURCE_URI (never an argument: it holds a
// password); object storage credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/importer"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/worker"
)

const usage = `memoryctl works with memory packages (the framework-neutral format of memory-operator).

  memoryctl import [flags] --out DIR|s3://BUCKET/PREFIX/   convert a framework's memory into a package
  memoryctl inspect [flags] DIR|s3://BUCKET/PREFIX/         manifest, counts per type and scope
  memoryctl verify [flags] DIR|s3://BUCKET/PREFIX/          read every item, checking every checksum
  memoryctl pending list|retry [flags]                      a store's pending index work (through its gateway)

Run "memoryctl <command> -h" for a command's flags.
`

// Environment variables memoryctl reads its secrets from.
const (
	envSourceURI = "MEMORYCTL_SOURCE_URI"
	envAccessKey = "AWS_ACCESS_KEY_ID"
	envSecretKey = "AWS_SECRET_ACCESS_KEY"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "import":
		err = runImport(ctx, args, os.Stdout, os.Stderr)
	case "inspect":
		err = runRead(ctx, "inspect", args, os.Stdout, os.Stderr)
	case "verify":
		err = runRead(ctx, "verify", args, os.Stdout, os.Stderr)
	case "pending":
		err = runPending(ctx, args, os.Stdout, os.Stderr)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		err = fmt.Errorf("unknown command %q\n\n%s", cmd, usage)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "memoryctl:", err)
		os.Exit(1)
	}
}

// location is a package's place: a local directory or an S3 prefix.
type location struct {
	objects snapshot.Objects
	prefix  string
	display string
}

// objectFlags are the flags that reach object storage and decrypt packages.
type objectFlags struct {
	endpoint, region string
	insecure         bool
	keyFile          string
	unencrypted      bool
}

func (o *objectFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.endpoint, "s3-endpoint", "", "S3 endpoint host:port (for s3:// locations)")
	fs.StringVar(&o.region, "s3-region", "", "S3 region")
	fs.BoolVar(&o.insecure, "s3-insecure", false, "use plain HTTP to the endpoint")
	fs.StringVar(&o.keyFile, "key-file", "", "file holding the package's 32-byte key (raw, hex or base64)")
	fs.BoolVar(&o.unencrypted, "unencrypted", false, "the package is (to be) written without encryption")
}

func (o *objectFlags) key() (*snapshot.Key, error) {
	if o.keyFile == "" {
		if !o.unencrypted {
			return nil, errors.New("give --key-file, or --unencrypted for a plaintext package")
		}
		return nil, nil
	}
	b, err := os.ReadFile(o.keyFile)
	if err != nil {
		return nil, err
	}
	k, err := snapshot.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.keyFile, err)
	}
	return &k, nil
}

func (o *objectFlags) open(where string) (location, error) {
	if rest, ok := strings.CutPrefix(where, "s3://"); ok {
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" || o.endpoint == "" {
			return location{}, errors.New("an s3:// location needs a bucket and --s3-endpoint")
		}
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		c, err := minio.New(o.endpoint, &minio.Options{Creds: credentials.NewStaticV4(os.Getenv(envAccessKey), os.Getenv(envSecretKey), ""),
			Secure: !o.insecure, Region: o.region})
		if err != nil {
			return location{}, err
		}
		return location{objects: snapshot.NewMinioObjects(c, bucket), prefix: prefix, display: where}, nil
	}
	if where == "" {
		return location{}, errors.New("no package location")
	}
	return location{objects: snapshot.DirObjects{Root: where}, prefix: "", display: where}, nil
}

func runImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var of objectFlags
	of.register(fs)
	out := fs.String("out", "", "where the package goes: a directory, or s3://bucket/prefix/")
	file := fs.String("file", "", "the source file (LangGraphSQLite: the checkpointer's SQLite file; LettaAgentFile: the .af)")
	finish := worker.ImportFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ic, err := finish()
	if err != nil {
		return err
	}
	if ic == nil {
		return errors.New("--import-kind is required")
	}
	key, err := of.key()
	if err != nil {
		return err
	}
	loc, err := of.open(*out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if loc.prefix == "" {
		loc.prefix = "package/"
	}
	start := time.Now()
	st, m, err := worker.BuildImportPackage(ctx, ic, worker.ImportSource{PostgresURI: os.Getenv(envSourceURI), PostgresURIVar: envSourceURI, FilePath: *file},
		importer.PackageOptions{Objects: loc.objects, Prefix: loc.prefix, Key: key, Unencrypted: key == nil, SpillDir: os.TempDir()})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "package %s at %s%s: %d memories in %d scopes, %d shards (%s)\n", m.PackageID, loc.display, strings.TrimPrefix(loc.prefix, "package/"),
		m.Counts.Items, m.Counts.Scopes, len(m.Shards), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "threads %d: imported %d, inactive %d, zombie %d, no user %d, empty %d, unsupported %d; store items %d (skipped %d)\n",
		st.Threads, st.Imported, st.Inactive, st.Zombie, st.NoUser, st.Empty, st.Unsupported, st.StoreItems, st.StoreSkipped)
	if st.FirstProblem != "" {
		fmt.Fprintf(stdout, "first problem: %s\n", st.FirstProblem)
	}
	return nil
}

func runRead(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var of objectFlags
	of.register(fs)
	scopes := fs.Bool("scopes", false, "inspect: list the item count of every scope")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%s takes one package location", cmd)
	}
	loc, err := of.open(fs.Arg(0))
	if err != nil {
		return err
	}
	if loc.prefix == "" {
		if names, _ := loc.objects.List(ctx, "package/"+snapshot.ManifestName); len(names) == 1 {
			loc.prefix = "package/" // what memoryctl import writes into a directory
		}
	}
	key, err := of.key()
	if err != nil && cmd == "verify" {
		return err
	}
	r, err := snapshot.Open(ctx, loc.objects, loc.prefix, key)
	if err != nil {
		return err
	}
	m := r.Manifest()
	fmt.Fprintf(stdout, "package %s, format v%d (stored v%d), by %s %s\n", m.PackageID, m.FormatVersion, r.StoredFormatVersion(), m.Producer, m.ProducerVersion)
	fmt.Fprintf(stdout, "created %s, source %+v, encrypted %v\n", m.CreatedAt.Format(time.RFC3339), m.Source, m.Encryption != nil)
	fmt.Fprintf(stdout, "%d memories in %d scopes, %d shards, %d tombstones\n", m.Counts.Items, m.Counts.Scopes, len(m.Shards), m.Tombstones.Count)
	for _, t := range memory.AllTypes() {
		fmt.Fprintf(stdout, "  %-10s %d\n", t, m.Counts.ByType[t])
	}
	if cmd == "inspect" {
		if *scopes {
			for _, s := range slices.Sorted(maps.Keys(m.Counts.ByScope)) {
				fmt.Fprintf(stdout, "  %s\t%d\n", s, m.Counts.ByScope[s])
			}
		}
		return nil
	}
	var n int64
	last := time.Now()
	err = r.Items(ctx, func(memory.Item) error {
		n++
		if time.Since(last) > 2*time.Second {
			fmt.Fprintf(stderr, "verified %d of %d memories\n", n, m.Counts.Items)
			last = time.Now()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("verification failed after %d memories: %w", n, err)
	}
	if n != m.Counts.Items {
		return fmt.Errorf("read %d memories, the manifest counts %d", n, m.Counts.Items)
	}
	fmt.Fprintf(stdout, "verified: every shard's size and checksum, every memory (%d), all decrypted and valid\n", n)
	return nil
}
