package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func testSessions(n int) []Session {
	at := time.Date(2026, 2, 1, 9, 30, 0, 0, time.UTC)
	out := make([]Session, n)
	for i := range out {
		out[i] = Session{ID: fmt.Sprintf("session:s%04d", i), Owner: fmt.Sprintf("user:%d", i%7), LastSeq: 4, Promoted: 1, LastActive: at,
			Turns: []SessionTurn{
				{Seq: 2, Role: "summary", Content: json.RawMessage(`"moved to Lisbon; a cat named Miso"`), At: at.Add(-time.Minute)},
				{Seq: 3, Role: "user", Content: json.RawMessage(`{"text":"café ☕ 東京","n":12345678901234567890}`), At: at.Add(-time.Second)},
				{Seq: 4, Role: "assistant", Content: json.RawMessage(`["a","b"]`), At: at},
			}}
	}
	return out
}

// TestSessionsRoundTrip: a package carries sessions (encrypted, checksummed, in their
// own object), Verify reads them, and they come back exactly, numbers and JSON
// contents included; a package without them says so.
func TestSessionsRoundTrip(t *testing.T) {
	ctx := context.Background()
	obj := DirObjects{Root: t.TempDir()}
	want := testSessions(300)
	w, err := NewWriter(ctx, obj, baseOptions("with-sessions/"))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range genItems(genOptions{items: 20, scopes: 3}) {
		if err := w.Add(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range want {
		if err := w.AddSession(s); err != nil {
			t.Fatal(err)
		}
	}
	// Out of order, or not a session a restore could write back: refused, the writer usable.
	if err := w.AddSession(want[0]); !errors.Is(err, ErrScopeOrder) {
		t.Fatalf("a session out of order: %v", err)
	}
	bad := want[0]
	bad.ID, bad.Turns = "session:z", []SessionTurn{{Seq: 9, Role: "user", Content: json.RawMessage(`"x"`)}}
	if err := w.AddSession(bad); err == nil || !strings.Contains(err.Error(), "past last_seq") {
		t.Fatalf("a turn past last_seq: %v", err)
	}
	m, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Sessions == nil || m.Sessions.Count != 300 || m.Sessions.Object.Name != SessionsName {
		t.Fatalf("manifest sessions = %+v", m.Sessions)
	}
	k := testKey
	r, err := Open(ctx, obj, "with-sessions/", &k)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.VerifyChecksums(ctx); err != nil {
		t.Fatal(err)
	}
	var scanned int
	if err := r.Scan(ctx, ScanFuncs{Session: func(Session) error { scanned++; return nil }}); err != nil || scanned != 300 {
		t.Fatalf("Scan: %d sessions, %v", scanned, err)
	}
	var got []Session
	if err := r.Sessions(ctx, func(s Session) error { got = append(got, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sessions differ: got %d, first %+v\nwant first %+v", len(got), got[0], want[0])
	}
	// The session object is encrypted: no content in the clear.
	if raw := getObject(t, obj, "with-sessions/"+SessionsName); strings.Contains(string(raw), "Lisbon") {
		t.Fatal("the sessions object holds content in the clear")
	}

	// A package without sessions.
	writePackage(t, obj, baseOptions("without/"), genItems(genOptions{items: 5, scopes: 2}), nil)
	r, err = Open(ctx, obj, "without/", &k)
	if err != nil {
		t.Fatal(err)
	}
	if r.Manifest().Sessions != nil || r.SessionCount() != 0 {
		t.Fatalf("a package without sessions: %+v", r.Manifest().Sessions)
	}
	if err := r.Sessions(ctx, func(Session) error { return errors.New("none expected") }); err != nil {
		t.Fatal(err)
	}
}

// TestSessionsObjectTampered: a sessions object that is not the one the manifest
// names (another package's, or changed) is refused.
func TestSessionsObjectTampered(t *testing.T) {
	ctx := context.Background()
	obj := DirObjects{Root: t.TempDir()}
	for _, prefix := range []string{"a/", "b/"} {
		w, err := NewWriter(ctx, obj, baseOptions(prefix))
		if err != nil {
			t.Fatal(err)
		}
		n := 3
		if prefix == "b/" {
			n = 4
		}
		for _, s := range testSessions(n) {
			if err := w.AddSession(s); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	putObject(t, obj, "a/"+SessionsName, getObject(t, obj, "b/"+SessionsName))
	k := testKey
	r, err := Open(ctx, obj, "a/", &k)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sessions(ctx, func(Session) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("another package's sessions object: %v", err)
	}
}
