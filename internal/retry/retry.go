// Package retry attempts now what waits to be retried: every retrying
// dispatch of a route (Route), or of one delivery (Delivery), its River
// backoff and a target's Retry-After cut short. Each call is one transaction
// with its audit entry. The dispatches' jobs are made available at once
// through River's client (JobRetryTx); the worker asks the route's Guard
// before every attempt, so an attempt made now still keeps to the route's
// concurrency, rate and circuit (while the circuit is open it waits for the
// circuit, as any attempt does). A retry is no replay: it makes no new
// generation, and the dispatch keeps its attempts.
package retry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/store"
)

var (
	// ErrPaused means the route is paused: nothing of it is attempted until
	// it is resumed, so it is not retried now.
	ErrPaused = errors.New("route paused")
	// ErrUnknownRoute means a retry of a delivery named a route that is not
	// configured.
	ErrUnknownRoute = errors.New("unknown route")
)

// Operator is who asks for a retry, and why, for the audit log.
type Operator struct {
	// Actor is the token identity.
	Actor string
	// Reason is the operator's, optional.
	Reason string
}

// Route attempts now every retrying dispatch of the route named name whose
// River job waits for its next attempt, and returns how many. It refuses a
// paused route (ErrPaused): resume it first. An unknown route is
// routes.ErrNotFound. client may be an insert-only River client.
func Route(ctx context.Context, db *pgxpool.Pool, client *river.Client[pgx.Tx], table fanout.Table, name string, op Operator) (int, error) {
	r, ok := table.ByName(name)
	if !ok {
		return 0, routes.ErrNotFound
	}
	var n int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		paused, err := routes.PausedTx(ctx, tx, client, r)
		if err != nil {
			return fmt.Errorf("retry: %w", err)
		}
		if paused {
			return fmt.Errorf("%w: route %s is paused, and none of its dispatches is attempted until it is resumed: resume it, then retry",
				ErrPaused, r.Name)
		}
		waiting, err := store.WaitingRetriesOfRouteTx(ctx, tx, r.Name)
		if err != nil {
			return err
		}
		if err := retryNowTx(ctx, tx, client, waiting); err != nil {
			return err
		}
		n = len(waiting)
		return audit.Record(ctx, tx, audit.NewEntry{Actor: op.Actor, Action: audit.Retry, Route: r.Name, Reason: op.Reason})
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Retried is a dispatch that a retry made due now.
type Retried struct {
	Route      string `json:"route"`
	Generation int    `json:"generation"`
}

// Skip is a route whose retrying dispatch of a delivery was left to its own
// schedule, and why.
type Skip struct {
	Route  string `json:"route"`
	Reason string `json:"reason"`
}

// Result is what a retry of one delivery did.
type Result struct {
	Retried []Retried `json:"retried"`
	Skipped []Skip    `json:"skipped"`
}

// Delivery attempts now the retrying dispatches of the delivery (provider,
// deliveryID) whose River jobs wait for their next attempt: those of names,
// or of every route when names is empty. A paused route's, and a route's
// that is no longer configured, are skipped with the reason. An unknown
// delivery is deliveries.ErrNotFound; a name that is no configured route's,
// ErrUnknownRoute. A delivery with no retrying dispatch retries nothing.
// client may be an insert-only River client.
func Delivery(ctx context.Context, db *pgxpool.Pool, client *river.Client[pgx.Tx], table fanout.Table,
	provider, deliveryID string, names []string, op Operator,
) (Result, error) {
	res := Result{Retried: []Retried{}, Skipped: []Skip{}}
	// The CLI passes ids as typed: one the database cannot hold names nothing.
	if err := deliveries.CheckKey(provider, deliveryID); err != nil {
		return res, err
	}
	for _, name := range names {
		if _, ok := table.ByName(name); !ok {
			return res, fmt.Errorf("%w: the gateway has no route %q", ErrUnknownRoute, name)
		}
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		stored, err := store.EventStored(ctx, tx, provider, deliveryID)
		if err != nil {
			return err
		}
		if !stored {
			return deliveries.ErrNotFound
		}
		waiting, err := store.WaitingRetriesOfEventTx(ctx, tx, provider, deliveryID)
		if err != nil {
			return err
		}
		due, skipped, err := choose(ctx, tx, client, table, waiting, names)
		if err != nil {
			return err
		}
		if err := retryNowTx(ctx, tx, client, due); err != nil {
			return err
		}
		for _, w := range due {
			res.Retried = append(res.Retried, Retried{Route: w.Route, Generation: w.Generation})
		}
		res.Skipped = append(res.Skipped, skipped...)
		e := audit.NewEntry{Actor: op.Actor, Action: audit.Retry, Provider: provider, DeliveryID: deliveryID, Reason: op.Reason}
		if len(names) == 1 {
			e.Route = names[0]
		}
		return audit.Record(ctx, tx, e)
	})
	if err != nil {
		return Result{}, err
	}
	slices.SortFunc(res.Retried, func(a, b Retried) int {
		return cmp.Or(strings.Compare(a.Route, b.Route), cmp.Compare(a.Generation, b.Generation))
	})
	return res, nil
}

// choose returns those of waiting to retry now, of the routes named (all
// when none is), and the routes it skips with the reason: paused, or no
// longer configured.
func choose(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], table fanout.Table,
	waiting []store.WaitingRetry, names []string,
) ([]store.WaitingRetry, []Skip, error) {
	var due []store.WaitingRetry
	var skipped []Skip
	reasons := map[string]string{} // by route, once decided: why it is skipped, or ""
	for _, w := range waiting {
		if len(names) > 0 && !slices.Contains(names, w.Route) {
			continue
		}
		reason, decided := reasons[w.Route]
		if !decided {
			var err error
			if reason, err = skipReason(ctx, tx, client, table, w.Route); err != nil {
				return nil, nil, err
			}
			reasons[w.Route] = reason
			if reason != "" {
				skipped = append(skipped, Skip{Route: w.Route, Reason: reason})
			}
		}
		if reason == "" {
			due = append(due, w)
		}
	}
	slices.SortFunc(skipped, func(a, b Skip) int { return strings.Compare(a.Route, b.Route) })
	return due, skipped, nil
}

// skipReason says why a delivery's retrying dispatch of route is not
// retried now, or "" when it is.
func skipReason(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], table fanout.Table, route string) (string, error) {
	r, ok := table.ByName(route)
	if !ok {
		return "the route is no longer configured; its next attempt discards the dispatch", nil
	}
	paused, err := routes.PausedTx(ctx, tx, client, r)
	if err != nil {
		return "", fmt.Errorf("retry: %w", err)
	}
	if paused {
		return "the route is paused: resume it, then retry", nil
	}
	return "", nil
}

// retryNowTx makes the jobs of waiting available at once, in tx, through
// River's client: River's backoff and a target's Retry-After are cut short.
// The worker keeps no Retry-After of an attempt past its end (it is River's
// next scheduled_at, which this replaces), so nothing pushes the attempt back.
func retryNowTx(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], waiting []store.WaitingRetry) error {
	for _, w := range waiting {
		if _, err := client.JobRetryTx(ctx, tx, w.JobID); err != nil {
			return fmt.Errorf("retry %s generation %d now: %w", w.Route, w.Generation, err)
		}
	}
	return nil
}

// BulkResult is what a bulk retry did.
type BulkResult struct {
	// Deliveries counts the deliveries matched: those with a retrying
	// dispatch that the filter selects.
	Deliveries int `json:"deliveries"`
	// Retried counts the dispatches made due now.
	Retried int `json:"retried"`
	// Partial says a search (Filter.Q) stopped at its time budget: Next
	// continues it.
	Partial bool               `json:"-"`
	Next    *deliveries.Cursor `json:"-"`
}

// bulkPage is how many deliveries a bulk retry reads at a time.
const bulkPage = 200

// BulkTx attempts now, in tx, the retrying dispatches of every delivery f
// selects (f.State must be retrying or empty: a retry attempts retrying
// dispatches), after the cursor when one is given; a paused route's and a
// route's no longer configured are left to their own schedule. A search
// (f.Q) is evaluated within budget: past it, what was found is retried and
// the result is Partial, with the cursor that continues. One audit entry
// records it. client may be an insert-only River client.
func BulkTx(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], table fanout.Table,
	f deliveries.Filter, after *deliveries.Cursor, budget time.Duration, op Operator,
) (BulkResult, error) {
	var res BulkResult
	if f.State != "" && f.State != "retrying" {
		return res, fmt.Errorf("%w: a retry attempts retrying dispatches: state is retrying, or left out", deliveries.ErrBadFilter)
	}
	f.State = "retrying"
	if err := audit.Record(ctx, tx, audit.NewEntry{Actor: op.Actor, Action: audit.Retry, Provider: f.Provider, Reason: op.Reason}); err != nil {
		return res, err
	}
	deadline := time.Now().Add(budget)
	for {
		var items []deliveries.Item
		var next *deliveries.Cursor
		if f.Q == "" {
			var err error
			if items, next, err = deliveries.List(ctx, tx, f, bulkPage, after); err != nil {
				return res, err
			}
		} else {
			found, err := deliveries.Search(ctx, tx, f, bulkPage, after, time.Until(deadline))
			if err != nil {
				return res, err
			}
			items, next, res.Partial = found.Items, found.Next, found.Partial
		}
		for _, it := range items {
			waiting, err := store.WaitingRetriesOfEventTx(ctx, tx, it.Provider, it.DeliveryID)
			if err != nil {
				return res, err
			}
			due, _, err := choose(ctx, tx, client, table, waiting, nil)
			if err != nil {
				return res, err
			}
			if err := retryNowTx(ctx, tx, client, due); err != nil {
				return res, err
			}
			res.Deliveries++
			res.Retried += len(due)
		}
		if next == nil || res.Partial {
			res.Next = next
			return res, nil
		}
		after = next
	}
}
