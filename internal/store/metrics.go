package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

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
