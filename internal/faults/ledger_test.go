package faults_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate"
)

// asGatewayEnv, when set, makes the test binary a gateway (`gateway serve`,
// exactly as cmd/gateway wires it) with one more Go handler, builtin:ledger,
// which a route with order all needs: the fault test runs its gateways so.
const asGatewayEnv = "HOOKGATE_FAULTS_AS_GATEWAY"

func TestMain(m *testing.M) {
	if os.Getenv(asGatewayEnv) != "" {
		if err := serveWithLedger(); err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// serveWithLedger serves as `gateway serve` does, with builtin:ledger.
func serveWithLedger() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := hookgate.ConfigFromEnv()
	if err != nil {
		return err
	}
	gw, err := hookgate.New(cfg, hookgate.WithHandler("ledger", appendToLedger),
		hookgate.WithMigration(func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS faults_ledger (
				seq bigserial PRIMARY KEY, delivery_id text NOT NULL, entity text NOT NULL,
				event_time timestamptz NOT NULL, late boolean NOT NULL,
				started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL)`)
			return err
		}))
	if err != nil {
		return err
	}
	return gw.Run(ctx)
}

// appendToLedger appends each event it is handed, in its dispatch's
// transaction, with when it started and finished: two rows of one entity
// whose times overlap would be two handlers of the entity at once.
func appendToLedger(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
	started := time.Now()
	time.Sleep(2 * time.Millisecond) // room for a second handler of the entity to overlap, were it let in
	_, err := tx.Exec(ctx, `INSERT INTO faults_ledger (delivery_id, entity, event_time, late, started_at, finished_at)
		VALUES ($1, $2, $3, $4, $5, clock_timestamp())`, d.DeliveryID, d.Entity, d.EventTime, d.Late, started)
	return err
}

// ledgerFigures checks the route with order all: every acknowledged
// subscription event was appended exactly once, none superseded, and no two
// of one entity were handled at once; it returns the figures' line.
func ledgerFigures(ctx context.Context, t *testing.T, pool *pgxpool.Pool, deliveries []*delivery) string {
	t.Helper()
	sent := map[string]bool{}
	for _, d := range deliveries {
		if d.provider == "stripe" && d.event == "customer.subscription.updated" && d.acked.Load() {
			sent[d.id] = true
		}
	}
	rows, err := pool.Query(ctx, `SELECT delivery_id, entity, late, started_at, finished_at FROM faults_ledger ORDER BY entity, started_at`)
	if err != nil {
		t.Fatal(err)
	}
	appended := map[string]int{}
	var lastEntity string
	var lastFinished time.Time
	late, overlaps := 0, 0
	for rows.Next() {
		var id, entity string
		var isLate bool
		var started, finished time.Time
		if err := rows.Scan(&id, &entity, &isLate, &started, &finished); err != nil {
			t.Fatal(err)
		}
		appended[id]++
		if isLate {
			late++
		}
		if entity == lastEntity && started.Before(lastFinished) {
			overlaps++
			t.Errorf("ledger: %s of %s started at %s, before the one before it finished (%s)", id, entity,
				started.Format(time.StampMicro), lastFinished.Format(time.StampMicro))
		}
		lastEntity, lastFinished = entity, finished
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	once := 0
	for id := range sent {
		switch n := appended[id]; n {
		case 1:
			once++
		default:
			t.Errorf("ledger: %s appended %d times, want once", id, n)
		}
	}
	for id := range appended {
		if !sent[id] {
			t.Errorf("ledger: %s appended but never acknowledged", id)
		}
	}
	var superseded int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM hookgate_dispatches WHERE route = 'ledger' AND state = 'superseded'`).Scan(&superseded); err != nil {
		t.Fatal(err)
	}
	if superseded != 0 {
		t.Errorf("ledger: %d dispatches superseded on a route with order all", superseded)
	}
	return fmt.Sprintf("order all (ledger): %d subscription events, appended exactly once: %d; late: %d; superseded: %d; two of one entity at once: %d\n",
		len(sent), once, late, superseded, overlaps)
}
