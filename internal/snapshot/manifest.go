package snapshot

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
)

// FormatVersion is the package format this code writes, and the newest it reads.
// Version 4 writes embeddings in base64, version 3 added recorded_at, version 2 moved
// the tombstones out of the manifest (see TombstoneSet); older packages are read
// through the upgrade chain (upgrade.go).
const FormatVersion = 4

// Object names inside a package prefix.
const (
	// ManifestName is the manifest, written last: its presence makes a package complete.
	ManifestName = "manifest.json"
	// ScopeCountsName holds the per-scope item counts when there are more than
	// MaxInlineScopes scopes (a sealed stream of JSON lines, like a shard).
	ScopeCountsName = "scope-counts.jsonl.zst.sealed"
	// TombstonesName holds the tombstones when there are more than
	// MaxInlineTombstones (a sealed stream of JSON lines, like a shard).
	TombstonesName = "tombstones.jsonl.zst.sealed"
	shardDir       = "shards/"
)

// MaxInlineScopes is the largest number of scopes whose counts are written into the
// manifest itself; above it they go to the ScopeCountsName object, so that the
// manifest (and anything copied from it into Kubernetes status) stays small.
const MaxInlineScopes = 1000

// MaxInlineTombstones is the largest number of tombstones written into the manifest
// itself; beyond it they go to the TombstonesName object. Tombstones only grow, and a
// manifest must stay small whatever their number.
const MaxInlineTombstones = 1000

// maxManifestBytes bounds the manifest a reader accepts (it is read whole).
const maxManifestBytes = 64 << 20

// Algorithm names recorded in the manifest.
const (
	CompressionZstd = "zstd"
	EncryptionAES   = "AES-256-GCM"
	KDFHKDFSHA256   = "HKDF-SHA256"
)

// Manifest describes a complete package. Its JSON form is the format's
// (docs/snapshot-format.md); field names must not change within a format version.
type Manifest struct {
	FormatVersion int `json:"formatVersion"`
	// PackageID is 16 random bytes in hex, also written into every stream header, so
	// objects cannot be mixed between packages.
	PackageID       string     `json:"packageId"`
	Producer        string     `json:"producer"`
	ProducerVersion string     `json:"producerVersion"`
	CreatedAt       time.Time  `json:"createdAt"`   // export start: the items are as of this time
	CompletedAt     time.Time  `json:"completedAt"` // manifest written
	Source          SourceInfo `json:"source"`
	Selection       Selection  `json:"selection"`
	Counts          Counts     `json:"counts"`
	// Shards in scope order: every scope lives in exactly one shard, and the shards'
	// scope ranges do not overlap.
	Shards      []ShardInfo     `json:"shards"`
	Compression CompressionInfo `json:"compression"`
	Framing     FramingInfo     `json:"framing"`
	// Encryption is nil for an unencrypted package.
	Encryption *EncryptionInfo `json:"encryption,omitempty"`
	// Embedding is set when items carry embeddings.
	Embedding *EmbeddingInfo `json:"embedding,omitempty"`
	// Tombstones are the source store's forgotten scopes: a restore forgets, in the
	// target, what they cover.
	Tombstones TombstoneSet `json:"tombstones"`
	// Sessions are the store's live short-term sessions, in a package that was asked
	// to carry them (absent otherwise). Optional: a reader that does not know them
	// restores the memories all the same.
	Sessions *SessionSet `json:"sessions,omitempty"`
	// Import, in a package an import wrote (memoryctl import), is what the conversion
	// read, imported and left out, for the review before a restore. Informational.
	Import *ImportReport `json:"import,omitempty"`
}

// ImportReport counts an import by source unit, as MemoryRestore's status.import does.
type ImportReport struct {
	Threads      int64           `json:"threads"`
	Imported     int64           `json:"imported"`
	Inactive     int64           `json:"inactive,omitempty"`
	Zombie       int64           `json:"zombie,omitempty"`
	NoUser       int64           `json:"noUser,omitempty"`
	Empty        int64           `json:"empty,omitempty"`
	Unsupported  int64           `json:"unsupported,omitempty"`
	StoreItems   int64           `json:"storeItems,omitempty"`
	StoreSkipped int64           `json:"storeSkipped,omitempty"`
	Messages     int64           `json:"messages,omitempty"`
	LeftOut      []ImportLeftOut `json:"leftOut,omitempty"`
	FirstProblem string          `json:"firstProblem,omitempty"`
}

// ImportLeftOut is one kind of source data an import left out, and how much of it.
type ImportLeftOut struct {
	What  string `json:"what"`
	Count int64  `json:"count"`
}

// TombstoneSet says where a package's tombstones are: inline (at most
// MaxInlineTombstones when written by this code; any number when upgraded from
// version 1) or, beyond that, in a sealed object of JSON lines. Either way they are
// one per scope, in strictly increasing scope order, and a tombstone covers the
// memories of its scope recorded at or before its forgotten_at (an item without
// recorded_at: its created_at, at most the package's createdAt). Read them with
// Reader.Tombstones.
type TombstoneSet struct {
	Count int64 `json:"count"`
	// Entries are the tombstones when Object is nil (absent when there are none).
	Entries []memory.Tombstone `json:"entries,omitempty"`
	// Object is the TombstonesName object, when they are not inline.
	Object *ObjectRef `json:"object,omitempty"`
}

// SourceInfo names the store a package was exported from.
type SourceInfo struct {
	Namespace    string `json:"namespace,omitempty"`    // the MemoryStore's namespace
	Name         string `json:"name,omitempty"`         // the MemoryStore's name
	Tenant       string `json:"tenant,omitempty"`       // tenant the store belongs to
	Store        string `json:"store,omitempty"`        // backend identity, e.g. the PostgreSQL schema
	VectorEngine string `json:"vectorEngine,omitempty"` // "postgres" or "milvus"
}

// Selection records which items the producer exported. It documents the package; the
// reader does not enforce it.
type Selection struct {
	Scopes            []string      `json:"scopes,omitempty"`        // exact scopes
	ScopePrefixes     []string      `json:"scopePrefixes,omitempty"` // "user:" for user:*
	Types             []memory.Type `json:"types,omitempty"`         // empty: all exported types
	ActiveSince       *time.Time    `json:"activeSince,omitempty"`   // items updated since
	ExcludeExpiredAt  *time.Time    `json:"excludeExpiredAt,omitempty"`
	IncludeEmbeddings bool          `json:"includeEmbeddings"`
}

// Counts are the package's item counts.
type Counts struct {
	Items int64 `json:"items"`
	// ByType has an entry for each of the four types, zero included.
	ByType map[memory.Type]int64 `json:"byType"`
	// WithEmbedding counts items that carry an embedding.
	WithEmbedding int64 `json:"withEmbedding"`
	Scopes        int64 `json:"scopes"`
	// ByScope holds the per-scope item counts when there are at most MaxInlineScopes
	// scopes; otherwise it is nil and ScopeCountsObject points at them.
	ByScope           map[string]int64 `json:"byScope,omitempty"`
	ScopeCountsObject *ObjectRef       `json:"scopeCountsObject,omitempty"`
}

// ObjectRef points at an object of the package.
type ObjectRef struct {
	Name   string `json:"name"` // relative to the package prefix
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ShardInfo describes one shard: a sealed stream of zstd-compressed JSON lines, one
// memory.Item per line, grouped by scope in ascending byte order.
type ShardInfo struct {
	Name       string `json:"name"` // relative to the package prefix
	FirstScope string `json:"firstScope"`
	LastScope  string `json:"lastScope"`
	Scopes     int64  `json:"scopes"`
	Items      int64  `json:"items"`
	RawBytes   int64  `json:"rawBytes"` // JSON lines before compression
	Bytes      int64  `json:"bytes"`    // stored size
	SHA256     string `json:"sha256"`   // of the stored bytes
}

// CompressionInfo describes the compression inside sealed streams.
type CompressionInfo struct {
	Algorithm string `json:"algorithm"` // "zstd"
	Level     int    `json:"level"`     // informational; decoding does not depend on it
}

// FramingInfo describes the sealed streams.
type FramingInfo struct {
	Version   int `json:"version"`   // 1
	ChunkSize int `json:"chunkSize"` // plaintext bytes per chunk
}

// EncryptionInfo describes how the package is encrypted.
type EncryptionInfo struct {
	Algorithm string `json:"algorithm"` // "AES-256-GCM"
	KDF       string `json:"kdf"`       // "HKDF-SHA256"
	KeyID     string `json:"keyId"`     // Key.ID() of the master key
}

// EmbeddingInfo names the model that produced the items' embeddings.
type EmbeddingInfo struct {
	Model     string `json:"model"`
	Dimension int    `json:"dimension"`
	Metric    string `json:"metric,omitempty"` // "cosine", "l2", "ip"
	// Roles is how the embedder told queries from passages when it embedded the
	// items (as passages). Absent means none: texts sent as they were, which is how
	// every package written before roles were recorded was embedded.
	Roles *EmbeddingRoles `json:"roles,omitempty"`
}

// EmbeddingRoles is the roles convention of a package's embeddings.
type EmbeddingRoles struct {
	// Convention is "InputType", "Prefix" or "None".
	Convention string `json:"convention"`
	// QueryPrefix and PassagePrefix, with the Prefix convention.
	QueryPrefix   string `json:"queryPrefix,omitempty"`
	PassagePrefix string `json:"passagePrefix,omitempty"`
}

// EmbeddingRolesOf records r (nil for none, as packages without the field say).
func EmbeddingRolesOf(r embed.Roles) *EmbeddingRoles {
	if r = r.Normalized(); r.Convention == "" {
		return nil
	}
	return &EmbeddingRoles{Convention: string(r.Convention), QueryPrefix: r.QueryPrefix, PassagePrefix: r.PassagePrefix}
}

// EmbedRoles is the recorded convention (None when absent).
func (e *EmbeddingInfo) EmbedRoles() embed.Roles {
	if e == nil || e.Roles == nil {
		return embed.NoRoles
	}
	return embed.Roles{Convention: embed.Convention(e.Roles.Convention), QueryPrefix: e.Roles.QueryPrefix, PassagePrefix: e.Roles.PassagePrefix}.Normalized()
}

// StoredBytes is the total stored size of the package's data objects (the manifest
// excluded).
func (m *Manifest) StoredBytes() int64 {
	var n int64
	for _, s := range m.Shards {
		n += s.Bytes
	}
	if m.Counts.ScopeCountsObject != nil {
		n += m.Counts.ScopeCountsObject.Bytes
	}
	if m.Tombstones.Object != nil {
		n += m.Tombstones.Object.Bytes
	}
	if m.Sessions != nil {
		n += m.Sessions.Object.Bytes
	}
	return n
}

// objects lists every object of the package but the manifest, with its size and
// digest: the shards, then the scope counts and tombstone objects when there are.
func (m *Manifest) objects() []ObjectRef {
	refs := make([]ObjectRef, 0, len(m.Shards)+2)
	for _, sh := range m.Shards {
		refs = append(refs, ObjectRef{Name: sh.Name, Bytes: sh.Bytes, SHA256: sh.SHA256})
	}
	for _, ref := range []*ObjectRef{m.Counts.ScopeCountsObject, m.Tombstones.Object} {
		if ref != nil {
			refs = append(refs, *ref)
		}
	}
	if m.Sessions != nil && m.Sessions.Object != nil {
		refs = append(refs, *m.Sessions.Object)
	}
	return refs
}

// Encrypted reports whether the package is encrypted.
func (m *Manifest) Encrypted() bool { return m.Encryption != nil }

// macSuffix matches the manifest's final member `"mac": "<64 hex>"` and the closing
// brace. The MAC covers every byte before the comma that starts the match.
var macSuffix = regexp.MustCompile(`,[ \t\r\n]*"mac"[ \t\r\n]*:[ \t\r\n]*"([0-9a-f]{64})"[ \t\r\n]*\}[ \t\r\n]*$`)

// encodeManifest renders the manifest as indented JSON. With a key, the last member
// is "mac": HMAC-SHA256 under HKDF-SHA256(key, no salt, "memory-operator snapshot v1
// manifest mac") of every byte before the comma that precedes it.
func encodeManifest(m *Manifest, key *Key) ([]byte, error) {
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if key == nil {
		return append(body, '\n'), nil
	}
	signed := bytes.TrimSuffix(body, []byte("\n}"))
	if len(signed) == len(body) {
		return nil, errors.New("manifest JSON does not end with a closing brace")
	}
	mac := manifestMAC(key, signed)
	out := make([]byte, 0, len(signed)+96)
	out = append(out, signed...)
	out = append(out, ",\n  \"mac\": \""...)
	out = hex.AppendEncode(out, mac)
	return append(out, "\"\n}\n"...), nil
}

func manifestMAC(key *Key, signed []byte) []byte {
	h := hmac.New(sha256.New, key.derive(nil, manifestMACInfo))
	h.Write(signed)
	return h.Sum(nil)
}

// manifestProbe is the part of a manifest read before its version is known. These
// fields keep their names and meaning in every format version.
type manifestProbe struct {
	// FormatVersion is kept raw: a JSON number, never a string that looks like one.
	FormatVersion json.RawMessage `json:"formatVersion"`
	Encryption    *struct {
		KeyID string `json:"keyId"`
	} `json:"encryption"`
}

// decodeManifest checks a stored manifest and returns it upgraded to FormatVersion,
// with the version it was stored in: version, key and MAC first (on the stored bytes),
// then the upgrade chain, then the semantic checks.
func decodeManifest(raw []byte, key *Key) (*Manifest, int, error) {
	var probe manifestProbe
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, 0, corruptf("%s is not valid JSON: %v", ManifestName, err)
	}
	version, err := probeVersion(probe.FormatVersion)
	if err != nil {
		return nil, 0, err
	}
	if err := authenticateManifest(raw, probe, key); err != nil {
		return nil, 0, err
	}
	if err := requireMembers(raw, version); err != nil {
		return nil, 0, err
	}
	raw, err = upgradeManifest(raw, version, upgrades, FormatVersion)
	if err != nil {
		return nil, 0, err
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, 0, corruptf("%s: %v", ManifestName, err)
	}
	if err := m.validate(); err != nil {
		return nil, 0, corruptf("%s: %v", ManifestName, err)
	}
	return &m, version, nil
}

func probeVersion(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, corruptf("%s has no formatVersion", ManifestName)
	}
	if raw[0] == '"' {
		return 0, corruptf("%s: formatVersion is the string %s; it must be a JSON integer (versions are integers from 1)", ManifestName, raw)
	}
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 1 {
		return 0, corruptf("%s has an invalid formatVersion %s (versions are integers from 1)", ManifestName, raw)
	}
	if v > FormatVersion {
		return 0, fmt.Errorf("%w: the package has format version %d; this reader supports versions 1 to %d (upgrade memory-operator)", ErrUnsupportedVersion, v, FormatVersion)
	}
	return v, nil
}

// requiredMembers are the manifest's required members (docs/snapshot-format.md,
// "R"), by path, in every format version since the one given; a manifest without one
// is invalid, whatever the upgrade chain could make of it.
var requiredMembers = []struct {
	path  []string
	since int
}{
	{[]string{"packageId"}, 1}, {[]string{"createdAt"}, 1}, {[]string{"counts"}, 1}, {[]string{"shards"}, 1},
	{[]string{"compression"}, 1}, {[]string{"framing"}, 1}, {[]string{"tombstones"}, 1},
	{[]string{"counts", "items"}, 1}, {[]string{"counts", "byType"}, 1}, {[]string{"counts", "withEmbedding"}, 1},
	{[]string{"counts", "scopes"}, 1}, {[]string{"tombstones", "count"}, 2},
}

// requireMembers refuses a stored manifest of the given version that lacks a
// required member, naming it.
func requireMembers(raw []byte, version int) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return corruptf("%s is not a JSON object: %v", ManifestName, err)
	}
	for _, r := range requiredMembers {
		if version < r.since {
			continue
		}
		obj := top
		for i, name := range r.path {
			v, ok := obj[name]
			if !ok {
				return corruptf("%s has no %s (a required member)", ManifestName, strings.Join(r.path[:i+1], "."))
			}
			if i+1 < len(r.path) {
				obj = nil
				if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
					return corruptf("%s: %s is not an object", ManifestName, strings.Join(r.path[:i+1], "."))
				}
			}
		}
	}
	return nil
}

// authenticateManifest applies the key rules and checks the MAC. Every format version
// so far (1) uses the same scheme; a version that changes it dispatches here.
func authenticateManifest(raw []byte, probe manifestProbe, key *Key) error {
	if probe.Encryption == nil {
		if key != nil {
			return fmt.Errorf("%w: a key (id %s) was given but the package is unencrypted; pass no key to read it", ErrNotEncrypted, key.ID())
		}
		return nil
	}
	id := probe.Encryption.KeyID
	if key == nil {
		return fmt.Errorf("%w: the package is encrypted with key id %s", ErrKeyRequired, id)
	}
	if id != key.ID() {
		return fmt.Errorf("%w: the package is encrypted with key id %s; the key given has id %s", ErrWrongKey, id, key.ID())
	}
	// The suffix is short: match it in the tail only, not across a large manifest.
	tail := max(0, len(raw)-256)
	loc := macSuffix.FindSubmatchIndex(raw[tail:])
	if loc == nil {
		return corruptf("%s of an encrypted package has no \"mac\" as its last member", ManifestName)
	}
	want := manifestMAC(key, raw[:tail+loc[0]])
	got, _ := hex.DecodeString(string(raw[tail+loc[2] : tail+loc[3]]))
	if !hmac.Equal(want, got) {
		return corruptf("%s failed authentication: it was modified after it was written", ManifestName)
	}
	return nil
}

// validate checks what a reader relies on: consistent counts, ordered non-overlapping
// shards with safe names, and known algorithms.
func (m *Manifest) validate() error {
	if m.FormatVersion != FormatVersion {
		return fmt.Errorf("formatVersion is %d after upgrading, want %d", m.FormatVersion, FormatVersion)
	}
	if m.CreatedAt.IsZero() {
		return errors.New("createdAt is the zero time: it must be the time of the database snapshot the package was read from")
	}
	if b, err := hex.DecodeString(m.PackageID); err != nil || len(b) != 16 {
		return fmt.Errorf("packageId %q is not 32 hex characters", m.PackageID)
	}
	if m.Compression.Algorithm != CompressionZstd {
		return fmt.Errorf("compression algorithm %q is not supported (want %q)", m.Compression.Algorithm, CompressionZstd)
	}
	if m.Framing.Version != frameVersion {
		return fmt.Errorf("framing version %d is not supported (want %d)", m.Framing.Version, frameVersion)
	}
	if m.Framing.ChunkSize < MinChunkSize || m.Framing.ChunkSize > MaxChunkSize {
		return fmt.Errorf("framing chunk size %d is outside %d..%d", m.Framing.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if e := m.Encryption; e != nil && (e.Algorithm != EncryptionAES || e.KDF != KDFHKDFSHA256) {
		return fmt.Errorf("encryption %s with %s is not supported (want %s with %s)", e.Algorithm, e.KDF, EncryptionAES, KDFHKDFSHA256)
	}
	if err := m.validateShards(); err != nil {
		return err
	}
	if err := m.validateCounts(); err != nil {
		return err
	}
	if err := m.Tombstones.validate(); err != nil {
		return err
	}
	if err := m.Sessions.validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, ref := range m.objects() {
		if seen[ref.Name] {
			return fmt.Errorf("object %q appears twice", ref.Name)
		}
		seen[ref.Name] = true
	}
	return nil
}

// validate checks that the tombstones are in one place, counted, and (inline) one per
// scope in increasing scope order.
func (t TombstoneSet) validate() error {
	switch {
	case t.Count < 0:
		return fmt.Errorf("tombstones.count is %d", t.Count)
	case t.Object != nil && len(t.Entries) > 0:
		return errors.New("tombstones has both entries and an object")
	case t.Object != nil:
		if err := validObjectName(t.Object.Name); err != nil {
			return fmt.Errorf("tombstones.object: %v", err)
		}
		if t.Object.Bytes < headerSize+tagSize || !isSHA256Hex(t.Object.SHA256) {
			return fmt.Errorf("tombstones.object %s has an invalid size or sha256", t.Object.Name)
		}
		if t.Count == 0 {
			return errors.New("tombstones.object is set but tombstones.count is 0")
		}
		return nil
	case int64(len(t.Entries)) != t.Count:
		return fmt.Errorf("tombstones has %d entries but tombstones.count is %d", len(t.Entries), t.Count)
	}
	prev := ""
	for i, e := range t.Entries {
		if err := checkTombstone(e, prev); err != nil {
			return fmt.Errorf("tombstones.entries[%d]: %v", i, err)
		}
		prev = e.Scope
	}
	return nil
}

// checkTombstone checks one tombstone and that it follows the previous one's scope.
func checkTombstone(t memory.Tombstone, prev string) error {
	if err := memory.ValidateScope(t.Scope); err != nil {
		return err
	}
	if t.ForgottenAt.IsZero() {
		return fmt.Errorf("tombstone of %s has no forgotten_at", t.Scope)
	}
	if prev != "" && t.Scope <= prev {
		return fmt.Errorf("tombstone of %q follows %q: tombstones are one per scope, in increasing scope order", t.Scope, prev)
	}
	return nil
}

func (m *Manifest) validateShards() error {
	var items, scopes int64
	seen := make(map[string]bool, len(m.Shards))
	for i, s := range m.Shards {
		if err := validObjectName(s.Name); err != nil {
			return fmt.Errorf("shards[%d]: %v", i, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("shards[%d]: name %q appears twice", i, s.Name)
		}
		seen[s.Name] = true
		switch {
		case s.Items < 1 || s.Scopes < 1 || s.Scopes > s.Items:
			return fmt.Errorf("shard %s: %d items in %d scopes is not a valid shard", s.Name, s.Items, s.Scopes)
		case s.FirstScope == "" || s.FirstScope > s.LastScope:
			return fmt.Errorf("shard %s: scope range %q..%q is empty", s.Name, s.FirstScope, s.LastScope)
		case i > 0 && m.Shards[i-1].LastScope >= s.FirstScope:
			return fmt.Errorf("shard %s starts at scope %q, not after the previous shard's last scope %q", s.Name, s.FirstScope, m.Shards[i-1].LastScope)
		case s.Bytes < headerSize+tagSize:
			return fmt.Errorf("shard %s: size %d is below the smallest sealed stream (%d bytes)", s.Name, s.Bytes, headerSize+tagSize)
		case !isSHA256Hex(s.SHA256):
			return fmt.Errorf("shard %s: sha256 %q is not 64 lowercase hex characters", s.Name, s.SHA256)
		}
		items += s.Items
		scopes += s.Scopes
	}
	if items != m.Counts.Items {
		return fmt.Errorf("shards hold %d items but counts.items is %d", items, m.Counts.Items)
	}
	if scopes != m.Counts.Scopes {
		return fmt.Errorf("shards hold %d scopes but counts.scopes is %d", scopes, m.Counts.Scopes)
	}
	return nil
}

func (m *Manifest) validateCounts() error {
	c := m.Counts
	var byType int64
	for t, n := range c.ByType {
		if !t.Valid() {
			return fmt.Errorf("counts.byType has an unknown memory type %q", t)
		}
		if n < 0 {
			return fmt.Errorf("counts.byType[%s] is negative", t)
		}
		byType += n
	}
	if byType != c.Items {
		return fmt.Errorf("counts.byType adds up to %d but counts.items is %d", byType, c.Items)
	}
	if c.WithEmbedding < 0 || c.WithEmbedding > c.Items {
		return fmt.Errorf("counts.withEmbedding %d is outside 0..%d", c.WithEmbedding, c.Items)
	}
	if c.WithEmbedding > 0 && (m.Embedding == nil || m.Embedding.Model == "" || m.Embedding.Dimension < 1) {
		return fmt.Errorf("%d items carry embeddings but the embedding model and dimension are not recorded", c.WithEmbedding)
	}
	if e := m.Embedding; e != nil && e.Roles != nil {
		r := embed.Roles{Convention: embed.Convention(e.Roles.Convention), QueryPrefix: e.Roles.QueryPrefix, PassagePrefix: e.Roles.PassagePrefix}
		if err := r.Validate(); err != nil || r.Convention == "" {
			return fmt.Errorf("embedding.roles: convention %q with prefixes %q, %q is not a recorded convention (InputType, Prefix or None)", e.Roles.Convention, e.Roles.QueryPrefix, e.Roles.PassagePrefix)
		}
	}
	return c.validateScopeCounts()
}

// validateScopeCounts checks that the per-scope counts are in exactly one place and,
// when inline, add up.
func (c Counts) validateScopeCounts() error {
	switch {
	case c.ScopeCountsObject != nil && c.ByScope != nil:
		return errors.New("counts has both byScope and scopeCountsObject")
	case c.ScopeCountsObject != nil:
		o := c.ScopeCountsObject
		if err := validObjectName(o.Name); err != nil {
			return fmt.Errorf("counts.scopeCountsObject: %v", err)
		}
		if o.Bytes < headerSize+tagSize || !isSHA256Hex(o.SHA256) {
			return fmt.Errorf("counts.scopeCountsObject %s has an invalid size or sha256", o.Name)
		}
	default:
		var sum int64
		for s, n := range c.ByScope {
			if n < 1 {
				return fmt.Errorf("counts.byScope[%s] is %d", s, n)
			}
			sum += n
		}
		if int64(len(c.ByScope)) != c.Scopes || sum != c.Items {
			return fmt.Errorf("counts.byScope has %d scopes with %d items but counts says %d scopes with %d items", len(c.ByScope), sum, c.Scopes, c.Items)
		}
	}
	return nil
}

// validObjectName accepts names relative to the package prefix that cannot reach
// outside it.
func validObjectName(name string) error {
	if name == "" || name == ManifestName || strings.HasPrefix(name, "/") || strings.Contains(name, "\\") {
		return fmt.Errorf("object name %q is not allowed", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("object name %q is not allowed", name)
		}
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHexDigit(s[i]) || 'A' <= s[i] && s[i] <= 'F' {
			return false
		}
	}
	return true
}
