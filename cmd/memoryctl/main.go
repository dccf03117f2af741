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
	"path/filepath"
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

  memoryctl import --import-kind KIND [flags] --out DIR|s3://BUCKET/PREFIX/   convert a framework's memory into a package
  memoryctl inspect [flags] DIR|s3://BUCKET/PREFIX/                          manifest, counts per type and scope
  memoryctl verify [flags] DIR|s3://BUCKET/PREFIX/                           read every item, checking every checksum
  memoryctl pending list|retry [flags]                                       a store's pending index work (through its gateway)
  memoryctl status [flags]                                                   a store's gateway: sessions' tier, query cache hit rate

Flags may come before or after the package location.
Run "memoryctl <command> -h" for a command's flags and examples.
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
	case "status":
		err = runStatus(ctx, args, os.Stdout, os.Stderr)
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

// objectFlags are the flags that reach object storage and hold a package's key.
type objectFlags struct {
	endpoint, region string
	insecure         bool
	keyFile          string
	unencrypted      bool
}

// register adds the flags; forWriting adds --unencrypted, which only a command that
// writes a package needs (a reader learns from the manifest whether it is encrypted).
func (o *objectFlags) register(fs *flag.FlagSet, forWriting bool) {
	fs.StringVar(&o.endpoint, "s3-endpoint", "", "S3 endpoint host:port, for s3:// locations")
	fs.StringVar(&o.region, "s3-region", "", "S3 region")
	fs.BoolVar(&o.insecure, "s3-insecure", false, "plain HTTP to the S3 endpoint (a local MinIO without TLS)")
	fs.StringVar(&o.keyFile, "key-file", "", "file holding the package's 32-byte key (raw, hex or base64)")
	if forWriting {
		fs.BoolVar(&o.unencrypted, "unencrypted", false, "write the package without encryption (instead of --key-file)")
	}
}

// key reads --key-file; nil when there is none.
func (o *objectFlags) key() (*snapshot.Key, error) {
	if o.keyFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(o.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	k, err := snapshot.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("--key-file %s: %w", o.keyFile, err)
	}
	return &k, nil
}

// writeKey is the key a new package is written with: --key-file, or none with
// --unencrypted; one of the two must be said.
func (o *objectFlags) writeKey() (*snapshot.Key, error) {
	switch {
	case o.keyFile != "" && o.unencrypted:
		return nil, errors.New("give --key-file or --unencrypted, not both")
	case o.keyFile == "" && !o.unencrypted:
		return nil, errors.New("give --key-file to encrypt the package, or --unencrypted for a plaintext one")
	}
	return o.key()
}

// open turns a location argument into objects and a prefix. A local directory is
// the package itself (its manifest.json inside) or what memoryctl import wrote
// (the package under package/); prefix is "" when where names a place for a new
// package (import's --out).
func (o *objectFlags) open(ctx context.Context, where string, existing bool) (location, error) {
	if rest, ok := strings.CutPrefix(where, "s3://"); ok {
		bucket, prefix, _ := strings.Cut(rest, "/")
		switch {
		case bucket == "":
			return location{}, fmt.Errorf("%s: no bucket (want s3://BUCKET/PREFIX/)", where)
		case o.endpoint == "":
			return location{}, fmt.Errorf("%s: an s3:// location needs --s3-endpoint HOST:PORT", where)
		case existing && prefix == "":
			return location{}, fmt.Errorf("%s: no package prefix (want s3://BUCKET/PREFIX/, the prefix holding manifest.json)", where)
		}
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		c, err := minio.New(o.endpoint, &minio.Options{Creds: credentials.NewStaticV4(os.Getenv(envAccessKey), os.Getenv(envSecretKey), ""),
			Secure: !o.insecure, Region: o.region})
		if err != nil {
			return location{}, fmt.Errorf("--s3-endpoint %s: %w", o.endpoint, err)
		}
		loc := location{objects: snapshot.NewMinioObjects(c, bucket), prefix: prefix, display: where}
		if existing {
			if names, err := loc.objects.List(ctx, prefix+snapshot.ManifestName); err != nil {
				return location{}, fmt.Errorf("%s: %w", where, err)
			} else if len(names) == 0 {
				return location{}, fmt.Errorf("no memory package at %s: no %s under it", where, snapshot.ManifestName)
			}
		}
		return loc, nil
	}
	if where == "" {
		return location{}, errors.New("no package location")
	}
	if !existing {
		return location{objects: snapshot.DirObjects{Root: where}, display: where}, nil
	}
	st, err := os.Stat(where)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return location{}, fmt.Errorf("no memory package at %s: no such directory", where)
	case err != nil:
		return location{}, err
	case !st.IsDir():
		return location{}, fmt.Errorf("no memory package at %s: not a directory (a package is a directory holding %s)", where, snapshot.ManifestName)
	}
	if fileExists(filepath.Join(where, "package", snapshot.ManifestName)) { // what memoryctl import writes
		return location{objects: snapshot.DirObjects{Root: where}, prefix: "package/", display: where}, nil
	}
	if fileExists(filepath.Join(where, snapshot.ManifestName)) { // the package directory itself
		abs, err := filepath.Abs(where)
		if err != nil {
			return location{}, err
		}
		return location{objects: snapshot.DirObjects{Root: filepath.Dir(abs)}, prefix: filepath.Base(abs) + "/", display: where}, nil
	}
	return location{}, fmt.Errorf("no memory package at %s: no %s in it or in %s", where, snapshot.ManifestName, filepath.Join(where, "package"))
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

var importHelp = help{
	synopsis: "import --import-kind KIND [flags] --out DIR|s3://BUCKET/PREFIX/",
	about: `Converts a framework's memory into a memory package, for review before anything is
written to a store: the same conversion as a MemoryRestore with spec.source.importFrom.
A database source's URI comes from $MEMORYCTL_SOURCE_URI (it holds a password);
a file source is --file. Counts per thread outcome are printed at the end; on a
terminal, progress is shown while it runs.`,
	examples: `MEMORYCTL_SOURCE_URI='postgres://user:password@db:5432/langgraph' memoryctl import \
  --import-kind=LangGraphPostgres --import-user-metadata-key=user_id \
  --import-inactive-after=168h --out ./reviewed --key-file snapshot.key
memoryctl import --import-kind=LangGraphSQLite --file checkpoints.sqlite \
  --import-user-pattern='^u-(?P<user>[^:]+):' --out ./reviewed-sqlite --unencrypted
AWS_ACCESS_KEY_ID=minio AWS_SECRET_ACCESS_KEY=minio123 memoryctl import --import-kind=LettaAgentFile --file agent.af \
  --import-scope-template='agent:{thread}' --out s3://agent-memory/imports/agent/ --s3-endpoint localhost:9000 --s3-insecure --unencrypted`,
}

func runImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("import", importHelp, stderr)
	var of objectFlags
	of.register(fs, true)
	out := fs.String("out", "", "where the package goes: a directory (the package is written under DIR/package/), or s3://BUCKET/PREFIX/")
	file := fs.String("file", "", "the source file: LangGraphSQLite's checkpointer database, LettaAgentFile's .af, Mem0's Chroma directory (or its chroma.sqlite3), CrewAI's storage directory (or its long_term_memory_storage.db)")
	historyFile := fs.String("history-file", "", "Mem0: mem0's history database (history.db), for the memories' earlier values and deletions")
	chromaFile := fs.String("chroma-file", "", "CrewAI: the chroma.sqlite3 of its short-term and entity memory, when --file is the long-term database")
	finish := worker.ImportFlags(fs)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("import takes no arguments besides its flags (got %q); the package goes where --out says", rest[0])
	}
	ic, err := finish()
	if err != nil {
		return err
	}
	if ic == nil {
		return errors.New("--import-kind is required (" + strings.Join(worker.ImportKinds(), ", ") + ")")
	}
	switch {
	case ic.NeedsFile() && *file == "":
		return fmt.Errorf("--import-kind %s reads a file: give --file PATH", ic.Kind)
	case !ic.NeedsFile() && *file != "":
		return fmt.Errorf("--import-kind %s reads a database from $%s, not --file", ic.Kind, envSourceURI)
	case *file != "":
		if st, err := os.Stat(*file); err != nil {
			return fmt.Errorf("--file: %w", err)
		} else if !st.Mode().IsRegular() && ((ic.Kind != worker.ImportMem0 && ic.Kind != worker.ImportCrewAI) || !st.IsDir()) {
			return fmt.Errorf("--file %s: not a file", *file)
		}
	}
	switch {
	case *historyFile != "" && ic.Kind != worker.ImportMem0:
		return fmt.Errorf("--history-file is for --import-kind Mem0")
	case *historyFile != "":
		if _, err := os.Stat(*historyFile); err != nil {
			return fmt.Errorf("--history-file: %w", err)
		}
	}
	switch {
	case *chromaFile != "" && ic.Kind != worker.ImportCrewAI:
		return fmt.Errorf("--chroma-file is for --import-kind CrewAI")
	case *chromaFile != "":
		if _, err := os.Stat(*chromaFile); err != nil {
			return fmt.Errorf("--chroma-file: %w", err)
		}
	}
	if *out == "" {
		return errors.New("--out is required: a directory, or s3://BUCKET/PREFIX/")
	}
	key, err := of.writeKey()
	if err != nil {
		return err
	}
	loc, err := of.open(ctx, *out, false)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	where := loc.display
	if loc.prefix == "" { // a directory: the package goes under package/
		loc.prefix = "package/"
		where = filepath.Join(loc.display, "package")
	}
	// Checked before any work: a package is never overwritten.
	if names, err := loc.objects.List(ctx, loc.prefix+snapshot.ManifestName); err == nil && len(names) > 0 {
		return fmt.Errorf("--out %s already holds a package (%s%s): memoryctl never overwrites one; choose another --out, or remove it",
			*out, loc.prefix, snapshot.ManifestName)
	}
	start := time.Now()
	prog := newProgress(stderr, start)
	st, m, err := worker.BuildImportPackage(ctx, ic, worker.ImportSource{PostgresURI: os.Getenv(envSourceURI), PostgresURIVar: envSourceURI, FilePath: *file, HistoryPath: *historyFile,
		ChromaPath: *chromaFile},
		importer.PackageOptions{Objects: loc.objects, Prefix: loc.prefix, Key: key, Unencrypted: key == nil, SpillDir: os.TempDir()}, prog.update)
	prog.done(st)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "package %s at %s: %d memories in %d scopes, %d shards (%s)\n", m.PackageID, where,
		m.Counts.Items, m.Counts.Scopes, len(m.Shards), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "threads %d: imported %d, inactive %d, zombie %d, no user %d, empty %d, unsupported %d; store items %d (skipped %d)\n",
		st.Threads, st.Imported, st.Inactive, st.Zombie, st.NoUser, st.Empty, st.Unsupported, st.StoreItems, st.StoreSkipped)
	for _, l := range st.LeftOut {
		fmt.Fprintf(stdout, "left out: %d %s\n", l.Count, l.What)
	}
	if st.FirstProblem != "" {
		fmt.Fprintf(stdout, "first problem: %s\n", st.FirstProblem)
	}
	return nil
}

var readHelp = map[string]help{
	"inspect": {
		synopsis: "inspect [flags] DIR|s3://BUCKET/PREFIX/",
		about: `Prints a package's manifest: id, format version, producer, creation time and
source, whether it is encrypted, and its memories per type (per scope with --scopes).
Only the manifest is read; an encrypted package's manifest is authenticated with its
key, so give --key-file for one.`,
		examples: `memoryctl inspect ./reviewed --key-file snapshot.key --scopes
AWS_ACCESS_KEY_ID=minio AWS_SECRET_ACCESS_KEY=minio123 memoryctl inspect s3://agent-memory/acme/snapshots/nightly-20261201-0200/ \
  --s3-endpoint localhost:9000 --s3-insecure --key-file snapshot.key`,
	},
	"verify": {
		synopsis: "verify [flags] DIR|s3://BUCKET/PREFIX/",
		about: `Reads every memory of a package: each object's size and SHA-256 against the
authenticated manifest, each chunk decrypted and authenticated, each memory decoded
and validated. A wrong key, a changed byte or a missing shard fails it, naming what
failed. An encrypted package needs --key-file; a plaintext one needs nothing.

With --restore it is a restore drill by hand: the package (in object storage) is
restored into a scratch schema made on $MEMORYCTL_DRILL_URI's database (a login
that may create a schema), with every checksum verified on the way, then checked
as the operator's drills check: its memories and tombstones against the manifest,
no forgotten memory back, and a recall sample against exact search. The scratch
schema is dropped at the end, whatever happened.`,
		examples: `memoryctl verify ./reviewed --key-file snapshot.key
AWS_ACCESS_KEY_ID=minio AWS_SECRET_ACCESS_KEY=minio123 memoryctl verify s3://agent-memory/acme/snapshots/nightly-20261201-0200/ \
  --s3-endpoint localhost:9000 --s3-insecure --key-file snapshot.key
MEMORYCTL_DRILL_URI=postgres://drills@localhost/scratch AWS_ACCESS_KEY_ID=minio AWS_SECRET_ACCESS_KEY=minio123 \
  memoryctl verify --restore s3://agent-memory/acme/snapshots/nightly-20261201-0200/ --s3-endpoint localhost:9000 --s3-insecure \
  --key-file snapshot.key --dimension 384`,
	},
}

func runRead(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(cmd, readHelp[cmd], stderr)
	var of objectFlags
	of.register(fs, false)
	scopes := false
	if cmd == "inspect" {
		fs.BoolVar(&scopes, "scopes", false, "also list the memory count of every scope")
	}
	var df drillFlags
	if cmd == "verify" {
		df.register(fs)
	}
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("%s takes one package location, a directory or s3://BUCKET/PREFIX/ (got %d arguments besides flags)", cmd, len(rest))
	}
	if err := df.check(rest[0]); err != nil {
		return err
	}
	key, err := of.key()
	if err != nil {
		return err
	}
	loc, err := of.open(ctx, rest[0], true)
	if err != nil {
		return err
	}
	r, err := openPackage(ctx, loc, key, of.keyFile)
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
	if im := m.Import; im != nil {
		fmt.Fprintf(stdout, "imported from %s: threads %d: imported %d (%d messages), inactive %d, zombie %d, no user %d, empty %d, unsupported %d; store items %d (skipped %d)\n",
			m.Source.Store, im.Threads, im.Imported, im.Messages, im.Inactive, im.Zombie, im.NoUser, im.Empty, im.Unsupported, im.StoreItems, im.StoreSkipped)
		for _, l := range im.LeftOut {
			fmt.Fprintf(stdout, "  left out: %d %s\n", l.Count, l.What)
		}
		if im.FirstProblem != "" {
			fmt.Fprintf(stdout, "  first problem: %s\n", im.FirstProblem)
		}
	}
	if cmd == "inspect" {
		if scopes {
			for _, s := range slices.Sorted(maps.Keys(m.Counts.ByScope)) {
				fmt.Fprintf(stdout, "  %s\t%d\n", s, m.Counts.ByScope[s])
			}
		}
		return nil
	}
	if df.restore {
		return runDrill(ctx, rest[0], of, df, m, stdout, stderr)
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

// openPackage opens the package at loc, saying in memoryctl's words what is wrong
// with the key. A key given for a plaintext package is not needed, and not an error.
func openPackage(ctx context.Context, loc location, key *snapshot.Key, keyFile string) (*snapshot.Reader, error) {
	r, err := snapshot.Open(ctx, loc.objects, loc.prefix, key)
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, snapshot.ErrKeyRequired):
		return nil, fmt.Errorf("the package at %s is encrypted: give its key with --key-file", loc.display)
	case errors.Is(err, snapshot.ErrWrongKey):
		return nil, fmt.Errorf("the key in %s does not open the package at %s (wrong key, or the manifest was changed)", keyFile, loc.display)
	case errors.Is(err, snapshot.ErrNotEncrypted):
		return snapshot.Open(ctx, loc.objects, loc.prefix, nil)
	}
	return nil, fmt.Errorf("package at %s: %w", loc.display, err)
}
