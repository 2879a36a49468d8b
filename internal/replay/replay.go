// Package replay sends stored events again: a new generation of the dispatch
// of each selected route, for one delivery (OneTx) or every delivery a filter
// matches (BulkTx, worked in batches by BatchWorker), each logged in
// hookgate_replays. The dispatches themselves are package dispatch's.
package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/store"
)

// ErrUnknownRoute means a replay named a route that is not configured or does
// not match the delivery's event.
var ErrUnknownRoute = errors.New("unknown route")

// Request says what to re-dispatch.
type Request struct {
	// Routes limits the replay to these routes; empty: every matching route.
	Routes []string
	// Force re-dispatches routes whose latest dispatch succeeded or was
	// superseded, and routes never dispatched; without it only routes whose
	// latest dispatch ended discarded or cancelled are re-dispatched. A route
	// whose latest dispatch is still in progress is never re-dispatched.
	Force bool
}

// Skip is a matching route a replay did not re-dispatch, and why.
type Skip struct {
	Route  string `json:"route"`
	Reason string `json:"reason"`
}

// Result is what a replay of one delivery did: the dispatches it created,
// and each matching route it left alone with the reason.
type Result struct {
	Created []dispatch.Created `json:"dispatches"`
	Skipped []Skip             `json:"skipped"`
}

// RedispatchTx creates, with e, in tx, a new generation of the dispatch of each route
// the request selects, with its River job. Routes are those that match the
// event under the current route table; a route whose pattern matches but
// whose filter is now false is skipped, as is one whose latest dispatch is
// still in progress or (without Force) did not end discarded or cancelled;
// every route is skipped when the payload fails its schema as the schemas
// are now. A delivery that failed its schema at ingest is no longer invalid
// once a replay creates a dispatch of it.
func RedispatchTx(ctx context.Context, tx pgx.Tx, e *dispatch.Enqueuer, provider, deliveryID string, req Request) (Result, error) {
	res := Result{Created: []dispatch.Created{}, Skipped: []Skip{}}
	// The CLI passes ids as typed: one the database cannot hold names nothing.
	if err := deliveries.CheckKey(provider, deliveryID); err != nil {
		return res, err
	}
	ev := providers.Delivery{Provider: provider, DeliveryID: deliveryID}
	first, err := store.FirstReceipt(ctx, tx, provider, deliveryID)
	if errors.Is(err, store.ErrNoReceipt) {
		return res, deliveries.ErrNotFound
	}
	if err != nil {
		return res, fmt.Errorf("read delivery: %w", err)
	}
	ev.Event, ev.Headers, ev.ContentType, ev.Body = first.Event, first.Headers, first.ContentType, first.Body
	routes, filteredOut, err := selectRoutes(e, ev, req.Routes)
	if err != nil {
		return res, err
	}
	for _, r := range filteredOut {
		res.Skipped = append(res.Skipped, Skip{Route: r, Reason: "its filter is now false for this event, or fails on it"})
	}
	if len(routes) == 0 {
		return res, nil
	}
	// The schemas as they are now decide, as the filters do: a payload that
	// fails one is dispatched to no route; one that passes again leaves the
	// invalid state when a forced replay dispatches it.
	if ev = e.Check(ev); ev.Invalid != nil {
		for _, r := range routes {
			res.Skipped = append(res.Skipped, Skip{Route: r, Reason: fmt.Sprintf("the payload fails its schema %s at %q (%s): %s",
				ev.Invalid.Schema, ev.Invalid.Path, ev.Invalid.Rule, ev.Invalid.Message)})
		}
		return res, nil
	}

	last, err := store.LatestOf(ctx, tx, provider, deliveryID, routes)
	if err != nil {
		return res, err
	}
	var want []dispatch.Created
	for _, r := range routes {
		l, ok := last[r]
		switch {
		case ok && dispatch.IsInProgress(l.State): // a replay leaves it alone
			res.Skipped = append(res.Skipped, Skip{Route: r, Reason: fmt.Sprintf("its latest dispatch is still %s", l.State)})
		case ok && (l.State == dispatch.Discarded || l.State == dispatch.Cancelled), req.Force:
			want = append(want, dispatch.Created{Provider: provider, DeliveryID: deliveryID, Route: r, Generation: l.Generation + 1})
		case ok:
			res.Skipped = append(res.Skipped, Skip{Route: r, Reason: fmt.Sprintf("its latest dispatch %s; force replays it", l.State)})
		default:
			res.Skipped = append(res.Skipped, Skip{Route: r, Reason: "it was never dispatched (a route added since, or the payload failed its schema then); force dispatches it"})
		}
	}
	if len(want) == 0 {
		return res, nil
	}
	// A concurrent replay that created the same generation first wins the
	// primary key; this one then creates nothing for that route.
	created, err := e.CreateTx(ctx, tx, want)
	if err != nil {
		return res, err
	}
	res.Created = created
	if len(created) > 0 {
		if err := store.DeleteSchemaErrorTx(ctx, tx, provider, deliveryID); err != nil {
			return res, err
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(created, func(c dispatch.Created) bool { return c.Route == w.Route }) {
			res.Skipped = append(res.Skipped, Skip{Route: w.Route, Reason: "another replay created this generation first"})
		}
	}
	return res, nil
}

// selectRoutes returns the routes a replay of ev considers: those named (each
// must match ev under the current table, its filter included), or else every
// route that matches; and, when none were named, the routes whose pattern
// matches ev but whose filter is now false.
func selectRoutes(e *dispatch.Enqueuer, ev providers.Delivery, named []string) (routes, filteredOut []string, err error) {
	// The filters as they are now decide, as the route table does.
	matching := e.Matching(ev)
	if len(named) == 0 {
		for _, r := range e.Routes() {
			if r.MatchesEvent(ev.Provider, ev.Event) && !slices.Contains(matching, r.Name) {
				filteredOut = append(filteredOut, r.Name)
			}
		}
		return matching, filteredOut, nil
	}
	for _, r := range named {
		if !slices.Contains(matching, r) {
			if route, ok := e.Routes().ByName(r); ok && route.Filter != nil && route.MatchesEvent(ev.Provider, ev.Event) {
				return nil, nil, fmt.Errorf("%w: route %q's filter is false for %s:%s, or fails on it", ErrUnknownRoute, r, ev.Provider, ev.Event)
			}
			return nil, nil, fmt.Errorf("%w: %q is not a configured route matching %s:%s", ErrUnknownRoute, r, ev.Provider, ev.Event)
		}
		if !slices.Contains(routes, r) {
			routes = append(routes, r)
		}
	}
	return routes, nil, nil
}

// Entry is one entry of the replay log.
type Entry = store.Replay

func newReplayID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "rpl_" + hex.EncodeToString(b)
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// OneTx re-dispatches one delivery with e and logs the replay, in tx. It
// returns the replay's id and what it did.
func OneTx(ctx context.Context, tx pgx.Tx, e *dispatch.Enqueuer, actor, provider, deliveryID string, req Request, reason string) (string, Result, error) {
	res, err := RedispatchTx(ctx, tx, e, provider, deliveryID, req)
	if err != nil {
		return "", res, err
	}
	id := newReplayID()
	routes := req.Routes
	if routes == nil {
		routes = []string{}
	}
	filter, _ := json.Marshal(map[string]any{"provider": provider, "delivery_id": deliveryID, "routes": routes})
	err = store.LogReplayTx(ctx, tx, store.NewReplay{ReplayID: id, Actor: actor, Filter: filter, Force: req.Force,
		Reason: nullable(reason), Deliveries: 1, Dispatches: len(res.Created), State: "done"})
	if err != nil {
		return "", res, err
	}
	return id, res, nil
}

// BatchArgs are a bulk replay's job: it re-dispatches the next batch of
// the replay's deliveries and enqueues the next job, until none are left.
type BatchArgs struct {
	ReplayID string `json:"replay_id"`
}

// Kind implements river.JobArgs.
func (BatchArgs) Kind() string { return "hookgate_replay_batch" }

// replayBatchSize is how many deliveries one bulk replay transaction handles.
const replayBatchSize = 200

// BulkTx logs a bulk replay of every delivery matching f and enqueues its
// first batch, in tx; the work runs in the background. It returns the replay's
// id and how many deliveries matched: with a search (f.Q), how many the
// expression is to be evaluated on, those f's other fields select, since its
// batches evaluate it as they go. The set is fixed at the time of the
// request, by the database's clock (the one receipts are stamped with):
// deliveries received later are not replayed.
func BulkTx(ctx context.Context, tx pgx.Tx, e *dispatch.Enqueuer, actor string, f deliveries.Filter, force bool, reason string) (string, int, error) {
	now, err := store.DatabaseNow(ctx, tx)
	if err != nil {
		return "", 0, err
	}
	if f.Until == nil || f.Until.After(now) {
		f.Until = &now
	}
	matched, err := deliveries.Count(ctx, tx, f)
	if err != nil {
		return "", 0, err
	}
	id := newReplayID()
	filter, _ := json.Marshal(f)
	state := "running"
	if matched == 0 {
		state = "done"
	}
	err = store.LogReplayTx(ctx, tx, store.NewReplay{ReplayID: id, Actor: actor, Filter: filter, Force: force,
		Reason: nullable(reason), Deliveries: matched, State: state})
	if err != nil {
		return "", 0, err
	}
	if matched > 0 {
		if _, err := e.Client().InsertTx(ctx, tx, BatchArgs{ReplayID: id}, nil); err != nil {
			return "", 0, fmt.Errorf("enqueue replay: %w", err)
		}
	}
	return id, matched, nil
}

// BatchWorker works bulk replays, one batch per job and transaction, so a
// replay of any size holds neither a request nor a long transaction.
type BatchWorker struct {
	river.WorkerDefaults[BatchArgs]
	// Pool is the database.
	Pool *pgxpool.Pool
	// Enqueuer creates the dispatches.
	Enqueuer *dispatch.Enqueuer
}

// Work implements river.Worker.
func (w *BatchWorker) Work(ctx context.Context, job *river.Job[BatchArgs]) error {
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	at, err := store.LockReplayTx(ctx, tx, job.Args.ReplayID)
	if errors.Is(err, store.ErrNoReplay) {
		return river.JobCancel(fmt.Errorf("replay %s not found", job.Args.ReplayID))
	}
	if err != nil {
		return err
	}
	filterJSON, cursorJSON, force, state := at.Filter, at.Cursor, at.Force, at.State
	if state == "done" {
		return w.complete(ctx, tx, job)
	}
	var f deliveries.Filter
	if err := json.Unmarshal(filterJSON, &f); err != nil {
		return river.JobCancel(fmt.Errorf("replay filter: %w", err))
	}
	var after *deliveries.Cursor
	if len(cursorJSON) > 0 && string(cursorJSON) != "null" {
		after = &deliveries.Cursor{}
		if err := json.Unmarshal(cursorJSON, after); err != nil {
			return river.JobCancel(fmt.Errorf("replay cursor: %w", err))
		}
	}
	items, next, handled, err := batchOf(ctx, tx, f, after)
	if err != nil {
		return err
	}
	dispatched := 0
	for _, it := range items {
		res, err := RedispatchTx(ctx, tx, w.Enqueuer, it.Provider, it.DeliveryID, Request{Force: force})
		if errors.Is(err, deliveries.ErrNotFound) {
			continue // expired since the batch was read
		}
		if err != nil {
			return err
		}
		dispatched += len(res.Created)
	}
	state = "running"
	if next == nil {
		state = "done"
	}
	if err := store.AdvanceReplayTx(ctx, tx, job.Args.ReplayID, next, dispatched, handled, state); err != nil {
		return err
	}
	if next != nil {
		if _, err := w.Enqueuer.Client().InsertTx(ctx, tx, BatchArgs{ReplayID: job.Args.ReplayID}, nil); err != nil {
			return fmt.Errorf("enqueue next batch: %w", err)
		}
	}
	return w.complete(ctx, tx, job)
}

// searchBatchBudget bounds the time a bulk replay's batch spends evaluating
// its search (Filter.Q): the batch then replays what it found, and the next
// one continues where it stopped.
const searchBatchBudget = 5 * time.Second

// batchOf returns the deliveries of a bulk replay's next batch after the
// cursor, the cursor of the batch after it (nil at the end), and how many
// deliveries the batch handled: those it replays, or with a search those
// it evaluated the expression on.
func batchOf(ctx context.Context, tx pgx.Tx, f deliveries.Filter, after *deliveries.Cursor) ([]deliveries.Item, *deliveries.Cursor, int, error) {
	if f.Q == "" {
		items, next, err := deliveries.List(ctx, tx, f, replayBatchSize, after)
		return items, next, len(items), err
	}
	found, err := deliveries.Search(ctx, tx, f, replayBatchSize, after, searchBatchBudget)
	return found.Items, found.Next, found.Looked, err
}

func (w *BatchWorker) complete(ctx context.Context, tx pgx.Tx, job *river.Job[BatchArgs]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete job: %w", err)
	}
	return tx.Commit(ctx)
}

// List returns the newest replays first.
func List(ctx context.Context, db deliveries.DB, limit int) ([]Entry, error) {
	return store.ListReplays(ctx, db, limit)
}

// ErrNotFound means no replay has the id.
var ErrNotFound = store.ErrNoReplay

// Get returns one replay with its progress, or ErrNotFound (also for
// an id no replay could have, which the database would refuse as text).
func Get(ctx context.Context, db deliveries.DB, replayID string) (Entry, error) {
	if !providers.ValidID(replayID) {
		return Entry{}, ErrNotFound
	}
	return store.ReplayByID(ctx, db, replayID)
}
