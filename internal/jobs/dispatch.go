package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/receipts"
)

// DispatchKind is the River job kind of a dispatch. Stable: stored in river_job.
const DispatchKind = "hookgate_dispatch"

// Dispatch states, as stored in hookgate_dispatches.state.
const (
	StatePending    = "pending"
	StateRunning    = "running"
	StateSucceeded  = "succeeded"
	StateRetrying   = "retrying"
	StateDiscarded  = "discarded"
	StateSuperseded = "superseded"
	StateCancelled  = "cancelled"
)

// DispatchArgs are a dispatch job's arguments: the key of its dispatch row.
type DispatchArgs struct {
	Provider   string `json:"provider"`
	DeliveryID string `json:"delivery_id"`
	Route      string `json:"route"`
	Generation int    `json:"generation"`
}

// Kind implements river.JobArgs.
func (DispatchArgs) Kind() string { return DispatchKind }

// Enqueuer creates dispatch rows and their River jobs inside the caller's
// transaction.
type Enqueuer struct {
	// Client inserts the jobs; it may be an insert-only client.
	Client *river.Client[pgx.Tx]
	// Routes is the fan-out table.
	Routes Routes
	// MaxAttempts is each job's attempt limit. Defaults to River's (25).
	MaxAttempts int
}

// EnqueueTx creates generation 1 of the dispatch of every route matching the
// event, with one River job each, and returns how many it created. Routes that
// already have a generation 1 for this event (another hook delivered it first)
// get none.
func (e *Enqueuer) EnqueueTx(ctx context.Context, tx pgx.Tx, provider, deliveryID, event string) (int, error) {
	n, err := e.EnqueueManyTx(ctx, tx, []Event{{Provider: provider, DeliveryID: deliveryID, Event: event}})
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// Event names one event to dispatch.
type Event struct {
	Provider, DeliveryID, Event string
}

// EnqueueManyTx is EnqueueTx for several events in one round of statements.
// It returns how many dispatches each event created; an event listed twice
// gets them on its first listing.
func (e *Enqueuer) EnqueueManyTx(ctx context.Context, tx pgx.Tx, events []Event) ([]int, error) {
	var want []Created
	for _, ev := range events {
		for _, r := range e.Routes.Matching(ev.Provider, ev.Event) {
			want = append(want, Created{Provider: ev.Provider, DeliveryID: ev.DeliveryID, Route: r, Generation: 1})
		}
	}
	counts := make([]int, len(events))
	if len(want) == 0 {
		return counts, nil
	}
	created, err := e.insertTx(ctx, tx, want)
	if err != nil {
		return nil, err
	}
	perEvent := map[[2]string]int{}
	for _, c := range created {
		perEvent[[2]string{c.Provider, c.DeliveryID}]++
	}
	for i, ev := range events {
		k := [2]string{ev.Provider, ev.DeliveryID}
		counts[i] = perEvent[k]
		delete(perEvent, k)
	}
	return counts, nil
}

// Created is a dispatch that was just created.
type Created struct {
	Provider   string `json:"-"`
	DeliveryID string `json:"-"`
	Route      string `json:"route"`
	Generation int    `json:"generation"`
	State      string `json:"state"`
}

// insertTx inserts the wanted dispatch rows that do not exist yet, one River
// job for each row it inserted (one InsertManyTx), and links each row to its
// job.
func (e *Enqueuer) insertTx(ctx context.Context, tx pgx.Tx, want []Created) ([]Created, error) {
	providers := make([]string, len(want))
	ids := make([]string, len(want))
	routes := make([]string, len(want))
	gens := make([]int32, len(want))
	for i, w := range want {
		providers[i], ids[i], routes[i], gens[i] = w.Provider, w.DeliveryID, w.Route, int32(w.Generation)
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[])
		ON CONFLICT DO NOTHING
		RETURNING provider, delivery_id, route, generation`, providers, ids, routes, gens)
	if err != nil {
		return nil, fmt.Errorf("insert dispatches: %w", err)
	}
	created, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Created, error) {
		c := Created{State: StatePending}
		return c, row.Scan(&c.Provider, &c.DeliveryID, &c.Route, &c.Generation)
	})
	if err != nil {
		return nil, fmt.Errorf("insert dispatches: %w", err)
	}
	if len(created) == 0 {
		return created, nil
	}
	params := make([]river.InsertManyParams, len(created))
	for i, c := range created {
		params[i] = river.InsertManyParams{
			Args:       DispatchArgs{Provider: c.Provider, DeliveryID: c.DeliveryID, Route: c.Route, Generation: c.Generation},
			InsertOpts: &river.InsertOpts{MaxAttempts: e.MaxAttempts},
		}
	}
	results, err := e.Client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("insert dispatch jobs: %w", err)
	}
	providers, ids, routes, gens = providers[:0], ids[:0], routes[:0], gens[:0]
	jobIDs := make([]int64, len(results))
	for i, res := range results {
		c := created[i]
		providers, ids, routes, gens = append(providers, c.Provider), append(ids, c.DeliveryID), append(routes, c.Route), append(gens, int32(c.Generation))
		jobIDs[i] = res.Job.ID
	}
	_, err = tx.Exec(ctx, `
		UPDATE hookgate_dispatches d SET job_id = t.job_id
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bigint[]) AS t(provider, delivery_id, route, generation, job_id)
		WHERE d.provider = t.provider AND d.delivery_id = t.delivery_id AND d.route = t.route AND d.generation = t.generation`,
		providers, ids, routes, gens, jobIDs)
	if err != nil {
		return nil, fmt.Errorf("link dispatch jobs: %w", err)
	}
	return created, nil
}

// DispatchWorker works dispatch jobs: it runs the route's target and records
// the outcome on the dispatch row.
//
// Each attempt is one transaction: lock the dispatch row; when the delivery
// names an entity and a time, take the (route, entity) lock and compare with
// the route's watermark; run the target; then record success, move the
// watermark and complete the River job (river.JobCompleteTx), all in one
// commit. A builtin handler writes in that same transaction, so its effect
// happens exactly once. A forward cannot be undone, so it happens at least
// once, always with the same Idempotency-Key.
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]

	// Pool is the database the dispatch rows and receipts live in.
	Pool *pgxpool.Pool
	// Routes is the fan-out table.
	Routes Routes
	// Handlers are the builtin targets.
	Handlers Handlers
	// Forwarder sends to http(s) targets.
	Forwarder *Forwarder
	// Receipts reads the event's stored body.
	Receipts *receipts.Store
	// Logger logs failures; never payloads.
	Logger *slog.Logger
	// Metrics records final states; nil records nothing.
	Metrics *metrics.Metrics

	// retryAt holds, per job id, when a target's Retry-After allows the next
	// attempt; NextRetry takes it right after Work returns.
	retryAt sync.Map
}

// target is what a dispatch runs: a builtin handler, or a forward that ignores tx.
type target func(ctx context.Context, tx pgx.Tx, d Delivery) error

// Work implements river.Worker.
func (w *DispatchWorker) Work(ctx context.Context, job *river.Job[DispatchArgs]) error {
	run, err := w.target(job.Args.Route)
	if err == nil {
		err = w.dispatch(ctx, job, run)
	}
	var snooze *river.JobSnoozeError
	var fe *ForwardError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &snooze):
		return err
	case errors.Is(err, errGone):
		return river.JobCancel(err)
	case errors.Is(err, errNoTarget), errors.As(err, &fe) && fe.Permanent:
		w.recordFailure(ctx, job, StateDiscarded, err)
		w.Metrics.Dispatch(job.Args.Route, StateDiscarded, time.Time{})
		return river.JobCancel(err)
	}
	if errors.As(err, &fe) && fe.RetryAfter > 0 {
		w.retryAt.Store(job.ID, time.Now().Add(fe.RetryAfter))
	}
	state := StateRetrying
	if job.Attempt >= job.MaxAttempts {
		state = StateDiscarded
		w.Metrics.Dispatch(job.Args.Route, state, time.Time{})
	}
	w.recordFailure(ctx, job, state, err)
	return err
}

// NextRetry implements river.Worker: a target's Retry-After when it sent one,
// else River's default backoff (1 s before the first retry, then attempt^4 s).
func (w *DispatchWorker) NextRetry(job *river.Job[DispatchArgs]) time.Time {
	if at, ok := w.retryAt.LoadAndDelete(job.ID); ok {
		return at.(time.Time)
	}
	return time.Time{}
}

var (
	// errGone means the dispatch's row or receipt no longer exists (retention).
	errGone = errors.New("dispatch or receipt no longer stored")
	// errNoTarget means the route or its builtin handler is not configured.
	errNoTarget = errors.New("no such target")
)

func (w *DispatchWorker) target(routeName string) (target, error) {
	route, ok := w.Routes.ByName(routeName)
	if !ok {
		return nil, fmt.Errorf("%w: route %q is no longer configured", errNoTarget, routeName)
	}
	if name, ok := route.Builtin(); ok {
		handler := w.Handlers[name]
		if handler == nil {
			return nil, fmt.Errorf("%w: route %q: no builtin handler %q", errNoTarget, route.Name, name)
		}
		return target(handler), nil
	}
	return func(ctx context.Context, _ pgx.Tx, d Delivery) error {
		return w.Forwarder.Forward(ctx, route.Target, d)
	}, nil
}

// lockWait is how long a dispatch waits when another holds its entity's lock.
func lockWait() time.Duration {
	return 50*time.Millisecond + rand.N(150*time.Millisecond)
}

// dispatch runs one attempt in one transaction; see DispatchWorker.
func (w *DispatchWorker) dispatch(ctx context.Context, job *river.Job[DispatchArgs], run target) error {
	a := job.Args
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	var state string
	err = tx.QueryRow(ctx, `
		SELECT state FROM hookgate_dispatches
		WHERE provider = $1 AND delivery_id = $2 AND route = $3 AND generation = $4
		FOR UPDATE`, a.Provider, a.DeliveryID, a.Route, a.Generation).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return errGone
	}
	if err != nil {
		return fmt.Errorf("lock dispatch: %w", err)
	}
	if finalStates[state] {
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
	ordered := r.Entity != "" && !r.EventTime.IsZero()
	if ordered {
		var locked bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", a.Route+"|"+r.Entity).Scan(&locked); err != nil {
			return fmt.Errorf("entity lock: %w", err)
		}
		if !locked {
			return river.JobSnooze(lockWait())
		}
		var mark time.Time
		err := tx.QueryRow(ctx, "SELECT event_time FROM hookgate_watermarks WHERE route = $1 AND entity = $2", a.Route, r.Entity).Scan(&mark)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read watermark: %w", err)
		}
		if err == nil && mark.After(r.EventTime) {
			if err := setState(ctx, tx, a, StateSuperseded, job.Attempt, nil); err != nil {
				return err
			}
			if err := w.complete(ctx, tx, job); err != nil {
				return err
			}
			w.Metrics.Dispatch(a.Route, StateSuperseded, r.ReceivedAt)
			return nil
		}
	}

	d := Delivery{
		Provider: r.Provider, DeliveryID: r.DeliveryID, Event: r.Event, Entity: r.Entity, EventTime: r.EventTime,
		ContentType: r.ContentType, Body: r.Body, Headers: r.Headers,
		Route: a.Route, Generation: a.Generation, Attempt: job.Attempt,
	}
	if err := run(ctx, tx, d); err != nil {
		return err
	}
	if ordered {
		_, err := tx.Exec(ctx, `
			INSERT INTO hookgate_watermarks AS w (route, entity, event_time, provider, delivery_id)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (route, entity) DO UPDATE SET
				event_time = excluded.event_time, provider = excluded.provider,
				delivery_id = excluded.delivery_id, updated_at = now()
			WHERE w.event_time < excluded.event_time`,
			a.Route, r.Entity, r.EventTime, r.Provider, r.DeliveryID)
		if err != nil {
			return fmt.Errorf("move watermark: %w", err)
		}
	}
	if err := setState(ctx, tx, a, StateSucceeded, job.Attempt, nil); err != nil {
		return err
	}
	if err := w.complete(ctx, tx, job); err != nil {
		return err
	}
	w.Metrics.Dispatch(a.Route, StateSucceeded, r.ReceivedAt)
	return nil
}

// finalStates are the states after which a dispatch never runs its target again.
var finalStates = map[string]bool{StateSucceeded: true, StateSuperseded: true, StateDiscarded: true, StateCancelled: true}

// complete marks the job completed in tx and commits.
func (w *DispatchWorker) complete(ctx context.Context, tx pgx.Tx, job *river.Job[DispatchArgs]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit dispatch: %w", err)
	}
	return nil
}

func setState(ctx context.Context, db receipts.DBTX, a DispatchArgs, state string, attempt int, lastError *string) error {
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
func (w *DispatchWorker) recordFailure(ctx context.Context, job *river.Job[DispatchArgs], state string, cause error) {
	msg := excerpt(cause.Error(), 500)
	if err := setState(context.WithoutCancel(ctx), w.Pool, job.Args, state, job.Attempt, &msg); err != nil {
		w.Logger.ErrorContext(ctx, "record dispatch failure", "error", err, "route", job.Args.Route, "delivery_id", job.Args.DeliveryID)
	}
	w.Logger.WarnContext(ctx, "dispatch failed", "error", msg, "state", state, "route", job.Args.Route,
		"provider", job.Args.Provider, "delivery_id", job.Args.DeliveryID, "attempt", job.Attempt)
}

// excerpt cuts s to at most n bytes on a rune boundary.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
