package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookgate/hookgate/internal/batch"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/yield"
)

// Worker works dispatch jobs: it runs the route's target and records
// the outcome on the dispatch row.
//
// A builtin handler runs in one transaction with everything its attempt
// decides: the dispatch row's lock and state, the entity's watermark and the
// River job's completion (river.JobCompleteTx). Its effect happens exactly
// once: a process that dies at any point leaves all of it or none.
//
// A forward cannot be undone, so it happens at least once, always with the
// same Idempotency-Key, and it spends no transaction of its own: its outcome
// and the entity's watermark are written in batches shared with the forwards
// that finish at the same time (one commit for many), and River completes the
// job in its own batches. When the delivery names an entity and a time, the
// forward holds the lease of (route, entity), a row of hookgate_leases, from
// before it reads the watermark until its outcome is committed, so a target
// never gets an older event after it accepted a newer one. No database
// connection is held while the target answers, and a lease outlives a process
// that died with a newer event in flight: an older one waits for it.
type Worker struct {
	river.WorkerDefaults[Args]

	// Pool is the database the dispatch rows and receipts live in.
	Pool *pgxpool.Pool
	// Routes is the fan-out table.
	Routes fanout.Table
	// Handlers are the builtin targets.
	Handlers handlers.Registry
	// Forwarder sends to http(s) targets.
	Forwarder *forward.Client
	// Receipts reads the event's stored body.
	Receipts *receipts.Store
	// Logger logs failures; never payloads.
	Logger *slog.Logger
	// Metrics records final states; nil records nothing.
	Metrics *metrics.Metrics
	// Guard admits each attempt within its route's pause, circuit and rate;
	// nil admits all.
	Guard *routes.Guard
	// Yield holds dispatches back, up to MaxYield, while ingest is under
	// load; nil holds none.
	Yield *yield.Gate

	// retryAt holds, per job id, when a target's Retry-After allows the next
	// attempt; NextRetry takes it right after Work returns.
	retryAt sync.Map

	once     sync.Once
	recorder *batch.Batcher[outcome, struct{}]
}

var (
	// errGone means the dispatch's row or receipt no longer exists (retention).
	errGone = errors.New("dispatch or receipt no longer stored")
	// errNoTarget means the route or its builtin handler is not configured.
	errNoTarget = errors.New("no such target")
)

// MaxYield is the longest a dispatch is held back for ingest (package
// yield): the job's time limit includes it.
const MaxYield = 5 * time.Second

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	w.retryAt.Delete(job.ID) // an earlier attempt's, should River not have taken it
	w.Yield.Enter(ctx, time.Now().Add(MaxYield))
	err := w.work(ctx, job)
	var snooze *river.JobSnoozeError
	var fe *forward.Error
	var discard *handlers.DiscardError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &snooze):
		return err
	case errors.Is(err, errGone):
		return river.JobCancel(err)
	case errors.Is(err, errNoTarget), errors.As(err, &fe) && fe.Permanent, errors.As(err, &discard):
		w.recordFailure(ctx, job, Discarded, err)
		w.Metrics.Dispatch(job.Args.Route, Discarded, time.Time{})
		return river.JobCancel(err)
	}
	state := Retrying
	if job.Attempt >= job.MaxAttempts {
		state = Discarded
		w.Metrics.Dispatch(job.Args.Route, state, time.Time{})
	} else if errors.As(err, &fe) && fe.RetryAfter > 0 {
		// Only for a job River will retry: it then calls NextRetry, which
		// takes the entry; a discarded job's would stay forever.
		w.retryAt.Store(job.ID, time.Now().Add(fe.RetryAfter))
	}
	w.recordFailure(ctx, job, state, err)
	return err
}

// Timeout implements river.Worker: the route's attempt time limit and the
// database work around it.
func (w *Worker) Timeout(job *river.Job[Args]) time.Duration {
	if r, ok := w.Routes.ByName(job.Args.Route); ok && r.Timeout > 0 {
		return jobTimeout(r.Timeout)
	}
	return 0 // the client's
}

// NextRetry implements river.Worker: a target's Retry-After when it sent one,
// else River's default backoff (1 s before the first retry, then attempt^4 s).
func (w *Worker) NextRetry(job *river.Job[Args]) time.Time {
	if at, ok := w.retryAt.LoadAndDelete(job.ID); ok {
		return at.(time.Time)
	}
	return time.Time{}
}

func (w *Worker) work(ctx context.Context, job *river.Job[Args]) error {
	route, ok := w.Routes.ByName(job.Args.Route)
	if !ok {
		return fmt.Errorf("%w: route %q is no longer configured", errNoTarget, job.Args.Route)
	}
	name, builtin := route.Builtin()
	if !builtin {
		return w.forward(ctx, job, route)
	}
	handler := w.Handlers[name]
	if handler == nil {
		return fmt.Errorf("%w: route %q: no builtin handler %q", errNoTarget, route.Name, name)
	}
	return w.runBuiltin(ctx, job, route, handler)
}

// admit asks the route's Guard whether an attempt may start now; when not,
// the error snoozes the job (River keeps its attempt count) until it may.
// paused is the route's pause as the attempt read it from the database (the
// Guard's own view may be half a second old).
func (w *Worker) admit(ctx context.Context, route fanout.Route, paused bool) (routes.Ticket, error) {
	if paused {
		return routes.Ticket{}, river.JobSnooze(routes.PausedWait)
	}
	wait, t, err := w.Guard.Admit(ctx, route)
	if err != nil {
		return t, err
	}
	if wait > 0 {
		return t, river.JobSnooze(wait)
	}
	return t, nil
}

// lockWait is how long a dispatch waits when another holds its entity's lock
// or lease: the holder is at work and done within a forward's time limit.
func lockWait() time.Duration {
	return 50*time.Millisecond + rand.N(150*time.Millisecond)
}

// staleLeaseWait is how long a dispatch waits for an expired lease whose
// holder, a newer event, is still in progress: it retries on its own backoff,
// or waits to be rescued, so asking often would only cost the database.
func staleLeaseWait() time.Duration {
	return 2*time.Second + rand.N(3*time.Second)
}

// entityLock is the key of the advisory lock of one route's dispatches of one
// entity, as SQL over the expressions route and entity.
func entityLock(route, entity string) string {
	return "hashtextextended(" + route + " || '|' || " + entity + ", 0)"
}

func ordered(r receipts.Receipt) bool { return r.Entity != "" && !r.EventTime.IsZero() }

func delivery(r receipts.Receipt, a Args, attempt int) handlers.Delivery {
	return handlers.Delivery{
		Provider: r.Provider, DeliveryID: r.DeliveryID, Event: r.Event, Entity: r.Entity, EventTime: r.EventTime,
		ContentType: r.ContentType, Body: r.Body, Headers: r.Headers,
		Route: a.Route, Generation: a.Generation, Attempt: attempt,
	}
}

// runBuiltin runs one attempt of a builtin handler in one transaction; see
// Worker. The commit need not wait for the disk: if the database
// crashes before the commit is durable, the handler's writes, the dispatch's
// state, the watermark and the job's completion are all lost together, and
// River runs the job again, so the effect still happens once.
func (w *Worker) runBuiltin(ctx context.Context, job *river.Job[Args], route fanout.Route, handler handlers.Handler) error {
	a := job.Args
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}

	var state string
	var paused bool
	err = tx.QueryRow(ctx, `
		SELECT state, `+routes.PausedSQL("route")+` FROM hookgate_dispatches
		WHERE provider = $1 AND delivery_id = $2 AND route = $3 AND generation = $4
		FOR UPDATE`, a.Provider, a.DeliveryID, a.Route, a.Generation).Scan(&state, &paused)
	if errors.Is(err, pgx.ErrNoRows) {
		return errGone
	}
	if err != nil {
		return fmt.Errorf("lock dispatch: %w", err)
	}
	if IsFinal(state) {
		// River ran the job again after its outcome was committed (a rescue
		// after a crash): the effect already happened, only complete the job.
		return w.complete(ctx, tx, job)
	}
	r, err := w.Receipts.First(ctx, tx, a.Provider, a.DeliveryID)
	if errors.Is(err, receipts.ErrNotFound) {
		return errGone
	}
	if err != nil {
		return err
	}
	if ordered(r) {
		var locked bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock("+entityLock("$1", "$2")+")", a.Route, r.Entity).Scan(&locked); err != nil {
			return fmt.Errorf("entity lock: %w", err)
		}
		if !locked {
			return river.JobSnooze(lockWait())
		}
		newer, err := newerAccepted(ctx, tx, a.Route, r)
		if err != nil {
			return err
		}
		if newer {
			return w.finish(ctx, tx, job, Superseded, r.ReceivedAt)
		}
	}
	ticket, err := w.admit(ctx, route, paused)
	if err != nil {
		return err
	}
	if err := handlers.Call(ctx, tx, handler, delivery(r, a, job.Attempt)); err != nil {
		if pe := (*handlers.PanicError)(nil); errors.As(err, &pe) {
			w.Logger.ErrorContext(ctx, "handler panicked", "route", a.Route, "delivery_id", a.DeliveryID,
				"panic", errtext.Clean(fmt.Sprint(pe.Value)), "stack", string(pe.Stack))
		}
		err = fmt.Errorf("handler: %w", err)
		w.Guard.Done(ctx, route, ticket, routes.Failed, errText(err))
		return err
	}
	if ordered(r) {
		if err := moveWatermarks(ctx, tx, []watermark{{route: a.Route, entity: r.Entity, eventTime: r.EventTime, provider: r.Provider, deliveryID: r.DeliveryID}}); err != nil {
			return err
		}
	}
	if err := w.finish(ctx, tx, job, Succeeded, r.ReceivedAt); err != nil {
		return err
	}
	w.Guard.Done(ctx, route, ticket, routes.Succeeded, "")
	return nil
}

// finish records a builtin dispatch's final state, completes its job and
// commits, then counts it.
func (w *Worker) finish(ctx context.Context, tx pgx.Tx, job *river.Job[Args], state string, receivedAt time.Time) error {
	if err := setState(ctx, tx, job.Args, state, job.Attempt, nil); err != nil {
		return err
	}
	if err := w.complete(ctx, tx, job); err != nil {
		return err
	}
	w.Metrics.Dispatch(job.Args.Route, state, sinceReceipt(job.Args, receivedAt))
	return nil
}

// complete marks the job completed in tx and commits.
func (w *Worker) complete(ctx context.Context, tx pgx.Tx, job *river.Job[Args]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit dispatch: %w", err)
	}
	return nil
}

// newerAccepted reports whether the route already handled a newer event of
// r's entity. Called with the entity's lock (builtin) or lease held.
func newerAccepted(ctx context.Context, db receipts.DBTX, route string, r receipts.Receipt) (bool, error) {
	var mark time.Time
	err := db.QueryRow(ctx, "SELECT event_time FROM hookgate_watermarks WHERE route = $1 AND entity = $2", route, r.Entity).Scan(&mark)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read watermark: %w", err)
	}
	return mark.After(r.EventTime), nil
}

// watermark is a route's newest handled event of one entity.
type watermark struct {
	route, entity        string
	eventTime            time.Time
	provider, deliveryID string
}

// moveWatermarks raises watermarks, never lowering one.
func moveWatermarks(ctx context.Context, db receipts.DBTX, marks []watermark) error {
	newest := map[[2]string]watermark{}
	for _, m := range marks {
		k := [2]string{m.route, m.entity}
		if cur, ok := newest[k]; !ok || m.eventTime.After(cur.eventTime) {
			newest[k] = m
		}
	}
	var routes, entities, providers, ids []string
	var times []time.Time
	for _, m := range newest {
		routes, entities, times, providers, ids = append(routes, m.route), append(entities, m.entity), append(times, m.eventTime),
			append(providers, m.provider), append(ids, m.deliveryID)
	}
	_, err := db.Exec(ctx, `
		INSERT INTO hookgate_watermarks AS w (route, entity, event_time, provider, delivery_id)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[])
		ON CONFLICT (route, entity) DO UPDATE SET
			event_time = excluded.event_time, provider = excluded.provider,
			delivery_id = excluded.delivery_id, updated_at = now()
		WHERE w.event_time < excluded.event_time`, routes, entities, times, providers, ids)
	if err != nil {
		return fmt.Errorf("move watermark: %w", err)
	}
	return nil
}

// forward runs one attempt of a forward; see Worker.
func (w *Worker) forward(ctx context.Context, job *river.Job[Args], route fanout.Route) error {
	a := job.Args
	c, err := w.claim(ctx, a, false)
	if err != nil {
		return err
	}
	if IsFinal(c.state) {
		// Already decided (River ran the job again): nothing to do but give
		// back a lease the claim took again.
		return w.dropLease(ctx, c)
	}

	o := outcome{args: a, state: Succeeded, attempt: job.Attempt, leased: c.leased}
	switch {
	case c.newer:
		o.state = Superseded
	case c.leased != "":
		o.mark = &watermark{route: a.Route, entity: c.r.Entity, eventTime: c.r.EventTime, provider: c.r.Provider, deliveryID: c.r.DeliveryID}
	}
	if o.state == Succeeded {
		ticket, err := w.admit(ctx, route, c.paused)
		if err != nil {
			// Not admitted (paused, circuit open, over its rate): nothing
			// was sent. A first attempt gives its lease back; a retry keeps
			// it, as below.
			if job.Attempt <= 1 {
				_ = w.dropLease(ctx, c)
			}
			return err
		}
		err = w.Forwarder.ForwardWithin(ctx, route.Target, route.Timeout, delivery(c.r, a, job.Attempt))
		w.Metrics.ForwardAttempt(a.Route, forward.Outcome(err))
		w.Guard.Done(ctx, route, ticket, guardOutcome(err), errText(err))
		if err != nil {
			// The lease is kept while the dispatch retries: an earlier
			// attempt may have been accepted with its outcome lost, and an
			// older event must not go out after it. It is given back when
			// the dispatch ends (recordFailure) or expires once it has.
			return err
		}
	}
	if err := w.record(ctx, o); err != nil {
		if c.leased == "" {
			return err
		}
		// The outcome's batch failed, or this job's context ended before it
		// committed. The lease stays until the outcome and watermark are
		// committed, whatever happens, so no older event goes out after
		// this one; writing them now spares the target a second copy.
		if err := w.recordAgain(ctx, o); err != nil {
			return err
		}
	}
	w.Metrics.Dispatch(a.Route, o.state, sinceReceipt(a, c.r.ReceivedAt))
	return nil
}

// guardOutcome is a forward attempt's outcome as the route's circuit counts it.
func guardOutcome(err error) routes.Outcome {
	var fe *forward.Error
	switch {
	case err == nil:
		return routes.Succeeded
	case errors.As(err, &fe) && fe.Permanent:
		return routes.Refused
	}
	return routes.Failed
}

// errText is an error's text as stored and logged (cleaned and bounded:
// package errtext), or "" for none.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return errtext.Clean(err.Error())
}

// sinceReceipt is the receipt time from which a dispatch's success is
// measured: none for a replay, which a day later would skew the
// receipt-to-success figures of today.
func sinceReceipt(a Args, receivedAt time.Time) time.Time {
	if a.Generation > 1 {
		return time.Time{}
	}
	return receivedAt
}

// againTries bounds how often an outcome whose batch failed is written again
// before its job is left to River's retry.
const againTries = 5

// recordAgain writes an outcome in a transaction of its own, retrying with a
// growing pause. Writing it twice (the batch may commit after all) changes
// nothing: a final state is never overwritten, a watermark never lowered, a
// lease given back only by its holder.
func (w *Worker) recordAgain(ctx context.Context, o outcome) error {
	ctx = context.WithoutCancel(ctx)
	var err error
	for try := range againTries {
		time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		err = pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error { return writeOutcomes(ctx, tx, []outcome{o}) })
		if err == nil {
			return nil
		}
	}
	return err
}

// leaseTTL is how long a lease holds without its holder: as long as River
// waits before it rescues a job whose process died.
func (w *Worker) leaseTTL() time.Duration {
	timeout := 10 * time.Second
	if w.Forwarder != nil && w.Forwarder.Timeout > 0 {
		timeout = w.Forwarder.Timeout
	}
	return rescueAfter(w.Routes.MaxTimeout(timeout))
}

// dropLease gives back the claim's lease, if it took one.
func (w *Worker) dropLease(ctx context.Context, c *claim) error {
	if c.leased == "" {
		return nil
	}
	return dropLeasesOf(ctx, w.Pool, c.args)
}

// dropLeasesOf gives back whatever lease the dispatch a holds.
func dropLeasesOf(ctx context.Context, db receipts.DBTX, a Args) error {
	_, err := db.Exec(context.WithoutCancel(ctx), `DELETE FROM hookgate_leases
		WHERE route = $1 AND provider = $2 AND delivery_id = $3 AND generation = $4`,
		a.Route, a.Provider, a.DeliveryID, a.Generation)
	if err != nil {
		return fmt.Errorf("give back lease: %w", err)
	}
	return nil
}

// claim is what one attempt of a forward starts from.
type claim struct {
	args   Args
	state  string           // the dispatch row's state
	r      receipts.Receipt // the event's first receipt
	leased string           // the entity whose lease the dispatch holds for the route, or ""
	newer  bool             // the route already handled a newer event of that entity
	paused bool             // an operator paused the route
}

// leaseSQL takes the lease of (route $3, entity e) for the dispatch ($1, $2,
// $4), for $5 seconds, when the event has an entity and a time: when no one
// holds it, when this dispatch does (River runs it again), or when it expired
// and its holder either has an event no newer or is no longer in progress
// (its dispatch ended, or its River job is gone). A holder that died with a
// newer event in flight keeps it past its expiry: the target may have
// accepted that event, so an older one waits until it is sent again or ends.
// It returns the entity, whether the lease was taken, and whether the lease
// it waits for has expired (its holder retries, or was rescued: a longer wait).
func leaseSQL(entitySQL string) string {
	return `WITH e AS (` + entitySQL + `),
	taken AS (
		INSERT INTO hookgate_leases AS l (route, entity, provider, delivery_id, generation, event_time, expires_at)
		SELECT $3, e.entity, $1, $2, $4, e.event_time, now() + make_interval(secs => $5) FROM e
		ON CONFLICT (route, entity) DO UPDATE SET provider = excluded.provider, delivery_id = excluded.delivery_id,
			generation = excluded.generation, event_time = excluded.event_time, expires_at = excluded.expires_at
		WHERE (l.provider, l.delivery_id, l.generation) = (excluded.provider, excluded.delivery_id, excluded.generation)
			OR l.expires_at < now() AND (l.event_time <= excluded.event_time OR NOT EXISTS (` + leaseHolderInProgressSQL + `))
		RETURNING l.entity)
	SELECT e.entity, EXISTS (SELECT 1 FROM taken),
		coalesce((SELECT expires_at < now() FROM hookgate_leases WHERE route = $3 AND entity = e.entity), false) FROM e`
}

// The receipts' entity and time, for the lease and the watermark: any
// receipt's (the receipts of one event name them alike, and it needs no
// sort), or, made exactly, the first receipt's (hooks that sent different
// bodies under one id).
var (
	anyEntitySQL = `SELECT entity, event_time FROM hookgate_receipts
		WHERE provider = $1 AND delivery_id = $2 AND entity IS NOT NULL AND event_time IS NOT NULL LIMIT 1`
	firstEntitySQL = `SELECT entity, event_time FROM (` + receipts.FirstSQL("$1", "$2") + `) r
		WHERE r.entity IS NOT NULL AND r.event_time IS NOT NULL`
	anyLeaseSQL, firstLeaseSQL = leaseSQL(anyEntitySQL), leaseSQL(firstEntitySQL)
)

// claim starts an attempt in one round trip, in one implicit transaction
// whose commit need not wait for the disk (a lease lost in a crash of the
// database only lets a later event go first, as before leases): when the
// event's receipt names an entity and a time, it takes the lease of (route,
// entity); then it reads the dispatch's state, the receipt and the entity's
// watermark. The two statements run in that order, each on a fresh snapshot,
// so the watermark is read after the lease is held. When another
// holds the lease the job is snoozed. No connection is held afterwards: the
// lease, a row, outlives this call and is given back with the outcome.
func (w *Worker) claim(ctx context.Context, a Args, exact bool) (*claim, error) {
	// The lease needs only the event's entity, so at first it takes any
	// receipt's; when it is not the first receipt's, the claim is made again
	// exactly.
	lease := anyLeaseSQL
	if exact {
		lease = firstLeaseSQL
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(lease, a.Provider, a.DeliveryID, a.Route, a.Generation, w.leaseTTL().Seconds())
	// The watermark is that of the receipt's entity, checked below to be the
	// leased one, read by a correlated subquery so that its plan stays a
	// lookup of one key, whatever the statistics were when the connection
	// prepared it.
	b.Queue(`SELECT d.state, `+routes.PausedSQL("d.route")+`,
		(SELECT w.event_time FROM hookgate_watermarks w WHERE w.route = d.route AND w.entity = r.entity), `+receipts.Columns+`
		FROM hookgate_dispatches d CROSS JOIN LATERAL (`+receipts.FirstSQL("d.provider", "d.delivery_id")+`) r
		WHERE d.provider = $1 AND d.delivery_id = $2 AND d.route = $3 AND d.generation = $4`,
		a.Provider, a.DeliveryID, a.Route, a.Generation)
	results := w.Pool.SendBatch(ctx, b)
	c := &claim{args: a}
	var entity string
	var leased, stale bool
	var mark *time.Time
	_, err := results.Exec()
	if err == nil {
		if err = results.QueryRow().Scan(&entity, &leased, &stale); errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if leased {
		c.leased = entity
	}
	if err == nil {
		c.r, err = receipts.Scan(results.QueryRow(), &c.state, &c.paused, &mark)
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	switch {
	case errors.Is(err, receipts.ErrNotFound):
		_ = w.dropLease(ctx, c)
		return nil, errGone
	case err != nil:
		// The implicit transaction rolled back: no lease was taken.
		return nil, fmt.Errorf("read dispatch: %w", err)
	case entity != "" && !leased && stale:
		return nil, river.JobSnooze(staleLeaseWait())
	case entity != "" && !leased:
		return nil, river.JobSnooze(lockWait())
	case ordered(c.r) != (c.leased != "") || c.leased != "" && c.leased != c.r.Entity:
		_ = w.dropLease(ctx, c)
		if !exact {
			return w.claim(ctx, a, true)
		}
		// Another hook's receipt of the event came between the statements.
		return nil, river.JobSnooze(lockWait())
	}
	c.newer = mark != nil && mark.After(c.r.EventTime)
	return c, nil
}

// outcome is a forward's decided state, to be written with others in one commit.
type outcome struct {
	args    Args
	state   string
	attempt int
	mark    *watermark // the watermark to raise, for an accepted ordered forward
	leased  string     // the entity whose lease the dispatch gives back, or ""
}

// record writes the outcome in the next batch and returns once it is committed.
func (w *Worker) record(ctx context.Context, o outcome) error {
	w.once.Do(func() {
		w.recorder = &batch.Batcher[outcome, struct{}]{Do: w.recordBatch, MaxBatch: 128, Concurrency: 2}
	})
	_, err := w.recorder.Submit(ctx, o)
	return err
}

// recordBatch writes outcomes and watermarks in one transaction.
func (w *Worker) recordBatch(ctx context.Context, os []outcome) ([]struct{}, error) {
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error { return writeOutcomes(ctx, tx, os) })
	if err != nil {
		return nil, err
	}
	return make([]struct{}, len(os)), nil
}

// writeOutcomes writes outcomes and their watermarks in tx. A row already
// final is left as it is: a run that River repeated cannot undo an outcome.
func writeOutcomes(ctx context.Context, tx pgx.Tx, os []outcome) error {
	var providers, ids, routes, states []string
	var gens, attempts []int32
	var marks []watermark
	for _, o := range os {
		providers, ids, routes, states = append(providers, o.args.Provider), append(ids, o.args.DeliveryID), append(routes, o.args.Route), append(states, o.state)
		gens, attempts = append(gens, int32(o.args.Generation)), append(attempts, int32(o.attempt))
		if o.mark != nil {
			marks = append(marks, *o.mark)
		}
	}
	_, err := tx.Exec(ctx, `
		UPDATE hookgate_dispatches d SET state = t.state, attempts = t.attempts, last_error = NULL, updated_at = now()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[])
			AS t(provider, delivery_id, route, generation, state, attempts)
		WHERE d.provider = t.provider AND d.delivery_id = t.delivery_id AND d.route = t.route AND d.generation = t.generation
		AND d.state NOT IN (`+FinalSQL+`)`,
		providers, ids, routes, gens, states, attempts)
	if err != nil {
		return fmt.Errorf("record outcomes: %w", err)
	}
	if len(marks) > 0 {
		if err := moveWatermarks(ctx, tx, marks); err != nil {
			return err
		}
	}
	return dropLeases(ctx, tx, os)
}

// dropLeases gives back the leases of outcomes that hold one, in the
// transaction that records them.
func dropLeases(ctx context.Context, tx pgx.Tx, os []outcome) error {
	var providers, ids, routes, entities []string
	var gens []int32
	for _, o := range os {
		if o.leased != "" {
			providers, ids, routes, entities = append(providers, o.args.Provider), append(ids, o.args.DeliveryID),
				append(routes, o.args.Route), append(entities, o.leased)
			gens = append(gens, int32(o.args.Generation))
		}
	}
	if len(routes) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		DELETE FROM hookgate_leases l
		USING unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[]) AS t(provider, delivery_id, route, generation, entity)
		WHERE l.route = t.route AND l.entity = t.entity
		AND (l.provider, l.delivery_id, l.generation) = (t.provider, t.delivery_id, t.generation)`,
		providers, ids, routes, gens, entities)
	if err != nil {
		return fmt.Errorf("give back leases: %w", err)
	}
	return nil
}

func setState(ctx context.Context, db receipts.DBTX, a Args, state string, attempt int, lastError *string) error {
	_, err := db.Exec(ctx, `
		UPDATE hookgate_dispatches SET state = $5, attempts = $6, last_error = $7, updated_at = now()
		WHERE provider = $1 AND delivery_id = $2 AND route = $3 AND generation = $4`,
		a.Provider, a.DeliveryID, a.Route, a.Generation, state, attempt, lastError)
	if err != nil {
		return fmt.Errorf("update dispatch: %w", err)
	}
	return nil
}

// recordFailure stores a failed attempt on the dispatch row. It is best effort:
// River retries the job whether or not the row could be updated.
func (w *Worker) recordFailure(ctx context.Context, job *river.Job[Args], state string, cause error) {
	msg := errText(cause)
	if err := setState(context.WithoutCancel(ctx), w.Pool, job.Args, state, job.Attempt, &msg); err != nil {
		w.Logger.ErrorContext(ctx, "record dispatch failure", "error", err, "route", job.Args.Route, "delivery_id", job.Args.DeliveryID)
	}
	if IsFinal(state) { // an ended dispatch holds no lease (one left would expire)
		if err := dropLeasesOf(ctx, w.Pool, job.Args); err != nil {
			w.Logger.WarnContext(ctx, "give back lease", "error", err, "route", job.Args.Route, "delivery_id", job.Args.DeliveryID)
		}
	}
	w.Logger.WarnContext(ctx, "dispatch failed", "error", msg, "state", state, "route", job.Args.Route,
		"provider", job.Args.Provider, "delivery_id", job.Args.DeliveryID, "attempt", job.Attempt)
}
