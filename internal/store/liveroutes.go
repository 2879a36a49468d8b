package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The routes the database owns (hookgate_live_routes), with the version
// every change moves (hookgate_live_routes_state).

// LiveRoute is a stored route: its name and its spec, the configuration
// file's shape as JSON; Deleted when it was deleted (its dispatches already
// made finish with it).
type LiveRoute struct {
	Name    string
	Spec    []byte
	Deleted bool
}

// LiveRoutesVersion is the routes' version: it moves with every change.
func LiveRoutesVersion(ctx context.Context, db Querier) (int64, error) {
	var v int64
	if err := db.QueryRow(ctx, `SELECT version FROM hookgate_live_routes_state`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the routes' version: %w", err)
	}
	return v, nil
}

// LiveRoutes returns the stored routes in the order first made, and their
// version, read together.
func LiveRoutes(ctx context.Context, db Querier) ([]LiveRoute, int64, error) {
	rows, err := db.Query(ctx, `SELECT r.name, r.spec, r.deleted_at IS NOT NULL, s.version
		FROM hookgate_live_routes_state s LEFT JOIN hookgate_live_routes r ON true ORDER BY r.position`)
	if err != nil {
		return nil, 0, fmt.Errorf("read the routes: %w", err)
	}
	var routes []LiveRoute
	var version int64
	for rows.Next() {
		var name *string
		var spec []byte
		var deleted *bool
		if err := rows.Scan(&name, &spec, &deleted, &version); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("read the routes: %w", err)
		}
		if name != nil {
			routes = append(routes, LiveRoute{Name: *name, Spec: spec, Deleted: *deleted})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read the routes: %w", err)
	}
	return routes, version, nil
}

// SeedLiveRoutesTx stores routes in an empty table that was never seeded,
// once: it reports whether it did. It locks the routes' state until tx ends.
func SeedLiveRoutesTx(ctx context.Context, tx pgx.Tx, routes []LiveRoute, by string) (bool, error) {
	var seeded bool
	if err := tx.QueryRow(ctx, `SELECT seeded_at IS NOT NULL OR EXISTS (SELECT 1 FROM hookgate_live_routes)
		FROM hookgate_live_routes_state FOR UPDATE`).Scan(&seeded); err != nil {
		return false, fmt.Errorf("seed the routes: %w", err)
	}
	if seeded {
		return false, nil
	}
	for _, r := range routes {
		if _, err := tx.Exec(ctx, `INSERT INTO hookgate_live_routes (name, spec, updated_by) VALUES ($1, $2, $3)`, r.Name, r.Spec, by); err != nil {
			return false, fmt.Errorf("seed route %s: %w", r.Name, err)
		}
	}
	if err := bumpLiveRoutesTx(ctx, tx); err != nil {
		return false, fmt.Errorf("seed the routes: %w", err)
	}
	return true, nil
}

// lockLiveRoutesTx takes the routes' state row until tx ends: changes to
// the routes are made one at a time, so that each sees the one before it
// (a route made twice at once is made once, then replaced).
func lockLiveRoutesTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM hookgate_live_routes_state FOR UPDATE`); err != nil {
		return fmt.Errorf("lock the routes: %w", err)
	}
	return nil
}

// bumpLiveRoutesTx moves the routes' version, and marks them seeded: once
// changed, the configured routes never seed them.
func bumpLiveRoutesTx(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `UPDATE hookgate_live_routes_state SET seeded_at = coalesce(seeded_at, now()), version = version + 1`)
	return err
}

// PutLiveRouteTx stores a route's spec, made or replaced, moves the version
// and returns the spec before (nil when the route is new).
func PutLiveRouteTx(ctx context.Context, tx pgx.Tx, name string, spec []byte, by string) ([]byte, error) {
	if err := lockLiveRoutesTx(ctx, tx); err != nil {
		return nil, err
	}
	var before []byte
	err := tx.QueryRow(ctx, `SELECT spec FROM hookgate_live_routes WHERE name = $1 AND deleted_at IS NULL FOR UPDATE`, name).Scan(&before)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("put route %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO hookgate_live_routes (name, spec, updated_by) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, updated_at = now(), updated_by = excluded.updated_by, deleted_at = NULL`,
		name, spec, by); err != nil {
		return nil, fmt.Errorf("put route %s: %w", name, err)
	}
	if err := bumpLiveRoutesTx(ctx, tx); err != nil {
		return nil, fmt.Errorf("put route %s: %w", name, err)
	}
	return before, nil
}

// DeleteLiveRouteTx marks a route deleted, moves the version and returns
// its spec; found is false when there is no such route.
func DeleteLiveRouteTx(ctx context.Context, tx pgx.Tx, name string) (before []byte, found bool, err error) {
	if err := lockLiveRoutesTx(ctx, tx); err != nil {
		return nil, false, err
	}
	err = tx.QueryRow(ctx, `UPDATE hookgate_live_routes SET deleted_at = now() WHERE name = $1 AND deleted_at IS NULL RETURNING spec`,
		name).Scan(&before)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("delete route %s: %w", name, err)
	}
	if err := bumpLiveRoutesTx(ctx, tx); err != nil {
		return nil, false, fmt.Errorf("delete route %s: %w", name, err)
	}
	return before, true, nil
}

// LiveRouteSpec returns the spec of the route name, unless it is deleted;
// found is false for none.
func LiveRouteSpec(ctx context.Context, db Querier, name string) (spec []byte, found bool, err error) {
	err = db.QueryRow(ctx, `SELECT spec FROM hookgate_live_routes WHERE name = $1 AND deleted_at IS NULL`, name).Scan(&spec)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read route %s: %w", name, err)
	}
	return spec, true, nil
}
