package importer

import (
	"context"
	"fmt"
	"os"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// PackageOptions say where an import's package goes.
type PackageOptions struct {
	Objects snapshot.Objects
	Prefix  string
	// Key encrypts the package; Unencrypted must be set to write without one.
	Key         *snapshot.Key
	Unencrypted bool
	// Source describes where the memories came from (the manifest's source).
	Source snapshot.SourceInfo
	// Producer and ProducerVersion name the importer ("memory-operator import").
	ProducerVersion string
	// SpillDir holds the sorter's temporary runs (os.TempDir() when empty).
	SpillDir string
	// SortBudget is the memory the sorter holds before spilling (0: a default).
	SortBudget int
}

// WritePackage runs an import (produce hands each converted memory to its callback)
// and writes the memories as a package, in the scope order a package needs. The
// restore engine then reads it like any snapshot: it verifies the whole package
// before writing anything, maps scopes, applies denylists and tombstones, resolves
// conflicts and is idempotent. A failed import leaves no manifest.
func WritePackage(ctx context.Context, o PackageOptions, produce func(fn func(memory.Item) error) (Stats, error)) (Stats, *snapshot.Manifest, error) {
	dir := o.SpillDir
	if dir == "" {
		dir = os.TempDir()
	}
	sorter := newScopeSorter(dir, o.SortBudget)
	defer sorter.close()
	st, err := produce(sorter.add)
	if err != nil {
		return st, nil, err
	}
	w, err := snapshot.NewWriter(ctx, o.Objects, snapshot.WriterOptions{Prefix: o.Prefix, Key: o.Key, Unencrypted: o.Unencrypted,
		ReplaceIncomplete: true, Producer: "memory-operator import", ProducerVersion: o.ProducerVersion, Source: o.Source})
	if err != nil {
		return st, nil, err
	}
	if err := sorter.each(func(it memory.Item) error { return w.Add(ctx, it) }); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return st, nil, fmt.Errorf("import: writing the package: %w", err)
	}
	m, err := w.Close(ctx)
	if err != nil {
		return st, nil, fmt.Errorf("import: writing the package: %w", err)
	}
	return st, m, nil
}
