package routes

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound means no configured route has the name.
var ErrNotFound = errors.New("no such route")

// Sync records the configured routes before a gateway starts working them: a
// state row each, the ring of each rate-limited route (sized to its rate),
// and each route's River queue, paused when the route is. A route's state
// outlives its removal from the configuration.
func Sync(ctx context.Context, db *pgxpool.Pool, table fanout.Table) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Processes starting at once take turns.
		if err := store.LockRouteSyncTx(ctx, tx); err != nil {
			return fmt.Errorf("sync routes: %w", err)
		}
		var names, limited []string
		for _, r := range table {
			names = append(names, r.Name)
		}
		if err := store.InsertRoutes(ctx, tx, names); err != nil {
			return fmt.Errorf("sync routes: %w", err)
		}
		for _, r := range table {
			paused, err := store.RoutePaused(ctx, tx, r.Name)
			if err != nil {
				return fmt.Errorf("sync routes: %w", err)
			}
			// A paused route's River queue row is made again before any
			// worker could take its jobs (see store.EnsureRiverQueueTx).
			if err := store.EnsureRiverQueueTx(ctx, tx, r.Queue(), paused); err != nil {
				return fmt.Errorf("sync route %s: queue: %w", r.Name, err)
			}
			if r.Rate.N == 0 {
				continue
			}
			limited = append(limited, r.Name)
			size, err := store.RateRingSize(ctx, tx, r.Name)
			if err != nil {
				return fmt.Errorf("sync route %s: rate: %w", r.Name, err)
			}
			if size == r.Rate.N {
				continue
			}
			// A new ring: the starts of the old one cannot be placed in it.
			if err := store.ResetRateRingTx(ctx, tx, r.Name, r.Rate.N); err != nil {
				return fmt.Errorf("sync route %s: rate: %w", r.Name, err)
			}
		}
		// A route whose rate was removed keeps no ring.
		if err := store.DropRateRingsTx(ctx, tx, names, limited); err != nil {
			return fmt.Errorf("sync routes: rate: %w", err)
		}
		return nil
	})
}

// Change is who pauses or resumes a route, and why.
type Change struct {
	// Actor is the token identity or the command line's user.
	Actor string
	// Reason is the operator's, optional.
	Reason string
}

// Pause pauses a route for every gateway process, in one transaction with
// its audit entry: its deliveries are still accepted and their dispatches
// created, but none is attempted until Resume. Pausing a paused route changes
// nothing. client may be an insert-only River client.
func Pause(ctx context.Context, db *pgxpool.Pool, client *river.Client[pgx.Tx], table fanout.Table, name string, c Change) (View, error) {
	r, ok := table.ByName(name)
	if !ok {
		return View{}, ErrNotFound
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		paused, err := store.PauseRouteTx(ctx, tx, store.PauseRoute{Route: r.Name, By: c.Actor, Reason: c.Reason})
		if err != nil {
			return err
		}
		if !paused {
			return nil // paused already
		}
		if err := pauseQueue(ctx, tx, client, r.Queue(), true); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.NewEntry{Actor: c.Actor, Action: audit.Pause, Route: r.Name, Reason: c.Reason})
	})
	if err != nil {
		return View{}, err
	}
	return Get(ctx, db, table, name)
}

// Resume resumes a paused route (also one paused in River UI): its waiting
// dispatches go out within its limits. Resuming an active route changes
// nothing.
func Resume(ctx context.Context, db *pgxpool.Pool, client *river.Client[pgx.Tx], table fanout.Table, name string, c Change) (View, error) {
	r, ok := table.ByName(name)
	if !ok {
		return View{}, ErrNotFound
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		routePaused, err := store.ResumeRouteTx(ctx, tx, r.Name)
		if err != nil {
			return err
		}
		// Also resumed when paused only in River UI; see
		// store.ResumeRiverQueueTx for why not River's QueueGetTx.
		queuePaused, err := store.ResumeRiverQueueTx(ctx, tx, r.Queue())
		if err != nil {
			return fmt.Errorf("resume: queue: %w", err)
		}
		if !routePaused && !queuePaused {
			return nil // active already
		}
		if err := pauseQueue(ctx, tx, client, r.Queue(), false); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.NewEntry{Actor: c.Actor, Action: audit.Resume, Route: r.Name, Reason: c.Reason})
	})
	if err != nil {
		return View{}, err
	}
	return Get(ctx, db, table, name)
}

// PausedTx reports whether route r is paused, as tx sees it: by an operator
// (Pause), or its River queue in River UI. client may be an insert-only River
// client.
func PausedTx(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], r fanout.Route) (bool, error) {
	paused, err := store.RoutePaused(ctx, tx, r.Name)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // no state row yet (Sync makes it): never paused
	case err != nil:
		return false, err
	case paused:
		return true, nil
	}
	q, err := client.QueueGetTx(ctx, tx, r.Queue())
	if errors.Is(err, rivertype.ErrNotFound) {
		return false, nil // no queue row: nothing paused it
	}
	if err != nil {
		return false, fmt.Errorf("read route queue: %w", err)
	}
	return q.PausedAt != nil, nil
}

// pauseQueue pauses or resumes a route's River queue in tx, and so tells the
// River clients working it at once. Its row is made first when missing.
func pauseQueue(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], queue string, pause bool) error {
	if err := store.EnsureRiverQueueTx(ctx, tx, queue, pause); err != nil {
		return fmt.Errorf("pause queue: %w", err)
	}
	var err error
	if pause {
		err = client.QueuePauseTx(ctx, tx, queue, nil)
	} else {
		err = client.QueueResumeTx(ctx, tx, queue, nil)
	}
	if err != nil && !errors.Is(err, rivertype.ErrNotFound) {
		return fmt.Errorf("pause queue: %w", err)
	}
	return nil
}

// View is a route as operators see it.
type View struct {
	Name  string   `json:"name"`
	Match []string `json:"match"`
	// Target is the URL without userinfo and query values, or builtin:<name>.
	Target      string  `json:"target"`
	Concurrency int     `json:"concurrency"`
	Rate        *string `json:"rate"`
	Timeout     string  `json:"timeout"`
	MaxAttempts int     `json:"max_attempts"`
	// Filter is the route's CEL filter, null when it has none.
	Filter *string `json:"filter"`
	// Transform is the route's transformation, null when it has none.
	Transform *string `json:"transform"`
	// Order is what order means for the route's target: latest, all or
	// none; OrderWindow how long it holds each new dispatch ("0s": none).
	Order       string `json:"order"`
	OrderWindow string `json:"order_window"`
	// State is "active" or "paused".
	State       string     `json:"state"`
	PausedAt    *time.Time `json:"paused_at"`
	PausedBy    *string    `json:"paused_by"`
	PauseReason *string    `json:"pause_reason"`
	// Circuit is "closed", "open" or "probing".
	Circuit       string     `json:"circuit"`
	Backlog       Backlog    `json:"backlog"`
	LastSuccessAt *time.Time `json:"last_success_at"`
	LastFailureAt *time.Time `json:"last_failure_at"`
	LastError     *string    `json:"last_error"`
	// Succeeded5m and Failed5m count attempts in the current minute and the
	// four before it, all processes together.
	Succeeded5m int64 `json:"succeeded_5m"`
	Failed5m    int64 `json:"failed_5m"`
}

// Backlog counts a route's unfinished dispatches, by state.
type Backlog struct {
	Pending  int64 `json:"pending"`
	Running  int64 `json:"running"`
	Retrying int64 `json:"retrying"`
}

// Get returns one configured route.
func Get(ctx context.Context, db *pgxpool.Pool, table fanout.Table, name string) (View, error) {
	r, ok := table.ByName(name)
	if !ok {
		return View{}, ErrNotFound
	}
	vs, err := List(ctx, db, fanout.Table{r})
	if err != nil {
		return View{}, err
	}
	return vs[0], nil
}

// List returns the configured routes, in the table's order.
func List(ctx context.Context, db *pgxpool.Pool, table fanout.Table) ([]View, error) {
	views := make([]View, len(table))
	at := map[string]*View{}
	var names, queues []string
	for i, r := range table {
		v := &views[i]
		*v = View{Name: r.Name, Match: []string{}, Target: r.Target, Concurrency: r.Concurrency, Timeout: r.Timeout.String(),
			MaxAttempts: r.MaxAttempts, State: "active", Circuit: CircuitClosed,
			Order: string(cmp.Or(r.Order, fanout.OrderLatest)), OrderWindow: r.OrderWindow.String()}
		if _, builtin := r.Builtin(); !builtin && !r.Listens() {
			v.Target = fanout.RedactURL(r.Target)
		}
		for _, m := range r.Matches {
			v.Match = append(v.Match, m.Provider+":"+m.Pattern)
		}
		if rate := r.Rate.String(); rate != "" {
			v.Rate = &rate
		}
		if r.Transform != nil {
			src := r.Transform.String()
			v.Transform = &src
		}
		if r.Filter != nil {
			src := r.Filter.String()
			v.Filter = &src
		}
		at[r.Name] = v
		names, queues = append(names, r.Name), append(queues, r.Queue())
	}
	o, err := store.RoutesOverviewOf(ctx, db, names, queues)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	for _, row := range o.Routes {
		cur := at[row.Name]
		cur.PausedAt, cur.PausedBy, cur.PauseReason = row.PausedAt, row.PausedBy, row.PauseReason
		cur.LastSuccessAt, cur.LastFailureAt, cur.LastError = row.LastSuccessAt, row.LastFailureAt, row.LastError
		if row.PausedAt != nil {
			cur.State = "paused"
		}
		r, _ := table.ByName(row.Name)
		cur.Circuit = circuitState(r.Circuit, row.Failures, row.Probing)
	}
	paused := map[string]bool{}
	for _, q := range o.PausedQueues {
		paused[q] = true
	}
	for _, r := range table {
		if paused[r.Queue()] { // paused in River UI
			at[r.Name].State = "paused"
		}
	}
	for _, b := range o.Backlog {
		switch b.State {
		case "running":
			at[b.Route].Backlog.Running += b.Count
		case "retrying":
			at[b.Route].Backlog.Retrying += b.Count
		default:
			at[b.Route].Backlog.Pending += b.Count
		}
	}
	for _, c := range o.Recent {
		at[c.Route].Succeeded5m, at[c.Route].Failed5m = c.Succeeded, c.Failed
	}
	return views, nil
}

// Put stores a route the database owns (spec, checked by the caller as the
// configuration's routes are), with its audit entry keeping the route before
// and after, in one transaction; created says it was new.
func Put(ctx context.Context, db *pgxpool.Pool, name string, spec []byte, actor string) (created bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		before, err := store.PutLiveRouteTx(ctx, tx, name, spec, actor)
		if err != nil {
			return err
		}
		created = before == nil
		return audit.Record(ctx, tx, audit.NewEntry{Actor: actor, Action: audit.RoutePut, Route: name, Before: Redacted(before), After: Redacted(spec),
			Ordered: true})
	})
	return created, err
}

// Delete deletes a route the database owns, with its audit entry keeping
// the route before, and returns it; ErrNotFound for none. Its dispatches
// already made finish with it.
func Delete(ctx context.Context, db *pgxpool.Pool, name, actor string) (before []byte, err error) {
	if fanout.CheckName(name) != nil {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name) // no route's name: not sent to the database
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var found bool
		if before, found, err = store.DeleteLiveRouteTx(ctx, tx, name); err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		return audit.Record(ctx, tx, audit.NewEntry{Actor: actor, Action: audit.RouteDelete, Route: name, Before: Redacted(before), Ordered: true})
	})
	return before, err
}

// Redacted is a stored route's spec as the audit log and the API show it:
// its target without what may be a credential (fanout.RedactURL). A
// credential belongs in target_env, whose name alone is stored.
func Redacted(spec []byte) []byte {
	if len(spec) == 0 {
		return spec
	}
	var m map[string]any
	if json.Unmarshal(spec, &m) != nil {
		return nil
	}
	if t, ok := m["target"].(string); ok && !strings.HasPrefix(t, "builtin:") {
		m["target"] = fanout.RedactURL(t)
	}
	b, _ := json.Marshal(m)
	return b
}
