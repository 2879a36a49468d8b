// Package schema applies hookgate's database schema and checks that it is
// current: River's migrations (rivermigrate) and then hookgate's own numbered
// SQL files (package migrations), under an advisory lock so that several
// processes may start at once. A gateway refuses to serve on a schema that is
// behind.
package schema

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/hookgate/hookgate/migrations"
)

// RiverIndexesDropped are River's indexes on river_job that hookgate's
// migration 0015 drops: GIN indexes on args and metadata, which no query of
// hookgate's uses and every job's state change writes.
var RiverIndexesDropped = []string{"river_job_args_index", "river_job_metadata_index"}

// RiverReindexed is what River's reindexer keeps up: its defaults without
// RiverIndexesDropped (it warns of a configured index that does not exist).
func RiverReindexed() []string {
	return slices.DeleteFunc(river.ReindexerIndexNamesDefault(), func(name string) bool { return slices.Contains(RiverIndexesDropped, name) })
}

// ErrBehind means the database lacks migrations this build needs.
var ErrBehind = errors.New("database schema is behind")

// migrateLockKey is the advisory lock that serialises migrations across
// processes starting at once ("hookgate" in ASCII).
const migrateLockKey = 0x686f6f6b67617465

type migration struct {
	version int
	name    string
	sql     string
}

func ourMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		prefix, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with its number", e.Name())
		}
		sql, err := fs.ReadFile(migrations.FS, e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(sql)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	return ms, nil
}

// Migrate applies River's pending migrations and then hookgate's, holding an
// advisory lock so that several processes may start at once: the first
// applies, the others wait and find nothing left to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrateLockKey)); err != nil {
		return fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even when ctx is done.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrateLockKey))
	}()

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}
	// River logs each migration it applies.
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}

	ms, err := ourMigrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS hookgate_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return err
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO hookgate_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate %s: %w", m.name, err)
		}
		logger.InfoContext(ctx, "applied migration", "name", m.name)
	}
	return nil
}

func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]bool, error) {
	rows, err := conn.Query(ctx, "SELECT version FROM hookgate_migrations")
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

// Check returns nil when every migration this build knows, River's and
// hookgate's, is applied, and an error wrapping ErrBehind when not.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	res, err := migrator.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("check river schema: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("%w: river: %s", ErrBehind, strings.Join(res.Messages, "; "))
	}
	ms, err := ourMigrations()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('hookgate_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	if !exists {
		return fmt.Errorf("%w: no hookgate migrations applied", ErrBehind)
	}
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return err
	}
	for _, m := range ms {
		if !applied[m.version] {
			return fmt.Errorf("%w: %s not applied", ErrBehind, m.name)
		}
	}
	return nil
}
