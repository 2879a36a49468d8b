package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/store"
)

// A route's circuit: failures open it at the threshold for the cooldown, a
// probe is taken only once the cooldown is over and by one attempt, and a
// success closes it. Deadlines come back as the time left until them.
func TestRouteCircuit(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	if err := store.InsertRoutes(ctx, pool, []string{"r"}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := store.FailRoute(ctx, pool, store.RouteFailure{Route: "none", Detail: "x", Threshold: 1}); err != nil || ok {
		t.Fatalf("a route without a row: ok %v, %v", ok, err)
	}
	fail := store.RouteFailure{Route: "r", Detail: "503", Threshold: 2, Cooldown: time.Hour}
	s, ok, err := store.FailRoute(ctx, pool, fail)
	if err != nil || !ok || s.Failures != 1 || s.OpenFor > 0 {
		t.Fatalf("first failure: %+v, %v, %v", s, ok, err)
	}
	s, _, err = store.FailRoute(ctx, pool, fail)
	if err != nil || s.Failures != 2 || s.OpenFor < 59*time.Minute || s.OpenFor > time.Hour {
		t.Fatalf("second failure: %+v, %v; want the circuit open for an hour", s, err)
	}
	if took, err := store.TakeProbe(ctx, pool, "r", 2, time.Minute); err != nil || took {
		t.Fatalf("probe during the cooldown: %v, %v", took, err)
	}
	if _, err := pool.Exec(ctx, "UPDATE hookgate_routes SET open_until = now() - interval '1 second' WHERE name = 'r'"); err != nil {
		t.Fatal(err)
	}
	if took, err := store.TakeProbe(ctx, pool, "r", 2, time.Minute); err != nil || !took {
		t.Fatalf("probe after the cooldown: %v, %v", took, err)
	}
	if took, err := store.TakeProbe(ctx, pool, "r", 2, time.Minute); err != nil || took {
		t.Fatalf("a second probe: %v, %v", took, err)
	}
	s, ok, err = store.RouteStateOf(ctx, pool, "r")
	if err != nil || !ok || s.ProbeFor <= 0 || s.ProbeFor > time.Minute || s.OpenFor > 0 {
		t.Fatalf("while probing: %+v, %v, %v", s, ok, err)
	}
	if _, ok, err := store.RouteStateOf(ctx, pool, "none"); err != nil || ok {
		t.Fatalf("a route without a row: ok %v, %v", ok, err)
	}
	if err := store.DropProbe(ctx, pool, "r"); err != nil {
		t.Fatal(err)
	}
	if err := store.NoteRouteFailure(ctx, pool, "r", "404"); err != nil {
		t.Fatal(err)
	}
	s, ok, err = store.CloseCircuit(ctx, pool, "r")
	if err != nil || !ok || s.Failures != 0 || s.OpenFor != 0 || s.ProbeFor != 0 {
		t.Fatalf("closed: %+v, %v, %v", s, ok, err)
	}
	states, err := store.RouteStates(ctx, pool)
	if err != nil || len(states) != 1 || states[0].Name != "r" {
		t.Fatalf("states %+v, %v", states, err)
	}

	// Paused and resumed once each.
	for i, want := range []bool{true, false} {
		var did bool
		inTx(t, pool, func(tx pgx.Tx) (err error) {
			did, err = store.PauseRouteTx(ctx, tx, store.PauseRoute{Route: "r", By: "op", Reason: "migrating"})
			return err
		})
		if did != want {
			t.Errorf("pause %d: %v, want %v", i, did, want)
		}
	}
	if paused, err := store.RoutePaused(ctx, pool, "r"); err != nil || !paused {
		t.Errorf("paused %v, %v", paused, err)
	}
	o, err := store.RoutesOverviewOf(ctx, pool, []string{"r"}, nil)
	if err != nil || len(o.Routes) != 1 || o.Routes[0].PausedBy == nil || *o.Routes[0].PausedBy != "op" ||
		o.Routes[0].LastError == nil || *o.Routes[0].LastError != "404" {
		t.Errorf("overview %+v, %v", o.Routes, err)
	}
	for i, want := range []bool{true, false} {
		var did bool
		inTx(t, pool, func(tx pgx.Tx) (err error) { did, err = store.ResumeRouteTx(ctx, tx, "r"); return err })
		if did != want {
			t.Errorf("resume %d: %v, want %v", i, did, want)
		}
	}
}

// A rate ring of two starts a window: two are taken, the third waits about
// the window; a route without a ring is not limited.
func TestRateRing(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	if err := store.InsertRoutes(ctx, pool, []string{"r", "gone"}); err != nil {
		t.Fatal(err)
	}
	if size, err := store.RateRingSize(ctx, pool, "r"); err != nil || size != 0 {
		t.Fatalf("size before %d, %v", size, err)
	}
	inTx(t, pool, func(tx pgx.Tx) error {
		if err := store.ResetRateRingTx(ctx, tx, "r", 2); err != nil {
			return err
		}
		return store.ResetRateRingTx(ctx, tx, "gone", 3)
	})
	if size, err := store.RateRingSize(ctx, pool, "r"); err != nil || size != 2 {
		t.Fatalf("size %d, %v", size, err)
	}
	for i := range 2 {
		if ok, _, err := store.TakeRateStart(ctx, pool, "r", time.Minute); err != nil || !ok {
			t.Fatalf("start %d: %v, %v", i, ok, err)
		}
	}
	ok, wait, err := store.TakeRateStart(ctx, pool, "r", time.Minute)
	if err != nil || ok || wait < 59*time.Second || wait > time.Minute {
		t.Fatalf("third start: %v, wait %v, %v", ok, wait, err)
	}
	if ok, _, err := store.TakeRateStart(ctx, pool, "unsynced", time.Minute); err != nil || !ok {
		t.Fatalf("a route without a ring: %v, %v", ok, err)
	}
	inTx(t, pool, func(tx pgx.Tx) error { return store.DropRateRingsTx(ctx, tx, []string{"r", "gone"}, []string{"r"}) })
	if size, err := store.RateRingSize(ctx, pool, "gone"); err != nil || size != 0 {
		t.Fatalf("a dropped ring's size %d, %v", size, err)
	}
	var slots int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM hookgate_rate_slots WHERE route = 'gone'").Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("a dropped ring keeps %d slots, %v", slots, err)
	}
	if size, err := store.RateRingSize(ctx, pool, "r"); err != nil || size != 2 {
		t.Fatalf("a kept ring's size %d, %v", size, err)
	}
}

// Retention's statements run on a migrated database (their behaviour on
// receipts and dispatches is tested where retention is used).
func TestRetentionStatementsRun(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	inTx(t, pool, func(tx pgx.Tx) error {
		events, err := store.ExpireReceiptsTx(ctx, tx, 10, time.Hour, false)
		if len(events) != 0 {
			t.Errorf("expired %v in an empty database", events)
		}
		return err
	})
	if err := store.DeleteOldRouteCounts(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteExpiredIdempotencyKeys(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if n, err := store.DeleteExpiredIDs(ctx, pool, 10); err != nil || n != 0 {
		t.Fatalf("deleted %d ids, %v", n, err)
	}
}
