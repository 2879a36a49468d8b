// Package ingest makes the delivery decision: one transaction that inserts
// verified deliveries' receipts and, for the new ones, the dispatches and River
// jobs they imply, then commits. A caller may answer a sender only after
// Accept returns without error: by then everything the answer promises is
// durable.
//
// Concurrent deliveries share commits. Each commit costs a disk flush, so one
// commit per request caps the gateway at the disk's flush rate; instead,
// requests that arrive while a commit is in flight join the next batch, and
// each is answered, with its own outcome, once its batch has committed. A
// request that finds a committer free is committed at once, alone: coalescing
// adds no wait when there is nothing to coalesce.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/batch"
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

// Outcome is one delivery's result in a batch: a Result, or receipts.ErrConflict.
type Outcome struct {
	Result Result
	Err    error
}

// DefaultCommitters is how many batches commit at once unless set.
const DefaultCommitters = 2

// Ingester accepts verified deliveries.
type Ingester struct {
	// Pool is the database.
	Pool *pgxpool.Pool
	// Receipts stores receipts.
	Receipts *receipts.Store
	// Enqueuer creates the dispatches.
	Enqueuer *jobs.Enqueuer
	// MaxBatch bounds how many deliveries one transaction takes. Defaults to 64.
	MaxBatch int
	// Committers bounds how many batches commit at once. Defaults to 2: on a
	// two-core machine at concurrency 64, 2 gave the best throughput and p99
	// (1, 4 and 8 were measured; see README, Performance).
	Committers int

	once    sync.Once
	batcher *batch.Batcher[providers.Delivery, Outcome]
}

// Accept records a verified delivery, in a batch with the deliveries that
// arrive while other batches commit. Errors are receipts.ErrConflict (the key
// is taken by another body; nothing changed) or wrap ErrUnavailable.
func (in *Ingester) Accept(ctx context.Context, d providers.Delivery) (Result, error) {
	in.once.Do(func() {
		committers := in.Committers
		if committers <= 0 {
			committers = DefaultCommitters
		}
		in.batcher = &batch.Batcher[providers.Delivery, Outcome]{Do: in.AcceptMany, MaxBatch: in.MaxBatch, Concurrency: committers}
	})
	o, err := in.batcher.Submit(ctx, d)
	if err != nil {
		// A failed batch wraps ErrUnavailable already; a sender that is gone
		// may still have its delivery committed, and its retry is a duplicate.
		if errors.Is(err, ErrUnavailable) {
			return Result{}, err
		}
		return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return o.Result, o.Err
}

// AcceptMany is the delivery decision for a batch, in one transaction: insert
// the receipts (the primary key decides new, duplicate or conflict for each),
// create the dispatches and River jobs of the new ones, commit. A duplicate or
// a conflict is that delivery's outcome and never fails the others; an error
// (wrapping ErrUnavailable) means nothing of the batch was stored.
func (in *Ingester) AcceptMany(ctx context.Context, ds []providers.Delivery) ([]Outcome, error) {
	tx, err := in.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: begin: %w", ErrUnavailable, err)
	}
	// After any error the transaction is rolled back: River does not use
	// savepoints, and nothing of a failed decision may remain.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	kinds, err := in.Receipts.InsertManyTx(ctx, tx, ds)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	outcomes := make([]Outcome, len(ds))
	var events []jobs.Event
	var newIdx []int
	for i, k := range kinds {
		switch k {
		case receipts.New:
			events = append(events, jobs.Event{Provider: ds[i].Provider, DeliveryID: ds[i].DeliveryID, Event: ds[i].Event})
			newIdx = append(newIdx, i)
			outcomes[i].Result.Status = Accepted
		case receipts.Duplicate:
			outcomes[i].Result.Status = Duplicate
		case receipts.Conflict:
			outcomes[i].Err = receipts.ErrConflict
		}
	}
	if len(events) > 0 {
		counts, err := in.Enqueuer.EnqueueManyTx(ctx, tx, events)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		for j, i := range newIdx {
			outcomes[i].Result.Routes = counts[j]
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("%w: commit: %w", ErrUnavailable, err)
	}
	return outcomes, nil
}
