package provision

import (
	"context"
	"fmt"

	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// CheckPostgres makes sure, changing nothing, that admin can host stores on its
// server: it logs in, and may create roles and schemas in its database (what
// EnsurePostgres does for every store). It returns what it found, for a status message.
func CheckPostgres(ctx context.Context, admin PostgresConn) (string, error) {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	what := "PostgreSQL " + admin.Endpoint()
	var version string
	var createRole, createSchema bool
	err = pool.QueryRow(ctx, `SELECT current_setting('server_version'),
		(SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user),
		has_database_privilege(current_database(), 'CREATE')`).Scan(&version, &createRole, &createSchema)
	if err != nil {
		return "", classify(what, err)
	}
	switch {
	case !createRole:
		return "", fail(ReasonPermissionDenied, "%s: role %s may not create roles (it needs CREATEROLE)", what, admin.User)
	case !createSchema:
		return "", fail(ReasonPermissionDenied, "%s: role %s may not create schemas in database %s (it needs CREATE on it)",
			what, admin.User, admin.Database)
	}
	return fmt.Sprintf("%s (version %s, database %s)", what, version, admin.Database), nil
}

// CheckMilvus makes sure the Milvus server answers with these credentials.
func CheckMilvus(ctx context.Context, m MilvusConn) error {
	c, err := ConnectMilvus(ctx, m)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if _, err := c.ListCollections(ctx); err != nil {
		return classify("Milvus "+m.Address, err)
	}
	return nil
}

// CheckObjectStore makes sure the bucket exists, or may be created (createBucket),
// with these credentials. It creates nothing: the first store does.
func CheckObjectStore(ctx context.Context, s S3Conn) error {
	c, err := NewS3Client(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*connectTimeout)
	defer cancel()
	return ensureBucket(ctx, c, s, fmt.Sprintf("object storage %s: bucket %s", s.Endpoint, s.Bucket), false)
}

// CheckPGVector makes sure, changing nothing, that the admin's database has the vector
// extension or can create it (pgvector 0.5 or later, for HNSW). It returns what it found.
func CheckPGVector(ctx context.Context, admin PostgresConn) (string, error) {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	what := "PostgreSQL " + admin.Endpoint() + " (database " + admin.Database + ")"
	version, err := pgvector.AvailableVersion(ctx, pool)
	if err != nil {
		return "", classifyPGVector(what, err)
	}
	return "pgvector " + version, nil
}
