package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/minio/minio-go/v7"
)

// Objects is the object storage a package lives in: an S3-compatible bucket, or
// anything else that can store named blobs. Names are full object names inside the
// bucket (the package prefix included).
type Objects interface {
	// Put stores the object, reading r to EOF without knowing its size in advance,
	// and returns the number of bytes stored. When r fails, Put fails and stores
	// nothing under name.
	Put(ctx context.Context, name string, r io.Reader) (size int64, err error)
	// Get opens the object for reading. A missing object is an error that matches
	// fs.ErrNotExist.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// Delete removes every object whose name starts with prefix, and any unfinished
	// upload under it that the store lists by prefix. An empty prefix is refused.
	Delete(ctx context.Context, prefix string) error
	// AbortUploads aborts the unfinished uploads of exactly these object names (the
	// parts of multipart uploads a crashed writer left, invisible to listings but
	// holding storage; some servers, MinIO among them, list them only by exact name),
	// and returns how many it aborted.
	AbortUploads(ctx context.Context, names []string) (int, error)
	// List returns the names of the objects whose names start with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
}

// DefaultPartSize is the multipart part size used for uploads of unknown length: the
// memory a streamed upload buffers, and 1/10000 of the largest object it can store
// (80 GiB; a shard is never larger than its largest scope plus the shard target).
const DefaultPartSize = 8 << 20

// MinioObjects implements Objects for a bucket through minio-go, which speaks to any
// S3-compatible endpoint.
type MinioObjects struct {
	Client *minio.Client
	Bucket string
	// PartSize is the multipart part size for streamed uploads (DefaultPartSize when 0).
	PartSize uint64
}

// NewMinioObjects returns Objects for one bucket.
func NewMinioObjects(c *minio.Client, bucket string) *MinioObjects {
	return &MinioObjects{Client: c, Bucket: bucket, PartSize: DefaultPartSize}
}

// Put uploads r. Readers that know their length (bytes.Reader, strings.Reader) go up in
// one request; others stream as a multipart upload of PartSize parts, which minio-go
// aborts when r or the upload fails, so no object appears under name.
func (m *MinioObjects) Put(ctx context.Context, name string, r io.Reader) (int64, error) {
	size := int64(-1)
	if l, ok := r.(interface{ Len() int }); ok {
		size = int64(l.Len())
	}
	partSize := m.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	info, err := m.Client.PutObject(ctx, m.Bucket, name, r, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		PartSize:    partSize,
		// Shards carry their own SHA-256 (in the manifest) and, when encrypted,
		// authenticated chunks: hashing every part again for the request signature
		// only costs CPU on both ends.
		DisableContentSha256: true,
	})
	if err != nil {
		return 0, fmt.Errorf("uploading %s to bucket %s: %w", name, m.Bucket, err)
	}
	return info.Size, nil
}

// Get opens the object; a missing object or bucket matches fs.ErrNotExist.
func (m *MinioObjects) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	obj, err := m.Client.GetObject(ctx, m.Bucket, name, minio.GetObjectOptions{})
	if err == nil {
		// GetObject is lazy; Stat makes the request and surfaces a missing object now.
		var info minio.ObjectInfo
		if info, err = obj.Stat(); err == nil {
			return &sizedBody{ReadCloser: obj, what: fmt.Sprintf("%s in bucket %s", name, m.Bucket), size: info.Size}, nil
		}
		_ = obj.Close()
	}
	if isNotExist(err) {
		return nil, fmt.Errorf("object %s in bucket %s: %w", name, m.Bucket, fs.ErrNotExist)
	}
	return nil, fmt.Errorf("reading %s from bucket %s: %w", name, m.Bucket, err)
}

// sizedBody is an object's body that knows the size its store announced: a body that
// ends (or fails) before it was cut in transit, a reset connection, which is
// ErrTransfer and must never read as a truncated, corrupt package. An object that is
// shorter than its manifest says ends at its own size, with io.EOF, as before.
type sizedBody struct {
	io.ReadCloser
	what       string
	size, read int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if err != nil && b.read < b.size {
		return n, fmt.Errorf("%w: %s: after %d of its %d bytes: %v", ErrTransfer, b.what, b.read, b.size, err)
	}
	return n, err
}

func isNotExist(err error) bool {
	switch minio.ToErrorResponse(err).Code {
	case minio.NoSuchKey, minio.NoSuchBucket:
		return true
	}
	return false
}

// List returns the names under prefix (recursively), sorted.
func (m *MinioObjects) List(ctx context.Context, prefix string) ([]string, error) {
	var names []string
	for obj := range m.Client.ListObjects(ctx, m.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			if isNotExist(obj.Err) {
				return nil, fmt.Errorf("bucket %s: %w", m.Bucket, fs.ErrNotExist)
			}
			return nil, fmt.Errorf("listing %s in bucket %s: %w", prefix, m.Bucket, obj.Err)
		}
		names = append(names, obj.Key)
	}
	return names, nil
}

// Delete removes the objects under prefix, then unfinished multipart uploads under it.
func (m *MinioObjects) Delete(ctx context.Context, prefix string) error {
	if strings.Trim(prefix, "/") == "" {
		return errors.New("refusing to delete with an empty prefix (the whole bucket)")
	}
	if err := RemovePrefix(ctx, m.Client, m.Bucket, prefix, nil); err != nil {
		if isNotExist(err) {
			return nil
		}
		return err
	}
	for up := range m.Client.ListIncompleteUploads(ctx, m.Bucket, prefix, true) {
		if up.Err != nil {
			return fmt.Errorf("listing unfinished uploads under %s in bucket %s: %w", prefix, m.Bucket, up.Err)
		}
		if err := m.Client.RemoveIncompleteUpload(ctx, m.Bucket, up.Key); err != nil {
			return fmt.Errorf("aborting the unfinished upload of %s in bucket %s: %w", up.Key, m.Bucket, err)
		}
	}
	return nil
}

// AbortUploads aborts the unfinished multipart uploads of each name, listing them by
// the exact object name.
func (m *MinioObjects) AbortUploads(ctx context.Context, names []string) (int, error) {
	n := 0
	for _, name := range names {
		found := false
		for up := range m.Client.ListIncompleteUploads(ctx, m.Bucket, name, false) {
			if up.Err != nil {
				if isNotExist(up.Err) {
					break
				}
				return n, fmt.Errorf("listing unfinished uploads of %s in bucket %s: %w", name, m.Bucket, up.Err)
			}
			if up.Key == name {
				found = true
				n++
			}
		}
		if !found {
			continue
		}
		if err := m.Client.RemoveIncompleteUpload(ctx, m.Bucket, name); err != nil {
			return n, fmt.Errorf("aborting the unfinished upload of %s in bucket %s: %w", name, m.Bucket, err)
		}
	}
	return n, nil
}

// RemovePrefix deletes every object under prefix in bucket except those keep returns
// true for (nil keep: none are kept), streaming the listing into batched deletes so a
// prefix of any size needs no memory.
func RemovePrefix(ctx context.Context, c *minio.Client, bucket, prefix string, keep func(key string) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the lister if removal fails half-way
	objects := make(chan minio.ObjectInfo)
	listErr := make(chan error, 1)
	go func() {
		defer close(objects)
		for obj := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if obj.Err != nil {
				listErr <- obj.Err
				return
			}
			if keep != nil && keep(obj.Key) {
				continue
			}
			select {
			case objects <- obj:
			case <-ctx.Done():
				listErr <- ctx.Err()
				return
			}
		}
		listErr <- nil
	}()
	for rerr := range c.RemoveObjects(ctx, bucket, objects, minio.RemoveObjectsOptions{}) {
		if rerr.Err != nil {
			return fmt.Errorf("removing %s from bucket %s: %w", rerr.ObjectName, bucket, rerr.Err)
		}
	}
	if err := <-listErr; err != nil {
		return fmt.Errorf("listing %s in bucket %s: %w", prefix, bucket, err)
	}
	return nil
}
