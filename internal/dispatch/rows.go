package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/receipts"
)

// StateSQL is a dispatch's live state, for a query joining hookgate_dispatches
// d with river_job j (LEFT JOIN river_job j ON j.id = d.job_id). The row's own
// state is final once recorded; before that River's job says whether it is
// running, or was cancelled or discarded outside the worker (River UI, the
// rescuer). A dispatch whose job was deleted (River UI) will never run: it is
// cancelled, and so replayable. (The worker records an outcome before River
// completes the job, so a job that is gone with its row still in progress
// was deleted.)
var StateSQL = `CASE
	WHEN d.state IN (` + FinalSQL + `) THEN d.state
	WHEN d.job_id IS NOT NULL AND j.id IS NULL THEN 'cancelled'
	WHEN j.state = 'running' THEN 'running'
	WHEN j.state IN ('cancelled', 'discarded') THEN j.state::text
	ELSE d.state END`

// LatestStatesSQL lists the live state of the latest dispatch of each route of
// the event r (a hookgate_receipts row alias).
var LatestStatesSQL = `SELECT DISTINCT ON (d.route) ` + StateSQL + ` AS state
	FROM hookgate_dispatches d LEFT JOIN river_job j ON j.id = d.job_id
	WHERE d.provider = r.provider AND d.delivery_id = r.delivery_id
	ORDER BY d.route, d.generation DESC`

// OfEventSQL selects the dispatches of the event of receipts row r.
var OfEventSQL = `SELECT 1 FROM hookgate_dispatches d WHERE d.provider = r.provider AND d.delivery_id = r.delivery_id`

// Dispatch is one generation of one route's dispatch.
type Dispatch struct {
	Route      string    `json:"route"`
	Generation int       `json:"generation"`
	State      string    `json:"state"`
	Attempts   int       `json:"attempts"`
	LastError  *string   `json:"last_error"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// ListOf returns every dispatch of the event (provider, deliveryID), of every
// route and generation, with its live state, by route and generation.
func ListOf(ctx context.Context, db receipts.DBTX, provider, deliveryID string) ([]Dispatch, error) {
	rows, err := db.Query(ctx, `
		SELECT d.route, d.generation, `+StateSQL+`, d.attempts, d.last_error, d.created_at, d.updated_at
		FROM hookgate_dispatches d LEFT JOIN river_job j ON j.id = d.job_id
		WHERE d.provider = $1 AND d.delivery_id = $2
		ORDER BY d.route, d.generation`, provider, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("show dispatches: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Dispatch, error) {
		var x Dispatch
		err := row.Scan(&x.Route, &x.Generation, &x.State, &x.Attempts, &x.LastError, &x.CreatedAt, &x.UpdatedAt)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("show dispatches: %w", err)
	}
	return ds, nil
}

// Attempted is a dispatch with the errors River recorded for its job's
// attempts, as River stores them (JSON objects with at, attempt and error).
type Attempted struct {
	Dispatch
	JobErrors []string
}

// HistoryOf is ListOf with each dispatch's River job errors. A job River has
// already cleaned away leaves none.
func HistoryOf(ctx context.Context, db receipts.DBTX, provider, deliveryID string) ([]Attempted, error) {
	rows, err := db.Query(ctx, `SELECT d.route, d.generation, `+StateSQL+`, d.attempts, d.last_error,
			d.created_at, d.updated_at, coalesce(j.errors::text[], '{}')
		FROM hookgate_dispatches d LEFT JOIN river_job j ON j.id = d.job_id
		WHERE d.provider = $1 AND d.delivery_id = $2
		ORDER BY d.route, d.generation`, provider, deliveryID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempted, error) {
		var x Attempted
		err := row.Scan(&x.Route, &x.Generation, &x.State, &x.Attempts, &x.LastError, &x.CreatedAt, &x.UpdatedAt, &x.JobErrors)
		return x, err
	})
}

// Latest is the newest generation of one route's dispatch of an event, with
// its live state.
type Latest struct {
	Generation int
	State      string
}

// LatestTx returns, by route, the latest dispatch of the event (provider,
// deliveryID) on each of routes that has one.
func LatestTx(ctx context.Context, db receipts.DBTX, provider, deliveryID string, routes []string) (map[string]Latest, error) {
	rows, err := db.Query(ctx, `
		SELECT DISTINCT ON (d.route) d.route, d.generation, `+StateSQL+`
		FROM hookgate_dispatches d LEFT JOIN river_job j ON j.id = d.job_id
		WHERE d.provider = $1 AND d.delivery_id = $2 AND d.route = ANY($3)
		ORDER BY d.route, d.generation DESC`, provider, deliveryID, routes)
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
