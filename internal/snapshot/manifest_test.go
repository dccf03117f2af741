package snapshot

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

func validManifest() *Manifest {
	return &Manifest{
		FormatVersion: FormatVersion,
		PackageID:     "00112233445566778899aabbccddeeff",
		Producer:      "test",
		CreatedAt:     time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Counts: Counts{
			Items:   3,
			ByType:  map[memory.Type]int64{memory.Working: 0, memory.Episodic: 1, memory.Semantic: 2, memory.Procedural: 0},
			Scopes:  2,
			ByScope: map[string]int64{"user:a": 2, "user:b": 1},
		},
		Shards: []ShardInfo{
			{Name: "shards/000001.jsonl.zst.sealed", FirstScope: "user:a", LastScope: "user:a", Scopes: 1, Items: 2, Bytes: 100, SHA256: strings.Repeat("a", 64)},
			{Name: "shards/000002.jsonl.zst.sealed", FirstScope: "user:b", LastScope: "user:b", Scopes: 1, Items: 1, Bytes: 100, SHA256: strings.Repeat("b", 64)},
		},
		Compression: CompressionInfo{Algorithm: CompressionZstd, Level: 1},
		Framing:     FramingInfo{Version: 1, ChunkSize: DefaultChunkSize},
		Tombstones:  TombstoneSet{Count: 1, Entries: []memory.Tombstone{{Scope: "user:gone", ForgottenAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}}},
	}
}

func TestManifestMAC(t *testing.T) {
	key := frameTestKey
	m := validManifest()
	m.Encryption = &EncryptionInfo{Algorithm: EncryptionAES, KDF: KDFHKDFSHA256, KeyID: key.ID()}
	raw, err := encodeManifest(m, &key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(raw, []byte("\"\n}\n")) || !bytes.Contains(raw, []byte(",\n  \"mac\": \"")) {
		t.Fatalf("manifest does not end with the mac member:\n%s", raw)
	}
	got, version, err := decodeManifest(raw, &key)
	if err != nil || version != FormatVersion || got.Counts.Items != 3 || got.Tombstones.Entries[0].Scope != "user:gone" {
		t.Fatalf("decode: %+v, %d, %v", got, version, err)
	}

	// Any change before the mac is refused: counts, tombstones, whitespace.
	for _, edit := range [][2]string{
		{`"items": 3`, `"items": 4`},
		{`"user:gone"`, `"user:gona"`},
		{`"producer": "test"`, `"producer":  "test"`},
	} {
		bad := bytes.Replace(raw, []byte(edit[0]), []byte(edit[1]), 1)
		if bytes.Equal(bad, raw) {
			t.Fatalf("edit %q did not apply", edit[0])
		}
		if _, _, err := decodeManifest(bad, &key); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "manifest.json failed authentication") {
			t.Errorf("edit %q: got %v", edit[0], err)
		}
	}
	// Removing the mac does not make an encrypted manifest acceptable.
	i := bytes.LastIndex(raw, []byte(",\n  \"mac\""))
	noMAC := append(bytes.Clone(raw[:i]), "\n}\n"...)
	if _, _, err := decodeManifest(noMAC, &key); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `has no "mac" as its last member`) {
		t.Errorf("mac removed: got %v", err)
	}
	// Keys.
	other := key
	other[0] ^= 1
	if _, _, err := decodeManifest(raw, &other); !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "encrypted with key id "+key.ID()+"; the key given has id "+other.ID()) {
		t.Errorf("wrong key: got %v", err)
	}
	if _, _, err := decodeManifest(raw, nil); !errors.Is(err, ErrKeyRequired) || !strings.Contains(err.Error(), key.ID()) {
		t.Errorf("no key: got %v", err)
	}
	plain, err := encodeManifest(validManifest(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := decodeManifest(plain, &key); !errors.Is(err, ErrNotEncrypted) {
		t.Errorf("key for an unencrypted manifest: got %v", err)
	}
	if _, _, err := decodeManifest(plain, nil); err != nil {
		t.Errorf("unencrypted manifest: %v", err)
	}
}

func TestManifestValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(m *Manifest)
		want string
	}{
		{func(m *Manifest) { m.Shards[1].Name = "../other/shard" }, `object name "../other/shard" is not allowed`},
		{func(m *Manifest) { m.Shards[1].Name = "/abs" }, `object name "/abs" is not allowed`},
		{func(m *Manifest) { m.Shards[1].Name = m.Shards[0].Name }, "appears twice"},
		{func(m *Manifest) { m.Shards[1].FirstScope, m.Shards[1].LastScope = "user:a", "user:a" }, `starts at scope "user:a", not after the previous shard's last scope "user:a"`},
		{func(m *Manifest) { m.Shards[0].Items = 5 }, "shards hold 6 items but counts.items is 3"},
		{func(m *Manifest) { m.Shards[0].SHA256 = "xyz" }, "is not 64 lowercase hex"},
		{func(m *Manifest) { m.Counts.ByType[memory.Working] = 1 }, "counts.byType adds up to 4 but counts.items is 3"},
		{func(m *Manifest) { m.Counts.ByType["dream"] = 0 }, `unknown memory type "dream"`},
		{func(m *Manifest) { m.Counts.ByScope["user:b"] = 2 }, "counts.byScope has 2 scopes with 4 items"},
		{func(m *Manifest) { m.Counts.WithEmbedding = 1 }, "1 items carry embeddings but the embedding model"},
		{func(m *Manifest) {
			m.Embedding = &EmbeddingInfo{Model: "e5", Dimension: 4, Roles: &EmbeddingRoles{Convention: "Sideways"}}
		}, `embedding.roles: convention "Sideways"`},
		{func(m *Manifest) {
			m.Embedding = &EmbeddingInfo{Model: "e5", Dimension: 4, Roles: &EmbeddingRoles{Convention: "Auto"}}
		}, `embedding.roles: convention "Auto"`},
		{func(m *Manifest) {
			m.Embedding = &EmbeddingInfo{Model: "e5", Dimension: 4, Roles: &EmbeddingRoles{Convention: "InputType", QueryPrefix: "query: "}}
		}, `embedding.roles: convention "InputType" with prefixes`},
		{func(m *Manifest) {
			m.Embedding = &EmbeddingInfo{Model: "e5", Dimension: 4, Roles: &EmbeddingRoles{}}
		}, `embedding.roles: convention ""`},
		{func(m *Manifest) { m.Compression.Algorithm = "gzip" }, `compression algorithm "gzip"`},
		{func(m *Manifest) { m.Framing.ChunkSize = 10 }, "framing chunk size 10"},
		{func(m *Manifest) { m.PackageID = "x" }, `packageId "x"`},
		{func(m *Manifest) { m.Encryption = &EncryptionInfo{Algorithm: "ROT13", KDF: KDFHKDFSHA256} }, "encryption ROT13"},
		{func(m *Manifest) { m.Tombstones.Count = 2 }, "tombstones has 1 entries but tombstones.count is 2"},
		{func(m *Manifest) { m.Tombstones.Entries[0].Scope = "nobody" }, "tombstones.entries[0]:"},
		{func(m *Manifest) { m.Tombstones.Entries[0].ForgottenAt = time.Time{} }, "tombstone of user:gone has no forgotten_at"},
		{func(m *Manifest) {
			m.Tombstones = TombstoneSet{Count: 2, Entries: []memory.Tombstone{m.Tombstones.Entries[0], m.Tombstones.Entries[0]}}
		}, `tombstone of "user:gone" follows "user:gone"`},
		{func(m *Manifest) {
			m.Tombstones.Object = &ObjectRef{Name: TombstonesName, Bytes: 100, SHA256: strings.Repeat("c", 64)}
		}, "tombstones has both entries and an object"},
		{func(m *Manifest) {
			m.Tombstones = TombstoneSet{Count: 5, Object: &ObjectRef{Name: m.Shards[0].Name, Bytes: 100, SHA256: strings.Repeat("c", 64)}}
		}, "appears twice"},
		{func(m *Manifest) {
			m.Tombstones = TombstoneSet{Object: &ObjectRef{Name: TombstonesName, Bytes: 100, SHA256: strings.Repeat("c", 64)}}
		},
			"tombstones.object is set but tombstones.count is 0"},
	} {
		m := validManifest()
		tc.edit(m)
		if err := m.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	if err := validManifest().validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*EmbeddingRoles{nil, {Convention: "None"}, {Convention: "InputType"}, {Convention: "Prefix", QueryPrefix: "query: ", PassagePrefix: "passage: "}} {
		m := validManifest()
		m.Embedding = &EmbeddingInfo{Model: "e5", Dimension: 4, Roles: r}
		if err := m.validate(); err != nil {
			t.Errorf("roles %+v: %v", r, err)
		}
	}
}
