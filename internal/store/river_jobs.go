package store

import (
	"context"
	"fmt"
)

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
