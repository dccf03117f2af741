package pgstore

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

func TestForget(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	a1 := item("a1", "user:a", memory.Semantic, "name", `{"name":"Ana","secret":"s3cr3t"}`, 1, 0)
	a1.Embedding = []float32{1}
	a2 := item("a2", "user:a", memory.Episodic, "", `{"trip":"Lisbon"}`, 1, 0)
	a2.Embedding = []float32{2}
	a3 := item("a3", "user:a", memory.Working, "", `{"x":1}`, 1, 0)
	b1 := item("b1", "user:b", memory.Semantic, "name", `{"name":"Bo"}`, 1, 0)
	b1.Embedding = []float32{3}
	if res := importSlice(t, s, []memory.Item{a1, a2, a3, b1}); res.Inserted != 4 || res.Embeddings != 3 {
		t.Fatalf("Import = %+v", res)
	}
	// A stray vector row of the scope whose memory is gone is deleted too.
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.t.vectors+` VALUES ('orphan', 'user:a', 'semantic', '{1}')`); err != nil {
		t.Fatal(err)
	}

	if ok, err := s.IsForgotten(ctx, "user:a"); err != nil || ok {
		t.Fatalf("IsForgotten before = %v, %v", ok, err)
	}
	before := time.Now().Add(-time.Minute)
	res, err := s.Forget(ctx, "user:a", "GDPR erasure request #42", "alice@ops")
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 3 || res.VectorsDeleted != 3 || res.ForgottenAt.Before(before) {
		t.Fatalf("Forget = %+v, want 3 deleted and 3 vectors", res)
	}
	if n := countRows(t, pool, s.t.memories, "scope = 'user:a'"); n != 0 {
		t.Fatalf("user:a memories left: %d", n)
	}
	if n := countRows(t, pool, s.t.vectors, "scope = 'user:a'"); n != 0 {
		t.Fatalf("user:a vectors left: %d", n)
	}
	if c, _ := s.Count(ctx); c != 1 {
		t.Fatalf("Count = %d, want 1 (user:b)", c)
	}
	if n := countRows(t, pool, s.t.vectors, "scope = 'user:b'"); n != 1 {
		t.Fatalf("user:b vectors = %d, want 1", n)
	}
	if got, err := s.Recall(ctx, RecallQuery{Scope: "user:a", Now: now}); err != nil || len(got) != 0 {
		t.Fatalf("Recall after forget = %v, %v", got, err)
	}
	if ok, _ := s.IsForgotten(ctx, "user:a"); !ok {
		t.Fatal("IsForgotten(user:a) = false after Forget")
	}
	if ok, _ := s.IsForgotten(ctx, "user:b"); ok {
		t.Fatal("IsForgotten(user:b) = true")
	}
	ts, err := s.Tombstones(ctx)
	if err != nil || len(ts) != 1 || ts[0].Scope != "user:a" || ts[0].Reason != "GDPR erasure request #42" || !ts[0].ForgottenAt.Equal(res.ForgottenAt) {
		t.Fatalf("Tombstones = %+v, %v", ts, err)
	}

	type audit struct {
		action, scope string
		detail        map[string]any
	}
	readAudit := func() []audit {
		rows, err := pool.Query(ctx, `SELECT action, scope, detail FROM `+s.t.auditLog+` ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []audit
		for rows.Next() {
			var a audit
			var raw []byte
			if err := rows.Scan(&a.action, &a.scope, &raw); err != nil {
				t.Fatal(err)
			}
			if string(raw) == "" || json.Unmarshal(raw, &a.detail) != nil {
				t.Fatalf("detail %q", raw)
			}
			for _, leak := range []string{"s3cr3t", "Lisbon", "Ana"} {
				if strings.Contains(string(raw), leak) {
					t.Fatalf("audit detail %s leaks content %q", raw, leak)
				}
			}
			out = append(out, a)
		}
		return out
	}
	logs := readAudit()
	want := map[string]any{"actor": "alice@ops", "reason": "GDPR erasure request #42", "deleted": float64(3), "vectors_deleted": float64(3)}
	if len(logs) != 1 || logs[0].action != "forget" || logs[0].scope != "user:a" || !equalMaps(logs[0].detail, want) {
		t.Fatalf("audit = %+v, want one forget record with %v", logs, want)
	}

	// Forgetting again: nothing to delete, the tombstone is refreshed, a second record.
	res2, err := s.Forget(ctx, "user:a", "repeat", "bob")
	if err != nil || res2.Deleted != 0 || res2.VectorsDeleted != 0 || res2.ForgottenAt.Before(res.ForgottenAt) {
		t.Fatalf("second Forget = %+v, %v", res2, err)
	}
	ts, _ = s.Tombstones(ctx)
	if len(ts) != 1 || ts[0].Reason != "repeat" {
		t.Fatalf("Tombstones after second forget = %+v", ts)
	}
	if logs = readAudit(); len(logs) != 2 || logs[1].detail["actor"] != "bob" || logs[1].detail["deleted"] != float64(0) {
		t.Fatalf("audit after second forget = %+v", logs)
	}

	// New memories for a forgotten scope are accepted (forgetting is not a ban).
	mustPut(t, s, item("a9", "user:a", memory.Semantic, "", `{"new":true}`, 1, 0), Inserted)

	if _, err := s.Forget(ctx, "user:a' OR '1'='1", "", ""); err == nil {
		t.Fatal("Forget of an invalid scope succeeded")
	}
	if c, _ := s.Count(ctx); c != 2 {
		t.Fatalf("Count = %d, want 2", c)
	}
}

func TestAddTombstone(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	t1 := now.Add(-day)
	if err := s.AddTombstone(ctx, Tombstone{Scope: "user:z", ForgottenAt: t1, Reason: "first"}); err != nil {
		t.Fatal(err)
	}
	// An older one does not replace it; a newer one does.
	if err := s.AddTombstone(ctx, Tombstone{Scope: "user:z", ForgottenAt: t1.Add(-time.Hour), Reason: "older"}); err != nil {
		t.Fatal(err)
	}
	ts, _ := s.Tombstones(ctx)
	if len(ts) != 1 || !ts[0].ForgottenAt.Equal(t1) || ts[0].Reason != "first" {
		t.Fatalf("after older = %+v", ts)
	}
	if err := s.AddTombstone(ctx, Tombstone{Scope: "user:z", ForgottenAt: now, Reason: "newer"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddTombstone(ctx, Tombstone{Scope: "session:a", ForgottenAt: now}); err != nil {
		t.Fatal(err)
	}
	ts, _ = s.Tombstones(ctx)
	want := []Tombstone{{Scope: "session:a", ForgottenAt: now}, {Scope: "user:z", ForgottenAt: now, Reason: "newer"}}
	if len(ts) != 2 || ts[0] != want[0] || ts[1] != want[1] {
		t.Fatalf("Tombstones = %+v, want %+v", ts, want)
	}
	if err := s.AddTombstone(ctx, Tombstone{Scope: "bad"}); err == nil {
		t.Fatal("AddTombstone of a bad scope succeeded")
	}
	if err := s.AddTombstone(ctx, Tombstone{Scope: "user:q"}); err == nil {
		t.Fatal("AddTombstone without a time succeeded")
	}
}

func equalMaps(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
