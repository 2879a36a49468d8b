package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/store"
)

// RecoveredScope is the receipt scope of a Stripe event stored from the API.
// A signed delivery of the same event later is another scope's receipt of an
// event already dispatched: 202 with no new dispatch, never a conflict.
const RecoveredScope = "recovered"

// storeBatch is how many recovered events one transaction stores; compared
// is how many listed events one query compares with the receipts; maxHeld is
// how many bytes of missing events a run holds before storing them.
const (
	storeBatch = 64
	compared   = 100
	maxHeld    = 16 << 20
)

// recoverStripe lists the events since the checkpoint and stores those with
// no receipt. Missing events are held and stored oldest first when the
// listing ends (or, past maxHeld bytes, as they come, newest first: an
// order-aware route then supersedes the older ones, as it would for any
// deliveries arriving out of order).
func (r *Recoverer) recoverStripe(ctx context.Context, opts Options) (Report, error) {
	rep := newReport("stripe", opts)
	start := time.Now()
	since, mayMove, err := r.window(ctx, "stripe", start, opts)
	if err != nil {
		return rep, err
	}
	var api stripeAPI = r.stripe
	run := &stripeRun{r: r, api: api, opts: opts, rep: &rep, young: start.Add(-r.minAge)}
	err = api.list(ctx, since, func(e event) error { return run.add(ctx, e) }, func(id, reason string) { run.skip(ctx, id, reason) })
	// What was found missing is stored even when the listing failed part way.
	if ctx.Err() == nil {
		if cerr := run.compare(ctx); cerr != nil {
			err = errors.Join(err, cerr)
		} else if serr := run.store(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	slices.Reverse(rep.Found) // oldest first, as stored
	if err != nil {
		return rep, err
	}
	if mayMove {
		if err := r.saveCheckpoint(ctx, "stripe", start.Add(-overlap)); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// stripeRun is one run's events on their way from the listing to the
// receipts: listed and not yet compared with the receipts (batch), then
// found missing and not yet stored (held).
type stripeRun struct {
	r     *Recoverer
	api   stripeAPI
	opts  Options
	rep   *Report
	young time.Time // an event created since is left to the next run

	batch     []candidate
	held      []candidate
	heldBytes int
}

// candidate is a listed event on its way to the receipts.
type candidate struct {
	event
	// d is the event read as a delivery of scope recovered, once it was
	// found storable.
	d providers.Delivery
}

// skip reports a listed event the gateway cannot store.
func (s *stripeRun) skip(ctx context.Context, id, reason string) {
	s.r.skip(ctx, s.rep, "stripe", id, reason)
}

// add takes one listed event, and compares the batch with the receipts once
// it is full. An event too young is left to the next run; one that is not
// storable as an event is skipped (no later run would do better); one past
// MaxBodyBytes is compared with the receipts too, and reported if missing.
func (s *stripeRun) add(ctx context.Context, ev event) error {
	if !ev.created.Before(s.young) {
		return nil // the next run sees it
	}
	e := candidate{event: ev}
	if !e.tooLarge() {
		d, err := providers.StripeEvent(e.raw)
		if err != nil {
			s.skip(ctx, e.id, err.Error())
			return nil
		}
		d.Scope, d.ContentType, d.Headers = RecoveredScope, "application/json", map[string]string{}
		e.d = d
	}
	if s.batch = append(s.batch, e); len(s.batch) >= compared {
		return s.compare(ctx)
	}
	return nil
}

// compare reports the batch's events with no receipt found, and holds them
// to be stored (unless the run is dry), storing what is held once past
// maxHeld bytes. One past MaxBodyBytes is skipped: no later run does better,
// as the gateway refuses such a body from Stripe too.
func (s *stripeRun) compare(ctx context.Context) error {
	missing, err := s.r.missingStripe(ctx, s.batch)
	s.batch = nil
	if err != nil {
		return err
	}
	for _, e := range missing {
		s.rep.Found = append(s.rep.Found, e.id)
		s.r.metrics.Recovery("stripe", "found", 1)
		if e.tooLarge() {
			s.skip(ctx, e.id, fmt.Sprintf("the %s event is %d bytes, more than GATEWAY_MAX_BODY_BYTES (%d): not stored", cmp.Or(e.typ, "untyped"), e.size, s.api.maxBodyBytes()))
			continue
		}
		if !s.opts.DryRun {
			s.held = append(s.held, e)
			s.heldBytes += len(e.raw)
		}
	}
	if s.heldBytes > maxHeld {
		return s.store(ctx)
	}
	return nil
}

// store stores the held events oldest first: they were listed newest first.
func (s *stripeRun) store(ctx context.Context) error {
	slices.Reverse(s.held)
	err := s.r.storeStripe(ctx, s.held, s.opts.Actor, s.rep)
	s.held, s.heldBytes = nil, 0
	return err
}

// missingStripe returns the events with no receipt of any scope.
func (r *Recoverer) missingStripe(ctx context.Context, events []candidate) ([]candidate, error) {
	if len(events) == 0 {
		return nil, nil
	}
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.id
	}
	stored, err := store.ReceivedIDs(ctx, r.pool, "stripe", "", ids)
	if err != nil {
		return nil, err
	}
	var missing []candidate
	for _, e := range events {
		if !slices.Contains(stored, e.id) {
			missing = append(missing, e)
		}
	}
	return missing, nil
}

// storeStripe stores events, in transactions of storeBatch, and reports and
// counts what it stored.
func (r *Recoverer) storeStripe(ctx context.Context, events []candidate, actor string, rep *Report) error {
	ds := make([]providers.Delivery, len(events))
	for i, e := range events {
		ds[i] = e.d
	}
	for chunk := range slices.Chunk(ds, storeBatch) {
		stored, err := r.storeStripeTx(ctx, chunk, actor)
		if err != nil {
			r.metrics.Recovery("stripe", "failed", len(chunk))
			return err
		}
		rep.Stored = append(rep.Stored, stored...)
		r.metrics.Recovery("stripe", "stored", len(stored))
	}
	return nil
}

// storeStripeTx stores recovered events as receipts with their dispatches,
// and an audit entry for each one stored, in one transaction. An event
// another run (or process) stored meanwhile is a duplicate or, when the
// API's copy changed between the two reads, a conflict: either way it is
// stored once and is not counted here.
func (r *Recoverer) storeStripeTx(ctx context.Context, ds []providers.Delivery, actor string) ([]string, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store events: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	outcomes, err := r.ingester.AcceptManyTx(ctx, tx, ds)
	if err != nil {
		return nil, fmt.Errorf("store events: %w", err)
	}
	var stored []string
	for i, o := range outcomes {
		if o.Err == nil && o.Result.Status == ingest.Accepted {
			stored = append(stored, ds[i].DeliveryID)
		}
	}
	if err := recordAudit(ctx, tx, actor, "stripe", "stored from Stripe's events API", stored...); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("store events: %w", err)
	}
	return stored, nil
}
