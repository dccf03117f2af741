// Package restore writes the memories of a snapshot package into a memory store: the
// engine behind MemoryRestore and `memory-operator restore`. It knows nothing of
// Kubernetes; the caller opens the package (snapshot.Open, with the key) or hands
// over memories it converted itself (a Package: an import's, importer.Converted),
// connects the target (pgstore.Store, its vector.Index and embed.Embedder) and calls
// Run.
//
// # Order of work
//
//  1. The options are checked and the embeddings policy is resolved against the
//     package's manifest and the target's embedder and index.
//  2. The whole package is verified and planned, before anything is written (verify.go):
//     every tombstone and every shard is read in full (snapshot.Reader.Scan: each
//     chunk authenticated, decompressed, each line parsed and checked, every count,
//     order and checksum compared with the authenticated manifest) and every item
//     validated; every scope, of items and of tombstones, is mapped. A bad package, a
//     wrong key (already at snapshot.Open), an unknown future format version
//     (likewise), an invalid mapping target, an unmapped scope under UnmappedFail,
//     or a mapping that sends two package scopes to one target scope (unless
//     Options.AllowMerge) fails here, with the target exactly as it was. A package
//     the caller made itself (Options.Written: an import's, from a source it read
//     and converted whole) is not read a first time: its scopes are mapped from its
//     scope list, and a package file's lines are checked as step 4 reads them.
//  3. The package's tombstones, mapped, are applied to the target
//     (pgstore.ApplyTombstones, in batches streamed from the package): each forgets
//     there what it covers, as Forget would, and the vector deletions owed to an
//     external index are then done.
//  4. Shards are read again in parallel (Options.Parallelism; shards hold disjoint
//     scopes) and their items merged in batches (pgstore.Store.Merge: COPY into a
//     staging table, one INSERT ... ON CONFLICT per batch; a batch that meets no
//     stored memory is copied straight into the table), each batch one
//     transaction whose vectors are written before it commits. Batches end at scope
//     boundaries and hold at most BatchSize items and BatchBytes of them; up to
//     Parallelism of them are merged at once while the next ones are read,
//     validated and hashed, and a batch whose target scopes overlap one in flight
//     waits for it.
//
// # What is restored
//
// For each item, in this order: a scope on the denylist (Denylisted: matched against
// the package's scope, before mapping; exact, or a prefix written "user:test-*"); the
// scope is mapped (Unmapped when the mapper's policy is Skip); a type not asked for
// (Type; by default every type but working); an item with expires_at at or before
// Options.Now (Expired). The rest are merged under their mapped scope: an invalid
// item is skipped (Invalid); an item a tombstone covers — the target's, which by then
// include the package's, mapped — is skipped (Tombstoned; see pgstore's forget.go: a
// tombstone covers the memories of its scope recorded at or before it, by the store's
// clock, and a memory recorded later is kept; a restored memory keeps the recorded_at
// its source gave it, at most the package's cut); a conflict with a stored memory follows the conflict
// policy (see pgstore.ConflictPolicy), the target's memory being kept counting as
// Conflict. Archived items are restored as archived (and get no vector).
//
// # Identifiers
//
// The format names two identifiers in an item: scope and memory_id (history entries
// and content carry none; content is the user's JSON and is never rewritten). The
// mapping applies to the scope, and to the scope of every tombstone. memory_id is
// kept: IDs are globally unique and stable across snapshot and restore, which is what
// makes a restore idempotent and lets a vector follow its memory. An item whose
// (scope, key) slot, or whose content in its scope (items without a key), is already
// stored is merged into that memory, which keeps its own memory_id. An item whose
// memory_id is held by a memory of another scope in the target (another user's) is
// never moved there: it is skipped as Skipped.IDInUseByOtherScope; one held by another
// slot of its own scope is a Conflict (Result.IDConflicts).
//
// Two package scopes never map to one target scope unless Options.AllowMerge is set
// (merging two accounts of one person): then their items meet in the target slots and
// are resolved by the conflict policy, leaving the rows and vectors that restoring
// them one after the other would. Nor is a package scope renamed onto a target scope
// that holds memories of its own (someone's) unless Options.IntoExisting (or
// AllowMerge) is set. With KeepNewer the result does not depend on
// the order the shards are processed in; with Overwrite and Skip it does (the last,
// resp. first, writer wins).
//
// # Tombstones
//
// The package's tombstones are applied to the target under their mapped scope (an
// unmapped one under Keep keeps its name; under Skip or Fail it is not applied, having
// no known target identity — its scope's items are not restored either). Applying one
// forgets, in the target, what it covers: the memories of its scope created at or
// before it, their vectors, with an audit record. Items are then checked against the
// target's tombstones in SQL; a batch holds the store's forget lock shared, so a scope
// forgotten while the restore runs is forgotten after the batch commits, and its
// tombstone covers everything written before.
//
// # Embeddings
//
// Reuse writes the package's vectors when the package names the same model and
// dimension as the target's embedder (and the index has that dimension, and the
// metrics agree when the package records one); otherwise, and for items without a
// vector, it falls back to Options.ReuseFallback (Reembed by default). Reembed embeds
// item.EmbeddingText() with the target's embedder. Defer writes no vectors (and
// deletes the now stale vector of a memory whose value a restore replaced). Vectors
// of two models are never mixed in one index. Vectors are written only for memories
// whose value the restore wrote (inserted or replaced), under the stored memory's ID.
//
// # Idempotence and interruption
//
// Every batch commits on its own and the merge is idempotent: running a restore again
// changes nothing (Unchanged items; no vector is written; no history entry is
// recorded twice), and a restore interrupted at any point, run again, ends in exactly
// the state of an uninterrupted run. A batch's vectors are written before its commit,
// so a committed memory always has its vector; a crash between the two leaves vectors
// of uncommitted rows, which the rerun writes again.
//
// # Dry run
//
// A dry run does everything but write: the package's tombstones are applied and each
// batch is merged, with the tombstones of its target scopes applied first, in
// transactions that are rolled back, so the counts are those of a real run (exact
// unless several package scopes map onto one target slot across batches); the
// embedder is not called and the vectors that would be written are counted.
package restore
