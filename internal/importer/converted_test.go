package importer

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// convertedItems are memories as an import makes them: many scopes, arriving out of
// scope order, some expiring.
func convertedItems() []memory.Item {
	at := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	var items []memory.Item
	for i := range 3000 {
		it := memory.Item{MemoryID: fmt.Sprintf("lg-%05d", i), MemoryType: memory.Episodic, Scope: fmt.Sprintf("user:%03d", (i*37)%97),
			Content: json.RawMessage(fmt.Sprintf(`{"thread_id":"t%d","turn":%d,"messages":[{"role":"user","content":"订单 %d 到了吗？"}]}`, i/7, i%7, i)),
			Source:  "langgraph-checkpoint-postgres@schema-v9", BaseScore: 0.5, CreatedAt: at.Add(-time.Duration(i) * time.Second), UpdatedAt: at}
		if i%50 == 0 {
			exp := at.Add(30 * time.Minute) // gone by the restore
			it.ExpiresAt = &exp
		}
		items = append(items, it)
	}
	return items
}

func produceItems(items []memory.Item) func(fn func(memory.Item) error) (Stats, error) {
	return func(fn func(memory.Item) error) (Stats, error) {
		for _, it := range items {
			if err := fn(it); err != nil {
				return Stats{}, err
			}
		}
		return Stats{Items: int64(len(items))}, nil
	}
}

// TestConvertedRestoresAsItsPackage: memories converted and handed to the restore
// engine as they are (Convert) restore exactly as the package WritePackage makes of
// them, spilled to many runs or not; the same memories give the same digest, others
// another; and the engine refuses to read them without Options.Written.
func TestConvertedRestoresAsItsPackage(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testutil.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	items := convertedItems()
	now := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	restoreInto := func(t *testing.T, pkg restore.Package, written bool) (*restore.Result, []string) {
		t.Helper()
		schema := testutil.UniqueName("conv_")
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		})
		if _, err := pgstore.Migrate(ctx, pool, schema); err != nil {
			t.Fatal(err)
		}
		spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
		if err := pgindex.Ensure(ctx, pool, schema, spec); err != nil {
			t.Fatal(err)
		}
		res, err := restore.Run(ctx, restore.Options{Reader: pkg, Written: written, Target: pgstore.New(pool, schema),
			Index: pgindex.New(pool, schema, spec), Embedder: embed.NewHashing(8), Types: memory.AllTypes(), Now: now,
			BatchSize: 400, Parallelism: 2})
		if err != nil {
			t.Fatal(err)
		}
		var dump []string
		// A vector's every column but xact, which names the transaction that wrote it.
		rows, err := pool.Query(ctx, `SELECT row(m.*)::text || coalesce((SELECT row(v.memory_id, v.scope, v.memory_type, v.embedding)::text FROM `+pgx.Identifier{schema, "vectors"}.Sanitize()+
			` v WHERE v.memory_id = m.memory_id), '') FROM `+pgx.Identifier{schema, "memories"}.Sanitize()+` m ORDER BY memory_id`)
		if err != nil {
			t.Fatal(err)
		}
		if dump, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		return res, dump
	}

	dir := t.TempDir()
	if _, _, err := WritePackage(ctx, PackageOptions{Objects: snapshot.DirObjects{Root: dir}, Prefix: "pkg/", Unencrypted: true, SpillDir: dir},
		produceItems(items)); err != nil {
		t.Fatal(err)
	}
	pkg, err := snapshot.Open(ctx, snapshot.DirObjects{Root: dir}, "pkg/", nil)
	if err != nil {
		t.Fatal(err)
	}
	want, wantDump := restoreInto(t, pkg, false)
	if want.Inserted == 0 || want.Skipped.Expired == 0 || len(wantDump) != int(want.Inserted) {
		t.Fatalf("the package restored %+v", want)
	}

	var digest string
	for _, budget := range []int{0, 64 << 10} { // all in one run; many runs
		_, conv, err := Convert(ctx, PackageOptions{SpillDir: t.TempDir(), SortBudget: budget}, produceItems(items))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conv.Close)
		if budget > 0 && len(conv.sorter.runs) < 5 {
			t.Fatalf("budget %d: %d runs, want many", budget, len(conv.sorter.runs))
		}
		if _, err := restore.Run(ctx, restore.Options{Reader: conv, Target: pgstore.New(pool, "unused")}); err == nil ||
			!strings.Contains(err.Error(), "Options.Written") {
			t.Fatalf("converted memories restored without Options.Written: %v", err)
		}
		got, gotDump := restoreInto(t, conv, true)
		got.PackageID, got.Shards = want.PackageID, want.Shards
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("budget %d: converted restored\n%+v\nthe package\n%+v", budget, got, want)
		}
		if !reflect.DeepEqual(gotDump, wantDump) {
			t.Fatalf("budget %d: the stores differ", budget)
		}
		if budget == 0 {
			digest = conv.Digest()
			continue
		}
		// The digest is of the runs, which a budget splits differently: compare
		// like with like.
		_, again, err := Convert(ctx, PackageOptions{SpillDir: t.TempDir(), SortBudget: budget}, produceItems(items))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(again.Close)
		if again.Digest() != conv.Digest() {
			t.Fatal("the same memories converted twice have different digests")
		}
	}
	other := append(convertedItems()[:10], convertedItems()[11:]...)
	_, conv, err := Convert(ctx, PackageOptions{SpillDir: t.TempDir()}, produceItems(other))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conv.Close)
	if conv.Digest() == digest || len(digest) != 64 {
		t.Fatalf("digest %q of other memories, %q of the first", conv.Digest(), digest)
	}
}
