// Package snapshot writes and reads snapshot packages (format v1): a store's memories
// exported to a prefix of an S3-compatible bucket as scope-sharded JSON lines,
// zstd-compressed and sealed in authenticated chunks (AES-256-GCM, or a SHA-256
// checksum for packages written unencrypted on explicit request), described by a
// manifest that is written last. docs/snapshot-format.md is the specification.
//
// Every consumer (the snapshot and restore workers, verify, the CLI) goes through this
// package: Writer produces a package, Open/Reader consume one. Both stream: no shard is
// ever held in memory, and the reader releases only data that has been authenticated.
// Older format versions are upgraded on read through one chain (see upgrade.go).
package snapshot
