package pgstore

// Scope versions (migration 12).
//
// A scope's version is a counter that every committed transaction which changed
// what a search of the scope can return raises by exactly one: a change of its
// memories (insert, supersede, reinforcement, delete, forget, archival, purge,
// restore, import), of its vectors in the embedded index's table, and the end of
// index work (IndexDone), after which the dense channel of any engine, Milvus
// included, finds the memory's current value. The lexical postings need none of
// their own: a write that leaves them owed marks its scope, and a search of a
// marked scope makes them before it reads any (lexical.go), so what it returns
// follows from the memories alone.
//
// Triggers do it, so every writer is covered, the gateway and the Jobs alike, and no
// caller can forget. A statement trigger notes the scopes its statement touched; a
// deferred trigger raises their versions at commit, one upsert in scope order. A
// version row is locked only from then to the end of the commit, after its
// transaction took every other lock it will take, and always in one order, so two
// writers over overlapping scopes, whatever the order of their statements, never
// wait on each other in a cycle (TestScopeVersionsNoDeadlock). A per-statement bump
// would: a batch inserting into scope A and reinforcing in B against one inserting
// into B and reinforcing in A.
//
// The counter is a row updated under its row lock, so concurrent commits on a scope
// each see the other's increment: the version after two commits is two more,
// whatever order they ran in. (A sequence value taken at write time would not do:
// commits do not come in the order of nextval, so a reader could see the later
// number before the earlier commit is visible, and then nothing changes when it is.)
//
// What a cache gets from it: read the version, then search. A later reader that
// reads the same version has seen no commit to the scope that the search did not
// see (any such commit would have raised the version first, in the same
// transaction), so a result filed under the version read before it was computed is
// never older than that version.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ScopeVersion returns scope's version (see the top of this file): 0 when nothing
// ever changed the scope, and a larger number after every commit that did. Any role
// that can use the store's schema may read it.
func (s *Store) ScopeVersion(ctx context.Context, scope string) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT `+pgx.Identifier{s.schema, "scope_version"}.Sanitize()+`($1)`, scope).Scan(&v); err != nil {
		return 0, fmt.Errorf("pgstore: version of scope %q: %w", scope, err)
	}
	return v, nil
}

// ScopeVersionsEpoch returns a random name that migration 12 gave this schema's
// versions. A store dropped and made again under the same schema starts its versions
// from 0 again, with another epoch: a cache kept outside the database (Redis) puts
// the epoch in its keys so that it never takes an old store's entry for the new
// one's.
func (s *Store) ScopeVersionsEpoch(ctx context.Context) (string, error) {
	var epoch string
	err := s.pool.QueryRow(ctx, `SELECT value FROM `+pgx.Identifier{s.schema, "store_meta"}.Sanitize()+` WHERE key = 'scope_versions_epoch'`).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("pgstore: scope versions epoch: none (schema version below 12?)")
	}
	if err != nil {
		return "", fmt.Errorf("pgstore: scope versions epoch: %w", err)
	}
	return epoch, nil
}
