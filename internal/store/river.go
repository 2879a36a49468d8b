package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// River's own tables (river_queue, river_job), read and written where
// River's client API cannot do what hookgate needs: pausing and resuming a
// queue, reading one and listing queues go through River's client instead
// (QueuePauseTx, QueueResumeTx, QueueGet, QueueList). These statements
// depend on River's schema, not on a published API: they were written for
// River's schema at migration version 8 (river_test.go pins it, and fails
// when River's migrations go past it until this file is checked again).

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
