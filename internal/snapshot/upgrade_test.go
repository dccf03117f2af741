package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/testutil"
)

func TestUpgradeChainMatchesFormatVersion(t *testing.T) {
	if len(upgrades) != FormatVersion-1 {
		t.Fatalf("the upgrade chain has %d steps; format version %d needs %d", len(upgrades), FormatVersion, FormatVersion-1)
	}
	for i, s := range upgrades {
		if s.From != i+1 || s.Manifest == nil {
			t.Errorf("upgrades[%d] starts at version %d (want %d) or has no manifest step", i, s.From, i+1)
		}
	}
}

// A synthetic chain 1 → 2 → 3 shows that the steps run in order, from the package's
// version only, on the manifest and on item lines.
func TestUpgradeChainRunsInOrder(t *testing.T) {
	step := func(from int) upgradeStep {
		return upgradeStep{
			From: from,
			Manifest: func(raw []byte) ([]byte, error) {
				old := fmt.Sprintf(`"formatVersion":%d`, from)
				if !bytes.Contains(raw, []byte(old)) {
					return nil, fmt.Errorf("step %d got %s", from, raw)
				}
				out := bytes.Replace(raw, []byte(old), []byte(fmt.Sprintf(`"formatVersion":%d`, from+1)), 1)
				return append(out[:len(out)-1], []byte(fmt.Sprintf(`,"v%d":true}`, from))...), nil
			},
			Item: func(line []byte) ([]byte, error) {
				return append(line, []byte(fmt.Sprintf("+%d", from))...), nil
			},
		}
	}
	chain := []upgradeStep{step(1), step(2)}

	got, err := upgradeManifest([]byte(`{"formatVersion":1}`), 1, chain, 3)
	if err != nil || string(got) != `{"formatVersion":3,"v1":true,"v2":true}` {
		t.Fatalf("from 1: %s, %v", got, err)
	}
	got, err = upgradeManifest([]byte(`{"formatVersion":2}`), 2, chain, 3)
	if err != nil || string(got) != `{"formatVersion":3,"v2":true}` {
		t.Fatalf("from 2: %s, %v", got, err)
	}
	got, err = upgradeManifest([]byte(`{"formatVersion":3}`), 3, chain, 3)
	if err != nil || string(got) != `{"formatVersion":3}` {
		t.Fatalf("current: %s, %v", got, err)
	}

	up := itemUpgrader(1, chain, 3)
	if line, err := up([]byte("item")); err != nil || string(line) != "item+1+2" {
		t.Fatalf("item from 1: %s, %v", line, err)
	}
	if itemUpgrader(3, chain, 3) != nil || itemUpgrader(1, nil, 1) != nil {
		t.Fatal("an upgrader without steps to run must be nil")
	}

	// A broken chain is a programming error, reported as such.
	if _, err := upgradeManifest([]byte(`{"formatVersion":1}`), 1, chain[:1], 3); err == nil || !strings.Contains(err.Error(), "has 1 steps") {
		t.Fatalf("short chain: %v", err)
	}
	bad := []upgradeStep{{From: 1, Manifest: func(raw []byte) ([]byte, error) { return raw, nil }}}
	if _, err := upgradeManifest([]byte(`{"formatVersion":1}`), 1, bad, 2); err == nil || !strings.Contains(err.Error(), "did not produce a version 2 manifest") {
		t.Fatalf("step not bumping the version: %v", err)
	}
	failing := []upgradeStep{{From: 1, Manifest: func([]byte) ([]byte, error) { return nil, errors.New("boom") }}}
	if _, err := upgradeManifest([]byte(`{"formatVersion":1}`), 1, failing, 2); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "from format version 1 to 2: boom") {
		t.Fatalf("failing step: %v", err)
	}
}

func TestManifestVersionProbe(t *testing.T) {
	for raw, want := range map[string]struct {
		err  error
		text string
	}{
		fmt.Sprintf(`{"formatVersion":%d}`, FormatVersion+1): {ErrUnsupportedVersion,
			fmt.Sprintf("format version %d; this reader supports versions 1 to %d", FormatVersion+1, FormatVersion)},
		`{"formatVersion":"1"}`:  {ErrCorrupt, `formatVersion is the string "1"; it must be a JSON integer`},
		`{"formatVersion":"x"}`:  {ErrCorrupt, `formatVersion is the string "x"`},
		`{"formatVersion":null}`: {ErrCorrupt, "has no formatVersion"},
		`{"formatVersion":99}`:   {ErrUnsupportedVersion, "format version 99"},
		`{"formatVersion":0}`:    {ErrCorrupt, "invalid formatVersion 0"},
		`{"formatVersion":-1}`:   {ErrCorrupt, "invalid formatVersion -1"},
		`{"formatVersion":1.5}`:  {ErrCorrupt, "invalid formatVersion 1.5"},
		`{"producer":"x"}`:       {ErrCorrupt, "has no formatVersion"},
		`not json`:               {ErrCorrupt, "is not valid JSON"},
	} {
		_, _, err := decodeManifest([]byte(raw), nil)
		if !errors.Is(err, want.err) || !strings.Contains(err.Error(), want.text) {
			t.Errorf("%s: got %v, want %v containing %q", raw, err, want.err, want.text)
		}
	}
}

// fixture is a package in testdata and the key it was written with.
type fixture struct {
	dir string
	key *Key
}

// fixtures are the encrypted and the plain package of a format version in testdata.
func fixtures(version int) []fixture {
	return []fixture{{fmt.Sprintf("v%d-encrypted", version), &testKey}, {fmt.Sprintf("v%d-plain", version), nil}}
}

// uploadFixture copies a package from testdata into the bucket under prefix.
func uploadFixture(t *testing.T, obj Objects, dir, prefix string) {
	t.Helper()
	testutil.EachFile(t, filepath.Join("testdata", dir), func(rel string, b []byte) { putObject(t, obj, prefix+rel, b) })
}

// readFixture uploads a fixture package, opens it, checks it was stored in version
// (12 items in 4 shards, upgraded to FormatVersion) and verifies it, and returns its
// items and tombstones.
func readFixture(t *testing.T, obj Objects, dir string, key *Key, version, items, shards int) (*Reader, []memory.Item, []memory.Tombstone) {
	t.Helper()
	ctx := context.Background()
	uploadFixture(t, obj, dir, dir+"/")
	r, err := Open(ctx, obj, dir, key)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Manifest()
	if r.StoredFormatVersion() != version || m.FormatVersion != FormatVersion || m.Counts.Items != int64(items) || len(m.Shards) != shards {
		t.Fatalf("stored %d, manifest %+v", r.StoredFormatVersion(), m)
	}
	var tombs []memory.Tombstone
	if err := r.Tombstones(ctx, func(tb memory.Tombstone) error { tombs = append(tombs, tb); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	return r, readItems(t, r), tombs
}

// Packages written by the last version 1 writer are read through the upgrade chain:
// the manifest's inline tombstones become entries of the version 2 TombstoneSet,
// everything verifies, and the items read back as written.
func TestReadsVersion1Packages(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	for _, tc := range fixtures(1) {
		t.Run(tc.dir, func(t *testing.T) {
			r, items, got := readFixture(t, obj, tc.dir, tc.key, 1, 12, 4)
			want := []memory.Tombstone{
				{Scope: "user:2", ForgottenAt: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)},
				{Scope: "user:9", ForgottenAt: time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC), Reason: "gdpr"},
			}
			if !slices.Equal(got, want) || r.TombstoneCount() != 2 {
				t.Fatalf("tombstones %+v (count %d), want %+v", got, r.TombstoneCount(), want)
			}
			if err := r.VerifyChecksums(ctx); err != nil {
				t.Fatal(err)
			}
			if len(items) != 12 || items[0].MemoryID != "v1-u0-m0" || items[11].Scope != "user:3" || items[0].Source != "v1@test" {
				t.Fatalf("items %+v", items)
			}
		})
	}
	// The upgrade keeps one tombstone per scope, the latest, in scope order, whatever
	// a version 1 producer listed.
	raw := `{"formatVersion":1,"tombstones":[{"scope":"user:b","forgotten_at":"2026-01-02T00:00:00Z"},` +
		`{"scope":"user:a","forgotten_at":"2026-01-01T00:00:00Z"},{"scope":"user:b","forgotten_at":"2026-01-03T00:00:00Z","reason":"later"}]}`
	out, err := upgradeManifestV1([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	var up struct {
		FormatVersion int          `json:"formatVersion"`
		Tombstones    TombstoneSet `json:"tombstones"`
	}
	if err := json.Unmarshal(out, &up); err != nil {
		t.Fatal(err)
	}
	if up.FormatVersion != 2 || up.Tombstones.Count != 2 || up.Tombstones.Entries[0].Scope != "user:a" || up.Tombstones.Entries[1].Reason != "later" {
		t.Fatalf("upgraded %s", out)
	}
	if out, err := upgradeManifestV1([]byte(`{"formatVersion":1}`)); err != nil || !bytes.Contains(out, []byte(`"tombstones":{"count":0}`)) {
		t.Fatalf("no tombstones: %s, %v", out, err)
	}
}

// TestGuaranteeTombstonesScale: a package's tombstones are streamed to an object of
// their own beyond MaxInlineTombstones, so the manifest stays small whatever their
// number; they read back, verified, in order; and damage to them is found.
func TestGuaranteeTombstonesScale(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	const n = 200_000
	ts := make([]memory.Tombstone, n)
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for i := range ts {
		ts[i] = memory.Tombstone{Scope: fmt.Sprintf("user:%08d", i), ForgottenAt: at.Add(time.Duration(i) * time.Millisecond)}
		if i%1000 == 0 {
			ts[i].Reason = `asked "nicely" ` + "\u00e9\n"
		}
	}
	items := genItems(genOptions{items: 100, scopes: 10, seed: 4})
	opts := baseOptions("many-tombs")
	opts.Selection.IncludeEmbeddings, opts.Embedding = false, nil
	m := writePackage(t, obj, opts, items, ts)
	raw := getObject(t, obj, "many-tombs/"+ManifestName)
	if len(raw) > 16<<10 || m.Tombstones.Object == nil || m.Tombstones.Count != n || m.Tombstones.Entries != nil {
		t.Fatalf("manifest is %d bytes, tombstones %+v", len(raw), m.Tombstones.Object)
	}
	r, err := Open(ctx, obj, "many-tombs", &testKey)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	err = r.Tombstones(ctx, func(tb memory.Tombstone) error {
		if tb != ts[i] {
			return fmt.Errorf("tombstone %d is %+v, want %+v", i, tb, ts[i])
		}
		i++
		return nil
	})
	if err != nil || i != n {
		t.Fatalf("read %d tombstones: %v", i, err)
	}
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	// At the limit they stay inline; one more and they move out.
	for _, k := range []int{MaxInlineTombstones, MaxInlineTombstones + 1} {
		m := writePackage(t, obj, WriterOptions{Prefix: fmt.Sprintf("limit-%d", k), Key: &testKey}, nil, ts[:k])
		if inline := m.Tombstones.Object == nil; inline != (k <= MaxInlineTombstones) || m.Tombstones.Count != int64(k) {
			t.Errorf("%d tombstones: inline %v", k, inline)
		}
	}
	// Damage to the tombstone object or its count is found.
	name := "many-tombs/" + TombstonesName
	body := getObject(t, obj, name)
	damaged := bytes.Clone(body)
	damaged[len(damaged)/2] ^= 1
	putObject(t, obj, name, damaged)
	if err := r.Tombstones(ctx, func(memory.Tombstone) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged tombstone object: %v", err)
	}
	if err := r.VerifyChecksums(ctx); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("checksums of a damaged tombstone object: %v", err)
	}
	putObject(t, obj, name, body)
	// Writers refuse tombstones out of order or twice.
	w, err := NewWriter(ctx, obj, WriterOptions{Prefix: "order", Key: &testKey})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Abort(ctx) }()
	if err := w.AddTombstone(ts[1]); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []memory.Tombstone{ts[0], ts[1], {Scope: "user:x"}, {Scope: "x", ForgottenAt: at}} {
		if err := w.AddTombstone(bad); err == nil {
			t.Errorf("AddTombstone(%+v) accepted", bad)
		}
	}
}

// TestGuaranteeReaderRefusesMissingRequiredMembers: the reader is as strict as the format
// document: a manifest without a required member (createdAt, tombstones,
// tombstones.count, counts.items, ...) or with a string formatVersion is refused,
// naming the member, instead of being read as if it were there.
func TestGuaranteeReaderRefusesMissingRequiredMembers(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	tamperFixture(t, obj, "plain", nil)
	raw := getObject(t, obj, "plain/"+ManifestName)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edits := map[string]struct {
		edit func(m map[string]any)
		want string
	}{
		"no createdAt":        {func(m map[string]any) { delete(m, "createdAt") }, "has no createdAt (a required member)"},
		"zero createdAt":      {func(m map[string]any) { m["createdAt"] = "0001-01-01T00:00:00Z" }, "createdAt is the zero time"},
		"no tombstones":       {func(m map[string]any) { delete(m, "tombstones") }, "has no tombstones (a required member)"},
		"no tombstones.count": {func(m map[string]any) { delete(m["tombstones"].(map[string]any), "count") }, "has no tombstones.count"},
		"no counts.items":     {func(m map[string]any) { delete(m["counts"].(map[string]any), "items") }, "has no counts.items"},
		"no packageId":        {func(m map[string]any) { delete(m, "packageId") }, "has no packageId"},
		"string version":      {func(m map[string]any) { m["formatVersion"] = "3" }, `formatVersion is the string "3"; it must be a JSON integer`},
		"string version 1":    {func(m map[string]any) { m["formatVersion"] = "1" }, `formatVersion is the string "1"`},
	}
	for name, tc := range edits {
		t.Run(name, func(t *testing.T) {
			var c map[string]any
			b, _ := json.Marshal(m)
			_ = json.Unmarshal(b, &c)
			tc.edit(c)
			edited, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			prefix := "edit-" + strings.ReplaceAll(name, " ", "-")
			tamperFixture(t, obj, prefix, nil)
			putObject(t, obj, prefix+"/"+ManifestName, edited)
			_, err = Open(ctx, obj, prefix, nil)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrCorrupt containing %q", err, tc.want)
			}
		})
	}
	// The manifest as written opens.
	if _, err := Open(ctx, obj, "plain", nil); err != nil {
		t.Fatal(err)
	}
}

// TestReadsVersion2Packages: packages written by the last version 2 release read
// through the chain, with their items as written (no recorded_at: a restore reads
// it as created_at, at most createdAt) and their tombstones.
func TestReadsVersion2Packages(t *testing.T) {
	obj := newBucket(t)
	for _, tc := range fixtures(2) {
		t.Run(tc.dir, func(t *testing.T) {
			r, items, got := readFixture(t, obj, tc.dir, tc.key, 2, 12, 4)
			if !r.Manifest().CreatedAt.Equal(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)) {
				t.Fatalf("manifest %+v", r.Manifest())
			}
			if len(got) != 2 || got[0].Scope != "user:2" || got[1].Reason != "gdpr" {
				t.Fatalf("tombstones %+v", got)
			}
			if len(items) != 12 || items[0].MemoryID != "v2-u0-m0" || items[0].Source != "v2@test" {
				t.Fatalf("items %+v", items)
			}
			for _, it := range items {
				if !it.RecordedAt.IsZero() {
					t.Fatalf("%s has a recorded_at %s; version 2 items have none", it.MemoryID, it.RecordedAt)
				}
			}
		})
	}
}

// Version 3 wrote embeddings as arrays of numbers; they read back as the same float32
// values that version 4 writes in base64, extreme ones included.
func TestReadsVersion3Packages(t *testing.T) {
	obj := newBucket(t)
	want := [][]float32{
		{0.5, -0.25, 0.125, 1},
		{math.SmallestNonzeroFloat32, -math.MaxFloat32, 1e-7, 0.1},
		{0.333333343, -0.7071068, 0, 2.5e-3},
	}
	for _, tc := range fixtures(3) {
		t.Run(tc.dir, func(t *testing.T) {
			r, items, got := readFixture(t, obj, tc.dir, tc.key, 3, 6, 1)
			if m := r.Manifest(); m.Embedding == nil || m.Embedding.Dimension != 4 || m.Counts.WithEmbedding != 5 {
				t.Fatalf("manifest %+v", m)
			}
			if len(got) != 1 || got[0].Scope != "user:9" || got[0].Reason != "gdpr" {
				t.Fatalf("tombstones %+v", got)
			}
			for i, it := range items {
				id := fmt.Sprintf("v3-u%d-m%d", i/3, i%3)
				switch {
				case it.MemoryID != id:
					t.Fatalf("item %d is %s, want %s", i, it.MemoryID, id)
				case id == "v3-u1-m2":
					if it.Embedding != nil {
						t.Fatalf("%s has an embedding %v; it was written without one", id, it.Embedding)
					}
				case !slices.Equal(it.Embedding, want[i%3]):
					t.Fatalf("%s: embedding %v, want %v", id, it.Embedding, want[i%3])
				}
				// recorded_at is written only where it differs from created_at.
				if (id == "v3-u1-m1") != it.RecordedAt.Equal(it.CreatedAt.Add(30*time.Minute)) || (id != "v3-u1-m1") != it.RecordedAt.IsZero() {
					t.Fatalf("%s: recorded_at %s, created_at %s", id, it.RecordedAt, it.CreatedAt)
				}
			}
		})
	}
}

// Version 4 writes embeddings as base64 and reads back the exact float32 values.
func TestEmbeddingsWrittenInBase64(t *testing.T) {
	vec := []float32{1, -2.5, math.SmallestNonzeroFloat32, math.MaxFloat32, float32(math.Copysign(0, -1)), 0.1}
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	line, err := appendItem(nil, &memory.Item{MemoryID: "m", MemoryType: memory.Semantic, Scope: "user:1", Content: json.RawMessage(`{}`),
		CreatedAt: at, UpdatedAt: at, Embedding: vec})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(line, []byte(`"embedding":"AACAPwAAIMABAAAA//9/fwAAAIDNzMw9"}`)) {
		t.Fatalf("line %s", line)
	}
	var it memory.Item
	if err := unmarshalItem(line, &it); err != nil || !slices.Equal(it.Embedding, vec) || math.Signbit(float64(it.Embedding[4])) != true {
		t.Fatalf("decoded %v, %v", it.Embedding, err)
	}
	for line, want := range map[string]string{
		`{"embedding":"AACA"}`:     "3 bytes are not a whole number of float32 values",
		`{"embedding":"AADAfw=="}`: "element 0 is NaN (must be finite)",
		`{"embedding":"AA*APw=="}`: "embedding: not base64: illegal base64 data at input byte 2",
	} {
		if err := unmarshalItem([]byte(line), &it); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", line, err, want)
		}
	}
}

// A writer leaves out a recorded_at equal to created_at (absent reads as created_at)
// and writes one that differs; both read back as they mean.
func TestRecordedAtWrittenWhenItDiffers(t *testing.T) {
	obj := newBucket(t)
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	same := memory.Item{MemoryID: "same", MemoryType: memory.Semantic, Scope: "user:1", Content: json.RawMessage(`{"v":1}`),
		Source: "t", BaseScore: 0.5, CreatedAt: at, UpdatedAt: at, RecordedAt: at}
	later := same
	later.MemoryID, later.Content, later.RecordedAt = "later", json.RawMessage(`{"v":2}`), at.Add(time.Second)
	writePackage(t, obj, baseOptions("rec"), []memory.Item{later, same}, nil)
	r, err := Open(context.Background(), obj, "rec", &testKey)
	if err != nil {
		t.Fatal(err)
	}
	got := readItems(t, r)
	if len(got) != 2 || got[0].MemoryID != "later" || !got[0].RecordedAt.Equal(later.RecordedAt) || !got[1].RecordedAt.IsZero() {
		t.Fatalf("items %+v", got)
	}
}
