// Package retention deletes what hookgate no longer needs to keep: receipts
// past their expires_at (never while a dispatch of their event is in
// progress) with the dispatches of events left without a receipt, abandoned
// leases, idle watermarks, old route counts and expired idempotency records.
// Worker runs it as a periodic River job.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/dispatch"
)

// Args are the periodic job that deletes expired receipts.
type Args struct{}

// Kind implements river.JobArgs. Stable: stored in river_job.
func (Args) Kind() string { return "hookgate_retention" }

// retentionBatch is how many receipts one retention transaction deletes.
const retentionBatch = 1000

// Worker deletes receipts past their expires_at, in batches of one
// transaction each, with the dispatch rows of events that have no receipt
// left; and expired idempotency records, and watermarks not moved for longer
// than the retention. A receipt whose event has a dispatch still in progress
// is kept until that dispatch ends.
type Worker struct {
	river.WorkerDefaults[Args]
	// Pool is the database.
	Pool *pgxpool.Pool
	// Retention is GATEWAY_RETENTION: watermarks idle longer are dropped.
	Retention time.Duration
	// Logger reports what was deleted.
	Logger *slog.Logger
}

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, _ *river.Job[Args]) error {
	n, err := DeleteExpired(ctx, w.Pool, w.Retention)
	if n > 0 {
		w.Logger.InfoContext(ctx, "retention deleted expired receipts", "receipts", n)
	}
	return err
}

// DeleteExpired runs retention once and returns how many receipts it deleted.
func DeleteExpired(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int, error) {
	total := 0
	for {
		var n int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `
				DELETE FROM hookgate_receipts WHERE (provider, scope, delivery_id) IN (
					SELECT provider, scope, delivery_id FROM hookgate_receipts r
					WHERE expires_at < now() AND NOT EXISTS (`+dispatch.EventInProgressSQL+`)
					ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
				RETURNING provider, delivery_id`, retentionBatch)
			if err != nil {
				return err
			}
			var providers, ids []string
			for rows.Next() {
				var p, id string
				if err := rows.Scan(&p, &id); err != nil {
					rows.Close()
					return err
				}
				providers, ids = append(providers, p), append(ids, id)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			n = len(ids)
			if n == 0 {
				return nil
			}
			return dispatch.DeleteOfGoneTx(ctx, tx, providers, ids)
		})
		if err != nil {
			return total, fmt.Errorf("delete expired receipts: %w", err)
		}
		total += n
		if n < retentionBatch {
			break
		}
	}
	if err := dispatch.DeleteAbandonedLeases(ctx, pool); err != nil {
		return total, err
	}
	if _, err := pool.Exec(ctx, "DELETE FROM hookgate_route_minutes WHERE minute < now() - interval '1 day'"); err != nil {
		return total, fmt.Errorf("delete old route counts: %w", err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM hookgate_idempotency WHERE expires_at < now()"); err != nil {
		return total, fmt.Errorf("delete expired idempotency keys: %w", err)
	}
	if err := dispatch.DeleteIdleWatermarks(ctx, pool, retention); err != nil {
		return total, err
	}
	return total, nil
}

// PeriodicJob schedules retention every 10 minutes, and at start.
func PeriodicJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(10*time.Minute),
		func() (river.JobArgs, *river.InsertOpts) { return Args{}, nil }, &river.PeriodicJobOpts{RunOnStart: true})
}
