// Package memory is the framework-neutral model of an agent memory: the memory item,
// its scopes and types, content hashing for idempotent writes, and time-decayed scoring.
//
// It has no dependencies beyond the standard library so that every backend, the
// snapshot format and the offline tools share one definition of a memory.
package memory
