// Package schema applies hookgate's database schema and checks that it is
// current: River's migrations (rivermigrate) and then hookgate's own numbered
// SQL files (package migrations), under an advisory lock so that several
// processes may start at once. A gateway refuses to serve on a schema that is
// behind.
//
// hookgate's and River's tables live in a PostgreSQL schema of their own
// (GATEWAY_DATABASE_SCHEMA, "hookgate" by default), which the gateway's
// connections put first on their search_path (Use), public after it, so
// that a service's handlers still find its own tables by their plain names. A
// database an earlier release made, with its tables in public, is moved to
// the schema once, under the same lock, with nothing lost.
package schema

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
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

// Default is the schema hookgate's and River's tables live in unless
// GATEWAY_DATABASE_SCHEMA says otherwise.
const Default = "hookgate"

var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CheckName reports whether name can name the schema: 1-63 of a-z, 0-9 and
// _, not starting with a digit, and none of PostgreSQL's own (pg_*,
// information_schema).
func CheckName(name string) error {
	if !nameRE.MatchString(name) || strings.HasPrefix(name, "pg_") || name == "information_schema" {
		return errors.New("must be 1-63 of a-z, 0-9 and _, not starting with a digit, and not one of PostgreSQL's own schemas")
	}
	return nil
}

// Use puts the schema name first on the search_path of cfg's connections,
// the service's own path after it (ServicePath: its tables found by their
// plain names, in whichever schemas the URL, the role or the server gives
// it): every statement of hookgate's and River's finds its tables in name.
// name must pass CheckName.
func Use(cfg *pgx.ConnConfig, name, servicePath string) {
	path := pgx.Identifier{name}.Sanitize()
	if servicePath != "" {
		path += ", " + servicePath
	}
	cfg.RuntimeParams["search_path"] = path
}

// Of returns the schema first on cfg's search_path (Use), "public" when it
// names none.
func Of(cfg *pgx.ConnConfig) string {
	first, _, _ := strings.Cut(cfg.RuntimeParams["search_path"], ",")
	if name := strings.Trim(strings.TrimSpace(first), `"`); name != "" {
		return name
	}
	return "public"
}

// ServicePath returns the search_path a service's own connection should
// have: the one cfg's connections have (cfg as the URL gives it: its own
// search_path, else the role's or the server's), without the schema name,
// which "$user" also names when the user is called so (the private
// PostgreSQL's user and the default schema are both hookgate). So a service's plain CREATE TABLE lands in
// public, or where its database says, never among hookgate's tables. When
// hookgate's schema is public itself (an earlier release's layout, kept on
// purpose), the path is left as it is: the two share it.
func ServicePath(ctx context.Context, cfg *pgx.ConnConfig, name string) (string, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var path, user string
	if err := conn.QueryRow(ctx, "SELECT current_setting('search_path'), current_user").Scan(&path, &user); err != nil {
		return "", err
	}
	var keep []string
	for part := range strings.SplitSeq(path, ",") {
		part = strings.TrimSpace(part)
		bare := strings.Trim(part, `"`)
		hidden := name != "public" && (bare == name || bare == "$user" && user == name)
		if part == "" || hidden {
			continue
		}
		keep = append(keep, part)
	}
	if len(keep) == 0 {
		return "public", nil
	}
	return strings.Join(keep, ", "), nil
}

// Migrate applies River's pending migrations and then hookgate's, in the
// schema the pool's connections use first (Use): it creates the schema, and
// moves there the tables an earlier release made in public. It holds an
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
	if err := ensureSchema(ctx, conn.Conn(), logger); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}

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

// ensureSchema creates the schema first on the connection's search_path,
// and, when it holds no hookgate tables yet and public does (an earlier
// release's database), moves hookgate's and River's tables, sequences, types
// and functions there in one transaction.
func ensureSchema(ctx context.Context, conn *pgx.Conn, logger *slog.Logger) error {
	name := Of(conn.Config())
	if err := CheckName(name); err != nil {
		return fmt.Errorf("schema %q: %w", name, err)
	}
	if name == "public" {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", name, err)
	}
	var ours, earlier bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass('public.hookgate_migrations') IS NOT NULL`,
		name+".hookgate_migrations").Scan(&ours, &earlier); err != nil {
		return fmt.Errorf("look for an earlier release's tables: %w", err)
	}
	if ours {
		return nil
	}
	if !earlier {
		// A new schema: say so when another one already holds hookgate's
		// tables, for a changed GATEWAY_DATABASE_SCHEMA starts from nothing
		// (two gateways may share a database, each in a schema of its own).
		var others []string
		rows, err := conn.Query(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relname = 'hookgate_migrations' AND c.relkind = 'r' AND n.nspname <> $1 ORDER BY 1`, name)
		if err == nil {
			others, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return fmt.Errorf("look for hookgate's tables in other schemas: %w", err)
		}
		if len(others) > 0 {
			logger.WarnContext(ctx, "hookgate's tables are also in another schema of this database: this gateway starts with none of their deliveries; "+
				"if that schema was this gateway's, stop it and set GATEWAY_DATABASE_SCHEMA back (or rename that schema while no gateway runs)",
				"schema", name, "other_schemas", strings.Join(others, ","))
		}
		return nil
	}
	moved := 0
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Tables first (with their indexes, constraints and owned
		// sequences), then what is left: free sequences, types, functions.
		own, err := ownNames()
		if err != nil {
			return err
		}
		for _, list := range []string{movableTables, movableRest} {
			rows, err := tx.Query(ctx, list, name, own)
			if err != nil {
				return err
			}
			stmts, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, stmt := range stmts {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return fmt.Errorf("%s: %w", stmt, err)
				}
			}
			moved += len(stmts)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("move an earlier release's tables from public to %s: %w", name, err)
	}
	logger.InfoContext(ctx, "moved hookgate's and River's tables from public to their own schema", "schema", name, "objects", moved)
	return nil
}

// movableTables and movableRest are the statements that move hookgate's and
// River's objects, those named in $2 (ownNames), from public to the schema
// $1: a service's own table that happens to be named hookgate_* or river_*
// stays where it is.
const (
	movableTables = `SELECT format('ALTER TABLE public.%I SET SCHEMA %I', c.relname, $1::text)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'u') AND c.relname = ANY($2)`
	movableRest = `SELECT format('ALTER SEQUENCE public.%I SET SCHEMA %I', c.relname, $1::text)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind = 'S' AND c.relname = ANY($2)
		UNION ALL
		SELECT format('ALTER VIEW public.%I SET SCHEMA %I', c.relname, $1::text)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind = 'v' AND c.relname = ANY($2)
		UNION ALL
		SELECT format('ALTER TYPE public.%I SET SCHEMA %I', t.typname, $1::text)
		FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		WHERE n.nspname = 'public' AND t.typtype IN ('e', 'c', 'd') AND t.typrelid = 0 AND t.typname = ANY($2)
		UNION ALL
		SELECT format('ALTER FUNCTION %s SET SCHEMA %I', p.oid::regprocedure, $1::text)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.proname = ANY($2)`
)

// riverObjects are River's tables, free sequences, types and functions up
// to its migration version 8 (store's river_test.go pins that version).
var riverObjects = []string{"river_client", "river_client_queue", "river_job", "river_job_notify", "river_job_state",
	"river_job_state_in_bitmask", "river_leader", "river_migration", "river_notification", "river_queue"}

var createdRE = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNLOGGED\s+)?(?:TABLE|VIEW|FUNCTION|TYPE|SEQUENCE)\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)

// ownNames are the names of the objects hookgate's migrations create (and
// hookgate_migrations) and River's: what a move takes from public.
func ownNames() ([]string, error) {
	names := append([]string{"hookgate_migrations"}, riverObjects...)
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		sql, err := fs.ReadFile(migrations.FS, e.Name())
		if err != nil {
			return nil, err
		}
		for _, m := range createdRE.FindAllStringSubmatch(string(sql), -1) {
			names = append(names, strings.ToLower(m[1]))
		}
	}
	return names, nil
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
