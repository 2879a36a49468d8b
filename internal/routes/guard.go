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
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/store"
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
// Run must be running for its view of the routes to stay current.
type Guard struct {
	pool   *pgxpool.Pool
	table  fanout.Source
	queues *river.Client[pgx.Tx]
	logger *slog.Logger

	// Events, when set, hears of a circuit that opens and of a route whose
	// last notify.FailingAfter attempts failed (package notify). It must
	// not block.
	Events func(notify.Event)

	states atomic.Pointer[map[string]state]

	mu     sync.Mutex
	counts map[string]*outcomeCount // since the last flush
}

// NewGuard returns a Guard of table's routes, whose shared state lives in
// pool. Through queues (an insert-only River client will do) it pauses again
// the River queue of a paused route that was resumed in River UI: its
// dispatches would otherwise be fetched and put back, over and over, for as
// long as the route stays paused. logger reports what could not be written.
func NewGuard(pool *pgxpool.Pool, table fanout.Source, queues *river.Client[pgx.Tx], logger *slog.Logger) *Guard {
	return &Guard{pool: pool, table: table, queues: queues, logger: logger}
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
		g.logger.WarnContext(ctx, "record route outcome", "route", r.Name, "error", err)
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

// stateOf is a route's state as the database said it, its deadlines placed
// on this process's clock.
func stateOf(r store.RouteState) state {
	s := state{paused: r.Paused, failures: r.Failures}
	now := time.Now()
	if r.OpenFor > 0 {
		s.openUntil = now.Add(r.OpenFor)
	}
	if r.ProbeFor > 0 {
		s.probeUntil = now.Add(r.ProbeFor)
	}
	return s
}

// Refresh reads every route's state.
func (g *Guard) Refresh(ctx context.Context) error {
	rs, err := store.RouteStates(ctx, g.pool)
	if err != nil {
		return err
	}
	m := map[string]state{}
	for _, r := range rs {
		m[r.Name] = stateOf(r)
	}
	g.states.Store(&m)
	return g.repause(ctx, m)
}

// queueListMax is the most queues River's QueueList returns at once.
const queueListMax = 10000

// repause pauses the River queues of paused routes that run.
func (g *Guard) repause(ctx context.Context, m map[string]state) error {
	var queues []string
	routeOf := map[string]string{}
	for _, r := range g.table.Known() {
		if m[r.Name].paused {
			queues = append(queues, r.Queue())
			routeOf[r.Queue()] = r.Name
		}
	}
	if len(queues) == 0 {
		return nil
	}
	// River's queues are few (a route's each, and the embedder's): all of
	// them in one read, and on its own each that a full list may have left
	// out.
	list, err := g.queues.QueueList(ctx, river.NewQueueListParams().First(queueListMax))
	if err != nil {
		return fmt.Errorf("read queues: %w", err)
	}
	listed := make(map[string]*rivertype.Queue, len(list.Queues))
	for _, q := range list.Queues {
		listed[q.Name] = q
	}
	for _, q := range queues {
		row, ok := listed[q]
		if !ok && len(list.Queues) == queueListMax {
			row, err = g.queues.QueueGet(ctx, q)
			if errors.Is(err, rivertype.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("read queues: %w", err)
			}
		}
		if row == nil || row.PausedAt != nil {
			continue // no row to pause, or paused already
		}
		// The states were read before the queues: a resume may have come
		// between. The route's row is locked while its queue is paused, so
		// a resume either came first (and it is left alone) or waits and
		// resumes the queue after.
		var paused bool
		err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
			var err error
			if paused, err = store.LockRoutePausedTx(ctx, tx, routeOf[q]); err != nil || !paused {
				return err
			}
			return g.queues.QueuePauseTx(ctx, tx, q, nil)
		})
		if err != nil {
			return fmt.Errorf("pause queue %s: %w", q, err)
		}
		if !paused {
			continue
		}
		g.logger.WarnContext(ctx, "a paused route's queue was resumed outside the gateway (River UI?): paused it again; resume the route instead",
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
				g.logger.WarnContext(ctx, "record route counts", "error", err)
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
	var rows []store.RouteCounts
	for name, c := range counts {
		rows = append(rows, store.RouteCounts{Route: name, Succeeded: c.succeeded, Failed: c.failed})
	}
	err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error { return store.AddRouteCountsTx(ctx, tx, rows) })
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
	took, err := store.TakeProbe(ctx, g.pool, r.Name, r.Circuit.Failures, probeFor(r))
	if err != nil {
		return false, err
	}
	if took {
		return true, nil
	}
	s, ok, err := store.RouteStateOf(ctx, g.pool, r.Name)
	if err != nil {
		return false, fmt.Errorf("circuit probe: %w", err)
	}
	if ok {
		g.setState(r.Name, stateOf(s))
	}
	return false, nil
}

// dropProbe gives the probe back (its attempt did not start after all).
func (g *Guard) dropProbe(ctx context.Context, r fanout.Route) error {
	return store.DropProbe(ctx, g.pool, r.Name)
}

// note records a permanent refusal as the route's last failure, for
// operators, without counting it towards the circuit.
func (g *Guard) note(ctx context.Context, r fanout.Route, detail string) error {
	return store.NoteRouteFailure(ctx, g.pool, r.Name, detail)
}

// fail counts a failed attempt: the circuit opens at the route's threshold of
// consecutive failures, or again when a probe fails.
func (g *Guard) fail(ctx context.Context, r fanout.Route, t Ticket, detail string) error {
	s, ok, err := store.FailRoute(ctx, g.pool, store.RouteFailure{Route: r.Name, Detail: detail,
		Threshold: r.Circuit.Failures, Probe: t.Probe, Cooldown: r.Circuit.Cooldown})
	if err != nil {
		return err
	}
	if !ok {
		return nil // the route's row is written when a gateway starts with it
	}
	g.setState(r.Name, stateOf(s))
	if g.Events != nil {
		page := "/admin/ui/routes"
		switch {
		case r.Circuit.Failures > 0 && s.OpenFor > 0 && (t.Probe || s.Failures == r.Circuit.Failures):
			g.Events(notify.Event{Type: notify.CircuitOpened, Route: r.Name, Count: s.Failures, Page: page,
				Message: fmt.Sprintf("route %s's circuit opened after %d failed attempts in a row; its dispatches wait %s before a probe. Last error: %s",
					r.Name, s.Failures, r.Circuit.Cooldown, detail)})
		case s.Failures >= notify.FailingAfter:
			g.Events(notify.Event{Type: notify.RouteFailing, Route: r.Name, Count: s.Failures, Page: page,
				Message: fmt.Sprintf("route %s is failing: its last %d attempts failed. Last error: %s", r.Name, s.Failures, detail)})
		}
	}
	return nil
}

// close ends a run of failures: the circuit closes.
func (g *Guard) close(ctx context.Context, r fanout.Route) error {
	s, ok, err := store.CloseCircuit(ctx, g.pool, r.Name)
	if err != nil {
		return err
	}
	if ok {
		g.setState(r.Name, stateOf(s))
	}
	return nil
}

// permit takes a start from the route's rate, or returns how long to wait.
func (g *Guard) permit(ctx context.Context, r fanout.Route) (time.Duration, error) {
	ok, wait, err := store.TakeRateStart(ctx, g.pool, r.Name, r.Rate.Per)
	if err != nil {
		return 0, err
	}
	if ok {
		return 0, nil
	}
	d := wait + time.Millisecond
	return d + jitter(d/2+50*time.Millisecond), nil
}

// Gauges reports each configured route's pause and circuit as this process
// last read them (no query), for the metrics.
func (g *Guard) Gauges() []metrics.RouteGauge {
	now := time.Now()
	table := g.table.Routes()
	gs := make([]metrics.RouteGauge, len(table))
	for i, r := range table {
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

// AdmitAll admits every attempt at once and records no outcome: the guard of
// a dispatch worker whose routes' pauses, circuits and rates are not in force
// (tests).
type AdmitAll struct{}

// Admit admits the attempt at once.
func (AdmitAll) Admit(context.Context, fanout.Route) (time.Duration, Ticket, error) {
	return 0, Ticket{}, nil
}

// Done records nothing.
func (AdmitAll) Done(context.Context, fanout.Route, Ticket, Outcome, string) {}
