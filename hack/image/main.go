// Command image builds a container image from static files, without a container
// engine or registry access, and writes it as a docker-archive tarball (what
// `ctr images import` and `docker load` read). `make image` builds the operator's
// image with it, in the layout of the Dockerfile's distroless runtime stage: the
// binary at /memory-operator, CA certificates, /etc/passwd with the nonroot user
// 65532, /tmp, running as 65532:65532; hack/cluster.sh builds its pause image with it.
//
// The layer is reproducible: entries sorted, owners and modes fixed, every time set
// to SOURCE_DATE_EPOCH (0 when unset).
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var files, labels listFlag
	out := flag.String("out", "", "where to write the docker-archive tarball")
	tag := flag.String("tag", "", "the image reference recorded in the tarball (localhost/memory-operator:dev)")
	entrypoint := flag.String("entrypoint", "", "entrypoint, comma-separated")
	cmd := flag.String("cmd", "", "default arguments, comma-separated")
	user := flag.String("user", "65532:65532", "uid:gid the image runs as")
	caCerts := flag.String("ca-certs", "", "CA bundle copied to /etc/ssl/certs/ca-certificates.crt")
	flag.Var(&files, "file", "src:dst[:mode] adds a file (repeatable; mode in octal, 0755 by default)")
	flag.Var(&labels, "label", "key=value image label (repeatable)")
	flag.Parse()
	if err := run(*out, *tag, *entrypoint, *cmd, *user, *caCerts, files, labels); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// entry is one file or directory of the layer.
type entry struct {
	path string
	mode int64
	uid  int
	data []byte
	dir  bool
}

func run(out, tag, entrypoint, cmd, user, caCerts string, files, labels []string) error {
	if out == "" || tag == "" || entrypoint == "" {
		return fmt.Errorf("--out, --tag and --entrypoint are required")
	}
	ref, err := name.ParseReference(tag)
	if err != nil {
		return fmt.Errorf("--tag: %w", err)
	}
	uid, gid, err := parseUser(user)
	if err != nil {
		return err
	}
	entries, err := layerEntries(uid, gid, caCerts, files)
	if err != nil {
		return err
	}
	layer, err := layerTar(entries, sourceDate())
	if err != nil {
		return err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: sourceDate()}
	cfg.Config.Entrypoint = split(entrypoint)
	cfg.Config.Cmd = split(cmd)
	cfg.Config.User = user
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cfg.Config.Labels = map[string]string{}
	for _, kv := range labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--label %q: want key=value", kv)
		}
		cfg.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", ref.Name(), digest)
	return nil
}

// layerEntries are the image's files: the nonroot user's passwd and group entries,
// its home, /tmp, the CA bundle and the files asked for.
func layerEntries(uid, gid int, caCerts string, files []string) ([]entry, error) {
	entries := []entry{
		{path: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid))},
		{path: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", gid))},
		{path: "home/nonroot", mode: 0o700, uid: uid, dir: true},
		{path: "tmp", mode: 0o1777, dir: true},
	}
	if caCerts != "" {
		b, err := os.ReadFile(caCerts)
		if err != nil {
			return nil, fmt.Errorf("--ca-certs: %w", err)
		}
		entries = append(entries, entry{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: b})
	}
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 || !strings.HasPrefix(parts[1], "/") {
			return nil, fmt.Errorf("--file %q: want src:/dst[:mode]", f)
		}
		mode := int64(0o755)
		if len(parts) == 3 {
			var err error
			if mode, err = strconv.ParseInt(parts[2], 8, 32); err != nil {
				return nil, fmt.Errorf("--file %q: mode: %w", f, err)
			}
		}
		b, err := os.ReadFile(parts[0])
		if err != nil {
			return nil, fmt.Errorf("--file: %w", err)
		}
		entries = append(entries, entry{path: strings.TrimPrefix(path.Clean(parts[1]), "/"), mode: mode, data: b})
	}
	return entries, nil
}

func parseUser(u string) (uid, gid int, err error) {
	a, b, ok := strings.Cut(u, ":")
	if uid, err = strconv.Atoi(a); err == nil && ok {
		gid, err = strconv.Atoi(b)
	}
	if err != nil || !ok || uid <= 0 || gid <= 0 {
		return 0, 0, fmt.Errorf("--user %q: want a non-root numeric uid:gid", u)
	}
	return uid, gid, nil
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func sourceDate() time.Time {
	if s, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		return time.Unix(s, 0).UTC()
	}
	return time.Unix(0, 0).UTC()
}

// layerTar writes the entries, with every parent directory, sorted by path.
func layerTar(entries []entry, mtime time.Time) ([]byte, error) {
	byPath := map[string]entry{}
	for _, e := range entries {
		for dir := path.Dir(e.path); dir != "."; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = entry{path: dir, mode: 0o755, dir: true}
			}
		}
		byPath[e.path] = e
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := byPath[p]
		h := &tar.Header{Name: p, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: mtime, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
