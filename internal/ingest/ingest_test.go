package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func setup(t *testing.T, cfg ingest.Config) (*ingest.Ingester, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.NewPool(t)
	logger := slog.New(slog.DiscardHandler)
	client, err := dispatch.NewInserter(pool, logger)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := fanout.Parse("a=github:push>builtin:log b=*:*>builtin:log", handlers.Default(logger).Names(), fanout.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	return ingest.NewIngester(pool, &receipts.Store{Retention: 72 * time.Hour}, dispatch.NewEnqueuer(client, routes, dispatch.EnqueuerConfig{}), cfg), pool
}

func push(id, scope, body string) providers.Delivery {
	return providers.Delivery{Provider: "github", Scope: scope, DeliveryID: id, Event: "push", ContentType: "application/json", Body: []byte(body)}
}

func count(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func describe(o ingest.Outcome) string {
	if errors.Is(o.Err, receipts.ErrConflict) {
		return "conflict"
	}
	if o.Err != nil {
		return o.Err.Error()
	}
	return fmt.Sprintf("%s/%d", o.Result.Status, o.Result.Routes)
}

// One batch, every case at once: each delivery gets its own outcome, and a
// duplicate or conflict never fails the others.
func TestAcceptManyOutcomes(t *testing.T) {
	t.Parallel()
	in, pool := setup(t, ingest.Config{})
	ctx := context.Background()
	if _, err := in.AcceptMany(ctx, []providers.Delivery{push("old", "1", `{"v":1}`), push("old2", "1", `{"v":1}`)}); err != nil {
		t.Fatal(err)
	}
	batch := []providers.Delivery{
		push("new", "1", `{"v":1}`),  // new: routes a and b
		push("new", "1", `{"v":1}`),  // a second copy in the same batch: duplicate
		push("new", "1", `{"v":2}`),  // the same key, another body, same batch: conflict
		push("old", "1", `{"v":1}`),  // stored before: duplicate
		push("old2", "1", `{"v":9}`), // stored before, another body: conflict
		push("new", "2", `{"v":1}`),  // another hook's copy of "new": a receipt, no dispatch
		push("other", "1", `{"v":1}`),
	}
	out, err := in.AcceptMany(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"accepted/2", "duplicate/0", "conflict", "duplicate/0", "conflict", "accepted/0", "accepted/2"}
	for i := range want {
		if got := describe(out[i]); got != want[i] {
			t.Errorf("delivery %d: %s, want %s", i, got, want[i])
		}
	}
	if r, d, j := count(t, pool, "hookgate_receipts"), count(t, pool, "hookgate_dispatches"), count(t, pool, "river_job"); r != 5 || d != 8 || j != 8 {
		t.Fatalf("receipts %d, dispatches %d, jobs %d; want 5, 8, 8", r, d, j)
	}
	var body string
	_ = pool.QueryRow(ctx, "SELECT convert_from(body, 'UTF8') FROM hookgate_receipts WHERE delivery_id = 'old2'").Scan(&body)
	if body != `{"v":1}` {
		t.Fatalf("a conflict changed the stored body to %s", body)
	}
}

// A commit that fails fails every delivery of its batch, and stores nothing.
func TestAcceptManyFailedCommit(t *testing.T) {
	t.Parallel()
	in, pool := setup(t, ingest.Config{})
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected commit failure'; END $$;
		CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON hookgate_receipts
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_at_commit();`)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			_, err := in.Accept(ctx, push(fmt.Sprint("d-", i), "1", `{}`))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ingest.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
	}
	if r, j := count(t, pool, "hookgate_receipts"), count(t, pool, "river_job"); r != 0 || j != 0 {
		t.Fatalf("receipts %d, jobs %d after failed commits", r, j)
	}
}

// Many concurrent requests through Accept: each gets its own answer, copies
// of one delivery resolve to one accepted, whatever batches they land in.
func TestAcceptConcurrentBatches(t *testing.T) {
	t.Parallel()
	in, pool := setup(t, ingest.Config{MaxBatch: 8})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for i := range 200 {
		wg.Go(func() {
			id := fmt.Sprint("d-", i%100) // every delivery twice
			res, err := in.Accept(context.Background(), push(id, "1", `{"same":true}`))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				got[err.Error()]++
				return
			}
			got[string(res.Status)]++
		})
	}
	wg.Wait()
	if got["accepted"] != 100 || got["duplicate"] != 100 || len(got) != 2 {
		t.Fatalf("outcomes %v", got)
	}
	if r, j := count(t, pool, "hookgate_receipts"), count(t, pool, "river_job"); r != 100 || j != 200 {
		t.Fatalf("receipts %d, jobs %d", r, j)
	}
}

// A delivery that the database refuses fails alone: the batch it came in is
// split until it is alone, its batch-mates are committed, and it is
// ErrRefused (the request's own 400), never ErrUnavailable.
func TestCommitManyRefusesOnlyTheFaultyDelivery(t *testing.T) {
	t.Parallel()
	in, pool := setup(t, ingest.Config{})
	ctx := context.Background()
	// Stands for any value the database refuses that validation missed.
	if _, err := pool.Exec(ctx, `ALTER TABLE hookgate_receipts ADD CONSTRAINT no_poison CHECK (delivery_id <> 'poison')`); err != nil {
		t.Fatal(err)
	}
	var batch []providers.Delivery
	for i := range 64 {
		id := fmt.Sprint("d-", i)
		if i == 37 {
			id = "poison"
		}
		batch = append(batch, push(id, "1", `{}`))
	}
	out := in.CommitMany(ctx, batch)
	for i, o := range out {
		switch {
		case i == 37 && !errors.Is(o.Err, ingest.ErrRefused):
			t.Errorf("the faulty delivery: %s, want ErrRefused", describe(o))
		case i == 37 && errors.Is(o.Err, ingest.ErrUnavailable):
			t.Errorf("the faulty delivery is also ErrUnavailable: %v", o.Err)
		case i != 37 && describe(o) != "accepted/2":
			t.Errorf("delivery %d: %s, want accepted/2", i, describe(o))
		}
	}
	if r, d, j := count(t, pool, "hookgate_receipts"), count(t, pool, "hookgate_dispatches"), count(t, pool, "river_job"); r != 63 || d != 126 || j != 126 {
		t.Fatalf("receipts %d, dispatches %d, jobs %d; want 63, 126, 126", r, d, j)
	}
}

// When the database itself fails, every delivery of the batch is
// ErrUnavailable at once: it is not split into 64 more failing transactions.
func TestCommitManyUnavailableFailsAllWithoutSplitting(t *testing.T) {
	t.Parallel()
	in, pool := setup(t, ingest.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the transaction cannot even begin
	var batch []providers.Delivery
	for i := range 8 {
		batch = append(batch, push(fmt.Sprint("d-", i), "1", `{}`))
	}
	for i, o := range in.CommitMany(ctx, batch) {
		if !errors.Is(o.Err, ingest.ErrUnavailable) || errors.Is(o.Err, ingest.ErrRefused) {
			t.Errorf("delivery %d: %v, want ErrUnavailable", i, o.Err)
		}
	}
	if r := count(t, pool, "hookgate_receipts"); r != 0 {
		t.Fatalf("%d receipts stored", r)
	}
}

// The same events reaching two hooks at once, in opposite orders, commit in
// two concurrent transactions that create the same dispatches: rows are
// inserted in key order, so they wait for one another and never deadlock,
// and each event is dispatched once per route.
func TestConcurrentBatchesOfTheSameEventsNeverDeadlock(t *testing.T) {
	t.Parallel()
	in, pool := setup(t, ingest.Config{})
	ctx := context.Background()
	const rounds, events = 20, 64
	for round := range rounds {
		var forward, backward []providers.Delivery
		for i := range events {
			id := fmt.Sprintf("r%d-e%d", round, i)
			forward = append(forward, push(id, "hook-1", `{}`))
			backward = append([]providers.Delivery{push(id, "hook-2", `{}`)}, backward...)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k, batch := range [][]providers.Delivery{forward, backward} {
			wg.Go(func() { _, errs[k] = in.AcceptMany(ctx, batch) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	var dispatches, distinct, jobs int
	err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (delivery_id, route)), (SELECT count(*) FROM river_job)
		FROM hookgate_dispatches`).Scan(&dispatches, &distinct, &jobs)
	if err != nil {
		t.Fatal(err)
	}
	if want := rounds * events * 2; dispatches != want || distinct != want || jobs != want {
		t.Fatalf("dispatches %d (%d distinct), jobs %d; want %d each", dispatches, distinct, jobs, want)
	}
}

// countAcks counts what an Ingester tells its Acks.
type countAcks struct{ arrived, acked atomic.Int64 }

func (c *countAcks) Arrived() { c.arrived.Add(1) }
func (c *countAcks) Acked()   { c.acked.Add(1) }

// Forwarding yields to deliveries waiting for their acknowledgement (package
// yield): the Ingester tells of each one before its commit, and of its answer
// only once the commit is done, a refused or conflicting delivery's included.
func TestAcksAreToldOfEachDeliveryWaitingAndOfItsAnswer(t *testing.T) {
	t.Parallel()
	acks := &countAcks{}
	in, pool := setup(t, ingest.Config{Acks: acks})
	ctx := context.Background()
	// Commits wait behind this lock until it is let go.
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, "LOCK TABLE hookgate_receipts IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := in.Accept(ctx, push(fmt.Sprint("waits-", i), "1", `{}`)); err != nil {
				t.Error(err)
			}
		})
	}
	dbtest.Eventually(t, 5*time.Second, fmt.Sprintf("%d deliveries waiting", n), func() error {
		if a := acks.arrived.Load(); a != n {
			return fmt.Errorf("%d arrived", a)
		}
		return nil
	})
	if a := acks.acked.Load(); a != 0 {
		t.Fatalf("%d acknowledgements told while every commit waits for the lock", a)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// A conflict is an answer too.
	if _, err := in.Accept(ctx, push("waits-0", "1", `{"other":1}`)); !errors.Is(err, receipts.ErrConflict) {
		t.Fatalf("a reused id with another body: %v, want ErrConflict", err)
	}
	if a, b := acks.arrived.Load(), acks.acked.Load(); a != n+1 || b != n+1 {
		t.Fatalf("after the commits: %d arrived, %d acknowledged; want %d each", a, b, n+1)
	}
}
