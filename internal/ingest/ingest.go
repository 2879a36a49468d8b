// Package ingest makes the delivery decision: one transaction that inserts a
// verified delivery's receipt and, when it is new, the dispatches and River
// jobs it implies, then commits. A caller may answer the sender only after
// Accept returns without error: by then everything the answer promises is
// durable.
package ingest

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/jobs"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
)

// ErrUnavailable means the database could not be reached or the commit
// failed: nothing was stored, and the sender should retry.
var ErrUnavailable = errors.New("database unavailable")

// Status says what Accept decided.
type Status string

// The statuses of a delivery decision, as sent in the response body.
const (
	// Accepted means a new receipt and its jobs were committed.
	Accepted Status = "accepted"
	// Duplicate means the same receipt key and body were already stored;
	// nothing new was enqueued.
	Duplicate Status = "duplicate"
)

// Result is the outcome of Accept.
type Result struct {
	Status Status
	// Routes is how many dispatches the receipt created: 0 for a duplicate,
	// and 0 for another hook's copy of an event already dispatched.
	Routes int
}

// Ingester accepts verified deliveries.
type Ingester struct {
	// Pool is the database.
	Pool *pgxpool.Pool
	// Receipts stores receipts.
	Receipts *receipts.Store
	// Enqueuer creates the dispatches.
	Enqueuer *jobs.Enqueuer
}

// Accept records a verified delivery. Errors are receipts.ErrConflict (the key
// is taken by another body; nothing changed) or wrap ErrUnavailable.
func (in *Ingester) Accept(ctx context.Context, d providers.Delivery) (Result, error) {
	tx, err := in.Pool.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("%w: begin: %w", ErrUnavailable, err)
	}
	// After any error the transaction is rolled back: River does not use
	// savepoints, and nothing of a failed decision may remain.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	outcome, err := in.Receipts.InsertTx(ctx, tx, d)
	if errors.Is(err, receipts.ErrConflict) {
		return Result{}, err
	}
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if outcome == receipts.Duplicate {
		return Result{Status: Duplicate}, nil
	}
	routes, err := in.Enqueuer.EnqueueTx(ctx, tx, d.Provider, d.DeliveryID, d.Event)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("%w: commit: %w", ErrUnavailable, err)
	}
	return Result{Status: Accepted, Routes: routes}, nil
}
