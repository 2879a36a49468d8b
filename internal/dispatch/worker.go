package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookgate/hookgate/internal/batch"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/tracing"
	"github.com/hookgate/hookgate/internal/transform"
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

	pool      *pgxpool.Pool
	routes    fanout.Source
	handlers  handlers.Registry
	forwarder *forward.Client
	receipts  *receipts.Store
	logger    *slog.Logger
	metrics   *metrics.Metrics
	guard     Admitter
	yield     *yield.Gate

	// Events, when set, hears of each dispatch discarded (package notify).
	// It must not block.
	Events func(notify.Event)
	// Tracer, when set, traces each attempt in its delivery's trace
	// (package tracing); nil: no tracing work at all.
	Tracer trace.Tracer

	// retryAt holds, per job id, when a target's Retry-After allows the next
	// attempt; NextRetry takes it right after Work returns.
	retryAt sync.Map

	recorder *batch.Batcher[outcome, struct{}]
	claimer  *batch.Batcher[store.ClaimRequest, store.ClaimResult]
}

// attemptSpan starts an attempt's span in its delivery's trace (the
// traceparent its job keeps), linked to River's own span of the job.
func (w *Worker) attemptSpan(ctx context.Context, job *river.Job[Args]) (context.Context, trace.Span) {
	a := job.Args
	opts := []trace.SpanStartOption{trace.WithAttributes(attribute.String("hookgate.route", a.Route),
		attribute.String("hookgate.provider", a.Provider), attribute.String("hookgate.delivery_id", a.DeliveryID),
		attribute.Int("hookgate.generation", a.Generation), attribute.Int("hookgate.attempt", job.Attempt))}
	if river := trace.SpanContextFromContext(ctx); river.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: river}))
	}
	parent := tracing.FromMetadata(ctx, job.Metadata)
	if !trace.SpanContextFromContext(parent).IsRemote() {
		opts = append(opts, trace.WithNewRoot()) // no delivery trace kept (a replay's): a trace of its own
	}
	return w.Tracer.Start(parent, "hookgate.dispatch", opts...)
}

// step starts a span of part of an attempt, and returns what ends it; with
// tracing off, both do nothing.
func (w *Worker) step(ctx context.Context, name string) func(error) {
	return tracing.Step(w.Tracer, ctx, name)
}

// discarded tells Events of a dispatch discarded for err.
func (w *Worker) discarded(job *river.Job[Args], err error) {
	if w.Events == nil {
		return
	}
	a := job.Args
	w.Events(notify.Event{Type: notify.DispatchDiscarded, Route: a.Route, Provider: a.Provider,
		Page: "/admin/ui/deliveries/" + url.PathEscape(a.Provider) + "/" + url.PathEscape(a.DeliveryID),
		Message: fmt.Sprintf("route %s discarded its dispatch of %s delivery %s (generation %d) after %d attempt(s): %s",
			a.Route, a.Provider, a.DeliveryID, a.Generation, job.Attempt, errtext.Clean(err.Error()))})
}

// Admitter admits each attempt of a route's dispatch within the route's
// pause, circuit and rate, or says how long it waits, and learns how an
// admitted attempt ended: *routes.Guard, or routes.AdmitAll where none of
// them is in force.
type Admitter interface {
	Admit(ctx context.Context, r fanout.Route) (wait time.Duration, t routes.Ticket, err error)
	Done(ctx context.Context, r fanout.Route, t routes.Ticket, o routes.Outcome, detail string)
}

// NewWorker returns a Worker of table's dispatches, whose rows live in pool
// and whose events' stored bodies it reads through rs. handlers are the
// builtin targets (none: a builtin route's dispatches are discarded), and
// forwarder sends to http(s) targets. guard admits each attempt; gate holds
// dispatches back, up to MaxYield, while ingest is under load
// (yield.Never holds none). m records final states and forward attempts;
// logger logs failures, never payloads.
func NewWorker(pool *pgxpool.Pool, table fanout.Source, rs *receipts.Store, handlers handlers.Registry, forwarder *forward.Client,
	guard Admitter, gate *yield.Gate, m *metrics.Metrics, logger *slog.Logger) *Worker {
	w := &Worker{pool: pool, routes: table, handlers: handlers, forwarder: forwarder, receipts: rs, logger: logger,
		metrics: m, guard: guard, yield: gate}
	w.recorder = &batch.Batcher[outcome, struct{}]{Do: w.recordBatch, MaxBatch: 128, Concurrency: 2, Linger: outcomeLinger}
	w.claimer = &batch.Batcher[store.ClaimRequest, store.ClaimResult]{Do: w.claimBatch, MaxBatch: 64, Concurrency: 2, Linger: claimLinger}
	// Dispatches the gate sends on together claim together and record their
	// outcomes together: during a load, as in a drain, a forward's round
	// trips are shared.
	gate.OnWake(func(n int) {
		w.claimer.Expect(n)
		w.recorder.Expect(n)
	})
	return w
}

var (
	// errGone means the dispatch's row or receipt no longer exists (retention).
	errGone = errors.New("dispatch or receipt no longer stored")
	// errNoTarget means the route or its builtin handler is not configured.
	errNoTarget = errors.New("no such target")
)

// claimLinger and outcomeLinger bound how long a batch of claims, and of
// outcomes, waits for the dispatches the gate sent on together (their
// outcomes come after their claims and their targets' answers).
const (
	claimLinger   = 3 * time.Millisecond
	outcomeLinger = 10 * time.Millisecond
)

// MaxYield is the longest a dispatch is held back for ingest (package
// yield): the job's time limit includes it.
const MaxYield = 5 * time.Second

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) (err error) {
	if w.Tracer != nil {
		var span trace.Span
		ctx, span = w.attemptSpan(ctx, job)
		defer func() {
			tracing.Fail(span, err)
			span.End()
		}()
	}
	w.retryAt.Delete(job.ID) // an earlier attempt's, should River not have taken it
	if wait := w.orderWindow(job); wait > 0 {
		return river.JobSnooze(wait)
	}
	// A listen route's attempt waits for a person's machine, not for this
	// one's cores: it does not yield (held, it would show running while
	// no listener is there).
	r, known := w.routes.Route(job.Args.Route)
	listens := known && r.Listens()
	if !listens {
		w.yield.Enter(ctx, time.Now().Add(MaxYield))
	}
	// A listen route's offers go with the dispatch's outcome: an answer
	// that comes for one then is 409, and changes nothing.
	endOffers := func() {
		if listens {
			_ = store.DeleteOffers(context.WithoutCancel(ctx), w.pool, job.ID)
		}
	}
	err = w.work(ctx, job)
	var snooze *river.JobSnoozeError
	var fe *forward.Error
	var discard *handlers.DiscardError
	switch {
	case err == nil:
		endOffers()
		return nil
	case errors.As(err, &snooze):
		return err
	case errors.Is(err, errGone):
		return river.JobCancel(err)
	case errors.Is(err, errNoTarget), errors.As(err, &fe) && fe.Permanent, errors.As(err, &discard):
		w.recordFailure(ctx, job, Discarded, err)
		w.metrics.Dispatch(job.Args.Route, Discarded, time.Time{})
		w.discarded(job, err)
		endOffers()
		return river.JobCancel(err)
	}
	state := Retrying
	if job.Attempt >= job.MaxAttempts {
		state = Discarded
		w.metrics.Dispatch(job.Args.Route, state, time.Time{})
		w.discarded(job, err)
		endOffers()
	} else if errors.As(err, &fe) && fe.RetryAfter > 0 {
		// Only for a job River will retry: it then calls NextRetry, which
		// takes the entry; a discarded job's would stay forever.
		w.retryAt.Store(job.ID, time.Now().Add(fe.RetryAfter))
	}
	w.recordFailure(ctx, job, state, err)
	return err
}

// orderWindow is how much longer a route with an order window holds the
// job's first attempt back, so that an older event of its entity still in
// flight from the sender arrives and goes first (the oldest waiting takes
// the turn: store.OlderWaiting). The window runs from the job's creation,
// the commit of the receipt or replay that made it. A snooze keeps the
// attempt count, so the attempt that follows is the first again, and goes.
func (w *Worker) orderWindow(job *river.Job[Args]) time.Duration {
	r, ok := w.routes.Route(job.Args.Route)
	if !ok || r.OrderWindow <= 0 || job.Attempt > 1 {
		return 0
	}
	return time.Until(job.CreatedAt.Add(r.OrderWindow))
}

// Timeout implements river.Worker: the route's attempt time limit and the
// database work around it.
func (w *Worker) Timeout(job *river.Job[Args]) time.Duration {
	if r, ok := w.routes.Route(job.Args.Route); ok && r.Timeout > 0 {
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
	route, ok := w.routes.Route(job.Args.Route)
	if !ok {
		return fmt.Errorf("%w: route %q is no longer configured", errNoTarget, job.Args.Route)
	}
	name, builtin := route.Builtin()
	if !builtin {
		return w.forward(ctx, job, route)
	}
	handler := w.handlers[name]
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
	wait, t, err := w.guard.Admit(ctx, route)
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
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := store.NoDiskWaitTx(ctx, tx); err != nil {
		return err
	}

	state, paused, err := store.LockDispatchTx(ctx, tx, store.DispatchKey(a))
	if errors.Is(err, store.ErrNoDispatch) {
		return errGone
	}
	if err != nil {
		return err
	}
	if IsFinal(state) {
		// River ran the job again after its outcome was committed (a rescue
		// after a crash): the effect already happened, only complete the job.
		return w.complete(ctx, tx, job)
	}
	r, err := w.receipts.First(ctx, tx, a.Provider, a.DeliveryID)
	if errors.Is(err, receipts.ErrNotFound) {
		return errGone
	}
	if err != nil {
		return err
	}
	d := delivery(r, a, job.Attempt)
	inTurn := route.Ordered() && ordered(r)
	if inTurn {
		locked, err := store.TryEntityLockTx(ctx, tx, a.Route, r.Entity)
		if err != nil {
			return err
		}
		if !locked {
			return river.JobSnooze(lockWait())
		}
		if route.OldestFirst() {
			older, err := store.OlderWaiting(ctx, tx, a.Route, r.Entity, r.EventTime)
			if err != nil {
				return err
			}
			if older {
				return river.JobSnooze(lockWait())
			}
		}
		mark, by, ok, err := store.WatermarkOf(ctx, tx, a.Route, r.Entity)
		if err != nil {
			return err
		}
		if ok && mark.After(r.EventTime) { // the route handled a newer event of the entity
			if route.Supersedes() {
				if err := store.SetSupersededBy(ctx, tx, store.DispatchKey(a), by); err != nil {
					return err
				}
				if err := w.finish(ctx, tx, job, route, Superseded, r.ReceivedAt); err != nil {
					return err
				}
				w.logSuperseded(ctx, a, r.Entity, by)
				return nil
			}
			d.Late = true
		}
	}
	ticket, err := w.admit(ctx, route, paused)
	if err != nil {
		return err
	}
	if err := handlers.Call(ctx, tx, handler, d); err != nil {
		if pe := (*handlers.PanicError)(nil); errors.As(err, &pe) {
			w.logger.ErrorContext(ctx, "handler panicked", "route", a.Route, "delivery_id", a.DeliveryID,
				"panic", errtext.Clean(fmt.Sprint(pe.Value)), "stack", string(pe.Stack))
		}
		err = fmt.Errorf("handler: %w", err)
		w.guard.Done(ctx, route, ticket, routes.Failed, errText(err))
		return err
	}
	if inTurn {
		if err := store.RaiseWatermarks(ctx, tx, []store.Watermark{markOf(a, r)}); err != nil {
			return err
		}
	}
	if err := w.finish(ctx, tx, job, route, Succeeded, r.ReceivedAt); err != nil {
		return err
	}
	w.guard.Done(ctx, route, ticket, routes.Succeeded, "")
	return nil
}

// finish records a builtin dispatch's final state (and ends its turn on a
// route that hands an entity's events oldest first), completes its job and
// commits, then counts it.
func (w *Worker) finish(ctx context.Context, tx pgx.Tx, job *river.Job[Args], route fanout.Route, state string, receivedAt time.Time) error {
	if err := store.SetDispatchState(ctx, tx, store.DispatchKey(job.Args), state, job.Attempt, nil); err != nil {
		return err
	}
	if route.OldestFirst() {
		if err := store.EndTurns(ctx, tx, []store.DispatchKey{store.DispatchKey(job.Args)}); err != nil {
			return err
		}
	}
	if err := w.complete(ctx, tx, job); err != nil {
		return err
	}
	w.metrics.Dispatch(job.Args.Route, state, sinceReceipt(job.Args, receivedAt))
	return nil
}

// logSuperseded logs a dispatch that ended superseded: its route's target
// had accepted a newer event of the entity, from the delivery by.
func (w *Worker) logSuperseded(ctx context.Context, a Args, entity, by string) {
	w.logger.InfoContext(ctx, "dispatch superseded", "route", a.Route, "entity", entity, "provider", a.Provider,
		"delivery_id", a.DeliveryID, "generation", a.Generation, "superseded_by", by)
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

// forward runs one attempt of a forward; see Worker.
func (w *Worker) forward(ctx context.Context, job *river.Job[Args], route fanout.Route) error {
	a := job.Args
	end := w.step(ctx, "hookgate.dispatch.claim")
	c, err := w.claim(ctx, a, route, false)
	end(err)
	if err != nil {
		return err
	}
	if IsFinal(c.state) {
		// Already decided (River ran the job again): nothing to do but give
		// back a lease the claim took again.
		return w.dropLease(ctx, c)
	}

	o := outcome{args: a, state: Succeeded, attempt: job.Attempt, leased: c.leased, turn: route.OldestFirst()}
	d := delivery(c.r, a, job.Attempt)
	switch {
	case c.newer && route.Supersedes():
		o.state, o.supersededBy = Superseded, c.markBy
	case c.leased != "":
		d.Late = c.newer
		m := markOf(a, c.r)
		o.mark = &m
	}
	// send: the attempt sends a request (none for a dispatch superseded, or
	// one the route's transformation skips).
	send := o.state == Succeeded
	target, headers := route.Target, map[string]string(nil)
	if send && route.Transform != nil {
		res, err := route.Transform.Apply(&filter.Input{Provider: d.Provider, Event: d.Event, Headers: d.Headers, ContentType: d.ContentType, Body: d.Body})
		if err == nil {
			target, err = transform.Target(route.Target, res.Path)
		}
		if err != nil {
			// The attempt fails, and is retried like a target's failure
			// (the lease kept likewise); the route's circuit does not count
			// it: the target was not asked.
			w.metrics.ForwardAttempt(a.Route, "transform_failed")
			return err
		}
		d.Body, d.ContentType, headers = res.Body, res.ContentType, res.Headers
		if res.Skip {
			w.metrics.ForwardAttempt(a.Route, "skipped")
			send = false
		}
	}
	if send && route.Listens() {
		err := w.listenerConnected(ctx, route)
		if err == nil && c.paused {
			err = river.JobSnooze(routes.PausedWait)
		}
		if err == nil {
			err = w.offer(ctx, job, route)
		}
		var snooze *river.JobSnoozeError
		switch {
		case errors.As(err, &snooze) && job.Attempt <= 1:
			_ = w.dropLease(ctx, c)
		case !errors.As(err, &snooze) && ctx.Err() == nil:
			w.metrics.ForwardAttempt(a.Route, forward.Outcome(err))
		}
		if err != nil {
			return err
		}
	} else if send {
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
		fctx, span := ctx, trace.Span(nil)
		if w.Tracer != nil {
			fctx, span = w.Tracer.Start(ctx, "hookgate.dispatch.forward", trace.WithSpanKind(trace.SpanKindClient))
		}
		err = w.forwarder.ForwardWith(fctx, target, route.Timeout, d, headers)
		if span != nil {
			span.SetAttributes(attribute.String("hookgate.forward.outcome", forward.Outcome(err)))
			tracing.Fail(span, err)
			span.End()
		}
		w.metrics.ForwardAttempt(a.Route, forward.Outcome(err))
		w.guard.Done(ctx, route, ticket, guardOutcome(err), errText(err))
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
	if o.state == Superseded {
		w.logSuperseded(ctx, a, c.r.Entity, o.supersededBy)
	}
	w.metrics.Dispatch(a.Route, o.state, sinceReceipt(a, c.r.ReceivedAt))
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
		err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error { return writeOutcomes(ctx, tx, []outcome{o}) })
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
	if w.forwarder.Timeout > 0 {
		timeout = w.forwarder.Timeout
	}
	return rescueAfter(w.routes.Routes().MaxTimeout(timeout))
}

// dropLease gives back the claim's lease, if it took one.
func (w *Worker) dropLease(ctx context.Context, c *claim) error {
	if c.leased == "" {
		return nil
	}
	return store.GiveBackLeaseOf(context.WithoutCancel(ctx), w.pool, store.DispatchKey(c.args), c.leased)
}

// claim is what one attempt of a forward starts from.
type claim struct {
	args   Args
	state  string           // the dispatch row's state
	r      receipts.Receipt // the event's first receipt
	leased string           // the entity whose lease the dispatch holds for the route, or ""
	newer  bool             // the route already handled a newer event of that entity
	markBy string           // the delivery whose event set the watermark, when newer
	paused bool             // an operator paused the route
}

// claim starts an attempt in one round trip shared with the claims that
// arrive at the same time (claimBatch), in one implicit transaction whose
// commit need not wait for the disk (a lease lost in a crash of the
// database only lets a later event go first, as before leases): when the
// event's receipt names an entity and a time, it takes the lease of (route,
// entity); then it reads the dispatch's state, the receipt and the entity's
// watermark. The two statements run in that order, each on a fresh snapshot,
// so the watermark is read after the lease is held. When another
// holds the lease the job is snoozed. No connection is held afterwards: the
// lease, a row, outlives this call and is given back with the outcome.
func (w *Worker) claim(ctx context.Context, a Args, route fanout.Route, exact bool) (*claim, error) {
	// The lease needs only the event's entity, so at first it takes any
	// receipt's; when it is not the first receipt's, the claim is made again
	// exactly.
	mode := store.ClaimMode{Ordered: route.Ordered(), OldestFirst: route.OldestFirst(), Exact: exact}
	sc, err := w.claimer.Submit(ctx, store.ClaimRequest{Key: store.DispatchKey(a), Mode: mode})
	if err == nil {
		err = sc.Err
	}
	c := &claim{args: a, state: sc.State, r: sc.Receipt, paused: sc.Paused}
	entity, leased, stale, mark := sc.Entity, sc.Leased, sc.Stale, sc.Mark
	if leased {
		c.leased = entity
	}
	switch {
	case errors.Is(err, receipts.ErrNotFound):
		_ = w.dropLease(ctx, c)
		return nil, errGone
	case err != nil:
		return nil, err
	case entity != "" && !leased && stale:
		return nil, river.JobSnooze(staleLeaseWait())
	case entity != "" && !leased:
		return nil, river.JobSnooze(lockWait())
	case route.Ordered() && ordered(c.r) != (c.leased != "") || c.leased != "" && c.leased != c.r.Entity:
		_ = w.dropLease(ctx, c)
		if !exact {
			return w.claim(ctx, a, route, true)
		}
		// Another hook's receipt of the event came between the statements.
		return nil, river.JobSnooze(lockWait())
	}
	c.newer = c.leased != "" && mark != nil && mark.After(c.r.EventTime)
	if c.newer && sc.MarkBy != nil {
		c.markBy = *sc.MarkBy
	}
	return c, nil
}

// claimBatch starts the attempts of the forwards whose claims arrived
// together, in one round trip (store.ClaimDispatches): River hands a route's
// workers the jobs of one fetch at once, and each claim alone would cost a
// round trip and three statements. A batch that fails as one (a deadlock
// with an outcome's batch that gives back the same leases, say) is claimed
// again one by one, so that one claim's trouble is its own.
func (w *Worker) claimBatch(ctx context.Context, reqs []store.ClaimRequest) ([]store.ClaimResult, error) {
	cs, err := store.ClaimDispatches(ctx, w.pool, reqs, w.leaseTTL())
	if err == nil || len(reqs) == 1 {
		return cs, err
	}
	cs = make([]store.ClaimResult, len(reqs))
	for i, r := range reqs {
		one, err := store.ClaimDispatches(ctx, w.pool, []store.ClaimRequest{r}, w.leaseTTL())
		if err != nil {
			cs[i].Err = err
			continue
		}
		cs[i] = one[0]
	}
	return cs, nil
}

// outcome is a forward's decided state, to be written with others in one commit.
type outcome struct {
	args    Args
	state   string
	attempt int
	mark    *store.Watermark // the watermark to raise, for an accepted ordered forward
	leased  string           // the entity whose lease the dispatch gives back, or ""
	// supersededBy is the delivery whose newer event superseded a superseded one.
	supersededBy string
	turn         bool // the dispatch's turn row goes with its outcome
}

// record writes the outcome in the next batch and returns once it is committed.
func (w *Worker) record(ctx context.Context, o outcome) error {
	_, err := w.recorder.Submit(ctx, o)
	return err
}

// recordBatch writes outcomes and watermarks in one transaction.
func (w *Worker) recordBatch(ctx context.Context, os []outcome) ([]struct{}, error) {
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error { return writeOutcomes(ctx, tx, os) })
	if err != nil {
		return nil, err
	}
	return make([]struct{}, len(os)), nil
}

// writeOutcomes writes outcomes, their watermarks and the giving back of
// their leases in tx (store.WriteOutcomesTx).
func writeOutcomes(ctx context.Context, tx pgx.Tx, os []outcome) error {
	rows := make([]store.Outcome, len(os))
	var marks []store.Watermark
	for i, o := range os {
		rows[i] = store.Outcome{DispatchKey: store.DispatchKey(o.args), State: o.state, Attempt: o.attempt, Leased: o.leased,
			SupersededBy: o.supersededBy, Turn: o.turn}
		if o.mark != nil {
			marks = append(marks, *o.mark)
		}
	}
	return store.WriteOutcomesTx(ctx, tx, rows, marks)
}

// markOf is the watermark an accepted dispatch a of r's event raises.
func markOf(a Args, r receipts.Receipt) store.Watermark {
	return store.Watermark{Route: a.Route, Entity: r.Entity, EventTime: r.EventTime, Provider: r.Provider, DeliveryID: r.DeliveryID}
}

// recordFailure stores a failed attempt on the dispatch row. It is best effort:
// River retries the job whether or not the row could be updated.
func (w *Worker) recordFailure(ctx context.Context, job *river.Job[Args], state string, cause error) {
	msg := errText(cause)
	if err := store.SetDispatchState(context.WithoutCancel(ctx), w.pool, store.DispatchKey(job.Args), state, job.Attempt, &msg); err != nil {
		w.logger.ErrorContext(ctx, "record dispatch failure", "error", err, "route", job.Args.Route, "delivery_id", job.Args.DeliveryID)
	}
	if IsFinal(state) { // an ended dispatch holds no lease (one left would expire) and waits for no turn
		if err := store.GiveBackLease(context.WithoutCancel(ctx), w.pool, store.DispatchKey(job.Args)); err != nil {
			w.logger.WarnContext(ctx, "give back lease", "error", err, "route", job.Args.Route, "delivery_id", job.Args.DeliveryID)
		}
		if err := store.EndTurns(context.WithoutCancel(ctx), w.pool, []store.DispatchKey{store.DispatchKey(job.Args)}); err != nil {
			w.logger.WarnContext(ctx, "end turn", "error", err, "route", job.Args.Route, "delivery_id", job.Args.DeliveryID)
		}
	}
	w.logger.WarnContext(ctx, "dispatch failed", "error", msg, "state", state, "route", job.Args.Route,
		"provider", job.Args.Provider, "delivery_id", job.Args.DeliveryID, "attempt", job.Attempt)
}
