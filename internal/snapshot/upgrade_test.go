package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
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
		`{"formatVersion":2}`:   {ErrUnsupportedVersion, "format version 2; this reader supports versions 1 to 1"},
		`{"formatVersion":99}`:  {ErrUnsupportedVersion, "format version 99"},
		`{"formatVersion":0}`:   {ErrCorrupt, "invalid formatVersion 0"},
		`{"formatVersion":-1}`:  {ErrCorrupt, "invalid formatVersion -1"},
		`{"formatVersion":1.5}`: {ErrCorrupt, "invalid formatVersion 1.5"},
		`{"producer":"x"}`:      {ErrCorrupt, "has no formatVersion"},
		`not json`:              {ErrCorrupt, "is not valid JSON"},
	} {
		_, _, err := decodeManifest([]byte(raw), nil)
		if !errors.Is(err, want.err) || !strings.Contains(err.Error(), want.text) {
			t.Errorf("%s: got %v, want %v containing %q", raw, err, want.err, want.text)
		}
	}
}
