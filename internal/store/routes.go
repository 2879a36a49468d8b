package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Batcher sends a batch of statements in one round trip: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx. Sent on a pool or a connection outside a
// transaction, the batch is one implicit transaction.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// LockRouteSyncTx takes the lock under which processes starting at once
// sync their routes in turn; it is held until tx ends.
func LockRouteSyncTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('hookgate_routes_sync'))"); err != nil {
		return fmt.Errorf("lock routes sync: %w", err)
	}
	return nil
}

// InsertRoutes gives each of routes that has none a state row (active, its
// circuit closed), in name order. A route's row is never deleted: its state
// outlives its removal from the configuration.
func InsertRoutes(ctx context.Context, db Querier, routes []string) error {
	if _, err := db.Exec(ctx, `INSERT INTO hookgate_routes (name) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT DO NOTHING`, routes); err != nil {
		return fmt.Errorf("insert routes: %w", err)
	}
	return nil
}

// RoutePaused says whether route's state row says it is paused. A route
// without a row is an error (pgx.ErrNoRows).
func RoutePaused(ctx context.Context, db Querier, route string) (bool, error) {
	var paused bool
	if err := db.QueryRow(ctx, "SELECT paused_at IS NOT NULL FROM hookgate_routes WHERE name = $1", route).Scan(&paused); err != nil {
		return false, fmt.Errorf("read route pause: %w", err)
	}
	return paused, nil
}

// LockRoutePausedTx locks route's state row in tx until tx ends (an
// operator's resume waits for it) and says whether the route is paused; a
// route without a row is not.
func LockRoutePausedTx(ctx context.Context, tx pgx.Tx, route string) (bool, error) {
	var paused bool
	err := tx.QueryRow(ctx, "SELECT paused_at IS NOT NULL FROM hookgate_routes WHERE name = $1 FOR UPDATE", route).Scan(&paused)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock route pause: %w", err)
	}
	return paused, nil
}

// PauseRoute is an operator's pause of a route.
type PauseRoute struct {
	// Route is the route's name.
	Route string
	// By is who paused it: the token identity or the command line's user.
	By string
	// Reason is the operator's, empty for none (stored as NULL).
	Reason string
}

// PauseRouteTx marks the route paused now, by whom and why, making its row
// when it has none, and says whether it did: a route paused already is left
// as it was (false). In tx, with the pause of its River queue and its audit
// entry.
func PauseRouteTx(ctx context.Context, tx pgx.Tx, p PauseRoute) (bool, error) {
	var reason *string
	if p.Reason != "" {
		reason = &p.Reason
	}
	tag, err := tx.Exec(ctx, `INSERT INTO hookgate_routes AS r (name, paused_at, paused_by, pause_reason) VALUES ($1, now(), $2, $3)
		ON CONFLICT (name) DO UPDATE SET paused_at = now(), paused_by = excluded.paused_by, pause_reason = excluded.pause_reason
		WHERE r.paused_at IS NULL`, p.Route, p.By, reason)
	if err != nil {
		return false, fmt.Errorf("pause: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// ResumeRouteTx clears the route's pause, and says whether it was paused.
// In tx, with the resumption of its River queue and its audit entry.
func ResumeRouteTx(ctx context.Context, tx pgx.Tx, route string) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE hookgate_routes SET paused_at = NULL, paused_by = NULL, pause_reason = NULL
		WHERE name = $1 AND paused_at IS NOT NULL`, route)
	if err != nil {
		return false, fmt.Errorf("resume: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// RouteState is a route's state that all gateway processes share, as its
// row says. Its deadlines are given as the time left until them by the
// database's clock (hookgate_seconds_until), so that a process can place
// them on its own clock: zero or less when passed or unset.
type RouteState struct {
	Name     string
	Paused   bool
	Failures int
	// OpenFor is how long the circuit still admits no attempt.
	OpenFor time.Duration
	// ProbeFor is how long the probe that runs may still run.
	ProbeFor time.Duration
}

// scanRouteState reads a row of the columns name, paused_at IS NOT NULL,
// failures, hookgate_seconds_until(open_until) and
// hookgate_seconds_until(probe_until), in that order.
func scanRouteState(row pgx.Row) (RouteState, error) {
	var s RouteState
	var open, probe float64
	if err := row.Scan(&s.Name, &s.Paused, &s.Failures, &open, &probe); err != nil {
		return s, err
	}
	s.OpenFor = time.Duration(open * float64(time.Second))
	s.ProbeFor = time.Duration(probe * float64(time.Second))
	return s, nil
}

// RouteStates returns the state of every route that has a row.
func RouteStates(ctx context.Context, db Querier) ([]RouteState, error) {
	rows, err := db.Query(ctx, `SELECT name, paused_at IS NOT NULL, failures,
		hookgate_seconds_until(open_until), hookgate_seconds_until(probe_until)
		FROM hookgate_routes`)
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	ss, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RouteState, error) { return scanRouteState(row) })
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	return ss, nil
}

// RouteStateOf returns the state of one route; ok is false when it has no
// row.
func RouteStateOf(ctx context.Context, db Querier, route string) (s RouteState, ok bool, err error) {
	s, err = scanRouteState(db.QueryRow(ctx, `SELECT name, paused_at IS NOT NULL, failures,
		hookgate_seconds_until(open_until), hookgate_seconds_until(probe_until)
		FROM hookgate_routes WHERE name = $1`, route))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("read route: %w", err)
	}
	return s, true, nil
}

// TakeProbe makes the caller's attempt the route's probe for d, and says
// whether it did: only when the route has failed at least threshold times
// in a row, its circuit's cooldown is over and no other probe runs. The
// times are the database's clock's.
func TakeProbe(ctx context.Context, db Querier, route string, threshold int, d time.Duration) (bool, error) {
	tag, err := db.Exec(ctx, `UPDATE hookgate_routes SET probe_until = clock_timestamp() + make_interval(secs => $3)
		WHERE name = $1 AND failures >= $2
		AND (open_until IS NULL OR open_until <= clock_timestamp())
		AND (probe_until IS NULL OR probe_until <= clock_timestamp())`,
		route, threshold, d.Seconds())
	if err != nil {
		return false, fmt.Errorf("circuit probe: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// DropProbe ends the route's probe, if one runs: the next attempt may probe.
func DropProbe(ctx context.Context, db Querier, route string) error {
	if _, err := db.Exec(ctx, "UPDATE hookgate_routes SET probe_until = NULL WHERE name = $1", route); err != nil {
		return fmt.Errorf("circuit probe: %w", err)
	}
	return nil
}

// NoteRouteFailure records detail as the route's last failure, now, without
// counting it towards its circuit.
func NoteRouteFailure(ctx context.Context, db Querier, route, detail string) error {
	if _, err := db.Exec(ctx, "UPDATE hookgate_routes SET last_failure_at = now(), last_error = $2 WHERE name = $1", route, detail); err != nil {
		return fmt.Errorf("route failure: %w", err)
	}
	return nil
}

// RouteFailure is a failed attempt of a route, counted towards its circuit.
type RouteFailure struct {
	// Route is the route's name.
	Route string
	// Detail is the failure's text, free of credentials.
	Detail string
	// Threshold is how many failures in a row open the circuit; 0: never.
	Threshold int
	// Probe means the attempt was the route's probe: its failure opens the
	// circuit again, and the probe ends.
	Probe bool
	// Cooldown is how long an opened circuit admits no attempt.
	Cooldown time.Duration
}

// FailRoute counts a failed attempt and records it as the route's last
// failure: the circuit opens for the cooldown when the failures in a row
// reach the threshold, or again when a probe failed. It returns the route's
// state after; ok is false when the route has no row.
func FailRoute(ctx context.Context, db Querier, f RouteFailure) (s RouteState, ok bool, err error) {
	s, err = scanRouteState(db.QueryRow(ctx, `UPDATE hookgate_routes SET failures = failures + 1,
			last_failure_at = now(), last_error = $2,
			open_until = CASE WHEN $3 > 0 AND ($4 OR failures + 1 = $3) THEN clock_timestamp() + make_interval(secs => $5) ELSE open_until END,
			probe_until = CASE WHEN $4 THEN NULL ELSE probe_until END
		WHERE name = $1 RETURNING name, paused_at IS NOT NULL, failures,
			hookgate_seconds_until(open_until), hookgate_seconds_until(probe_until)`,
		f.Route, f.Detail, f.Threshold, f.Probe, f.Cooldown.Seconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("circuit: %w", err)
	}
	return s, true, nil
}

// CloseCircuit ends the route's run of failures: its circuit closes and a
// probe that runs ends. It returns the route's state after; ok is false when
// the route has no row.
func CloseCircuit(ctx context.Context, db Querier, route string) (s RouteState, ok bool, err error) {
	s, err = scanRouteState(db.QueryRow(ctx, `UPDATE hookgate_routes SET failures = 0, open_until = NULL, probe_until = NULL
		WHERE name = $1 RETURNING name, paused_at IS NOT NULL, failures,
			hookgate_seconds_until(open_until), hookgate_seconds_until(probe_until)`, route))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("circuit: %w", err)
	}
	return s, true, nil
}

// RouteCounts counts a route's attempts by outcome.
type RouteCounts struct {
	Route     string
	Succeeded int64
	Failed    int64
}

// AddRouteCountsTx adds counts to their routes' current minute, all
// processes together, and moves last_success_at to now for the routes with
// a success among them. In tx: both or neither, so that counts that could
// not be written may be added again.
func AddRouteCountsTx(ctx context.Context, tx pgx.Tx, counts []RouteCounts) error {
	names := make([]string, len(counts))
	ok := make([]int64, len(counts))
	failed := make([]int64, len(counts))
	for i, c := range counts {
		names[i], ok[i], failed[i] = c.Route, c.Succeeded, c.Failed
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO hookgate_route_minutes AS m (route, minute, succeeded, failed)
		SELECT t.route, date_trunc('minute', now()), t.ok, t.failed
		FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS t(route, ok, failed) ORDER BY t.route
		ON CONFLICT (route, minute) DO UPDATE SET succeeded = m.succeeded + excluded.succeeded, failed = m.failed + excluded.failed`,
		names, ok, failed); err != nil {
		return fmt.Errorf("add route counts: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE hookgate_routes r SET last_success_at = now()
		FROM unnest($1::text[], $2::bigint[]) AS t(route, ok) WHERE r.name = t.route AND t.ok > 0`, names, ok); err != nil {
		return fmt.Errorf("add route counts: %w", err)
	}
	return nil
}

// RouteRow is a route's state row as operators see it.
type RouteRow struct {
	Name        string
	PausedAt    *time.Time
	PausedBy    *string
	PauseReason *string
	// Failures is the route's failures in a row.
	Failures int
	// Probing means a probe runs.
	Probing       bool
	LastSuccessAt *time.Time
	LastFailureAt *time.Time
	LastError     *string
}

// RouteBacklog counts a route's dispatch jobs that River has still to
// finish, in one of the states "pending", "running" and "retrying".
type RouteBacklog struct {
	Route string
	State string
	Count int64
}

// RoutesOverview is what operators see of routes, read in one round trip.
type RoutesOverview struct {
	// Routes are the routes' state rows.
	Routes []RouteRow
	// PausedQueues are the River queues asked for that River says are
	// paused (also by River UI).
	PausedQueues []string
	// Backlog counts the routes' unfinished dispatch jobs.
	Backlog []RouteBacklog
	// Recent counts the routes' attempts in the current minute and the four
	// before it, all processes together.
	Recent []RouteCounts
}

// RoutesOverviewOf reads the overview of routes, whose River queues are
// queues, in one batch: their state rows, which of the queues are paused
// (riverPausedQueuesSQL), their dispatch jobs' backlog
// (riverDispatchBacklogSQL) and their recent counts.
func RoutesOverviewOf(ctx context.Context, db Batcher, routes, queues []string) (RoutesOverview, error) {
	var o RoutesOverview
	b := &pgx.Batch{}
	b.Queue(`SELECT name, paused_at, paused_by, pause_reason, failures, coalesce(probe_until > now(), false),
		last_success_at, last_failure_at, last_error FROM hookgate_routes WHERE name = ANY($1)`, routes).Query(func(rows pgx.Rows) error {
		var err error
		o.Routes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RouteRow, error) {
			var r RouteRow
			err := row.Scan(&r.Name, &r.PausedAt, &r.PausedBy, &r.PauseReason, &r.Failures, &r.Probing,
				&r.LastSuccessAt, &r.LastFailureAt, &r.LastError)
			return r, err
		})
		return err
	})
	b.Queue(riverPausedQueuesSQL, queues).Query(func(rows pgx.Rows) error {
		var err error
		o.PausedQueues, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	b.Queue(riverDispatchBacklogSQL, routes).Query(func(rows pgx.Rows) error {
		var err error
		o.Backlog, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RouteBacklog, error) {
			var r RouteBacklog
			err := row.Scan(&r.Route, &r.State, &r.Count)
			return r, err
		})
		return err
	})
	b.Queue(`SELECT route, sum(succeeded)::bigint, sum(failed)::bigint FROM hookgate_route_minutes
		WHERE route = ANY($1) AND minute >= date_trunc('minute', now()) - interval '4 minutes' GROUP BY route`, routes).Query(func(rows pgx.Rows) error {
		var err error
		o.Recent, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RouteCounts, error) {
			var r RouteCounts
			err := row.Scan(&r.Route, &r.Succeeded, &r.Failed)
			return r, err
		})
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return RoutesOverview{}, fmt.Errorf("read routes overview: %w", err)
	}
	return o, nil
}
