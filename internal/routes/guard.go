// Package routes keeps each route's state that all gateway processes share,
// in PostgreSQL: whether an operator paused it, its circuit breaker, its rate
// limit's recent starts, and its recent outcomes. The Guard admits each
// attempt of a route's dispatch (or says how long to wait) and learns its
// outcome; Pause, Resume and List are the operators' side.
package routes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/metrics"
)

// Circuit states, as shown to operators.
const (
	CircuitClosed  = "closed"
	CircuitOpen    = "open"
	CircuitProbing = "probing"
)

// How long a dispatch of a paused route (PausedWait), or one waiting for
// another's probe, waits before it asks again. A paused route's River queue is paused too, so
// only a dispatch fetched in the moment of the pause meets it.
const (
	PausedWait = time.Second
	probeWait  = time.Second
)

// PausedSQL is whether the route named by the SQL expression route is
// paused, for a worker to read in the statement that starts an attempt: an
// attempt that starts after a pause has committed sees it.
func PausedSQL(route string) string {
	return `coalesce((SELECT paused_at IS NOT NULL FROM hookgate_routes WHERE name = ` + route + `), false)`
}

// refreshEvery is how old a process's view of the routes' pause and circuit
// may be; flushEvery how often its outcome counts are added to the database.
const (
	refreshEvery = 500 * time.Millisecond
	flushEvery   = time.Second
)

// state is one route's shared state as a process last read it. Times are
// local deadlines, computed from the database's own remaining durations so
// that clocks need not agree.
type state struct {
	paused     bool
	failures   int
	openUntil  time.Time // the circuit admits no attempt before
	probeUntil time.Time // another process's probe runs until
}

// Guard admits attempts of routes' dispatches: not while the route is paused
// or its circuit open, and within its rate, counted across all processes.
// Run must be running for its view of the routes to stay current. A nil
// Guard admits everything.
type Guard struct {
	// Pool is the database the routes' state lives in.
	Pool *pgxpool.Pool
	// Table is the fan-out table.
	Table fanout.Table
	// Logger reports what could not be written.
	Logger *slog.Logger
	// Queues, when set, pauses again the River queue of a paused route that
	// was resumed in River UI: its dispatches would otherwise be fetched and
	// put back, over and over, for as long as the route stays paused.
	Queues *river.Client[pgx.Tx]

	states atomic.Pointer[map[string]state]

	mu     sync.Mutex
	counts map[string]*outcomeCount // since the last flush
}

type outcomeCount struct {
	succeeded, failed int64
}

// Ticket is an admitted attempt, handed back to Done.
type Ticket struct {
	// Probe means the attempt decides whether the route's open circuit closes.
	Probe bool
}

// Admit decides whether an attempt of route r may start now. A wait above
// zero means not: the dispatch should wait that long (without spending an
// attempt) and ask again. An admitted attempt's outcome goes to Done.
func (g *Guard) Admit(ctx context.Context, r fanout.Route) (wait time.Duration, t Ticket, err error) {
	if g == nil {
		return 0, t, nil
	}
	s := g.state(r.Name)
	now := time.Now()
	if s.paused {
		return PausedWait, t, nil
	}
	if r.Circuit.Failures > 0 && s.failures >= r.Circuit.Failures {
		if s.openUntil.After(now) {
			return s.openUntil.Sub(now) + jitter(time.Second), t, nil
		}
		took, err := g.takeProbe(ctx, r)
		if err != nil {
			return 0, t, err
		}
		if !took {
			return probeWait + jitter(probeWait), t, nil
		}
		t.Probe = true
	}
	if r.Rate.N > 0 {
		wait, err := g.permit(ctx, r)
		if err == nil && wait > 0 && t.Probe {
			err = g.dropProbe(ctx, r)
		}
		if err != nil || wait > 0 {
			return wait, Ticket{}, err
		}
	}
	return 0, t, nil
}

// jitter is a random pause below d, so that waiting dispatches do not all
// come back at once.
func jitter(d time.Duration) time.Duration { return rand.N(d) + time.Millisecond }

// Outcome is how an admitted attempt ended.
type Outcome int

const (
	// Succeeded closes the route's circuit.
	Succeeded Outcome = iota
	// Failed is a failure of the target (no answer, a timeout, a 5xx, 408 or
	// 429, a builtin handler's error): it counts towards the circuit.
	Failed
	// Refused is a target's permanent refusal (another 4xx): the target
	// answered, so the circuit neither counts nor resets it.
	Refused
)

// Done records the outcome of an admitted attempt; detail is a failure's
// text, already free of credentials. Best effort: a state that cannot be
// written is logged.
func (g *Guard) Done(ctx context.Context, r fanout.Route, t Ticket, o Outcome, detail string) {
	if g == nil {
		return
	}
	failed := o != Succeeded
	g.mu.Lock()
	if g.counts == nil {
		g.counts = map[string]*outcomeCount{}
	}
	c := g.counts[r.Name]
	if c == nil {
		c = &outcomeCount{}
		g.counts[r.Name] = c
	}
	if failed {
		c.failed++
	} else {
		c.succeeded++
	}
	g.mu.Unlock()

	ctx = context.WithoutCancel(ctx)
	var err error
	switch {
	case o == Failed:
		err = g.fail(ctx, r, t, detail)
	case o == Refused && t.Probe:
		err = errors.Join(g.dropProbe(ctx, r), g.note(ctx, r, detail))
	case o == Refused: // neither counts nor resets the circuit, but is shown
		err = g.note(ctx, r, detail)
	case t.Probe || g.state(r.Name).failures > 0:
		err = g.close(ctx, r)
	}
	if err != nil {
		g.Logger.WarnContext(ctx, "record route outcome", "route", r.Name, "error", err)
	}
}

// state is the process's view of a route; a route not read yet is active
// with its circuit closed.
func (g *Guard) state(name string) state {
	if m := g.states.Load(); m != nil {
		return (*m)[name]
	}
	return state{}
}

// setState replaces one route's view, after this process changed it.
func (g *Guard) setState(name string, s state) {
	for {
		old := g.states.Load()
		m := map[string]state{}
		if old != nil {
			for k, v := range *old {
				m[k] = v
			}
		}
		m[name] = s
		if g.states.CompareAndSwap(old, &m) {
			return
		}
	}
}

// stateColumns read a hookgate_routes row as a state (see scanState).
const stateColumns = `paused_at IS NOT NULL, failures,
	coalesce(extract(epoch FROM open_until - clock_timestamp()), 0)::float8,
	coalesce(extract(epoch FROM probe_until - clock_timestamp()), 0)::float8`

func scanState(row pgx.Row, extra ...any) (state, error) {
	var s state
	var open, probe float64
	if err := row.Scan(append([]any{&s.paused, &s.failures, &open, &probe}, extra...)...); err != nil {
		return s, err
	}
	now := time.Now()
	if open > 0 {
		s.openUntil = now.Add(time.Duration(open * float64(time.Second)))
	}
	if probe > 0 {
		s.probeUntil = now.Add(time.Duration(probe * float64(time.Second)))
	}
	return s, nil
}

// Refresh reads every route's state.
func (g *Guard) Refresh(ctx context.Context) error {
	rows, err := g.Pool.Query(ctx, "SELECT "+stateColumns+", name FROM hookgate_routes")
	if err != nil {
		return fmt.Errorf("read routes: %w", err)
	}
	m := map[string]state{}
	for rows.Next() {
		var name string
		s, err := scanState(rows, &name)
		if err != nil {
			rows.Close()
			return fmt.Errorf("read routes: %w", err)
		}
		m[name] = s
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read routes: %w", err)
	}
	g.states.Store(&m)
	return g.repause(ctx, m)
}

// repause pauses the River queues of paused routes that run.
func (g *Guard) repause(ctx context.Context, m map[string]state) error {
	if g.Queues == nil {
		return nil
	}
	var queues []string
	for _, r := range g.Table {
		if m[r.Name].paused {
			queues = append(queues, r.Queue())
		}
	}
	if len(queues) == 0 {
		return nil
	}
	rows, err := g.Pool.Query(ctx, `SELECT name FROM river_queue WHERE paused_at IS NULL AND name = ANY($1)`, queues)
	if err != nil {
		return fmt.Errorf("read queues: %w", err)
	}
	running, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read queues: %w", err)
	}
	for _, q := range running {
		if err := g.Queues.QueuePause(ctx, q, nil); err != nil {
			return fmt.Errorf("pause queue %s: %w", q, err)
		}
		g.Logger.WarnContext(ctx, "a paused route's queue was resumed outside the gateway (River UI?): paused it again; resume the route instead",
			"queue", q)
	}
	return nil
}

// Run keeps the view of the routes current and adds this process's outcome
// counts to the database, until ctx ends (then it flushes once more).
func (g *Guard) Run(ctx context.Context) {
	refresh := time.NewTicker(refreshEvery)
	flush := time.NewTicker(flushEvery)
	defer refresh.Stop()
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = g.flush(fctx)
			cancel()
			return
		case <-refresh.C:
			_ = g.Refresh(ctx) // kept as it was while the database does not answer
		case <-flush.C:
			if err := g.flush(ctx); err != nil && ctx.Err() == nil {
				g.Logger.WarnContext(ctx, "record route counts", "error", err)
			}
		}
	}
}

// flush adds the outcome counts since the last flush to the routes' minutes,
// and moves last_success_at. Counts that cannot be written are kept for the
// next flush.
func (g *Guard) flush(ctx context.Context) error {
	g.mu.Lock()
	counts := g.counts
	g.counts = nil
	g.mu.Unlock()
	if len(counts) == 0 {
		return nil
	}
	var names []string
	var ok, failed []int64
	for name, c := range counts {
		names, ok, failed = append(names, name), append(ok, c.succeeded), append(failed, c.failed)
	}
	err := pgx.BeginFunc(ctx, g.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO hookgate_route_minutes AS m (route, minute, succeeded, failed)
			SELECT t.route, date_trunc('minute', now()), t.ok, t.failed
			FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS t(route, ok, failed) ORDER BY t.route
			ON CONFLICT (route, minute) DO UPDATE SET succeeded = m.succeeded + excluded.succeeded, failed = m.failed + excluded.failed`,
			names, ok, failed); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE hookgate_routes r SET last_success_at = now()
			FROM unnest($1::text[], $2::bigint[]) AS t(route, ok) WHERE r.name = t.route AND t.ok > 0`, names, ok)
		return err
	})
	if err != nil {
		g.mu.Lock()
		if g.counts == nil {
			g.counts = map[string]*outcomeCount{}
		}
		for name, c := range counts {
			if cur := g.counts[name]; cur != nil {
				cur.succeeded += c.succeeded
				cur.failed += c.failed
			} else {
				g.counts[name] = c
			}
		}
		g.mu.Unlock()
		return fmt.Errorf("record route counts: %w", err)
	}
	return nil
}

// probeFor is how long a probe may run before another process may probe: the
// attempt's time limit and its database work.
func probeFor(r fanout.Route) time.Duration { return r.Timeout + 10*time.Second }

// takeProbe makes this attempt the route's probe, when its circuit's cooldown
// is over and no other probe runs. When the circuit turns out closed (another
// process's probe succeeded) the attempt is admitted as an ordinary one.
func (g *Guard) takeProbe(ctx context.Context, r fanout.Route) (bool, error) {
	tag, err := g.Pool.Exec(ctx, `UPDATE hookgate_routes SET probe_until = clock_timestamp() + make_interval(secs => $3)
		WHERE name = $1 AND failures >= $2
		AND (open_until IS NULL OR open_until <= clock_timestamp())
		AND (probe_until IS NULL OR probe_until <= clock_timestamp())`,
		r.Name, r.Circuit.Failures, probeFor(r).Seconds())
	if err != nil {
		return false, fmt.Errorf("circuit probe: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	s, err := scanState(g.Pool.QueryRow(ctx, "SELECT "+stateColumns+" FROM hookgate_routes WHERE name = $1", r.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("circuit probe: %w", err)
	}
	g.setState(r.Name, s)
	return false, nil
}

// dropProbe gives the probe back (its attempt did not start after all).
func (g *Guard) dropProbe(ctx context.Context, r fanout.Route) error {
	if _, err := g.Pool.Exec(ctx, "UPDATE hookgate_routes SET probe_until = NULL WHERE name = $1", r.Name); err != nil {
		return fmt.Errorf("circuit probe: %w", err)
	}
	return nil
}

// note records a permanent refusal as the route's last failure, for
// operators, without counting it towards the circuit.
func (g *Guard) note(ctx context.Context, r fanout.Route, detail string) error {
	if _, err := g.Pool.Exec(ctx, "UPDATE hookgate_routes SET last_failure_at = now(), last_error = $2 WHERE name = $1", r.Name, detail); err != nil {
		return fmt.Errorf("route failure: %w", err)
	}
	return nil
}

// fail counts a failed attempt: the circuit opens at the route's threshold of
// consecutive failures, or again when a probe fails.
func (g *Guard) fail(ctx context.Context, r fanout.Route, t Ticket, detail string) error {
	s, err := scanState(g.Pool.QueryRow(ctx, `UPDATE hookgate_routes SET failures = failures + 1,
			last_failure_at = now(), last_error = $2,
			open_until = CASE WHEN $3 > 0 AND ($4 OR failures + 1 = $3) THEN clock_timestamp() + make_interval(secs => $5) ELSE open_until END,
			probe_until = CASE WHEN $4 THEN NULL ELSE probe_until END
		WHERE name = $1 RETURNING `+stateColumns,
		r.Name, detail, r.Circuit.Failures, t.Probe, r.Circuit.Cooldown.Seconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // the route's row is written when a gateway starts with it
	}
	if err != nil {
		return fmt.Errorf("circuit: %w", err)
	}
	g.setState(r.Name, s)
	return nil
}

// close ends a run of failures: the circuit closes.
func (g *Guard) close(ctx context.Context, r fanout.Route) error {
	s, err := scanState(g.Pool.QueryRow(ctx, `UPDATE hookgate_routes SET failures = 0, open_until = NULL, probe_until = NULL
		WHERE name = $1 RETURNING `+stateColumns, r.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("circuit: %w", err)
	}
	g.setState(r.Name, s)
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

// permit takes a start from the route's rate, or returns how long to wait.
func (g *Guard) permit(ctx context.Context, r fanout.Route) (time.Duration, error) {
	b := &pgx.Batch{}
	// A start lost with a crash of the database only lets one more through.
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(lockRingSQL, r.Name)
	b.Queue(permitSQL, r.Name, r.Rate.Per.Seconds())
	results := g.Pool.SendBatch(ctx, b) // one implicit transaction
	var ok bool
	var wait float64
	_, err := results.Exec()
	if err == nil {
		_, err = results.Exec()
	}
	if err == nil {
		err = results.QueryRow().Scan(&ok, &wait)
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("rate: %w", err)
	}
	if ok {
		return 0, nil
	}
	d := time.Duration(wait*float64(time.Second)) + time.Millisecond
	return d + jitter(d/2+50*time.Millisecond), nil
}

// Gauges reports each configured route's pause and circuit as this process
// last read them (no query), for the metrics.
func (g *Guard) Gauges() []metrics.RouteGauge {
	now := time.Now()
	gs := make([]metrics.RouteGauge, len(g.Table))
	for i, r := range g.Table {
		s := g.state(r.Name)
		gs[i] = metrics.RouteGauge{Route: r.Name, Paused: s.paused, Circuit: circuitState(r.Circuit, s.failures, s.probeUntil.After(now))}
	}
	return gs
}

// circuitState names a route's circuit: probing while a probe runs, open
// once its consecutive failures reach the route's threshold (0 turns the
// circuit off), else closed.
func circuitState(c fanout.Circuit, failures int, probing bool) string {
	switch {
	case probing:
		return CircuitProbing
	case c.Failures > 0 && failures >= c.Failures:
		return CircuitOpen
	}
	return CircuitClosed
}
