package provision

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// An index generation (pgstore's generations.go) of a store on the Postgres engine
// keeps its vectors in a table of its own beside the vectors table, shaped like it:
// vectors_g2, vectors_g3, ... The store's roles hold on it what they hold on the
// vectors table, granted with the store's other privileges (grantRoles), so a
// store's reconcile never takes them away mid-switch.

// generationTablePrefix starts every generation table's name.
const generationTablePrefix = pgindex.Table + "_g"

// GenerationTable is the table of index generation n (2 or more) on the Postgres
// engine.
func GenerationTable(n int) string { return fmt.Sprintf("%s%d", generationTablePrefix, n) }

// EnsureGenerationTable creates generation n's table in the store's schema, unless
// it exists, and grants the store's roles their vectors privileges on it. A table
// holding vectors of another dimension is refused with DimensionMismatch.
func EnsureGenerationTable(ctx context.Context, admin PostgresConn, names Names, n int, spec vector.Spec) error {
	if n < 2 {
		return fail(ReasonBackendError, "index generation %d: generations beyond the first start at 2", n)
	}
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return err
	}
	defer pool.Close()
	what := "PostgreSQL " + admin.Endpoint() + ": generation table " + names.Schema + "." + GenerationTable(n)
	if err := pgindex.EnsureTable(ctx, pool, names.Schema, GenerationTable(n), spec); err != nil {
		return classify(what, err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockRoles(ctx, tx); err != nil {
			return err
		}
		for kind, role := range map[string]string{"agent": names.Role, "worker": names.WorkerRole} {
			if err := grantGenerationTables(ctx, tx, names.Schema, kind, role); err != nil {
				return err
			}
		}
		return nil
	})
	return classify(what+": granting "+names.Role+" and "+names.WorkerRole, err)
}

// DropGenerationTable drops generation n's table, if it exists; generation 1's is
// the schema's own vectors table, which is emptied instead (its migrations and
// grants stay).
func DropGenerationTable(ctx context.Context, admin PostgresConn, names Names, n int) error {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return err
	}
	defer pool.Close()
	if n < 2 {
		_, err := pool.Exec(ctx, `TRUNCATE `+pgx.Identifier{names.Schema, pgindex.Table}.Sanitize())
		return classify("PostgreSQL "+admin.Endpoint(), err)
	}
	return classify("PostgreSQL "+admin.Endpoint(), pgindex.DropTable(ctx, pool, names.Schema, GenerationTable(n)))
}

// grantGenerationTables grants role, on every generation table of schema, what its
// kind holds on the vectors table.
func grantGenerationTables(ctx context.Context, tx pgx.Tx, schema, kind, role string) error {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname ~ $2 ORDER BY c.relname`, schema, "^"+generationTablePrefix+"[0-9]+$")
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	privs := Privileges[kind][pgindex.Table]
	for _, table := range tables {
		// The privilege names are constants of this package, never input.
		if err := execFormattedTx(ctx, tx, `GRANT `+strings.Join(privs, ", ")+` ON %I.%I TO %I`, schema, table, role); err != nil {
			return err
		}
	}
	return nil
}
