package routes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound means no configured route has the name.
var ErrNotFound = errors.New("no such route")

// queueRowSQL creates a route's River queue row when it has none, paused when
// $2: River's workers read a queue's pause from its row when they start, and
// River forgets a row no process has worked for a day, so a paused route's
// row is made again before any worker could take its jobs.
const queueRowSQL = `INSERT INTO river_queue (name, created_at, metadata, paused_at, updated_at)
	VALUES ($1, now(), '{}', CASE WHEN $2 THEN now() END, now())
	ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(river_queue.paused_at, excluded.paused_at)`

// Sync records the configured routes before a gateway starts working them: a
// state row each, the ring of each rate-limited route (sized to its rate),
// and each route's River queue, paused when the route is. A route's state
// outlives its removal from the configuration.
func Sync(ctx context.Context, db *pgxpool.Pool, table fanout.Table) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Processes starting at once take turns.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('hookgate_routes_sync'))"); err != nil {
			return fmt.Errorf("sync routes: %w", err)
		}
		var names, limited []string
		for _, r := range table {
			names = append(names, r.Name)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO hookgate_routes (name) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT DO NOTHING`, names); err != nil {
			return fmt.Errorf("sync routes: %w", err)
		}
		for _, r := range table {
			var paused bool
			if err := tx.QueryRow(ctx, "SELECT paused_at IS NOT NULL FROM hookgate_routes WHERE name = $1", r.Name).Scan(&paused); err != nil {
				return fmt.Errorf("sync routes: %w", err)
			}
			if _, err := tx.Exec(ctx, queueRowSQL, r.Queue(), paused); err != nil {
				return fmt.Errorf("sync route %s: queue: %w", r.Name, err)
			}
			if r.Rate.N == 0 {
				continue
			}
			limited = append(limited, r.Name)
			var size int
			err := tx.QueryRow(ctx, "SELECT size FROM hookgate_route_rates WHERE route = $1", r.Name).Scan(&size)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("sync route %s: rate: %w", r.Name, err)
			}
			if size == r.Rate.N {
				continue
			}
			// A new ring: the starts of the old one cannot be placed in it.
			if _, err := tx.Exec(ctx, `DELETE FROM hookgate_rate_slots WHERE route = $1`, r.Name); err != nil {
				return fmt.Errorf("sync route %s: rate: %w", r.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO hookgate_rate_slots (route, slot, at)
				SELECT $1, g, 'epoch' FROM generate_series(0, $2 - 1) g`, r.Name, r.Rate.N); err != nil {
				return fmt.Errorf("sync route %s: rate: %w", r.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO hookgate_route_rates (route, size) VALUES ($1, $2)
				ON CONFLICT (route) DO UPDATE SET size = excluded.size, next = 0`, r.Name, r.Rate.N); err != nil {
				return fmt.Errorf("sync route %s: rate: %w", r.Name, err)
			}
		}
		// A route whose rate was removed keeps no ring.
		if _, err := tx.Exec(ctx, `DELETE FROM hookgate_route_rates WHERE route = ANY($1) AND NOT route = ANY($2)`, names, limited); err != nil {
			return fmt.Errorf("sync routes: rate: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM hookgate_rate_slots WHERE route = ANY($1) AND NOT route = ANY($2)`, names, limited); err != nil {
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
		tag, err := tx.Exec(ctx, `INSERT INTO hookgate_routes AS r (name, paused_at, paused_by, pause_reason) VALUES ($1, now(), $2, $3)
			ON CONFLICT (name) DO UPDATE SET paused_at = now(), paused_by = excluded.paused_by, pause_reason = excluded.pause_reason
			WHERE r.paused_at IS NULL`, r.Name, c.Actor, nullable(c.Reason))
		if err != nil {
			return fmt.Errorf("pause: %w", err)
		}
		if tag.RowsAffected() == 0 {
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
		tag, err := tx.Exec(ctx, `UPDATE hookgate_routes SET paused_at = NULL, paused_by = NULL, pause_reason = NULL
			WHERE name = $1 AND paused_at IS NOT NULL`, r.Name)
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		queueTag, err := tx.Exec(ctx, `UPDATE river_queue SET paused_at = NULL, updated_at = now() WHERE name = $1 AND paused_at IS NOT NULL`, r.Queue())
		if err != nil {
			return fmt.Errorf("resume: queue: %w", err)
		}
		if tag.RowsAffected() == 0 && queueTag.RowsAffected() == 0 {
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

// pauseQueue pauses or resumes a route's River queue in tx, and so tells the
// River clients working it at once. Its row is made first when missing.
func pauseQueue(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], queue string, pause bool) error {
	if _, err := tx.Exec(ctx, queueRowSQL, queue, pause); err != nil {
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
			MaxAttempts: r.MaxAttempts, State: "active", Circuit: CircuitClosed}
		if _, builtin := r.Builtin(); !builtin {
			v.Target = fanout.RedactURL(r.Target)
		}
		for _, m := range r.Matches {
			v.Match = append(v.Match, m.Provider+":"+m.Pattern)
		}
		if rate := r.Rate.String(); rate != "" {
			v.Rate = &rate
		}
		if r.Filter != nil {
			src := r.Filter.String()
			v.Filter = &src
		}
		at[r.Name] = v
		names, queues = append(names, r.Name), append(queues, r.Queue())
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT name, paused_at, paused_by, pause_reason, failures, coalesce(probe_until > now(), false),
		last_success_at, last_failure_at, last_error FROM hookgate_routes WHERE name = ANY($1)`, names).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var name string
			var failures int
			var probing bool
			var v View
			if err := rows.Scan(&name, &v.PausedAt, &v.PausedBy, &v.PauseReason, &failures, &probing,
				&v.LastSuccessAt, &v.LastFailureAt, &v.LastError); err != nil {
				return err
			}
			cur := at[name]
			cur.PausedAt, cur.PausedBy, cur.PauseReason = v.PausedAt, v.PausedBy, v.PauseReason
			cur.LastSuccessAt, cur.LastFailureAt, cur.LastError = v.LastSuccessAt, v.LastFailureAt, v.LastError
			if v.PausedAt != nil {
				cur.State = "paused"
			}
			r, _ := table.ByName(name)
			cur.Circuit = circuitState(r.Circuit, failures, probing)
		}
		return rows.Err()
	})
	b.Queue(`SELECT name FROM river_queue WHERE name = ANY($1) AND paused_at IS NOT NULL`, queues).Query(func(rows pgx.Rows) error {
		paused := map[string]bool{}
		for rows.Next() {
			var q string
			if err := rows.Scan(&q); err != nil {
				return err
			}
			paused[q] = true
		}
		for _, r := range table {
			if paused[r.Queue()] { // paused in River UI
				at[r.Name].State = "paused"
			}
		}
		return rows.Err()
	})
	// The routes view's own aggregate of River's table, in this batch;
	// 'hookgate_dispatch' is dispatch.Kind (dispatch imports routes for Guard).
	b.Queue(`SELECT args->>'route', CASE WHEN state = 'running' THEN 'running'
			WHEN state = 'retryable' OR attempt > 0 THEN 'retrying' ELSE 'pending' END, count(*)
		FROM river_job WHERE kind = 'hookgate_dispatch' AND state IN ('available', 'scheduled', 'retryable', 'running')
		AND args->>'route' = ANY($1) GROUP BY 1, 2`, names).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var name, state string
			var n int64
			if err := rows.Scan(&name, &state, &n); err != nil {
				return err
			}
			switch state {
			case "running":
				at[name].Backlog.Running += n
			case "retrying":
				at[name].Backlog.Retrying += n
			default:
				at[name].Backlog.Pending += n
			}
		}
		return rows.Err()
	})
	b.Queue(`SELECT route, sum(succeeded)::bigint, sum(failed)::bigint FROM hookgate_route_minutes
		WHERE route = ANY($1) AND minute >= date_trunc('minute', now()) - interval '4 minutes' GROUP BY route`, names).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var name string
			var ok, failed int64
			if err := rows.Scan(&name, &ok, &failed); err != nil {
				return err
			}
			at[name].Succeeded5m, at[name].Failed5m = ok, failed
		}
		return rows.Err()
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	return views, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
