package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
)

// specIndex is an index that only knows its spec; every other call fails the test.
type specIndex struct {
	t *testing.T
	s vector.Spec
}

func (x specIndex) Upsert(context.Context, []vector.Entry) error {
	x.t.Error("unexpected Upsert")
	return errors.New("unexpected")
}
func (x specIndex) Delete(context.Context, []string) error {
	x.t.Error("unexpected Delete")
	return errors.New("unexpected")
}
func (x specIndex) DeleteScope(context.Context, string) error {
	x.t.Error("unexpected DeleteScope")
	return errors.New("unexpected")
}
func (x specIndex) Search(context.Context, vector.Query) ([]vector.Hit, error) {
	x.t.Error("unexpected Search")
	return nil, errors.New("unexpected")
}
func (x specIndex) Spec() vector.Spec { return x.s }

func TestNewChecksArguments(t *testing.T) {
	store := pgstore.New(nil, "unused") // New does not touch the database
	idx := specIndex{t, vector.Spec{Dimension: 8, Metric: vector.Cosine}}

	_, err := service.New(store, idx, embed.NewHashing(16))
	if !errors.Is(err, vector.ErrDimensionMismatch) {
		t.Fatalf("New with a 16-dim embedder over an 8-dim index: err = %v, want ErrDimensionMismatch", err)
	}
	if !strings.Contains(err.Error(), "16") || !strings.Contains(err.Error(), "8") {
		t.Errorf("error %q does not name both dimensions", err)
	}
	if _, err := service.New(store, idx, embed.NewHashing(8)); err != nil {
		t.Fatalf("New with matching dimensions: %v", err)
	}
	for name, f := range map[string]func() (*service.Memory, error){
		"nil store":    func() (*service.Memory, error) { return service.New(nil, idx, embed.NewHashing(8)) },
		"nil index":    func() (*service.Memory, error) { return service.New(store, nil, embed.NewHashing(8)) },
		"nil embedder": func() (*service.Memory, error) { return service.New(store, idx, nil) },
	} {
		if m, err := f(); err == nil || m != nil {
			t.Errorf("%s: New = %v, %v; want an error", name, m, err)
		}
	}
}

func TestSearchValidation(t *testing.T) {
	emb := &countingEmbedder{Embedder: embed.NewHashing(8)}
	m, err := service.New(pgstore.New(nil, "unused"), specIndex{t, vector.Spec{Dimension: 8, Metric: vector.Cosine}}, emb)
	if err != nil {
		t.Fatal(err)
	}
	// Every refusal is the caller's input, typed as such (a *memory.FieldError naming the
	// field), never something a caller could mistake for a failed backend.
	for _, tc := range []struct {
		name, field, want string
		q                 service.SearchQuery
	}{
		{"no scope", "scope", "is required", service.SearchQuery{Text: "x"}},
		{"bad scope kind", "scope", "unknown scope kind", service.SearchQuery{Scope: "tenant:1", Text: "x"}},
		{"scope injection", "scope", "disallowed character", service.SearchQuery{Scope: `user:1" || scope != "`, Text: "x"}},
		{"no text", "query", "is empty", service.SearchQuery{Scope: "user:1", Text: "  "}},
		{"NUL in the text", "query", "NUL", service.SearchQuery{Scope: "user:1", Text: "a\x00b"}},
		{"negative k", "top_k", "must be in [1, 100]", service.SearchQuery{Scope: "user:1", Text: "x", K: -1}},
		{"k too large", "top_k", "must be in [1, 100]", service.SearchQuery{Scope: "user:1", Text: "x", K: service.MaxSearchK + 1}},
		{"bad type", "types", `unknown memory type "fact"`, service.SearchQuery{Scope: "user:1", Text: "x", Types: []memory.Type{"fact"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Search(t.Context(), tc.q)
			var fe *memory.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Reason, tc.want) {
				t.Fatalf("Search(%+v) err = %v, want a field error of %s containing %q", tc.q, err, tc.field, tc.want)
			}
		})
	}
	if n := emb.calls.Load(); n != 0 {
		t.Errorf("invalid searches made %d embedding calls, want 0", n)
	}
}

// TestGuaranteeInputLimitRefusesBeforeAnything: with overflow Refuse, a write or search whose
// text is over the input limit is refused with embed.ErrTextTooLong naming the item,
// before the embedder, the index or the database is touched.
func TestGuaranteeInputLimitRefusesBeforeAnything(t *testing.T) {
	emb := &countingEmbedder{Embedder: embed.NewHashing(8)}
	m, err := service.NewWith(pgstore.New(nil, "unused"), specIndex{t, vector.Spec{Dimension: 8, Metric: vector.Cosine}}, emb,
		service.Options{InputLimit: embed.Limit{MaxInputBytes: 64, Overflow: embed.Refuse}})
	if err != nil {
		t.Fatal(err)
	}
	long := json.RawMessage(`{"text":"` + strings.Repeat("x", 100) + `"}`)
	items := []memory.Item{
		{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"short"}`), Source: "t", BaseScore: 0.5},
		{MemoryID: "m2", Scope: "user:1", MemoryType: memory.Semantic, Content: long, Source: "t", BaseScore: 0.5},
	}
	_, err = m.Write(t.Context(), items, service.WriteOptions{})
	var tl *embed.TextTooLongError
	if !errors.As(err, &tl) || tl.ID != "m2" || !strings.Contains(err.Error(), "item 1") {
		t.Fatalf("Write: %v, want a TextTooLongError naming item 1 (m2)", err)
	}
	if _, err := m.Search(t.Context(), service.SearchQuery{Scope: "user:1", Text: strings.Repeat("q", 65)}); !errors.Is(err, embed.ErrTextTooLong) {
		t.Fatalf("Search: %v, want ErrTextTooLong", err)
	}
	if n := emb.calls.Load(); n != 0 {
		t.Errorf("refused calls made %d embedding calls, want 0", n)
	}
	if _, err := service.NewWith(pgstore.New(nil, "unused"), specIndex{t, vector.Spec{Dimension: 8, Metric: vector.Cosine}}, emb,
		service.Options{InputLimit: embed.Limit{MaxInputBytes: 64, Overflow: "Cut"}}); err == nil {
		t.Error("NewWith accepted overflow Cut")
	}
}
