package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// River's own tables (river_queue, river_job), read and written where
// River's client API cannot do what hookgate needs: pausing and resuming a
// queue, reading one and listing queues, and making a job available at once,
// go through River's client instead (QueuePauseTx, QueueResumeTx, QueueGet,
// QueueList, JobRetryTx). These statements
// depend on River's schema, not on a published API: they were written for
// River's schema at migration version 8 (river_test.go pins it, and fails
// when River's migrations go past it until this file is checked again).
// The views of migration 0017 (hookgate_dispatch_states,
// hookgate_live_dispatches) read river_job's id and state too.

// EnsureRiverQueueTx makes queue's River queue row when it has none, paused
// when paused; a row that has one keeps it, and an unpaused row is paused
// when paused. River's workers read a queue's pause from its row when they
// start, and River forgets a row no process has worked for a day, so a
// paused route's row is made again before any worker could take its jobs.
// River's QueuePauseTx and QueueResumeTx need the row (they report
// rivertype.ErrNotFound without it) and its client cannot make one in a
// transaction of the caller's.
func EnsureRiverQueueTx(ctx context.Context, tx pgx.Tx, queue string, paused bool) error {
	if _, err := tx.Exec(ctx, `INSERT INTO river_queue (name, created_at, metadata, paused_at, updated_at)
		VALUES ($1, now(), '{}', CASE WHEN $2 THEN now() END, now())
		ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(river_queue.paused_at, excluded.paused_at)`, queue, paused); err != nil {
		return fmt.Errorf("ensure river queue: %w", err)
	}
	return nil
}

// ResumeRiverQueueTx resumes queue's River queue when it is paused (also by
// River UI), and says whether it was. River's QueueResumeTx does not say
// whether the queue was paused, and QueueGetTx reads it without a lock: of
// two operators resuming at once a route paused only in River UI, both
// would see it paused and both record a resume. This statement locks the
// row, so the second sees it resumed. The caller still resumes it through
// River (QueueResumeTx) for River's clients to hear of it.
func ResumeRiverQueueTx(ctx context.Context, tx pgx.Tx, queue string) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE river_queue SET paused_at = NULL, updated_at = now() WHERE name = $1 AND paused_at IS NOT NULL`, queue)
	if err != nil {
		return false, fmt.Errorf("resume river queue: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// riverPausedQueuesSQL are those of the River queues $1 that are paused, in
// RoutesOverviewOf's batch: a read of the pause of named queues, in the
// same round trip as the routes' own rows, by callers that have no River
// client (River's QueueList reads every queue's row, on its own).
const riverPausedQueuesSQL = `SELECT name FROM river_queue WHERE name = ANY($1) AND paused_at IS NOT NULL`

// riverDispatchBacklogSQL counts the dispatch jobs of the routes $1 that
// River has still to finish, by route and by what they wait for: running,
// retrying (a retryable job, or one that has been attempted) or pending. In
// RoutesOverviewOf's batch: River's client can list jobs but not count
// them. 'hookgate_dispatch' is dispatch.Kind (store imports no domain
// package; river_test.go checks it).
const riverDispatchBacklogSQL = `SELECT args->>'route', CASE WHEN state = 'running' THEN 'running'
		WHEN state = 'retryable' OR attempt > 0 THEN 'retrying' ELSE 'pending' END, count(*)
	FROM river_job WHERE kind = 'hookgate_dispatch' AND state IN ('available', 'scheduled', 'retryable', 'running')
	AND args->>'route' = ANY($1) GROUP BY 1, 2`

// RecordRiverEndsOf records on the dispatch rows still in progress what River
// decided without the worker for their jobs of kind: a job cancelled by an
// operator (River UI) or discarded by River's rescuer. River keeps such jobs
// for a day, so a minutely run records the outcome long before the job is gone.
func RecordRiverEndsOf(ctx context.Context, db Querier, kind string) error {
	_, err := db.Exec(ctx, `
		UPDATE hookgate_dispatches d
		SET state = j.state::text, updated_at = now(),
			last_error = coalesce(d.last_error, 'River job ' || j.state::text)
		FROM river_job j
		WHERE j.state IN ('cancelled', 'discarded') AND j.kind = $1
		AND d.job_id = j.id AND d.state IN ('pending', 'running', 'retrying')`, kind)
	if err != nil {
		return fmt.Errorf("reconcile dispatches: %w", err)
	}
	return nil
}

// MoveJobsToQueues moves the waiting jobs of kind to the queue of their
// route (their args' "route"): queues[i] is the queue of routes[i], and the
// jobs of any other route go to fallback. River has no API that changes a
// waiting job's queue.
func MoveJobsToQueues(ctx context.Context, db Querier, kind string, routes, queues []string, fallback string) error {
	_, err := db.Exec(ctx, `WITH t AS (SELECT * FROM unnest($2::text[], $3::text[]) AS t(route, queue)),
		j AS (SELECT j.id, coalesce((SELECT queue FROM t WHERE t.route = j.args->>'route'), $4) AS queue
			FROM river_job j WHERE j.kind = $1 AND j.state IN ('available', 'scheduled', 'retryable'))
		UPDATE river_job SET queue = j.queue FROM j WHERE river_job.id = j.id AND river_job.queue <> j.queue`,
		kind, routes, queues, fallback)
	if err != nil {
		return fmt.Errorf("queue dispatches by route: %w", err)
	}
	return nil
}

// UnfinishedJobs is a count of River's unfinished jobs of one state and, for
// dispatch jobs, one route.
type UnfinishedJobs struct {
	State string
	// Route is a dispatch job's route; nil for the jobs of other kinds.
	Route *string
	Count int64
	// OldestSeconds is the age of the oldest of them, by the database's clock.
	OldestSeconds float64
}

// UnfinishedJobsOf counts River's unfinished jobs (available, scheduled,
// retryable, running) by state and, for dispatch jobs, route, with the age of
// each group's oldest, in one query: the metrics' own aggregate of River's
// table, asked at each scrape. 'hookgate_dispatch' is dispatch.Kind, which
// this package cannot import: dispatch depends on it.
func UnfinishedJobsOf(ctx context.Context, db Querier) ([]UnfinishedJobs, error) {
	rows, err := db.Query(ctx, `SELECT state::text, CASE WHEN kind = 'hookgate_dispatch' THEN args->>'route' END,
			count(*), extract(epoch FROM now() - min(created_at))::float8
		FROM river_job WHERE state IN ('available', 'scheduled', 'retryable', 'running') GROUP BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("unfinished jobs: %w", err)
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UnfinishedJobs, error) {
		var x UnfinishedJobs
		err := row.Scan(&x.State, &x.Route, &x.Count, &x.OldestSeconds)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("unfinished jobs: %w", err)
	}
	return counts, nil
}

// AnyUnfinishedJob reports whether any River job of any kind waits or runs:
// whether, not how many, for a load tool that asks five times a second
// while it measures the database's CPU.
func AnyUnfinishedJob(ctx context.Context, db Querier) (bool, error) {
	var left bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled'))`).Scan(&left)
	if err != nil {
		return false, fmt.Errorf("read backlog: %w", err)
	}
	return left, nil
}

// CountUnfinishedJobs is how many River jobs of any kind wait or run.
func CountUnfinishedJobs(ctx context.Context, db Querier) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count backlog: %w", err)
	}
	return n, nil
}

// WaitingRetry is a retrying dispatch whose River job waits for its next
// attempt: retryable (River's backoff, or a target's Retry-After), scheduled
// (snoozed) or available.
type WaitingRetry struct {
	Route      string
	Generation int
	JobID      int64
}

// The statements of WaitingRetriesOfRouteTx and WaitingRetriesOfEventTx: the
// retrying dispatches of a route or an event whose River jobs are still to
// run, with those jobs. Each job row stays locked until the caller's
// transaction ends, so the job stays where it is until the caller has made it
// available: River fetches no job it cannot lock (it skips it), and a job
// neither fetched nor running cannot end. A job fetched before the lock is
// running by then, and left out. The rows are locked in the order River's
// scheduler locks the jobs it makes available (priority, scheduled_at, id),
// so that neither waits for the other in a cycle; two operators retrying at
// once take turns.
const (
	waitingRetriesOfRouteSQL = `SELECT d.route, d.generation, j.id
		FROM river_job j JOIN hookgate_dispatches d ON d.job_id = j.id
		WHERE j.state IN ('retryable', 'scheduled', 'available') AND d.route = $1 AND d.state = 'retrying'
		ORDER BY j.priority, j.scheduled_at, j.id FOR UPDATE OF j`
	waitingRetriesOfEventSQL = `SELECT d.route, d.generation, j.id
		FROM hookgate_dispatches d JOIN river_job j ON j.id = d.job_id
		WHERE d.provider = $1 AND d.delivery_id = $2 AND d.state = 'retrying'
			AND j.state IN ('retryable', 'scheduled', 'available')
		ORDER BY j.priority, j.scheduled_at, j.id FOR UPDATE OF j`
)

// WaitingRetriesOfRouteTx returns, locked in tx, route's retrying
// dispatches whose jobs wait for their next attempt (see the statements'
// comment). River's client lists jobs, but neither with their dispatch nor
// locked.
func WaitingRetriesOfRouteTx(ctx context.Context, tx pgx.Tx, route string) ([]WaitingRetry, error) {
	return waitingRetries(ctx, tx, waitingRetriesOfRouteSQL, route)
}

// WaitingRetriesOfEventTx is WaitingRetriesOfRouteTx for the dispatches of
// the event (provider, deliveryID), of every route and generation.
func WaitingRetriesOfEventTx(ctx context.Context, tx pgx.Tx, provider, deliveryID string) ([]WaitingRetry, error) {
	return waitingRetries(ctx, tx, waitingRetriesOfEventSQL, provider, deliveryID)
}

func waitingRetries(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]WaitingRetry, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read retrying dispatches: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WaitingRetry, error) {
		var x WaitingRetry
		err := row.Scan(&x.Route, &x.Generation, &x.JobID)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read retrying dispatches: %w", err)
	}
	return list, nil
}
