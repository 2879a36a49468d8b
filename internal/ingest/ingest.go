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
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/batch"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
)

// Errors returned by Accept besides receipts.ErrConflict.
var (
	// ErrUnavailable means the database could not be reached, the commit
	// failed or did not answer in time, or the commit queue was full or too
	// slow: the sender should retry. Usually nothing was stored, but a batch
	// that had taken the delivery may still commit after its caller gave up,
	// and the retry is then a duplicate. Never that another delivery was bad.
	ErrUnavailable = errors.New("database unavailable")
	// ErrRefused means the database refused this delivery, alone in its own
	// transaction (a value it cannot store): a fault of the request, which
	// the deliveries it was batched with do not share.
	ErrRefused = errors.New("the database refused the delivery")
)

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
	// Invalid, for a delivery accepted now, is why its payload failed its
	// schema: it was stored and dispatched to no route.
	Invalid *providers.SchemaError
}

// Outcome is one delivery's result in a batch: a Result, or an error
// (receipts.ErrConflict, ErrRefused or ErrUnavailable).
type Outcome struct {
	Result Result
	Err    error
}

// DefaultCommitters is how many batches commit at once unless set.
const DefaultCommitters = 2

// Ingester accepts verified deliveries.
type Ingester struct {
	pool     *pgxpool.Pool
	receipts *receipts.Store
	enqueuer *dispatch.Enqueuer
	acks     Acks
	batcher  *batch.Batcher[providers.Delivery, Outcome]
}

// Config are an Ingester's settings; the zero Config is the defaults.
type Config struct {
	// MaxBatch bounds how many deliveries one transaction takes. Defaults to 64.
	MaxBatch int
	// MaxBatchBytes bounds the bodies one transaction takes (a larger body
	// commits alone), so that a slow commit of large bodies delays few
	// others. Defaults to 8 MiB.
	MaxBatchBytes int64
	// Committers bounds how many batches commit at once. Defaults to 2: on a
	// two-core machine at concurrency 64, 2 gave the best throughput and p99
	// (1, 4 and 8 were measured; see CHANGELOG.md's measurement log).
	Committers int
	// MaxQueue bounds the deliveries waiting for a committer; past it a
	// delivery is refused at once (ErrUnavailable). Defaults to 1,024.
	MaxQueue int
	// MaxWait bounds how long a delivery waits for its batch to start, and
	// CommitTimeout how long that batch may take: when the database is slow,
	// a sender gets its 503 in bounded time instead of memory growing.
	// GitHub waits 10 s for an answer. Default to 5 s and 10 s.
	MaxWait, CommitTimeout time.Duration
	// Acks is told of each delivery that waits for its acknowledgement and
	// of its answer: forwarding yields to them (package yield's Gate).
	// Defaults to telling no one.
	Acks Acks
}

// Acks is told when a delivery begins to wait for its acknowledgement
// (Arrived) and when Accept returns its answer (Acked): *yield.Gate.
type Acks interface {
	Arrived()
	Acked()
}

// noAcks tells no one.
type noAcks struct{}

func (noAcks) Arrived() {}
func (noAcks) Acked()   {}

// NewIngester returns an Ingester that stores receipts through rs and creates
// their dispatches through enqueuer, in transactions on pool.
func NewIngester(pool *pgxpool.Pool, rs *receipts.Store, enqueuer *dispatch.Enqueuer, cfg Config) *Ingester {
	if cfg.Committers <= 0 {
		cfg.Committers = DefaultCommitters
	}
	if cfg.Acks == nil {
		cfg.Acks = noAcks{}
	}
	in := &Ingester{pool: pool, receipts: rs, enqueuer: enqueuer, acks: cfg.Acks}
	in.batcher = &batch.Batcher[providers.Delivery, Outcome]{
		Do: func(ctx context.Context, ds []providers.Delivery) ([]Outcome, error) {
			return in.CommitMany(ctx, ds), nil
		},
		MaxBatch: cfg.MaxBatch, Concurrency: cfg.Committers,
		Weight:    func(d providers.Delivery) int64 { return int64(len(d.Body)) },
		MaxWeight: cmp.Or(cfg.MaxBatchBytes, 8<<20),
		MaxQueue:  cmp.Or(cfg.MaxQueue, 1024), MaxWait: cmp.Or(cfg.MaxWait, 5*time.Second),
		Timeout: cmp.Or(cfg.CommitTimeout, 10*time.Second),
	}
	return in
}

// Accept records a verified delivery, in a batch with the deliveries that
// arrive while other batches commit. Errors are receipts.ErrConflict (the key
// is taken by another body; nothing changed), wrap ErrRefused (the database
// refused this delivery alone) or wrap ErrUnavailable.
func (in *Ingester) Accept(ctx context.Context, d providers.Delivery) (Result, error) {
	in.acks.Arrived()
	defer in.acks.Acked()
	// Schemas and route filters read the payload: they run here, before
	// the delivery joins a transaction, so that a costly one never holds its
	// batch-mates' commit.
	d = in.enqueuer.Check(d)
	d.Routes = in.enqueuer.Prematch(d)
	// So are its search keys, read from the payload likewise.
	d.Keys = in.receipts.KeysOf(d)
	o, err := in.batcher.Submit(ctx, d)
	if err != nil {
		// The queue was full or slow, or the sender is gone: a delivery whose
		// batch had started may still be committed, and its retry is then a
		// duplicate.
		return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return o.Result, o.Err
}

// Waiting returns how many deliveries wait for a transaction to take them.
func (in *Ingester) Waiting() int {
	return in.batcher.Waiting()
}

// conflictRetries is how often a delivery alone is committed again after a
// deadlock or serialization failure before it is answered unavailable.
const conflictRetries = 3

// CommitMany records a batch and gives every delivery its own outcome: one
// member's fault never becomes its batch-mates'. When the batch's
// transaction fails because the database refused something in it, or on a
// deadlock, the batch is split in halves, each committed on its own, until
// the delivery at fault is alone: that one is ErrRefused, the rest are
// committed. Only when the database itself is unavailable does every member
// get ErrUnavailable.
func (in *Ingester) CommitMany(ctx context.Context, ds []providers.Delivery) []Outcome {
	return in.commitSplitting(ctx, ds, conflictRetries)
}

func (in *Ingester) commitSplitting(ctx context.Context, ds []providers.Delivery, retries int) []Outcome {
	outs, err := in.AcceptMany(ctx, ds)
	if err == nil {
		return outs
	}
	blame := classify(err)
	switch {
	case blame == unavailable || ctx.Err() != nil:
		return failAll(len(ds), fmt.Errorf("%w: %w", ErrUnavailable, err))
	case len(ds) > 1:
		half := len(ds) / 2
		return append(in.commitSplitting(ctx, ds[:half], retries), in.commitSplitting(ctx, ds[half:], retries)...)
	case blame == refused:
		// The SQLSTATE tells an operator what; the database's own message
		// (which may quote the value) is not for the sender.
		return []Outcome{{Err: fmt.Errorf("%w: a value it holds cannot be stored (SQLSTATE %s)", ErrRefused, sqlState(err))}}
	case retries > 0: // a deadlock or serialization failure: the same work may pass now
		return in.commitSplitting(ctx, ds, retries-1)
	}
	return failAll(len(ds), fmt.Errorf("%w: %w", ErrUnavailable, err))
}

func failAll(n int, err error) []Outcome {
	outs := make([]Outcome, n)
	for i := range outs {
		outs[i].Err = err
	}
	return outs
}

// fault is what a failed transaction says about its batch.
type fault int

const (
	// unavailable: the database could not do the work at all (a lost
	// connection, a timeout, a shutdown, a full disk); every member fails.
	unavailable fault = iota
	// refused: the database refused a value or row of the batch (a data
	// exception, an integrity or size limit); some member is at fault.
	refused
	// conflicted: a deadlock or serialization failure; the work may pass again.
	conflicted
)

// sqlState returns the SQLSTATE of a database error, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// classify reads a failed transaction's error by its SQLSTATE class.
func classify(err error) fault {
	code := sqlState(err)
	if len(code) < 2 {
		return unavailable
	}
	switch code[:2] {
	case "22", "23", "54": // data exception, integrity constraint, program limit
		return refused
	case "40": // transaction rollback: deadlock, serialization failure
		return conflicted
	}
	return unavailable
}

// AcceptMany is the delivery decision for a batch, in one transaction: insert
// the receipts (the primary key decides new, duplicate or conflict for each),
// create the dispatches and River jobs of the new ones, commit. A duplicate or
// a conflict is that delivery's outcome and never fails the others; an error
// means nothing of the batch was stored. Rows are inserted in key order
// (receipts, then dispatches), so that concurrent batches holding the same
// keys wait for one another in one order and never deadlock.
func (in *Ingester) AcceptMany(ctx context.Context, ds []providers.Delivery) ([]Outcome, error) {
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	// After any error the transaction is rolled back: River does not use
	// savepoints, and nothing of a failed decision may remain.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	outcomes, err := in.AcceptManyTx(ctx, tx, ds)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return outcomes, nil
}

// AcceptManyTx is AcceptMany inside the caller's transaction, for a decision
// that records more than deliveries (recovery writes its audit entries in the
// same transaction). After an error the caller must roll tx back.
func (in *Ingester) AcceptManyTx(ctx context.Context, tx pgx.Tx, ds []providers.Delivery) ([]Outcome, error) {
	kinds, err := in.receipts.InsertManyTx(ctx, tx, ds)
	if err != nil {
		return nil, err
	}
	outcomes := make([]Outcome, len(ds))
	var events []providers.Delivery
	var newIdx []int
	for i, k := range kinds {
		switch k {
		case receipts.New:
			ev := in.enqueuer.Check(ds[i])
			events = append(events, ev)
			newIdx = append(newIdx, i)
			outcomes[i].Result.Status, outcomes[i].Result.Invalid = Accepted, ev.Invalid
		case receipts.Duplicate:
			outcomes[i].Result.Status = Duplicate
		case receipts.Conflict:
			outcomes[i].Err = receipts.ErrConflict
		}
	}
	if len(events) > 0 {
		counts, err := in.enqueuer.EnqueueManyTx(ctx, tx, events)
		if err != nil {
			return nil, err
		}
		for j, i := range newIdx {
			outcomes[i].Result.Routes = counts[j]
		}
	}
	return outcomes, nil
}
