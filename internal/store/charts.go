package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The console overview's charts: deliveries and forward attempts counted by
// bucket of time. Each is the console's own aggregate, kept beside its chart.

// DeliveriesPerBucketParams selects the deliveries DeliveriesPerBucket
// counts.
type DeliveriesPerBucketParams struct {
	// Since is the start of the first bucket: deliveries first received
	// since then are counted.
	Since time.Time
	// Bucket is each bucket's width.
	Bucket time.Duration
	// States ranks the states (deliveries.States, the summary's order).
	States []string
}

// DeliveriesBucket is a count of deliveries of one bucket, provider and state.
type DeliveriesBucket struct {
	// Bucket is the index of the bucket of their first receipt, from Since.
	Bucket   int
	Provider string
	// Rank is the rank in States (from 1) of the first state among their
	// routes' latest dispatches; for a delivery with none, the rank of
	// "invalid" when its payload failed its schema, else 0.
	Rank  int
	Count int64
}

// DeliveriesPerBucketSQL is the statement DeliveriesPerBucket runs, with its
// parameters Since ($1), Bucket in seconds ($2) and States ($3). It is
// exported for the console's benchmark, which shows PostgreSQL's plan of it.
//
// It reads dispatch states through the view hookgate_dispatch_states, and
// joins rather than asking per delivery, so that a day of deliveries is two
// scans and a sort. A dispatch is created in its event's first receipt's
// transaction or later, so only dispatches created since $1 (less an hour for
// clocks that differ) are read, through their created_at index.
const DeliveriesPerBucketSQL = `
	WITH r AS (
		SELECT provider, delivery_id, min(received_at) AS t
		FROM hookgate_receipts WHERE received_at >= $1
		GROUP BY provider, delivery_id
	), s AS (
		SELECT provider, delivery_id, min(array_position($3::text[], state)) AS rank
		FROM (SELECT DISTINCT ON (d.provider, d.delivery_id, d.route) d.provider, d.delivery_id, d.live_state AS state
			FROM hookgate_dispatch_states d JOIN r ON r.provider = d.provider AND r.delivery_id = d.delivery_id
			WHERE d.created_at >= $1::timestamptz - interval '1 hour'
			ORDER BY d.provider, d.delivery_id, d.route, d.generation DESC) l
		GROUP BY provider, delivery_id
	)
	SELECT floor(extract(epoch FROM r.t - $1) / $2)::int AS bucket, r.provider,
		coalesce(s.rank, CASE WHEN e.provider IS NULL THEN 0 ELSE array_position($3::text[], 'invalid') END, 0), count(*)
	FROM r LEFT JOIN s ON s.provider = r.provider AND s.delivery_id = r.delivery_id
		LEFT JOIN hookgate_schema_errors e ON e.provider = r.provider AND e.delivery_id = r.delivery_id
	GROUP BY 1, 2, 3`

// DeliveriesPerBucket counts the deliveries received since p.Since, in the
// bucket (p.Bucket wide) of their first receipt in the range, by provider
// and state (see DeliveriesBucket), in one scan of receipts and dispatches
// joined by bucket.
func DeliveriesPerBucket(ctx context.Context, db Querier, p DeliveriesPerBucketParams) ([]DeliveriesBucket, error) {
	rows, err := db.Query(ctx, DeliveriesPerBucketSQL, p.Since, p.Bucket.Seconds(), p.States)
	if err != nil {
		return nil, fmt.Errorf("deliveries per bucket: %w", err)
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeliveriesBucket, error) {
		var x DeliveriesBucket
		err := row.Scan(&x.Bucket, &x.Provider, &x.Rank, &x.Count)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("deliveries per bucket: %w", err)
	}
	return counts, nil
}

// ForwardsBucket is a count of forward attempts, every route's, in one bucket.
type ForwardsBucket struct {
	// Bucket is the bucket's index, from the start of the range.
	Bucket    int
	Succeeded int64
	Failed    int64
}

// ForwardsPerBucket counts the forward attempts of every route since since,
// by outcome, in buckets bucket wide, from the routes' counts by the minute
// (hookgate_route_minutes). A bucket without attempts is left out.
func ForwardsPerBucket(ctx context.Context, db Querier, since time.Time, bucket time.Duration) ([]ForwardsBucket, error) {
	rows, err := db.Query(ctx, `SELECT floor(extract(epoch FROM minute - $1) / $2)::int AS bucket, sum(succeeded)::bigint, sum(failed)::bigint
		FROM hookgate_route_minutes WHERE minute >= $1 GROUP BY 1`, since, bucket.Seconds())
	if err != nil {
		return nil, fmt.Errorf("forwards per bucket: %w", err)
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ForwardsBucket, error) {
		var x ForwardsBucket
		err := row.Scan(&x.Bucket, &x.Succeeded, &x.Failed)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("forwards per bucket: %w", err)
	}
	return counts, nil
}
