// Package retention deletes what hookgate no longer needs to keep: receipts
// past their expires_at (never while a dispatch of their event is in
// progress) with the dispatches of events left without a receipt, abandoned
// leases, idle watermarks, old route counts and expired idempotency records.
// A deleted receipt's id (provider, scope, delivery id, event, body hash) is
// kept until GATEWAY_ID_RETENTION after its receipt, so that the delivery
// sent again is still recognised (package receipts). Worker runs it as a
// periodic River job.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/archive"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/store"
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
	// Policy is how long what is kept.
	Policy
	// Logger reports what was deleted, and archived.
	Logger *slog.Logger
	// Counted, when set, counts each day the archive was asked to take.
	Counted func(provider string, ok bool)
	// Events, when set, hears of each day that could not be archived
	// (package notify). It must not block.
	Events func(notify.Event)
}

// ArchiveDue archives each (day, provider) that retention may drop
// (store.DaysToArchive: every receipt expired, no dispatch in progress),
// oldest first. A day that fails is logged, counted, and kept: retention
// deletes none of it, and the next run tries it again. Only the database
// failing ends it early.
func ArchiveDue(ctx context.Context, pool *pgxpool.Pool, s archive.Store, logger *slog.Logger, counted func(provider string, day time.Time, err error)) error {
	days, err := store.DaysToArchive(ctx, pool)
	if err != nil {
		return err
	}
	for _, d := range days {
		m, err := archive.Day(ctx, pool, s, d.Provider, d.Day)
		if counted != nil {
			counted(d.Provider, d.Day, err)
		}
		if err != nil {
			logger.ErrorContext(ctx, "archive failed: the day is kept, and tried again at retention's next run",
				"day", d.Day.Format(time.DateOnly), "provider", d.Provider, "store", s.String(), "error", err)
			continue
		}
		logger.InfoContext(ctx, "archived a day of deliveries", "day", d.Day.Format(time.DateOnly), "provider", d.Provider,
			"deliveries", m.Count, "store", s.String())
	}
	return nil
}

// Policy is how long retention keeps what.
type Policy struct {
	// Retention is GATEWAY_RETENTION: receipts expire on their own
	// expires_at, set from it at ingest; watermarks idle longer are dropped.
	Retention time.Duration
	// IDRetention is GATEWAY_ID_RETENTION: how long after its receipt a
	// delivery's id is kept. 0: ten times Retention.
	IDRetention time.Duration
	// Archive, when set (GATEWAY_ARCHIVE_URL), takes each day of a
	// provider's deliveries before any of them is deleted: a day is deleted
	// only once it is archived (Worker archives the days due first).
	Archive archive.Store
}

func (p Policy) idRetention() time.Duration {
	if p.IDRetention > 0 {
		return p.IDRetention
	}
	return 10 * p.Retention
}

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, _ *river.Job[Args]) error {
	if w.Archive != nil {
		counted := func(provider string, day time.Time, err error) {
			if w.Counted != nil {
				w.Counted(provider, err == nil)
			}
			if err != nil && w.Events != nil {
				w.Events(notify.Event{Type: notify.ArchiveFailed, Provider: provider,
					Message: fmt.Sprintf("%s's deliveries of %s could not be archived to %s; the day is kept and tried again at retention's next run: %s",
						provider, day.Format(time.DateOnly), w.Archive, errtext.Clean(err.Error()))})
			}
		}
		if err := ArchiveDue(ctx, w.Pool, w.Archive, w.Logger, counted); err != nil {
			return err
		}
	}
	n, err := DeleteExpired(ctx, w.Pool, w.Policy)
	if n > 0 {
		w.Logger.InfoContext(ctx, "retention deleted expired receipts", "receipts", n)
	}
	return err
}

// DeleteExpired runs retention once and returns how many receipts it deleted.
func DeleteExpired(ctx context.Context, pool *pgxpool.Pool, p Policy) (int, error) {
	total := 0
	for {
		var n int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			events, err := store.ExpireReceiptsTx(ctx, tx, retentionBatch, p.idRetention(), p.Archive != nil)
			if err != nil {
				return err
			}
			n = len(events)
			if n == 0 {
				return nil
			}
			providers, ids := make([]string, n), make([]string, n)
			for i, e := range events {
				providers[i], ids[i] = e.Provider, e.DeliveryID
			}
			return store.DeleteRowsOfGoneTx(ctx, tx, providers, ids)
		})
		if err != nil {
			return total, fmt.Errorf("delete expired receipts: %w", err)
		}
		total += n
		if n < retentionBatch {
			break
		}
	}
	if err := store.DeleteAbandonedLeases(ctx, pool); err != nil {
		return total, err
	}
	if err := store.DeleteOldRouteCounts(ctx, pool); err != nil {
		return total, err
	}
	if err := store.DeleteExpiredIdempotencyKeys(ctx, pool); err != nil {
		return total, err
	}
	if err := store.DeleteIdleWatermarks(ctx, pool, p.Retention); err != nil {
		return total, err
	}
	if err := deleteExpiredIDs(ctx, pool); err != nil {
		return total, err
	}
	return total, nil
}

// deleteExpiredIDs deletes the ids kept past their own expiry, a batch at a
// time.
func deleteExpiredIDs(ctx context.Context, pool *pgxpool.Pool) error {
	for {
		n, err := store.DeleteExpiredIDs(ctx, pool, 10*retentionBatch)
		if err != nil {
			return err
		}
		if n < 10*retentionBatch {
			return nil
		}
	}
}

// PeriodicJob schedules retention every 10 minutes, and at start.
func PeriodicJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(10*time.Minute),
		func() (river.JobArgs, *river.InsertOpts) { return Args{}, nil }, &river.PeriodicJobOpts{RunOnStart: true})
}
