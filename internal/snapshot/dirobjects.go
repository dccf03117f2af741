package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DirObjects implements Objects over a local directory: object names are paths under
// Root. Imports build their package in one (a Job's emptyDir, memoryctl's --out dir)
// before the restore engine reads it.
type DirObjects struct{ Root string }

var _ Objects = DirObjects{}

func (d DirObjects) path(name string) (string, error) {
	clean := filepath.Clean("/" + name)
	if clean == "/" || strings.Contains(name, "\x00") {
		return "", fmt.Errorf("object name %q is not a file name", name)
	}
	return filepath.Join(d.Root, clean), nil
}

// Put writes the object through a temporary file renamed into place, so a failed
// write leaves nothing under name.
func (d DirObjects) Put(ctx context.Context, name string, r io.Reader) (int64, error) {
	p, err := d.path(name)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".part-*")
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, ctxReader{ctx, r})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return 0, err
	}
	return n, nil
}

// Get opens the object.
func (d DirObjects) Get(_ context.Context, name string) (io.ReadCloser, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

// Delete removes every object whose name starts with prefix.
func (d DirObjects) Delete(ctx context.Context, prefix string) error {
	if prefix == "" {
		return errors.New("delete with an empty prefix")
	}
	names, err := d.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, n := range names {
		p, _ := d.path(n)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// AbortUploads has nothing to abort: a file is renamed into place whole.
func (DirObjects) AbortUploads(context.Context, []string) (int, error) { return 0, nil }

// List returns the names under prefix, sorted.
func (d DirObjects) List(_ context.Context, prefix string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(d.Root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".part-") {
			return nil
		}
		rel, err := filepath.Rel(d.Root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
