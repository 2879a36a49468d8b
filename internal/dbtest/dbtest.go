// Package dbtest gives tests a real, migrated PostgreSQL database of their own.
//
// A test binary starts one private server (package pgembed, with fsync off)
// the first time a test asks for a database, or uses TEST_DATABASE_URL when it
// is set. The schema is migrated once into a template database; each test gets
// a fresh copy of it, so tests run in parallel, commit freely and see only
// their own rows. Packages that use it call Main from TestMain so the server
// stops when the tests end.
package dbtest

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/pgembed"
	"github.com/hookgate/hookgate/internal/schema"
)

const template = "hookgate_template"

var (
	once     sync.Once
	adminURL string // a database to run CREATE DATABASE from
	server   *pgembed.Server
	dataDir  string
	startErr error
	counter  atomic.Int64
)

// Main runs the tests and then stops the private server, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	if server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = server.Stop(ctx)
		cancel()
		os.RemoveAll(dataDir)
	}
	os.Exit(code)
}

// MainWithDatabase is Main for tests and examples that read their database
// from the environment, as a service does: it sets the variable to the URL of
// a new, empty database (no schema: the gateway migrates it) before the
// tests run.
func MainWithDatabase(m *testing.M, variable string) {
	once.Do(start)
	if startErr != nil {
		fmt.Fprintln(os.Stderr, "test database:", startErr)
		os.Exit(1)
	}
	name := fmt.Sprintf("hookgate_test_%d_%d", os.Getpid(), counter.Add(1))
	if err := createDatabase(context.Background(), name, "template1"); err != nil {
		fmt.Fprintln(os.Stderr, "test database:", err)
		os.Exit(1)
	}
	os.Setenv(variable, withDatabase(adminURL, name))
	Main(m)
}

func createDatabase(ctx context.Context, name, from string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+from)
	return err
}

func start() {
	ctx := context.Background()
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		adminURL = u
	} else {
		dataDir, startErr = os.MkdirTemp("", "hookgate-test-pg-")
		if startErr != nil {
			return
		}
		server, startErr = pgembed.Start(ctx, pgembed.Options{Dir: dataDir, Database: "postgres", Ephemeral: true})
		if startErr != nil {
			return
		}
		adminURL = server.URL()
	}
	startErr = createTemplate(ctx)
}

func createTemplate(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+template+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+template); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, inSchema(withDatabase(adminURL, template)))
	if err != nil {
		return err
	}
	defer pool.Close()
	return schema.Migrate(ctx, pool, slog.New(slog.DiscardHandler))
}

// URL returns the URL of a new, migrated database that is dropped when the
// test ends. Its tables are in schema.Default, as a gateway's are, and the
// URL puts that schema first on its connections' search_path.
func URL(t testing.TB) string {
	t.Helper()
	return inSchema(newDatabase(t, template))
}

// inSchema is rawURL with schema.Default first on its search_path (as
// schema.Use sets it), public after it.
func inSchema(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	q.Set("search_path", schema.Default+",public")
	u.RawQuery = q.Encode()
	return u.String()
}

// EmptyURL returns the URL of a new database without any schema, dropped when
// the test ends: for testing migrations.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "template1")
}

// StartRiver starts client and stops it, waiting up to 10 s for its jobs, when
// the test ends.
func StartRiver(t testing.TB, client *river.Client[pgx.Tx]) {
	t.Helper()
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
}

// SharedDir returns a new directory, removed when the test ends, that a
// private server started from it may pass through: when the tests run as root
// that server runs as another user, and t.TempDir's parents are private.
func SharedDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newDatabase(t testing.TB, from string) string {
	t.Helper()
	once.Do(start)
	if startErr != nil {
		t.Fatalf("test database: %v", startErr)
	}
	ctx := context.Background()
	name := fmt.Sprintf("hookgate_test_%d_%d", os.Getpid(), counter.Add(1))
	if err := createDatabase(ctx, name, from); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return withDatabase(adminURL, name)
}

// NewPool returns a pool to a new, migrated database of the test's own, its
// connections in schema.Default.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("test pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func withDatabase(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	u.Path = "/" + name
	return u.String()
}
