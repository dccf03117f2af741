// Package provision creates, checks and removes a MemoryStore's resources in the shared
// backends: its PostgreSQL schema and role, its vector collection and its object-storage
// prefix. It knows nothing about Kubernetes; the controller resolves specs and Secrets
// into the connection settings here and maps errors onto conditions by their Reason.
package provision

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// tenantPattern mirrors the CRD's validation so direct callers get the same guarantee:
// every identifier derived from a tenant is safe as a PostgreSQL, Milvus and S3 name.
var tenantPattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$`)

// Names are the identifiers of one store's resources, all derived from its tenant.
type Names struct {
	Tenant string
	// Schema holds the store's tables; Role is the agents' login limited to it, and
	// WorkerRole the login of the operator's Jobs (snapshot, restore, archival), which
	// may also do the bookkeeping agents never need.
	Schema, Role, WorkerRole string
	// Collection is the Milvus collection (unused with PostgreSQL-embedded vectors).
	Collection string
	// Generations are the collections of the store's other index generations on
	// Milvus (an embedding switch's new one, the previous one kept for a rollback):
	// the store's role keeps its privileges on them, and deleting the store drops
	// them. Collection is then the serving generation's (the operator sets both from
	// the store's status; NamesFor leaves Generations empty).
	Generations []string
	// MilvusUser and MilvusRole are the store's login on a Milvus server with
	// authentication on, and the role holding its privileges on Collection (and
	// Generations) only (EnsureMilvusTenant).
	MilvusUser, MilvusRole string
	// RedisUser is the store's Redis user (EnsureRedisTenant), limited to the keys
	// mem:<tenant>:*.
	RedisUser string
	// Prefix is the store's object-storage prefix, ending in '/'.
	Prefix string
}

// NamesFor derives a store's identifiers from its tenant and the backend's base prefix.
func NamesFor(tenant, basePrefix string) (Names, error) {
	if !tenantPattern.MatchString(tenant) {
		return Names{}, fmt.Errorf("invalid tenant %q: want lowercase letters, digits and '-', starting with a letter, at most 40 characters", tenant)
	}
	ident := "mem_" + strings.ReplaceAll(tenant, "-", "_")
	prefix := tenant + "/"
	if p := strings.Trim(basePrefix, "/"); p != "" {
		prefix = p + "/" + prefix
	}
	return Names{
		Tenant:     tenant,
		Schema:     ident,
		Role:       ident + "_agent",
		WorkerRole: ident + "_worker",
		Collection: ident,
		MilvusUser: milvusUser(ident),
		MilvusRole: ident + "_role",
		RedisUser:  ident,
		Prefix:     prefix,
	}, nil
}

// maxMilvusUser is the longest user name Milvus accepts (proxy.maxUsernameLength; the
// first character a letter, then letters, digits and underscores, as ident is). Role
// names may be 255 characters, so the role is ident with a suffix.
const maxMilvusUser = 32

// milvusUser is ident when it fits in a Milvus user name with a character to spare,
// else its first 19 characters, '_' and 12 hex digits of its SHA-256: exactly 32, so
// the two forms never meet, and distinct tenants sharing a prefix stay distinct.
func milvusUser(ident string) string {
	if len(ident) < maxMilvusUser {
		return ident
	}
	sum := sha256.Sum256([]byte(ident))
	return ident[:maxMilvusUser-13] + "_" + hex.EncodeToString(sum[:])[:12]
}
