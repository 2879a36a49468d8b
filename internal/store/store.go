// Package store is hookgate's data-access layer: every SQL statement the
// gateway runs against its own tables and River's is here, as a named
// function with named parameters, in a file per table or concern. The other
// packages decide; this one reads and writes. A definition that two
// statements share (a dispatch's live state, a live dispatch, an event's
// first receipt) is a view or a function owned by a migration, never a
// string glued into both.
//
// The statements are written by hand in Go rather than compiled by sqlc from
// .sql files (River's choice): hookgate's statements are few, most are built
// once with their shape fixed, and several must choose their columns or
// conditions from a filter at run time (the deliveries list, the bulk
// replays), which sqlc cannot express without a statement per combination.
// Each function says what it reads or writes and which invariant it keeps;
// the tests of the packages that call them run them on a real PostgreSQL.
//
// Every function takes the Querier to run on: a pool, a connection or a
// transaction. A function whose statements must commit together with the
// caller's takes a pgx.Tx and says so by its name's Tx suffix.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DatabaseNow returns the database's clock: the time its statements read as
// now() (in a transaction, the transaction's start).
func DatabaseNow(ctx context.Context, db Querier) (time.Time, error) {
	var now time.Time
	if err := db.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}

// NoDiskWaitTx lets tx commit without waiting for the disk: a crash of the
// database may lose it after its commit returned, all of it together.
func NoDiskWaitTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return nil
}
