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
	"time"

	"github.com/jackc/pgx/v5"
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
}

// Handler is a builtin:<name> target. It runs inside the dispatch's
// transaction: its writes, the dispatch's success and the River job's
// completion commit together, or not at all. So a handler's database effect
// happens exactly once even when a process dies at any point and River runs
// the job again. A handler must not have effects outside tx that cannot be
// repeated; an error rolls its writes back and the dispatch is retried.
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

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Call runs h, turning a panic into a *PanicError.
func Call(ctx context.Context, tx pgx.Tx, h Handler, d Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h(ctx, tx, d)
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
