package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/snapshot"
)

// S3Conn is an S3-compatible endpoint, its credentials and the bucket used.
type S3Conn struct {
	Endpoint  string
	Region    string
	Secure    bool
	AccessKey string
	SecretKey string
	Bucket    string
	// CreateBucket allows creating a missing bucket.
	CreateBucket bool
}

// markerName is the object that reserves a prefix for one store.
const markerName = ".memory-store.json"

type prefixMarker struct {
	Owner  string `json:"owner"`
	Tenant string `json:"tenant"`
}

// NewS3Client builds a minio-go client for the endpoint.
func NewS3Client(s S3Conn) (*minio.Client, error) {
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure: s.Secure,
		Region: s.Region,
	})
	if err != nil {
		return nil, fail(ReasonBackendError, "object storage %s: %v", s.Endpoint, err)
	}
	return c, nil
}

// EnsureObjectStore checks the bucket (creating it when allowed) and reserves the
// store's prefix with a marker object naming its owner.
func EnsureObjectStore(ctx context.Context, s S3Conn, names Names, owner string) error {
	c, err := NewS3Client(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*connectTimeout)
	defer cancel()
	what := fmt.Sprintf("object storage %s: bucket %s", s.Endpoint, s.Bucket)

	if err := ensureBucket(ctx, c, s, what, true); err != nil {
		return err
	}

	key := names.Prefix + markerName
	current, err := readMarker(ctx, c, s.Bucket, key)
	if err != nil {
		return classify(what+": reading "+key, err)
	}
	switch {
	case current == nil:
		body, _ := json.Marshal(prefixMarker{Owner: owner, Tenant: names.Tenant})
		if _, err := c.PutObject(ctx, s.Bucket, key, bytes.NewReader(body), int64(len(body)),
			minio.PutObjectOptions{ContentType: "application/json"}); err != nil {
			return classify(what+": writing "+key, err)
		}
	case current.Owner != owner:
		return fail(ReasonTenantConflict, "%s: prefix %s is reserved by %s", what, names.Prefix, current.Owner)
	}
	return nil
}

// ensureBucket fails unless the bucket exists or createBucket allows making it, which
// it does when create is set.
func ensureBucket(ctx context.Context, c *minio.Client, s S3Conn, what string, create bool) error {
	exists, err := c.BucketExists(ctx, s.Bucket)
	switch {
	case err != nil:
		return classify(what, err)
	case exists:
		return nil
	case !s.CreateBucket:
		return fail(ReasonBucketNotFound, "%s does not exist and createBucket is false", what)
	case !create:
		return nil
	}
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		if resp := minio.ToErrorResponse(err); resp.Code != "BucketAlreadyOwnedByYou" && resp.Code != "BucketAlreadyExists" {
			return classify(what+": creating", err)
		}
	}
	return nil
}

// readMarker returns the prefix's marker, or nil when there is none.
func readMarker(ctx context.Context, c *minio.Client, bucket, key string) (*prefixMarker, error) {
	obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = obj.Close() }()
	body, err := io.ReadAll(io.LimitReader(obj, 64<<10))
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, nil
		}
		return nil, err
	}
	var m prefixMarker
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("marker %s is not valid JSON: %w", key, err)
	}
	return &m, nil
}

// SnapshotsFolder is where snapshot packages go by default, under the store's prefix.
// Reclaiming a store leaves it alone: snapshots outlive their store.
const SnapshotsFolder = "snapshots/"

// DeleteObjectStore removes every object under the store's prefix except its snapshot
// packages, refusing when the prefix is reserved by another store. The marker goes
// last, so an interrupted delete is retried with ownership still provable.
func DeleteObjectStore(ctx context.Context, s S3Conn, names Names, owner string) error {
	c, err := NewS3Client(s)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("object storage %s: bucket %s", s.Endpoint, s.Bucket)
	exists, err := c.BucketExists(ctx, s.Bucket)
	if err != nil {
		return classify(what, err)
	}
	if !exists {
		return nil
	}
	key := names.Prefix + markerName
	current, err := readMarker(ctx, c, s.Bucket, key)
	if err != nil {
		return classify(what+": reading "+key, err)
	}
	if current != nil && current.Owner != owner {
		return fail(ReasonTenantConflict, "%s: prefix %s is reserved by %s; not deleting", what, names.Prefix, current.Owner)
	}

	keep := func(k string) bool { return k == key || strings.HasPrefix(k, names.Prefix+SnapshotsFolder) }
	if err := snapshot.RemovePrefix(ctx, c, s.Bucket, names.Prefix, keep); err != nil {
		return classify(what, err)
	}
	if err := c.RemoveObject(ctx, s.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return classify(what+": removing "+key, err)
	}
	return nil
}
