package service_test

import (
	"context"
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
	for _, tc := range []struct {
		name string
		q    service.SearchQuery
		want string
	}{
		{"no scope", service.SearchQuery{Text: "x"}, "scope is required"},
		{"bad scope kind", service.SearchQuery{Scope: "tenant:1", Text: "x"}, "unknown scope kind"},
		{"scope injection", service.SearchQuery{Scope: `user:1" || scope != "`, Text: "x"}, "disallowed character"},
		{"no text", service.SearchQuery{Scope: "user:1", Text: "  "}, "text is required"},
		{"negative k", service.SearchQuery{Scope: "user:1", Text: "x", K: -1}, "k must be in [1, 100]"},
		{"k too large", service.SearchQuery{Scope: "user:1", Text: "x", K: service.MaxSearchK + 1}, "k must be in [1, 100]"},
		{"bad type", service.SearchQuery{Scope: "user:1", Text: "x", Types: []memory.Type{"fact"}}, `unknown memory type "fact"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Search(t.Context(), tc.q)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Search(%+v) err = %v, want one containing %q", tc.q, err, tc.want)
			}
		})
	}
	if n := emb.calls.Load(); n != 0 {
		t.Errorf("invalid searches made %d embedding calls, want 0", n)
	}
}
