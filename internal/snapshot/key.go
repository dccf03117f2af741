package snapshot

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// KeySize is the length of a package key in bytes (AES-256).
const KeySize = 32

// Key is a package's master key. It never encrypts data itself: every shard gets its
// own key derived with HKDF, and the manifest MAC key is derived the same way.
type Key [KeySize]byte

// HKDF "info" strings, one per derived key. They are part of the format.
const (
	keyIDLabel      = "memory-operator key id"
	shardKeyInfo    = "memory-operator snapshot v1 shard"
	manifestMACInfo = "memory-operator snapshot v1 manifest mac"
)

// ParseKey reads a key as it comes out of a Secret: exactly 32 raw bytes, or 64 hex
// characters, or the standard or URL-safe base64 encoding (padded or not) of 32 bytes.
// A value of exactly 32 bytes is taken as raw, unless it is all hex digits (then it is
// the hex form of a 16-byte key, refused); surrounding whitespace (a trailing newline)
// is ignored for the text forms only. Anything else is refused with an error
// that names the length found, never the value.
func ParseKey(b []byte) (Key, error) {
	var k Key
	if len(b) == KeySize && !isHex(b) {
		copy(k[:], b)
		return k, nil
	}
	s := bytes.TrimSpace(b)
	if len(s) == 0 {
		return Key{}, fmt.Errorf("key is %d bytes; need %d raw bytes, %d hex characters or base64 of %d bytes", len(s), KeySize, 2*KeySize, KeySize)
	}
	if isHex(s) && len(s)%2 == 0 {
		if len(s) != 2*KeySize {
			return Key{}, fmt.Errorf("key is %d hex characters (%d bytes); need %d hex characters (%d bytes)", len(s), len(s)/2, 2*KeySize, KeySize)
		}
		if _, err := hex.Decode(k[:], s); err != nil {
			return Key{}, fmt.Errorf("key is not valid hex: %v", err)
		}
		return k, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		dec := make([]byte, enc.DecodedLen(len(s)))
		n, err := enc.Decode(dec, s)
		if err != nil {
			continue
		}
		if n != KeySize {
			return Key{}, fmt.Errorf("key is %d characters of base64 decoding to %d bytes; need %d bytes (or %d raw bytes, or %d hex characters)", len(s), n, KeySize, KeySize, 2*KeySize)
		}
		copy(k[:], dec[:n])
		return k, nil
	}
	return Key{}, fmt.Errorf("key is %d bytes; need %d raw bytes, %d hex characters or base64 of %d bytes", len(s), KeySize, 2*KeySize, KeySize)
}

func isHex(s []byte) bool {
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if !isHexDigit(c) {
			return false
		}
	}
	return true
}

// ID returns the key's public fingerprint: the first 16 hex characters of
// HMAC-SHA256(key, "memory-operator key id"). It is recorded in the manifest so that a
// wrong key is recognised before anything is decrypted; it reveals nothing about the key.
func (k Key) ID() string {
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte(keyIDLabel))
	return hex.EncodeToString(m.Sum(nil))[:16]
}

// String never prints key material, only the fingerprint, so a key that ends up in a
// log line or an error message does not leak.
func (k Key) String() string { return "snapshot.Key(id " + k.ID() + ")" }

// GoString is String, for %#v.
func (k Key) GoString() string { return k.String() }

// derive returns HKDF-SHA256(master = k, salt, info) of KeySize bytes.
func (k Key) derive(salt []byte, info string) []byte {
	out, err := hkdf.Key(sha256.New, k[:], salt, info, KeySize)
	if err != nil {
		panic("snapshot: hkdf: " + err.Error()) // only for lengths above 255*32 bytes
	}
	return out
}
