package hookgatetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/schema"
)

// Database returns a pool to a new database of the test's own, dropped when
// the test ends, with hookgate's schema migrated (in its own schema, as the
// gateway's is) and then each of migrations run, as Run runs the functions
// given to WithMigration: on a pool of their own, with the server's
// search_path, so that the service's tables land where they do in
// production. The pool it returns is the gateway's kind (Gateway.Pool): its
// connections find hookgate's tables first and the service's by their plain
// names, so a transaction begun on it is what a handler is given.
//
// The database is made on the server DATABASE_URL names (its user must be
// able to create databases), or, when DATABASE_URL is unset, on a private
// PostgreSQL the test binary starts once: call Main from TestMain to stop
// it when the tests end.
func Database(t testing.TB, migrations ...func(context.Context, *pgxpool.Pool) error) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	var u string
	if base := os.Getenv("DATABASE_URL"); base != "" {
		u = newDatabase(t, base)
	} else {
		u = dbtest.EmptyURL(t)
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("hookgatetest: DATABASE_URL is not a PostgreSQL URL")
	}
	// The service's own search_path (the URL's, the role's or the
	// server's), without hookgate's schema: its migrations run with it, and
	// the gateway's connections have it after hookgate's schema.
	path, err := schema.ServicePath(ctx, cfg.ConnConfig.Copy(), schema.Default)
	if err != nil {
		t.Fatalf("hookgatetest: %v", err)
	}
	own := cfg.Copy()
	own.ConnConfig.RuntimeParams["search_path"] = path
	schema.Use(cfg.ConnConfig, schema.Default, path)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("hookgatetest: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := schema.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("hookgatetest: migrate: %v", err)
	}
	for i, migrate := range migrations {
		own, err := pgxpool.NewWithConfig(ctx, own.Copy())
		if err != nil {
			t.Fatalf("hookgatetest: %v", err)
		}
		err = migrate(ctx, own)
		own.Close()
		if err != nil {
			t.Fatalf("hookgatetest: the service's migration %d: %v", i+1, err)
		}
	}
	return pool
}

// Main runs the tests and then stops the private PostgreSQL that Database
// started, if it started one: call it from TestMain.
func Main(m *testing.M) { dbtest.Main(m) }

var databases atomic.Int64

// newDatabase creates a database on base's server, dropped when the test
// ends, and returns its URL.
func newDatabase(t testing.TB, base string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		// Not err's text, which may quote the URL: what kind of failure.
		var pgErr *pgconn.PgError
		cause := "the server cannot be reached"
		if errors.As(err, &pgErr) {
			cause = pgErr.Code + " " + pgErr.Message
		}
		t.Fatalf("hookgatetest: cannot connect to DATABASE_URL's server: %s", cause)
	}
	defer conn.Close(ctx)
	// The process id and a random part: two test binaries, on two machines
	// sharing a server, or one left by a killed run, never pick one name.
	name := fmt.Sprintf("hookgatetest_%d_%d_%08x", os.Getpid(), databases.Add(1), rand.Uint32())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("hookgatetest: create a test database on DATABASE_URL's server: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		t.Fatalf("hookgatetest: DATABASE_URL must be a postgres:// URL to make test databases beside it")
	}
	u.Path = "/" + name
	return u.String()
}
