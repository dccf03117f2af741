package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/amemory/memory-operator/internal/memory"
)

// KeysFileName is the key of the keys file in the gateway's keys Secret; the gateway
// Pod mounts only that item, never the plaintext keys beside it.
const KeysFileName = "keys.json"

// KeyPrefix starts every generated API key, so a leaked key is recognisable (secret
// scanners match on it).
const KeyPrefix = "mgw_"

// KeyFile is the gateway's view of its API keys: hashes only. The operator writes it
// next to the plaintext keys it generates; the gateway re-reads it when it changes.
type KeyFile struct {
	Keys []KeyEntry `json:"keys"`
}

// KeyEntry is one API key.
type KeyEntry struct {
	// Name identifies the key in logs and metrics (it is not secret).
	Name string `json:"name"`
	// SHA256 is the hex SHA-256 of the key.
	SHA256 string `json:"sha256"`
	// Scopes the key may touch: exact scopes, prefixes ending in '*' ("user:*"), or
	// "*" for every scope of the store. Empty means none.
	Scopes []string `json:"scopes"`
	// ReadOnly keys may read and search but not write or forget.
	ReadOnly bool `json:"readOnly,omitempty"`
}

// GenerateKey returns a new random API key (256 bits).
func GenerateKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// HashKey is the hex SHA-256 a KeyEntry stores for key. The keys are random 256-bit
// values, so a plain hash (no salt, no stretching) is enough to keep the file from
// being a credential.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// ValidateScopePattern checks one entry of KeyEntry.Scopes.
func ValidateScopePattern(p string) error {
	switch {
	case p == "*":
		return nil
	case strings.HasSuffix(p, "*"):
		prefix := strings.TrimSuffix(p, "*")
		if prefix == "" || strings.Contains(prefix, "*") {
			return fmt.Errorf("scope pattern %q: '*' goes only at the end", p)
		}
		// "user:*" is a prefix of valid scopes: check it with a stand-in id.
		if err := memory.ValidateScope(prefix + "x"); err != nil {
			return fmt.Errorf("scope pattern %q: %w", p, err)
		}
		return nil
	case strings.Contains(p, "*"):
		return fmt.Errorf("scope pattern %q: '*' goes only at the end", p)
	}
	if err := memory.ValidateScope(p); err != nil {
		return fmt.Errorf("scope pattern %q: %w", p, err)
	}
	return nil
}

// Validate checks the file: names and hashes present and unique, patterns valid.
func (f KeyFile) Validate() error {
	names, hashes := map[string]bool{}, map[string]bool{}
	for i, k := range f.Keys {
		switch {
		case k.Name == "":
			return fmt.Errorf("keys[%d]: name is required", i)
		case names[k.Name]:
			return fmt.Errorf("keys[%d]: name %q is repeated", i, k.Name)
		case len(k.SHA256) != 64:
			return fmt.Errorf("keys[%d] (%s): sha256 must be 64 hex digits", i, k.Name)
		case hashes[k.SHA256]:
			return fmt.Errorf("keys[%d] (%s): the same key is listed twice", i, k.Name)
		}
		if _, err := hex.DecodeString(k.SHA256); err != nil {
			return fmt.Errorf("keys[%d] (%s): sha256: %w", i, k.Name, err)
		}
		for _, p := range k.Scopes {
			if err := ValidateScopePattern(p); err != nil {
				return fmt.Errorf("keys[%d] (%s): %w", i, k.Name, err)
			}
		}
		names[k.Name], hashes[k.SHA256] = true, true
	}
	return nil
}

// Key is an authenticated caller's key: what it may touch.
type Key struct {
	Name     string
	ReadOnly bool
	scopes   []string
}

// Allows reports whether the key may touch scope.
func (k *Key) Allows(scope string) bool {
	for _, p := range k.scopes {
		if p == "*" || p == scope || (strings.HasSuffix(p, "*") && strings.HasPrefix(scope, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}

// AllowsAll reports whether the key may touch every scope of the store (pattern "*").
func (k *Key) AllowsAll() bool { return slices.Contains(k.scopes, "*") }

// Patterns returns the key's scope patterns.
func (k *Key) Patterns() []string { return k.scopes }

// keyRing holds the current keys, swapped whole when the file changes; lookups never
// block on a reload.
type keyRing struct {
	path string
	cur  atomic.Pointer[map[string]*Key] // by hash

	mu  sync.Mutex // serialises reloads
	sum [sha256.Size]byte
}

// loadKeyRing reads the keys file; the gateway refuses to start without a valid one.
func loadKeyRing(path string) (*keyRing, error) {
	r := &keyRing{path: path}
	if err := r.reload(true); err != nil {
		return nil, err
	}
	return r, nil
}

// reload re-reads the file and applies it when its content changed (force: always).
// Content, not modification time or size, tells: a rotated key of the same length in
// the same second is a change. A file that does not parse or validate is refused and
// the keys in use stay: a bad edit must not lock every agent out, nor let one in.
func (r *keyRing) reload(force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := os.ReadFile(r.path)
	if err != nil {
		return r.fail(fmt.Errorf("keys file: %w", err))
	}
	sum := sha256.Sum256(b)
	if !force && sum == r.sum {
		return nil
	}
	var f KeyFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return r.fail(fmt.Errorf("keys file %s: %w", r.path, err))
	}
	if err := f.Validate(); err != nil {
		return r.fail(fmt.Errorf("keys file %s: %w", r.path, err))
	}
	m := make(map[string]*Key, len(f.Keys))
	for _, k := range f.Keys {
		m[strings.ToLower(k.SHA256)] = &Key{Name: k.Name, ReadOnly: k.ReadOnly, scopes: k.Scopes}
	}
	r.cur.Store(&m)
	r.sum = sum
	return nil
}

// fail is where a refused reload ends; the caller logs it and counts it.
func (r *keyRing) fail(err error) error { return err }

// lookup returns the key whose hash matches presented, or nil. The map is keyed by
// the hash, so timing reveals nothing about any stored key.
func (r *keyRing) lookup(presented string) *Key {
	if presented == "" {
		return nil
	}
	m := r.cur.Load()
	if m == nil {
		return nil
	}
	return (*m)[HashKey(presented)]
}

// count is the number of keys in use.
func (r *keyRing) count() int {
	if m := r.cur.Load(); m != nil {
		return len(*m)
	}
	return 0
}
