package restore_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// prefixingEmbedder is the hashing embedder behind the Prefix convention, as the
// OpenAI client applies it: every text is sent with its role's prefix, so vectors made
// with it differ from the plain hashing embedder's. It counts the texts it embeds and
// records any role other than Passage (a restore never embeds queries).
type prefixingEmbedder struct {
	embed.Embedder
	roles   embed.Roles
	texts   atomic.Int64
	queries atomic.Int64
}

func (p *prefixingEmbedder) Roles() embed.Roles { return p.roles }

func (p *prefixingEmbedder) Embed(ctx context.Context, role embed.Role, texts []string) ([][]float32, error) {
	p.texts.Add(int64(len(texts)))
	prefix := p.roles.PassagePrefix
	if role == embed.Query {
		p.queries.Add(1)
		prefix = p.roles.QueryPrefix
	}
	sent := make([]string, len(texts))
	for i, t := range texts {
		sent[i] = prefix + t
	}
	return p.Embedder.Embed(ctx, role, sent)
}

// TestRestoreRolesDecideReuse: package vectors are reused only when the package was
// embedded with the target's roles convention as well as its model and dimension; a
// package without recorded roles (every package before roles were recorded) was
// embedded with none. Otherwise the restore re-embeds, as passages, with the
// target's convention.
func TestRestoreRolesDecideReuse(t *testing.T) {
	e := newEnv(t)
	src := e.newStore(t)
	seed(t, src, dataset(4, 5))
	e5 := embed.Roles{Convention: embed.ConventionPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "}

	items := src.exportAll(t)
	var live int64
	for _, it := range items {
		if it.MemoryType != memory.Working && it.ArchivedAt == nil && (it.ExpiresAt == nil || it.ExpiresAt.After(testNow)) {
			live++
		}
	}
	pkg := func(prefix string, roles *snapshot.EmbeddingRoles) *snapshot.Reader {
		return e.writePackage(t, prefix, items, pkgOptions{key: testKey, now: testNow,
			embedding: &snapshot.EmbeddingInfo{Model: hashingModel, Dimension: dim, Metric: "cosine", Roles: roles}})
	}
	unrecorded := pkg("snaps/roles-none/", nil)
	withE5 := pkg("snaps/roles-e5/", snapshot.EmbeddingRolesOf(e5))

	for _, tc := range []struct {
		name        string
		pkg         *snapshot.Reader
		targetRoles embed.Roles
		reuse       bool
	}{
		{"no recorded roles, target without roles: reuse", unrecorded, embed.NoRoles, true},
		{"no recorded roles, target with prefixes: re-embed", unrecorded, e5, false},
		{"recorded prefixes, target without roles: re-embed", withE5, embed.NoRoles, false},
		{"recorded prefixes, the same prefixes: reuse", withE5, e5, true},
		{"recorded prefixes, other prefixes: re-embed", withE5, embed.Roles{Convention: embed.ConventionPrefix, QueryPrefix: "q: ", PassagePrefix: "p: "}, false},
		{"recorded prefixes, target with input_type: re-embed", withE5, embed.Roles{Convention: embed.ConventionInputType}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := e.newStore(t)
			emb := &prefixingEmbedder{Embedder: embed.NewHashing(dim), roles: tc.targetRoles}
			res := run(t, restore.Options{Reader: tc.pkg, Target: dst.Store, Index: dst.index, Embedder: emb})
			if tc.reuse {
				if res.Embeddings != restore.Reuse || res.Embedded != 0 || emb.texts.Load() != 0 {
					t.Fatalf("%+v, %d texts embedded: want the package's vectors reused", res, emb.texts.Load())
				}
				return
			}
			if res.Embeddings != restore.Reembed || res.Embedded != live || emb.texts.Load() != live || emb.queries.Load() != 0 {
				t.Fatalf("%+v, %d texts (%d query calls): want %d re-embedded as passages", res, emb.texts.Load(), emb.queries.Load(), live)
			}
			// The vectors are the target convention's: the hashing embedder's of the
			// prefixed text.
			vecs := dst.vectorsOf(t)
			for _, it := range dst.exportAll(t) {
				if it.ArchivedAt != nil {
					continue
				}
				want, _ := embed.NewHashing(dim).Embed(context.Background(), embed.Passage, []string{tc.targetRoles.Normalized().PassagePrefix + it.EmbeddingText()})
				if !vectorsClose(vecs[it.MemoryID], want[0]) {
					t.Fatalf("%s: the vector is not the target convention's", it.MemoryID)
				}
			}
		})
	}

}
