// Command ledger is a service that embeds hookgate, as a Go service outside
// hookgate's module does: it registers a handler that writes Stripe's
// subscription events into the service's own tables, exactly once and in
// order per subscription, creates those tables with its own migration, and
// serves its own endpoint beside the gateway's.
//
// Run it like `gateway serve` (the same environment), with a route to its
// handler:
//
//	STRIPE_WEBHOOK_SECRET=whsec_... GATEWAY_ROUTES='ledger=stripe:customer.subscription.*>builtin:ledger' go run .
//
// GET /ledger shows what the handler wrote.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := hookgate.ConfigFromEnv()
	if err != nil {
		return err
	}
	var gw *hookgate.Gateway
	gw, err = hookgate.New(cfg,
		hookgate.WithHandler("ledger", record),
		hookgate.WithMigration(migrate),
		hookgate.WithHTTPHandler("GET /ledger", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			show(w, r, gw.Pool())
		})),
	)
	if err != nil {
		return err
	}
	return gw.Run(ctx)
}

// migrate creates the service's tables; it runs at every start, after
// hookgate's own migrations.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS ledger_effects (
			seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			event_id   text NOT NULL, -- no unique constraint: a doubled effect would show
			sub_id     text NOT NULL,
			event_time timestamptz NOT NULL
		);
		CREATE TABLE IF NOT EXISTS ledger_subscriptions (
			id     text PRIMARY KEY,
			status text NOT NULL
		)`)
	return err
}

// record applies one subscription event: it notes the effect and sets the
// subscription's status, in the dispatch's transaction.
func record(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
	var event struct {
		Data struct {
			Object struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := d.Decode(&event); err != nil {
		return hookgate.Discard(err)
	}
	sub := event.Data.Object
	if sub.ID == "" || sub.Status == "" {
		return hookgate.Discard(fmt.Errorf("event %s names no subscription and status", d.DeliveryID))
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ledger_effects (event_id, sub_id, event_time) VALUES ($1, $2, $3)`,
		d.DeliveryID, sub.ID, d.EventTime); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO ledger_subscriptions (id, status) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET status = excluded.status`, sub.ID, sub.Status)
	return err
}

// State is what GET /ledger answers.
type State struct {
	// Effects are the events applied, in the order they were.
	Effects []Effect `json:"effects"`
	// Subscriptions are each subscription's status.
	Subscriptions map[string]string `json:"subscriptions"`
}

// Effect is one applied event.
type Effect struct {
	EventID   string    `json:"event_id"`
	SubID     string    `json:"sub_id"`
	EventTime time.Time `json:"event_time"`
}

func show(w http.ResponseWriter, r *http.Request, pool *pgxpool.Pool) {
	st := State{Effects: []Effect{}, Subscriptions: map[string]string{}}
	// Both tables are read in one snapshot: read apart, a handler's commit
	// between the two reads would show a status whose effect is missing.
	err := pgx.BeginTxFunc(r.Context(), pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			rows, err := tx.Query(r.Context(), `SELECT event_id, sub_id, event_time FROM ledger_effects ORDER BY seq`)
			if err != nil {
				return err
			}
			var e Effect
			if _, err := pgx.ForEachRow(rows, []any{&e.EventID, &e.SubID, &e.EventTime}, func() error {
				st.Effects = append(st.Effects, e)
				return nil
			}); err != nil {
				return err
			}
			rows, err = tx.Query(r.Context(), `SELECT id, status FROM ledger_subscriptions`)
			if err != nil {
				return err
			}
			var id, status string
			_, err = pgx.ForEachRow(rows, []any{&id, &status}, func() error {
				st.Subscriptions[id] = status
				return nil
			})
			return err
		})
	if err != nil {
		http.Error(w, "the database is unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}
