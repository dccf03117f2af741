package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// minioPackages is the PackageStore of the running operator: the package format's own
// reader over minio-go, so the manifest is checked (and, for an encrypted package,
// authenticated with its key) exactly as a restore would check it.
type minioPackages struct{}

func (minioPackages) objects(a PackageAccess) (snapshot.Objects, error) {
	c, err := provision.NewS3Client(provision.S3Conn{
		Endpoint: a.Endpoint, Region: a.Region, Secure: !a.Insecure, AccessKey: a.AccessKey, SecretKey: a.SecretKey,
	})
	if err != nil {
		return nil, err
	}
	return snapshot.NewMinioObjects(c, a.Bucket), nil
}

// Summary opens the package with its key and digests the manifest as stored.
func (p minioPackages) Summary(ctx context.Context, a PackageAccess) (PackageSummary, error) {
	obj, err := p.objects(a)
	if err != nil {
		return PackageSummary{}, err
	}
	r, err := snapshot.Open(ctx, obj, a.Prefix, a.Key)
	if err != nil {
		return PackageSummary{}, err
	}
	digest, err := objectSHA256(ctx, obj, r.Prefix()+snapshot.ManifestName)
	if err != nil {
		return PackageSummary{}, err
	}
	return summarize(r.Manifest(), r.StoredFormatVersion(), digest), nil
}

// Delete removes every object under the package prefix.
func (p minioPackages) Delete(ctx context.Context, a PackageAccess) error {
	obj, err := p.objects(a)
	if err != nil {
		return err
	}
	return obj.Delete(ctx, a.Prefix)
}

func objectSHA256(ctx context.Context, obj snapshot.Objects, name string) (string, error) {
	rc, err := obj.Get(ctx, name)
	if err != nil {
		return "", err
	}
	defer func() { _ = rc.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// summarize is what status records of a manifest: totals, the non-zero counts per type,
// never the per-scope counts (those stay in object storage, next to the data).
func summarize(m *snapshot.Manifest, storedVersion int, manifestSHA256 string) PackageSummary {
	s := PackageSummary{
		FormatVersion:  storedVersion,
		StoreNamespace: m.Source.Namespace,
		StoreName:      m.Source.Name,
		Items:          m.Counts.Items,
		Scopes:         m.Counts.Scopes,
		Bytes:          m.StoredBytes(),
		Shards:         int32(len(m.Shards)),
		ManifestSHA256: manifestSHA256,
	}
	for t, n := range m.Counts.ByType {
		if n == 0 {
			continue // types with no items (not selected, or empty) are left out
		}
		if s.ItemsByType == nil {
			s.ItemsByType = map[string]int64{}
		}
		s.ItemsByType[string(t)] = n
	}
	if m.Embedding != nil {
		s.EmbeddingModel = m.Embedding.Model
	}
	return s
}

// isPackageUnusable reports whether a Summary error means the package itself is wrong
// (missing manifest, a format too new, a manifest that fails its checks or was written
// with another key), as opposed to object storage being out of reach.
func isPackageUnusable(err error) bool {
	for _, target := range []error{snapshot.ErrIncomplete, snapshot.ErrCorrupt, snapshot.ErrUnsupportedVersion,
		snapshot.ErrWrongKey, snapshot.ErrKeyRequired, snapshot.ErrNotEncrypted} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
