package snapshot

import "errors"

// Errors returned by Open and the Reader, always wrapped with the details (which
// object, which chunk, which numbers disagree). Test for them with errors.Is.
var (
	// ErrIncomplete: the prefix holds no manifest, so it is not a (complete) package.
	// A writer that failed, crashed or is still running leaves such a prefix.
	ErrIncomplete = errors.New("snapshot package is incomplete")
	// ErrUnsupportedVersion: the package was written in a format newer than this reader.
	ErrUnsupportedVersion = errors.New("snapshot format version is not supported")
	// ErrKeyRequired: the package is encrypted and no key was given.
	ErrKeyRequired = errors.New("snapshot package is encrypted and no key was given")
	// ErrWrongKey: the key given is not the key the package was encrypted with.
	ErrWrongKey = errors.New("wrong key for snapshot package")
	// ErrNotEncrypted: a key was given but the package is not encrypted. Refusing it
	// keeps a plaintext package from passing where an encrypted one is expected; pass
	// a nil key to read unencrypted packages.
	ErrNotEncrypted = errors.New("snapshot package is not encrypted")
	// ErrCorrupt: the package does not match its manifest or its own framing: a size,
	// checksum, authentication tag, count or ordering check failed, a shard is
	// truncated or has data after its end, or the manifest is invalid or was modified.
	ErrCorrupt = errors.New("snapshot package is corrupt")
	// ErrExists: NewWriter was pointed at a prefix that already holds objects.
	ErrExists = errors.New("snapshot prefix is not empty")
	// ErrTransfer: reading an object stopped before the size its store announced (a
	// connection reset mid-download). The package may be intact: retry. It is never
	// reported as ErrCorrupt, which a retry cannot cure.
	ErrTransfer = errors.New("object transfer interrupted")
)
