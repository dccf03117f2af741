// Package testutil finds the real services that integration tests run against.
// hack/services.sh starts them (PostgreSQL 15, PostgreSQL 16 with pgvector, MinIO,
// Milvus Lite, a Milvus server with authentication, Redis, Toxiproxy) and exports their
// addresses as MEMORY_TEST_* variables; `make test` does this for you. A test whose
// service is missing is skipped, and the skip announced even without -v.
package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"testing"
)

// requireEnv returns the variable's value. When it is unset the test fails under CI
// (a missing service there is a broken harness, never a pass) and is skipped elsewhere,
// saying so even without -v (see missing).
func requireEnv(t testing.TB, name, service string) string {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	missing(t, service+" is not running ("+name+" is unset)")
	return ""
}

// PostgresDSN is a superuser DSN for the throwaway PostgreSQL cluster.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return requireEnv(t, "MEMORY_TEST_PG_DSN", "PostgreSQL")
}

// Postgres holds the parts of the superuser connection, for code that takes them apart
// (the operator reads host, port and credentials from a Secret).
type Postgres struct {
	Host, Port, User, Password string
	PortNumber                 int // Port as a number
}

// PostgresParts returns the superuser connection settings.
func PostgresParts(t testing.TB) Postgres {
	t.Helper()
	PostgresDSN(t)
	return postgresParts(t, "PG")
}

// PGVectorDSN is a superuser DSN for the PostgreSQL 16 cluster that has the vector
// extension (pgvector 0.6.2) to create: the PGVector engine's server.
func PGVectorDSN(t testing.TB) string {
	t.Helper()
	return requireEnv(t, "MEMORY_TEST_PGVECTOR_DSN", "PostgreSQL with pgvector")
}

// PGVectorParts returns the pgvector server's superuser connection settings.
func PGVectorParts(t testing.TB) Postgres {
	t.Helper()
	PGVectorDSN(t)
	return postgresParts(t, "PGVECTOR")
}

func postgresParts(t testing.TB, name string) Postgres {
	t.Helper()
	env := func(part string) string { return os.Getenv("MEMORY_TEST_" + name + "_" + part) }
	pg := Postgres{Host: env("HOST"), Port: env("PORT"), User: env("USER"), Password: env("PASSWORD")}
	var err error
	if pg.PortNumber, err = strconv.Atoi(pg.Port); err != nil {
		t.Fatalf("MEMORY_TEST_%s_PORT: %v", name, err)
	}
	return pg
}

// MilvusAddr is host:port of the Milvus Lite gRPC server.
func MilvusAddr(t testing.TB) string {
	t.Helper()
	return requireEnv(t, "MEMORY_TEST_MILVUS_ADDR", "Milvus Lite")
}

// MilvusServer is a Milvus standalone server with authentication on, and its admin
// login (the platform team's, which provisioning uses to create each store's user).
type MilvusServer struct {
	Addr, User, Password string
}

// MilvusAuth returns the authenticated Milvus server's address and admin login.
func MilvusAuth(t testing.TB) MilvusServer {
	t.Helper()
	return MilvusServer{
		Addr:     requireEnv(t, "MEMORY_TEST_MILVUS_AUTH_ADDR", "The Milvus server"),
		User:     os.Getenv("MEMORY_TEST_MILVUS_AUTH_USER"),
		Password: os.Getenv("MEMORY_TEST_MILVUS_AUTH_PASSWORD"),
	}
}

// S3 holds the MinIO endpoint and its root credentials.
type S3 struct {
	Endpoint, AccessKey, SecretKey string
}

// S3Config returns the MinIO server's endpoint (host:port, plain HTTP) and credentials.
func S3Config(t testing.TB) S3 {
	t.Helper()
	return S3{
		Endpoint:  requireEnv(t, "MEMORY_TEST_S3_ENDPOINT", "MinIO"),
		AccessKey: os.Getenv("MEMORY_TEST_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("MEMORY_TEST_S3_SECRET_KEY"),
	}
}

// Redis is a Redis server with ACLs on: its default user is off, and its admin
// login (the platform team's, which provisioning uses to create each store's user).
type Redis struct {
	Addr, User, Password string
}

// RedisServer returns the Redis server's address and admin login.
func RedisServer(t testing.TB) Redis {
	t.Helper()
	return Redis{
		Addr:     requireEnv(t, "MEMORY_TEST_REDIS_ADDR", "Redis"),
		User:     os.Getenv("MEMORY_TEST_REDIS_USER"),
		Password: os.Getenv("MEMORY_TEST_REDIS_PASSWORD"),
	}
}

// ControlPlaneAssets is the directory of the envtest control plane's binaries
// (KUBEBUILDER_ASSETS: kube-apiserver, etcd and kubectl, which hack/install-tools.sh
// builds into bin/k8s).
func ControlPlaneAssets(t testing.TB) string {
	t.Helper()
	return requireEnv(t, "KUBEBUILDER_ASSETS", "The control plane")
}

// UniqueName returns prefix followed by random lowercase hex, for schemas, collections
// and buckets that must not collide between tests sharing one service.
func UniqueName(prefix string) string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b)
}
