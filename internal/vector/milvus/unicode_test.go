package milvus_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// hostileValues are strings written into the scope field as they are (bypassing the
// Index, which never stores such values), to hold the expression escaping to the real
// parser: quotes, backslashes, line breaks, expression syntax, Unicode. Then random
// strings over the same alphabet, from a fixed seed.
func hostileValues() []string {
	vals := []string{`user:1" || scope != "`, `user:1' || scope != '`, `a\`, `a\"`, `\\`, `\u4e2d`, `\x41`, "a\nb", "a\rb", "a\tb",
		`"`, `'`, ` `, "zoë-ユーザー", "zoe\u0308", "用户123", "𠮷", "ஷ", "a\u2028b", "a\u200db", `memory_id in ["x"]`, "[]", "(", "||"}
	alphabet := []string{`"`, `'`, `\`, "\n", "\r", "\t", " ", "|", "&", "=", "!", "(", ")", "[", "]", ",", "a", "Z", "0", ":", "/",
		"ë", "e\u0308", "ユ", "用", "𠮷", "ஷ", "\u2028", "\u200d", "%", "*", "u", "4"}
	rng := rand.New(rand.NewPCG(20, 12))
	for range 300 {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		vals = append(vals, b.String())
	}
	slices.Sort(vals)
	return slices.Compact(vals)
}

// TestLiteralAgainstMilvusLite: every value, written as a literal, selects exactly its
// own row in Milvus Lite's parser, alone and in a list.
func TestLiteralAgainstMilvusLite(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 2, Metric: vector.Cosine}
	name := newCollection(t, c, spec)
	vals := hostileValues()
	ids := make([]string, len(vals))
	types := make([]string, len(vals))
	vecs := make([][]float32, len(vals))
	for i := range vals {
		ids[i], types[i], vecs[i] = fmt.Sprintf("v%04d", i), "semantic", []float32{1, float32(i)}
	}
	if _, err := c.Upsert(ctx, name, "", entity.NewColumnVarChar(milvus.FieldID, ids), entity.NewColumnVarChar(milvus.FieldScope, vals),
		entity.NewColumnVarChar(milvus.FieldType, types), entity.NewColumnFloatVector(milvus.FieldEmbedding, spec.Dimension, vecs)); err != nil {
		t.Fatal(err)
	}
	query := func(expr string) []string {
		t.Helper()
		rs, err := c.Query(ctx, name, nil, expr, []string{milvus.FieldID}, client.WithSearchQueryConsistencyLevel(entity.ClStrong))
		if err != nil {
			t.Fatalf("query %s: %v", expr, err)
		}
		col, ok := rs.GetColumn(milvus.FieldID).(*entity.ColumnVarChar)
		if !ok {
			t.Fatalf("query %s: no id column", expr)
		}
		got := slices.Clone(col.Data())
		slices.Sort(got)
		return got
	}
	var all []string
	for i, v := range vals {
		lit, err := milvus.Literal(v)
		if err != nil {
			t.Fatalf("literal(%q): %v", v, err)
		}
		if got := query(milvus.FieldScope + " == " + lit); !slices.Equal(got, []string{ids[i]}) {
			t.Fatalf("scope == %s selects %v, want [%s] (value %q)", lit, got, ids[i], v)
		}
		all = append(all, lit)
	}
	if got := query(milvus.FieldScope + " in [" + strings.Join(all, ",") + "]"); !slices.Equal(got, ids) {
		t.Fatalf("scope in [all] selects %d rows, want %d", len(got), len(ids))
	}
}

// TestScopesWrittenBefore: a collection written before Unicode scopes holds ASCII
// scopes as they are; the Index still finds and deletes them by those.
func TestScopesWrittenBefore(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 2, Metric: vector.L2}
	name := newCollection(t, c, spec)
	old := []string{"user:1024", "session:2024-05-01_abc.def", "agent:support-bot", "user:alice@example.com"}
	ids := []string{"o1", "o2", "o3", "o4"}
	if _, err := c.Upsert(ctx, name, "", entity.NewColumnVarChar(milvus.FieldID, ids), entity.NewColumnVarChar(milvus.FieldScope, old),
		entity.NewColumnVarChar(milvus.FieldType, []string{"semantic", "semantic", "semantic", "semantic"}),
		entity.NewColumnFloatVector(milvus.FieldEmbedding, 2, [][]float32{{1, 0}, {1, 0}, {1, 0}, {1, 0}})); err != nil {
		t.Fatal(err)
	}
	ix := milvus.New(c, name, spec)
	for i, scope := range old {
		if milvus.ScopeValue(scope) != scope {
			t.Fatalf("ASCII scope %q is stored as %q", scope, milvus.ScopeValue(scope))
		}
		hits, err := ix.Search(ctx, vector.Query{Scope: scope, Vector: []float32{1, 0}, K: 10})
		if err != nil || len(hits) != 1 || hits[0].ID != ids[i] {
			t.Fatalf("search %s = %v, %v; want %s", scope, hits, err, ids[i])
		}
	}
	if err := ix.DeleteScope(ctx, old[0]); err != nil {
		t.Fatal(err)
	}
	if hits, err := ix.Search(ctx, vector.Query{Scope: old[0], Vector: []float32{1, 0}, K: 10}); err != nil || len(hits) != 0 {
		t.Fatalf("after DeleteScope: %v, %v", hits, err)
	}
}
