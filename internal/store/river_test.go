package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/store"
)

// riverSchemaVersion is River's migration version that the statements of
// store/river.go, which read and write River's own tables, were written for.
const riverSchemaVersion = 8

// A River upgrade whose migrations change River's schema fails here until
// store/river.go is checked against the new schema: its statements depend on
// river_queue's and river_job's columns and states, not on a River API.
func TestRiverSchemaVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	all := migrator.AllVersions()
	if len(all) == 0 {
		t.Fatal("River's driver ships no migration")
	}
	applied, err := migrator.ExistingVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) == 0 {
		t.Fatal("the test database has no River migration applied")
	}
	for _, v := range []struct {
		what    string
		version int
	}{
		{"River's driver ships migrations up to version", all[len(all)-1].Version},
		{"the migrated database reports River's migration version", applied[len(applied)-1].Version},
	} {
		if v.version != riverSchemaVersion {
			t.Errorf("%s %d, but store/river.go was written for River's schema at version %d: "+
				"re-check store/river.go's statements on river_queue and river_job against River's migrations "+
				"(and whether River's client API now does what they do), then set riverSchemaVersion in store/river_test.go",
				v.what, v.version, riverSchemaVersion)
		}
	}
	// The backlog statement counts River jobs by their kind, spelled out.
	if dispatch.Kind != "hookgate_dispatch" {
		t.Errorf("dispatch.Kind is %q: store/river.go's backlog counts jobs of kind 'hookgate_dispatch'", dispatch.Kind)
	}
}

func queuePaused(t *testing.T, db store.Querier, queue string) (exists, paused bool) {
	t.Helper()
	err := db.QueryRow(context.Background(), "SELECT paused_at IS NOT NULL FROM river_queue WHERE name = $1", queue).Scan(&paused)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true, paused
}

// inTx runs f in a transaction of pool's, and fails the test on its error.
func inTx(t *testing.T, pool *pgxpool.Pool, f func(tx pgx.Tx) error) {
	t.Helper()
	if err := pgx.BeginFunc(context.Background(), pool, f); err != nil {
		t.Fatal(err)
	}
}

// The statements of store/river.go do what they say on River's tables as
// River's migrations leave them.
func TestRiverQueueStatements(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()

	// Made when missing, paused or not as asked.
	inTx(t, pool, func(tx pgx.Tx) error { return store.EnsureRiverQueueTx(ctx, tx, "route_a", false) })
	inTx(t, pool, func(tx pgx.Tx) error { return store.EnsureRiverQueueTx(ctx, tx, "route_b", true) })
	if exists, paused := queuePaused(t, pool, "route_a"); !exists || paused {
		t.Errorf("route_a: exists %v, paused %v; want an active row", exists, paused)
	}
	if exists, paused := queuePaused(t, pool, "route_b"); !exists || !paused {
		t.Errorf("route_b: exists %v, paused %v; want a paused row", exists, paused)
	}
	// A paused row stays paused; an active one is paused when asked.
	inTx(t, pool, func(tx pgx.Tx) error { return store.EnsureRiverQueueTx(ctx, tx, "route_b", false) })
	if _, paused := queuePaused(t, pool, "route_b"); !paused {
		t.Error("route_b was resumed by EnsureRiverQueueTx(false)")
	}
	inTx(t, pool, func(tx pgx.Tx) error { return store.EnsureRiverQueueTx(ctx, tx, "route_a", true) })
	if _, paused := queuePaused(t, pool, "route_a"); !paused {
		t.Error("route_a was not paused by EnsureRiverQueueTx(true)")
	}

	// River's own client finds the row and pauses and resumes it.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := client.QueueGet(ctx, "route_b")
	if err != nil || q.PausedAt == nil {
		t.Fatalf("River reads route_b as %+v, %v; want it paused", q, err)
	}

	// Resumed when paused, and says so; then not.
	for i, want := range []bool{true, false} {
		var was bool
		inTx(t, pool, func(tx pgx.Tx) (err error) { was, err = store.ResumeRiverQueueTx(ctx, tx, "route_b"); return err })
		if was != want {
			t.Errorf("resume %d: was paused %v, want %v", i, was, want)
		}
	}
	if _, paused := queuePaused(t, pool, "route_b"); paused {
		t.Error("route_b still paused after ResumeRiverQueueTx")
	}
	var was bool
	inTx(t, pool, func(tx pgx.Tx) (err error) { was, err = store.ResumeRiverQueueTx(ctx, tx, "route_none"); return err })
	if was {
		t.Error("a queue without a row was paused")
	}
}

type dispatchArgs struct {
	Route string `json:"route"`
}

func (dispatchArgs) Kind() string { return "hookgate_dispatch" }

type otherArgs struct {
	Route string `json:"route"`
}

func (otherArgs) Kind() string { return "not_a_dispatch" }

// The overview reads River's queues' pauses and the dispatch jobs' backlog
// with the routes' own rows.
func TestRoutesOverviewReadsRiver(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	if err := store.InsertRoutes(ctx, pool, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	inTx(t, pool, func(tx pgx.Tx) error {
		if err := store.EnsureRiverQueueTx(ctx, tx, "route_a", true); err != nil {
			return err
		}
		return store.EnsureRiverQueueTx(ctx, tx, "route_b", false)
	})

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Each job's state and attempt, and what the backlog counts it as.
	jobs := []struct {
		args    river.JobArgs
		state   string
		attempt int
	}{
		{dispatchArgs{"a"}, "available", 0}, // pending
		{dispatchArgs{"a"}, "scheduled", 0}, // pending
		{dispatchArgs{"a"}, "available", 1}, // retrying
		{dispatchArgs{"a"}, "retryable", 1}, // retrying
		{dispatchArgs{"a"}, "running", 1},   // running
		{dispatchArgs{"a"}, "completed", 1}, // finished
		{dispatchArgs{"b"}, "running", 1},   // running
		{dispatchArgs{"c"}, "available", 0}, // another route
		{otherArgs{"a"}, "available", 0},    // another kind
	}
	for _, j := range jobs {
		res, err := client.Insert(ctx, j.args, &river.InsertOpts{Queue: "route_a"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE river_job SET state = $2::text::river_job_state, attempt = $3,
			finalized_at = CASE WHEN $2::text = 'completed' THEN now() END WHERE id = $1`, res.Job.ID, j.state, j.attempt); err != nil {
			t.Fatal(err)
		}
	}
	inTx(t, pool, func(tx pgx.Tx) error {
		return store.AddRouteCountsTx(ctx, tx, []store.RouteCounts{{Route: "a", Succeeded: 3, Failed: 2}, {Route: "b", Failed: 1}})
	})

	o, err := store.RoutesOverviewOf(ctx, pool, []string{"a", "b"}, []string{"route_a", "route_b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Routes) != 2 {
		t.Errorf("routes: %+v, want a and b", o.Routes)
	}
	if !slices.Equal(o.PausedQueues, []string{"route_a"}) {
		t.Errorf("paused queues %v, want [route_a]", o.PausedQueues)
	}
	backlog := map[string]int64{}
	for _, b := range o.Backlog {
		backlog[b.Route+" "+b.State] += b.Count
	}
	want := map[string]int64{"a pending": 2, "a retrying": 2, "a running": 1, "b running": 1}
	if len(backlog) != len(want) {
		t.Errorf("backlog %v, want %v", backlog, want)
	}
	for k, n := range want {
		if backlog[k] != n {
			t.Errorf("backlog %v, want %v", backlog, want)
			break
		}
	}
	recent := map[string]store.RouteCounts{}
	for _, c := range o.Recent {
		recent[c.Route] = c
	}
	if recent["a"].Succeeded != 3 || recent["a"].Failed != 2 || recent["b"].Failed != 1 {
		t.Errorf("recent counts %+v", o.Recent)
	}
}
