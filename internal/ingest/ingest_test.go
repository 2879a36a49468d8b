package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/jobs"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func setup(t *testing.T) (*ingest.Ingester, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.NewPool(t)
	logger := slog.New(slog.DiscardHandler)
	client, err := jobs.NewInsertClient(pool, logger)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := jobs.ParseRoutes("a=github:push>builtin:log b=*:*>builtin:log", jobs.DefaultHandlers(logger))
	if err != nil {
		t.Fatal(err)
	}
	return &ingest.Ingester{
		Pool:     pool,
		Receipts: &receipts.Store{Retention: 72 * time.Hour},
		Enqueuer: &jobs.Enqueuer{Client: client, Routes: routes},
	}, pool
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
	in, pool := setup(t)
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
	in, pool := setup(t)
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
	in, pool := setup(t)
	in.MaxBatch = 8
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
