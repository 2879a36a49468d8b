package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A rate-limited route has a ring of slots (hookgate_rate_slots), one per
// start its rate allows in a window, each holding the time of a start, and
// the ring's next slot (hookgate_route_rates): a start is allowed when the
// next slot's start is older than the window.

// RateRingSize returns the number of slots of route's rate ring: the rate's
// number of starts when the ring was made, 0 when the route has none.
func RateRingSize(ctx context.Context, db Querier, route string) (int, error) {
	var size int
	err := db.QueryRow(ctx, "SELECT size FROM hookgate_route_rates WHERE route = $1", route).Scan(&size)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("read rate ring: %w", err)
	}
	return size, nil
}

// ResetRateRingTx makes route's rate ring anew with size slots, all free,
// its next slot the first. A new ring: the starts of the old one cannot be
// placed in it.
func ResetRateRingTx(ctx context.Context, tx pgx.Tx, route string, size int) error {
	if _, err := tx.Exec(ctx, `DELETE FROM hookgate_rate_slots WHERE route = $1`, route); err != nil {
		return fmt.Errorf("reset rate ring: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO hookgate_rate_slots (route, slot, at)
		SELECT $1, g, 'epoch' FROM generate_series(0, $2 - 1) g`, route, size); err != nil {
		return fmt.Errorf("reset rate ring: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO hookgate_route_rates (route, size) VALUES ($1, $2)
		ON CONFLICT (route) DO UPDATE SET size = excluded.size, next = 0`, route, size); err != nil {
		return fmt.Errorf("reset rate ring: %w", err)
	}
	return nil
}

// DropRateRingsTx deletes the rate rings of those of routes that are not
// in keep: a route whose rate was removed keeps no ring.
func DropRateRingsTx(ctx context.Context, tx pgx.Tx, routes, keep []string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM hookgate_route_rates WHERE route = ANY($1) AND NOT route = ANY($2)`, routes, keep); err != nil {
		return fmt.Errorf("drop rate rings: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM hookgate_rate_slots WHERE route = ANY($1) AND NOT route = ANY($2)`, routes, keep); err != nil {
		return fmt.Errorf("drop rate rings: %w", err)
	}
	return nil
}

// The rate ring of route $1, window $2 seconds: lockRingSQL takes the ring's
// lock (in a statement of its own: a row locked earlier in the same statement
// could not be updated by it), then permitSQL takes a start when the ring's
// oldest is older than the window, or else says how long until it is. A
// route with no ring (not synced) is not limited.
const (
	lockRingSQL = `SELECT next FROM hookgate_route_rates WHERE route = $1 FOR UPDATE`
	permitSQL   = `WITH s AS (UPDATE hookgate_rate_slots sl SET at = clock_timestamp() FROM hookgate_route_rates r
			WHERE r.route = $1 AND sl.route = $1 AND sl.slot = r.next AND sl.at <= clock_timestamp() - make_interval(secs => $2)
			RETURNING sl.slot),
		n AS (UPDATE hookgate_route_rates SET next = (next + 1) % size WHERE route = $1 AND EXISTS (SELECT 1 FROM s) RETURNING next)
		SELECT EXISTS (SELECT 1 FROM s) OR NOT EXISTS (SELECT 1 FROM hookgate_route_rates WHERE route = $1),
			coalesce((SELECT extract(epoch FROM sl.at + make_interval(secs => $2) - clock_timestamp())
				FROM hookgate_rate_slots sl JOIN hookgate_route_rates r ON r.route = sl.route AND r.next = sl.slot
				WHERE sl.route = $1), 0)::float8`
)

// TakeRateStart takes a start from route's rate ring, whose window is
// window, in one round trip: ok when taken (or the route has no ring), else
// wait is how long until the ring's oldest start leaves the window. Sent on
// a pool or a connection, its statements are one implicit transaction.
func TakeRateStart(ctx context.Context, db Batcher, route string, window time.Duration) (ok bool, wait time.Duration, err error) {
	b := &pgx.Batch{}
	// A start lost with a crash of the database only lets one more through.
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(lockRingSQL, route)
	b.Queue(permitSQL, route, window.Seconds())
	results := db.SendBatch(ctx, b)
	var secs float64
	_, err = results.Exec()
	if err == nil {
		_, err = results.Exec()
	}
	if err == nil {
		err = results.QueryRow().Scan(&ok, &secs)
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, 0, fmt.Errorf("rate: %w", err)
	}
	return ok, time.Duration(secs * float64(time.Second)), nil
}
