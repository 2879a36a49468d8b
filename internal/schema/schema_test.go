package schema_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/schema"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Several processes starting at once all migrate; one applies, none fails, and
// the schema is current afterwards.
func TestMigrateConcurrentlyOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.EmptyURL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	if err := schema.Check(ctx, pool); !errors.Is(err, schema.ErrBehind) {
		t.Fatalf("Check on empty = %v, want ErrBehind", err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			p, err := pgxpool.New(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer p.Close()
			errs <- schema.Migrate(ctx, p, slog.New(slog.DiscardHandler))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	if err := schema.Check(ctx, pool); err != nil {
		t.Fatalf("Check after = %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM hookgate_migrations").Scan(&n); err != nil || n == 0 {
		t.Fatalf("hookgate_migrations rows = %d, %v", n, err)
	}
	// Nothing left to do the second time.
	if err := schema.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	var again int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM hookgate_migrations").Scan(&again)
	if again != n {
		t.Fatalf("migrations applied twice: %d then %d", n, again)
	}

	// A schema missing one of our migrations is behind.
	if _, err := pool.Exec(ctx, "DELETE FROM hookgate_migrations WHERE version = 1"); err != nil {
		t.Fatal(err)
	}
	if err := schema.Check(ctx, pool); !errors.Is(err, schema.ErrBehind) {
		t.Fatalf("Check with a missing migration = %v", err)
	}
}

// Receipt bodies are compressed with lz4 where the server has it, and the
// migration succeeds either way.
func TestReceiptBodiesUseLZ4WhereAvailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	var method string
	err := pool.QueryRow(ctx, `SELECT attcompression FROM pg_attribute
		WHERE attrelid = 'hookgate_receipts'::regclass AND attname = 'body'`).Scan(&method)
	if err != nil {
		t.Fatal(err)
	}
	_, lz4Err := pool.Exec(ctx, "CREATE TEMP TABLE lz4_probe (b bytea COMPRESSION lz4)")
	if want := map[bool]string{true: "l", false: ""}[lz4Err == nil]; method != want {
		t.Fatalf("body compression %q, want %q (server has lz4: %v)", method, want, lz4Err == nil)
	}
}

// River's GIN indexes on args and metadata are gone once the schema is
// current, River's reindexer is not asked to keep them, and no River
// migration after the one that created them touches them: a River upgrade
// whose migrations did would fail on a database without them, so this test
// fails first.
func TestRiverJobsWithoutGINIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	for _, name := range schema.RiverIndexesDropped {
		var exists bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("index %s exists after the migrations", name)
		}
		if slices.Contains(schema.RiverReindexed(), name) {
			t.Errorf("River's reindexer is given %s", name)
		}
	}
	if len(schema.RiverReindexed()) == 0 {
		t.Error("River's reindexer is given no index at all")
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, m := range migrator.AllVersions() {
		for _, name := range schema.RiverIndexesDropped {
			if !strings.Contains(m.SQLUp, name) {
				continue
			}
			if created != 0 && created != m.Version {
				t.Errorf("River's migration %d (%s) touches %s, which hookgate drops", m.Version, m.Name, name)
			}
			created = m.Version
		}
	}
	if created == 0 {
		t.Error("no River migration creates the indexes hookgate drops: is the list still right?")
	}
}
