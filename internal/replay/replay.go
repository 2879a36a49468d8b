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
// still in progress or (without Force) did not end discarded or cancelled.
func RedispatchTx(ctx context.Context, tx pgx.Tx, e *dispatch.Enqueuer, provider, deliveryID string, req Request) (Result, error) {
	res := Result{Created: []dispatch.Created{}, Skipped: []Skip{}}
	// The CLI passes ids as typed: one the database cannot hold names nothing.
	if err := deliveries.CheckKey(provider, deliveryID); err != nil {
		return res, err
	}
	ev := dispatch.Event{Provider: provider, DeliveryID: deliveryID}
	err := tx.QueryRow(ctx, `SELECT event, headers, content_type, body FROM hookgate_receipts WHERE provider = $1 AND delivery_id = $2
		ORDER BY received_at, scope LIMIT 1`, provider, deliveryID).Scan(&ev.Event, &ev.Headers, &ev.ContentType, &ev.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, deliveries.ErrNotFound
	}
	if err != nil {
		return res, fmt.Errorf("read delivery: %w", err)
	}
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
			res.Skipped = append(res.Skipped, Skip{Route: r, Reason: "it was never dispatched (a route added since); force dispatches it"})
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
func selectRoutes(e *dispatch.Enqueuer, ev dispatch.Event, named []string) (routes, filteredOut []string, err error) {
	// The filters as they are now decide, as the route table does.
	matching := e.Matching(ev)
	if len(named) == 0 {
		for _, r := range e.Routes {
			if r.MatchesEvent(ev.Provider, ev.Event) && !slices.Contains(matching, r.Name) {
				filteredOut = append(filteredOut, r.Name)
			}
		}
		return matching, filteredOut, nil
	}
	for _, r := range named {
		if !slices.Contains(matching, r) {
			if route, ok := e.Routes.ByName(r); ok && route.Filter != nil && route.MatchesEvent(ev.Provider, ev.Event) {
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
type Entry struct {
	ReplayID   string          `json:"replay_id"`
	Actor      string          `json:"actor"`
	CreatedAt  time.Time       `json:"created_at"`
	Filter     json.RawMessage `json:"filter"`
	Force      bool            `json:"force"`
	Reason     *string         `json:"reason"`
	Deliveries int             `json:"deliveries"`
	Dispatches int             `json:"dispatches"`
	State      string          `json:"state"`
	// Done is how many of the deliveries have been handled so far.
	Done int `json:"done"`
}

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
	_, err = tx.Exec(ctx, `
		INSERT INTO hookgate_replays (replay_id, actor, filter, force, reason, deliveries, dispatches, state, done)
		VALUES ($1, $2, $3, $4, $5, 1, $6, 'done', 1)`, id, actor, filter, req.Force, nullable(reason), len(res.Created))
	if err != nil {
		return "", res, fmt.Errorf("log replay: %w", err)
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
// id and how many deliveries matched. The set is fixed at the time of the
// request, by the database's clock (the one receipts are stamped with):
// deliveries received later are not replayed.
func BulkTx(ctx context.Context, tx pgx.Tx, e *dispatch.Enqueuer, actor string, f deliveries.Filter, force bool, reason string) (string, int, error) {
	var now time.Time
	if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return "", 0, fmt.Errorf("read clock: %w", err)
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
	_, err = tx.Exec(ctx, `
		INSERT INTO hookgate_replays (replay_id, actor, filter, force, reason, deliveries, state)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, id, actor, filter, force, nullable(reason), matched, state)
	if err != nil {
		return "", 0, fmt.Errorf("log replay: %w", err)
	}
	if matched > 0 {
		if _, err := e.Client.InsertTx(ctx, tx, BatchArgs{ReplayID: id}, nil); err != nil {
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

	var filterJSON, cursorJSON []byte
	var force bool
	var state string
	err = tx.QueryRow(ctx, `SELECT filter, cursor, force, state FROM hookgate_replays WHERE replay_id = $1 FOR UPDATE`,
		job.Args.ReplayID).Scan(&filterJSON, &cursorJSON, &force, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return river.JobCancel(fmt.Errorf("replay %s not found", job.Args.ReplayID))
	}
	if err != nil {
		return fmt.Errorf("read replay: %w", err)
	}
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
	items, next, err := deliveries.List(ctx, tx, f, replayBatchSize, after)
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
	// Deliveries that arrived with a receipt time inside the filter after the
	// count was taken are replayed too, but progress never passes the count;
	// a finished replay has handled all of it.
	_, err = tx.Exec(ctx, `UPDATE hookgate_replays SET cursor = $2, dispatches = dispatches + $3, state = $4,
		done = CASE WHEN $4 = 'done' THEN deliveries ELSE least(done + $5, deliveries) END
		WHERE replay_id = $1`, job.Args.ReplayID, next, dispatched, state, len(items))
	if err != nil {
		return fmt.Errorf("update replay: %w", err)
	}
	if next != nil {
		if _, err := w.Enqueuer.Client.InsertTx(ctx, tx, BatchArgs{ReplayID: job.Args.ReplayID}, nil); err != nil {
			return fmt.Errorf("enqueue next batch: %w", err)
		}
	}
	return w.complete(ctx, tx, job)
}

func (w *BatchWorker) complete(ctx context.Context, tx pgx.Tx, job *river.Job[BatchArgs]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete job: %w", err)
	}
	return tx.Commit(ctx)
}

// replayColumns are the columns scanReplay reads.
const replayColumns = `replay_id, actor, created_at, filter, force, reason, deliveries, dispatches, state, done`

func scanReplay(row pgx.Row) (Entry, error) {
	var r Entry
	err := row.Scan(&r.ReplayID, &r.Actor, &r.CreatedAt, &r.Filter, &r.Force, &r.Reason, &r.Deliveries, &r.Dispatches, &r.State, &r.Done)
	return r, err
}

// List returns the newest replays first.
func List(ctx context.Context, db deliveries.DB, limit int) ([]Entry, error) {
	rows, err := db.Query(ctx, `SELECT `+replayColumns+` FROM hookgate_replays ORDER BY created_at DESC, replay_id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list replays: %w", err)
	}
	replays, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) { return scanReplay(row) })
	if err != nil {
		return nil, fmt.Errorf("list replays: %w", err)
	}
	return replays, nil
}

// ErrNotFound means no replay has the id.
var ErrNotFound = errors.New("replay not found")

// Get returns one replay with its progress, or ErrNotFound (also for
// an id no replay could have, which the database would refuse as text).
func Get(ctx context.Context, db deliveries.DB, replayID string) (Entry, error) {
	if !providers.ValidID(replayID) {
		return Entry{}, ErrNotFound
	}
	r, err := scanReplay(db.QueryRow(ctx, `SELECT `+replayColumns+` FROM hookgate_replays WHERE replay_id = $1`, replayID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, fmt.Errorf("read replay: %w", err)
	}
	return r, nil
}
