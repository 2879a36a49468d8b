package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

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
	routes := e.Routes.Matching(provider, event)
	if len(routes) == 0 {
		return 0, nil
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation)
		SELECT $1, $2, route, 1 FROM unnest($3::text[]) AS route
		ON CONFLICT DO NOTHING
		RETURNING route`, provider, deliveryID, routes)
	if err != nil {
		return 0, fmt.Errorf("insert dispatches: %w", err)
	}
	created, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("insert dispatches: %w", err)
	}
	if len(created) == 0 {
		return 0, nil
	}
	params := make([]river.InsertManyParams, len(created))
	for i, route := range created {
		params[i] = river.InsertManyParams{
			Args:       DispatchArgs{Provider: provider, DeliveryID: deliveryID, Route: route, Generation: 1},
			InsertOpts: &river.InsertOpts{MaxAttempts: e.MaxAttempts},
		}
	}
	if _, err := e.Client.InsertManyTx(ctx, tx, params); err != nil {
		return 0, fmt.Errorf("insert dispatch jobs: %w", err)
	}
	return len(created), nil
}

// DispatchWorker works dispatch jobs: it runs the route's target and records
// the outcome on the dispatch row.
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]

	// Pool is the database the dispatch rows and receipts live in.
	Pool *pgxpool.Pool
	// Routes is the fan-out table.
	Routes Routes
	// Handlers are the builtin targets.
	Handlers Handlers
	// Receipts reads the event's stored body.
	Receipts *receipts.Store
	// Logger logs failures; never payloads.
	Logger *slog.Logger
}

// Work implements river.Worker.
func (w *DispatchWorker) Work(ctx context.Context, job *river.Job[DispatchArgs]) error {
	route, ok := w.Routes.ByName(job.Args.Route)
	if !ok {
		err := fmt.Errorf("route %q is no longer configured", job.Args.Route)
		w.recordFailure(ctx, job, StateDiscarded, err)
		return river.JobCancel(err)
	}
	name, ok := route.Builtin()
	if !ok {
		err := fmt.Errorf("route %q: forwarding to %s is not available in this build", route.Name, route.Target)
		w.recordFailure(ctx, job, StateDiscarded, err)
		return river.JobCancel(err)
	}
	handler := w.Handlers[name]
	if handler == nil {
		err := fmt.Errorf("route %q: no builtin handler %q", route.Name, name)
		w.recordFailure(ctx, job, StateDiscarded, err)
		return river.JobCancel(err)
	}
	err := w.runBuiltin(ctx, job, handler)
	if errors.Is(err, errGone) {
		return river.JobCancel(err)
	}
	if err != nil {
		state := StateRetrying
		if job.Attempt >= job.MaxAttempts {
			state = StateDiscarded
		}
		w.recordFailure(ctx, job, state, err)
		return err
	}
	return nil
}

// errGone means the dispatch's row or receipt no longer exists (retention).
var errGone = errors.New("dispatch or receipt no longer stored")

// runBuiltin runs a handler in one transaction with the dispatch's success and
// the job's completion. The dispatch row is locked and checked first: a
// dispatch that already succeeded (River may run a job again after a crash) is
// only completed, so the handler's effect happens once.
func (w *DispatchWorker) runBuiltin(ctx context.Context, job *river.Job[DispatchArgs], handler Handler) error {
	a := job.Args
	return pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `
			SELECT state FROM hookgate_dispatches
			WHERE provider = $1 AND delivery_id = $2 AND route = $3 AND generation = $4
			FOR UPDATE`, a.Provider, a.DeliveryID, a.Route, a.Generation).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return errGone
		}
		if err != nil {
			return fmt.Errorf("lock dispatch: %w", err)
		}
		if state != StateSucceeded {
			r, err := w.Receipts.First(ctx, tx, a.Provider, a.DeliveryID)
			if errors.Is(err, receipts.ErrNotFound) {
				return errGone
			}
			if err != nil {
				return err
			}
			d := Delivery{
				Provider: r.Provider, DeliveryID: r.DeliveryID, Event: r.Event, Entity: r.Entity, EventTime: r.EventTime,
				ContentType: r.ContentType, Body: r.Body, Headers: r.Headers,
				Route: a.Route, Generation: a.Generation, Attempt: job.Attempt,
			}
			if err := handler(ctx, tx, d); err != nil {
				return fmt.Errorf("handler: %w", err)
			}
			if err := setState(ctx, tx, a, StateSucceeded, job.Attempt, nil); err != nil {
				return err
			}
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete job: %w", err)
		}
		return nil
	})
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
