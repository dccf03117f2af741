package snapshot

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/amemory/memory-operator/internal/memory"
)

// upgradeStep converts a package of format version From to From+1. Readers accept every
// older version by running the steps from the package's version up to FormatVersion,
// in order, on the manifest and on every item line; everything after the chain sees
// the current format only.
type upgradeStep struct {
	From int
	// Manifest rewrites the manifest JSON; the result must carry formatVersion From+1.
	Manifest func(raw []byte) ([]byte, error)
	// Item rewrites one item line; nil when items did not change in this step.
	Item func(line []byte) ([]byte, error)
}

// upgrades is the chain: upgrades[i] converts version i+1 to i+2.
var upgrades = []upgradeStep{
	{From: 1, Manifest: upgradeManifestV1},
	{From: 2, Manifest: upgradeManifestV2},
	{From: 3, Manifest: upgradeManifestV3},
}

// upgradeManifestV3 brings a version 3 manifest to version 4. Version 4 writes
// embeddings as base64 strings (packedEmbedding) where version 3 wrote arrays of
// numbers; the reader takes both forms, so only the version changes. (The version
// is raised all the same: a version 3 reader fails on a string embedding midway,
// but refuses a version 4 package before it reads anything.)
func upgradeManifestV3(raw []byte) ([]byte, error) { return setFormatVersion(raw, 4) }

// setFormatVersion returns the manifest JSON with its formatVersion set to v.
func setFormatVersion(raw []byte, v int) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	m["formatVersion"] = json.RawMessage(strconv.Itoa(v))
	return json.Marshal(m)
}

// upgradeManifestV2 brings a version 2 manifest to version 3. Version 3 items may
// carry recorded_at (the time the source store took each in, by its clock), and a
// tombstone covers the memories of its scope recorded at or before it; version 2
// items carry none, which version 3 reads as created_at, at most the package's
// createdAt, exactly as version 2 read its tombstones. So only the version changes;
// items are as they were.
func upgradeManifestV2(raw []byte) ([]byte, error) { return setFormatVersion(raw, 3) }

// upgradeManifestV1 brings a version 1 manifest to version 2: its inline list of
// tombstones becomes a TombstoneSet holding them as entries, sorted by scope with one
// per scope (the latest, should a producer have listed a scope twice). Items did not
// change. Other members are kept as they are.
func upgradeManifestV1(raw []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	var ts []memory.Tombstone
	if r, ok := m["tombstones"]; ok {
		if err := json.Unmarshal(r, &ts); err != nil {
			return nil, fmt.Errorf("tombstones: %v", err)
		}
	}
	slices.SortStableFunc(ts, func(a, b memory.Tombstone) int {
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return a.ForgottenAt.Compare(b.ForgottenAt)
	})
	latest := ts[:0]
	for i, t := range ts {
		if i+1 < len(ts) && ts[i+1].Scope == t.Scope {
			continue
		}
		latest = append(latest, t)
	}
	set, err := json.Marshal(TombstoneSet{Count: int64(len(latest)), Entries: latest})
	if err != nil {
		return nil, err
	}
	m["tombstones"] = set
	m["formatVersion"] = json.RawMessage("2")
	return json.Marshal(m)
}

// upgradeManifest runs the manifest through chain from version from to version to.
func upgradeManifest(raw []byte, from int, chain []upgradeStep, to int) ([]byte, error) {
	if len(chain) != to-1 {
		return nil, fmt.Errorf("snapshot: the upgrade chain has %d steps for format version %d (want %d)", len(chain), to, to-1)
	}
	for v := from; v < to; v++ {
		step := chain[v-1]
		if step.From != v {
			return nil, fmt.Errorf("snapshot: upgrade step %d starts at version %d, want %d", v-1, step.From, v)
		}
		out, err := step.Manifest(raw)
		if err != nil {
			return nil, corruptf("upgrading %s from format version %d to %d: %v", ManifestName, v, v+1, err)
		}
		var probe manifestProbe
		if err := json.Unmarshal(out, &probe); err != nil || string(probe.FormatVersion) != fmt.Sprint(v+1) {
			return nil, fmt.Errorf("snapshot: upgrade step from version %d did not produce a version %d manifest", v, v+1)
		}
		raw = out
	}
	return raw, nil
}

// itemUpgrader returns the function that brings one item line of a version-from
// package to version to, or nil when no step changes items.
func itemUpgrader(from int, chain []upgradeStep, to int) func([]byte) ([]byte, error) {
	var steps []upgradeStep
	for v := from; v < to && v-1 < len(chain); v++ {
		if chain[v-1].Item != nil {
			steps = append(steps, chain[v-1])
		}
	}
	if len(steps) == 0 {
		return nil
	}
	return func(line []byte) ([]byte, error) {
		for _, s := range steps {
			var err error
			if line, err = s.Item(line); err != nil {
				return nil, fmt.Errorf("upgrading an item from format version %d to %d: %w", s.From, s.From+1, err)
			}
		}
		return line, nil
	}
}
