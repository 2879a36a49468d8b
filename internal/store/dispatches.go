package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Dispatch is one generation of one route's dispatch of an event, with its
// live state (the view hookgate_dispatch_states).
type Dispatch struct {
	Route      string    `json:"route"`
	Generation int       `json:"generation"`
	State      string    `json:"state"`
	Attempts   int       `json:"attempts"`
	LastError  *string   `json:"last_error"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// DispatchesOf returns every dispatch of the event (provider, deliveryID), of
// every route and generation, with its live state, by route and generation.
func DispatchesOf(ctx context.Context, db Querier, provider, deliveryID string) ([]Dispatch, error) {
	rows, err := db.Query(ctx, `
		SELECT route, generation, live_state, attempts, last_error, created_at, updated_at
		FROM hookgate_dispatch_states
		WHERE provider = $1 AND delivery_id = $2
		ORDER BY route, generation`, provider, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Dispatch, error) {
		var x Dispatch
		err := row.Scan(&x.Route, &x.Generation, &x.State, &x.Attempts, &x.LastError, &x.CreatedAt, &x.UpdatedAt)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	return ds, nil
}

// Attempted is a dispatch with the errors River recorded for its job's
// attempts, as River stores them (JSON objects with at, attempt and error).
type Attempted struct {
	Dispatch
	JobErrors []string
}

// HistoryOf is DispatchesOf with each dispatch's River job errors. A job
// River has already cleaned away leaves none.
func HistoryOf(ctx context.Context, db Querier, provider, deliveryID string) ([]Attempted, error) {
	rows, err := db.Query(ctx, `
		SELECT route, generation, live_state, attempts, last_error, created_at, updated_at,
			coalesce(job_errors::text[], '{}')
		FROM hookgate_dispatch_states
		WHERE provider = $1 AND delivery_id = $2
		ORDER BY route, generation`, provider, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("read dispatch history: %w", err)
	}
	hs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempted, error) {
		var x Attempted
		err := row.Scan(&x.Route, &x.Generation, &x.State, &x.Attempts, &x.LastError, &x.CreatedAt, &x.UpdatedAt, &x.JobErrors)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read dispatch history: %w", err)
	}
	return hs, nil
}

// Latest is the newest generation of one route's dispatch of an event, with
// its live state.
type Latest struct {
	Generation int
	State      string
}

// LatestOf returns, by route, the latest dispatch of the event (provider,
// deliveryID) on each of routes that has one.
func LatestOf(ctx context.Context, db Querier, provider, deliveryID string, routes []string) (map[string]Latest, error) {
	rows, err := db.Query(ctx, `
		SELECT DISTINCT ON (route) route, generation, live_state
		FROM hookgate_dispatch_states
		WHERE provider = $1 AND delivery_id = $2 AND route = ANY($3)
		ORDER BY route, generation DESC`, provider, deliveryID, routes)
	if err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	last := map[string]Latest{}
	for rows.Next() {
		var route string
		var l Latest
		if err := rows.Scan(&route, &l.Generation, &l.State); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read dispatches: %w", err)
		}
		last[route] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	return last, nil
}
