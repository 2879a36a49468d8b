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
	Route      string  `json:"route"`
	Generation int     `json:"generation"`
	State      string  `json:"state"`
	Attempts   int     `json:"attempts"`
	LastError  *string `json:"last_error"`
	// SupersededBy is, for a superseded dispatch, the delivery id of the
	// newer event of its entity that its route's target had accepted.
	SupersededBy string    `json:"superseded_by,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// DispatchesOf returns every dispatch of the event (provider, deliveryID), of
// every route and generation, with its live state, by route and generation.
func DispatchesOf(ctx context.Context, db Querier, provider, deliveryID string) ([]Dispatch, error) {
	rows, err := db.Query(ctx, `
		SELECT route, generation, live_state, attempts, last_error, coalesce(superseded_by, ''), created_at, updated_at
		FROM hookgate_dispatch_states
		WHERE provider = $1 AND delivery_id = $2
		ORDER BY route, generation`, provider, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Dispatch, error) {
		var x Dispatch
		err := row.Scan(&x.Route, &x.Generation, &x.State, &x.Attempts, &x.LastError, &x.SupersededBy, &x.CreatedAt, &x.UpdatedAt)
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
		SELECT route, generation, live_state, attempts, last_error, coalesce(superseded_by, ''), created_at, updated_at,
			coalesce(job_errors::text[], '{}')
		FROM hookgate_dispatch_states
		WHERE provider = $1 AND delivery_id = $2
		ORDER BY route, generation`, provider, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("read dispatch history: %w", err)
	}
	hs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempted, error) {
		var x Attempted
		err := row.Scan(&x.Route, &x.Generation, &x.State, &x.Attempts, &x.LastError, &x.SupersededBy, &x.CreatedAt, &x.UpdatedAt, &x.JobErrors)
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

// InsertDispatchesTx inserts the dispatch rows keys[i], each with its River
// job jobIDs[i], unless it exists already, and returns the keys it inserted
// with their job ids. Insert keys in key order, so that concurrent
// transactions creating the same dispatches wait for one another in one
// order and never deadlock.
func InsertDispatchesTx(ctx context.Context, tx pgx.Tx, keys []DispatchKey, jobIDs []int64) ([]DispatchKey, []int64, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation, job_id)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bigint[])
		ON CONFLICT DO NOTHING
		RETURNING provider, delivery_id, route, generation, job_id`,
		column(keys, func(k *DispatchKey) string { return k.Provider }),
		column(keys, func(k *DispatchKey) string { return k.DeliveryID }),
		column(keys, func(k *DispatchKey) string { return k.Route }),
		column(keys, func(k *DispatchKey) int32 { return int32(k.Generation) }),
		jobIDs)
	if err != nil {
		return nil, nil, fmt.Errorf("insert dispatches: %w", err)
	}
	var inserted []DispatchKey
	var ids []int64
	for rows.Next() {
		var k DispatchKey
		var id int64
		if err := rows.Scan(&k.Provider, &k.DeliveryID, &k.Route, &k.Generation, &id); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("insert dispatches: %w", err)
		}
		inserted, ids = append(inserted, k), append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("insert dispatches: %w", err)
	}
	return inserted, ids, nil
}

// DeleteRowsOfGoneTx deletes, in tx, the dispatches, search keys and schema errors of the
// events (providers[i], ids[i]) that have no receipt left: an event's rows
// go with its last receipt. One statement.
func DeleteRowsOfGoneTx(ctx context.Context, tx pgx.Tx, providers, ids []string) error {
	_, err := tx.Exec(ctx, `
		WITH gone AS (
			SELECT g.provider, g.delivery_id FROM unnest($1::text[], $2::text[]) AS g(provider, delivery_id)
			WHERE NOT EXISTS (SELECT 1 FROM hookgate_receipts r WHERE r.provider = g.provider AND r.delivery_id = g.delivery_id)),
		keys AS (
			DELETE FROM hookgate_search_keys k USING gone g WHERE k.provider = g.provider AND k.delivery_id = g.delivery_id),
		schema_errors AS (
			DELETE FROM hookgate_schema_errors s USING gone g WHERE s.provider = g.provider AND s.delivery_id = g.delivery_id)
		DELETE FROM hookgate_dispatches d USING gone g WHERE d.provider = g.provider AND d.delivery_id = g.delivery_id`,
		providers, ids)
	if err != nil {
		return fmt.Errorf("delete the rows of expired deliveries: %w", err)
	}
	return nil
}
