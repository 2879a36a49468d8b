// Package handlers holds what a builtin:<name> target is written against (a
// Delivery in, a Handler's error out, Discard for an error no retry mends)
// and the handlers hookgate ships: builtin:log and builtin:stripe-subscriptions.
// It needs neither River nor the dispatch rows: package dispatch runs a
// handler inside the dispatch's transaction and decides what its error means.
package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/errtext"
)

// Delivery is what a handler is given: one stored event, as a route sees it.
type Delivery struct {
	// Provider, DeliveryID, Event, Entity and EventTime are the receipt's.
	Provider   string
	DeliveryID string
	Event      string
	Entity     string
	EventTime  time.Time
	// ContentType and Body are the first receipt's, byte for byte.
	ContentType string
	Body        []byte
	// Headers are the kept provider headers of the first receipt.
	Headers map[string]string
	// Route, Generation and Attempt say which dispatch this is.
	Route      string
	Generation int
	Attempt    int
	// Late is whether a newer event of the entity was handled first (a
	// route with order all).
	Late bool
}

// Handler is a builtin:<name> target. It runs inside the dispatch's
// transaction: its writes, the dispatch's success and the River job's
// completion commit together, or not at all. So a handler's database effect
// happens exactly once even when a process dies at any point and River runs
// the job again. A handler must not have effects outside tx that cannot be
// repeated; an error rolls its writes back and the dispatch is retried. The
// transaction is not the handler's to end: see Call.
type Handler func(ctx context.Context, tx pgx.Tx, d Delivery) error

// DiscardError is a handler's error that retrying cannot mend: its dispatch
// is discarded at once, without spending its other attempts (visible to
// operators, replayable).
type DiscardError struct{ Err error }

// Discard marks err as permanent (see DiscardError); a nil err reads
// "discarded".
func Discard(err error) error {
	if err == nil {
		err = errors.New("discarded")
	}
	return &DiscardError{Err: err}
}

func (e *DiscardError) Error() string { return e.Err.Error() }

// Unwrap returns the error that was discarded.
func (e *DiscardError) Unwrap() error { return e.Err }

// PanicError is a handler's panic, turned into an error: the dispatch is
// retried like any other failure, and the process goes on.
type PanicError struct {
	// Value is what the handler panicked with; Stack its goroutine's stack.
	Value any
	Stack []byte
}

// Error is "panic: " and the panic's value, cleaned as every error text is
// (package errtext).
func (e *PanicError) Error() string { return "panic: " + errtext.Clean(fmt.Sprint(e.Value)) }

// The ways a handler can fail its attempt besides its error and a panic.
var (
	// ErrTxNotOwned means the handler called Commit or Rollback on the
	// dispatch's transaction: the gateway owns it, and commits the
	// handler's writes with the dispatch's success, or not at all. The call
	// is refused and the attempt fails (nothing of it commits); the dispatch
	// is retried like any error. A savepoint the handler began itself
	// (tx.Begin) is its own to commit or roll back.
	ErrTxNotOwned = errors.New("the handler called Commit or Rollback on the dispatch's transaction, which the gateway owns")
	// ErrTxEnded means the dispatch's transaction was no longer open when
	// the handler returned: it sent COMMIT or ROLLBACK as SQL. What it
	// committed is beyond the gateway's reach; the attempt fails.
	ErrTxEnded = errors.New("the dispatch's transaction was ended by the handler's own SQL")
	// ErrExited means the handler ended its goroutine (runtime.Goexit, as
	// t.FailNow does) instead of returning: the attempt fails and is
	// retried, and the worker goes on.
	ErrExited = errors.New("the handler ended its goroutine (runtime.Goexit, as t.FailNow does) instead of returning")
)

// Call runs h with tx as one attempt of a dispatch. h runs in a goroutine of
// its own, so that one ending itself (runtime.Goexit) fails the attempt
// instead of taking the worker's goroutine with it; Call waits for it. h
// gets tx behind a wrapper whose Commit and Rollback refuse (ErrTxNotOwned).
// A panic is a *PanicError. The error returned, whatever its source, has its
// text cleaned and bounded (package errtext); errors.Is and errors.As see
// through it.
func Call(ctx context.Context, tx pgx.Tx, h Handler, d Delivery) error {
	owned := &ownedTx{Tx: tx}
	done := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if v := recover(); v != nil {
				done <- &PanicError{Value: v, Stack: debug.Stack()}
			} else if !returned {
				done <- ErrExited
			}
		}()
		err := h(ctx, owned, d)
		returned = true
		done <- err
	}()
	err := <-done
	if method := owned.misused.Load(); method != nil && !errors.Is(err, ErrTxNotOwned) {
		err = errors.Join(fmt.Errorf("%w (it called %s)", ErrTxNotOwned, *method), err)
	}
	if c := tx.Conn(); c != nil && c.PgConn().TxStatus() == 'I' {
		err = errors.Join(ErrTxEnded, err)
	}
	return errtext.Wrap(err)
}

// ownedTx is the dispatch's transaction as a handler gets it: everything but
// Commit and Rollback, which are the gateway's.
type ownedTx struct {
	pgx.Tx
	misused atomic.Pointer[string] // the first refused call's name
}

// Commit refuses: the gateway commits the handler's writes with the dispatch.
func (t *ownedTx) Commit(context.Context) error { return t.refuse("Commit") }

// Rollback refuses: the attempt's failure rolls the writes back.
func (t *ownedTx) Rollback(context.Context) error { return t.refuse("Rollback") }

func (t *ownedTx) refuse(method string) error {
	t.misused.CompareAndSwap(nil, &method)
	return fmt.Errorf("%w (it called %s)", ErrTxNotOwned, method)
}

// Registry maps builtin names to handlers.
type Registry map[string]Handler

// Names returns the registered names, sorted.
func (h Registry) Names() []string {
	return slices.Sorted(maps.Keys(h))
}

// Default returns the builtin handlers hookgate ships.
func Default(logger *slog.Logger) Registry {
	return Registry{
		"log":                  Log(logger),
		"stripe-subscriptions": StripeSubscriptions(),
	}
}

// Log returns the builtin:log handler: it logs the delivery (never its
// body) and succeeds.
func Log(logger *slog.Logger) Handler {
	return func(ctx context.Context, _ pgx.Tx, d Delivery) error {
		logger.InfoContext(ctx, "delivery dispatched",
			"provider", d.Provider, "delivery_id", d.DeliveryID, "event", d.Event,
			"entity", d.Entity, "route", d.Route, "generation", d.Generation, "attempt", d.Attempt,
			"body_bytes", len(d.Body))
		return nil
	}
}
