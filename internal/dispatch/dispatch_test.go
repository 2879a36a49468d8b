package dispatch_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/yield"
)

type dispatchBundle struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	enq    *dispatch.Enqueuer
	store  *receipts.Store
	guard  *routes.Guard
	table  fanout.Table
}

type dispatchOpts struct {
	forwardSecrets []string
	forwardTimeout time.Duration
	workers        int
	pool           *pgxpool.Pool // share another bundle's database
	table          fanout.Table  // the routes, with their limits, instead of parsing them
	logger         *slog.Logger  // the worker's; default discards
}

func setupDispatch(t testing.TB, spec string, handlers handlers.Registry, opts ...dispatchOpts) *dispatchBundle {
	t.Helper()
	var o dispatchOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.workers == 0 {
		o.workers = 4
	}
	if o.forwardTimeout == 0 {
		o.forwardTimeout = 5 * time.Second
	}
	pool := o.pool
	if pool == nil {
		pool = dbtest.NewPool(t)
	}
	logger := o.logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rs := o.table
	if rs == nil {
		var err error
		if rs, err = fanout.Parse(spec, handlers.Names(), fanout.Defaults{}); err != nil {
			t.Fatal(err)
		}
	}
	// As a gateway starts: the routes' shared state first.
	if err := routes.Sync(context.Background(), pool, rs); err != nil {
		t.Fatal(err)
	}
	inserter, err := dispatch.NewInserter(pool, logger)
	if err != nil {
		t.Fatal(err)
	}
	guard := routes.NewGuard(pool, rs, inserter, logger)
	if err := guard.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	store := &receipts.Store{Retention: 72 * time.Hour}
	w := dispatch.NewWorker(pool, rs, store, handlers, forward.New(o.forwardSecrets, o.forwardTimeout, o.workers),
		guard, yield.Never(), metrics.Discard(), logger)
	client, err := dispatch.NewClient(pool, dispatch.ClientConfig{Dispatch: w, Workers: o.workers, ForwardTimeout: o.forwardTimeout, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return &dispatchBundle{pool: pool, client: client, enq: dispatch.NewEnqueuer(client, rs, dispatch.EnqueuerConfig{MaxAttempts: 3}), store: store,
		guard: guard, table: rs}
}

// only is b with an enqueuer of the given routes alone: deliveries it
// accepts are dispatched to those routes only.
func (b *dispatchBundle) only(routes fanout.Table) *dispatchBundle {
	c := *b
	c.enq = dispatch.NewEnqueuer(b.client, routes, dispatch.EnqueuerConfig{MaxAttempts: 3})
	return &c
}

func (b *dispatchBundle) accept(t testing.TB, d providers.Delivery) int {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := b.store.InsertTx(ctx, tx, d); err != nil {
		t.Fatal(err)
	}
	n, err := b.enq.EnqueueTx(ctx, tx, d.Provider, d.DeliveryID, d.Event)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *dispatchBundle) start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.guard.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	dbtest.StartRiver(t, b.client)
}

// A builtin handler receives the first receipt's exact bytes and identity.
func TestBuiltinReceivesTheStoredDelivery(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []handlers.Delivery
	handlers := handlers.Registry{"capture": func(_ context.Context, _ pgx.Tx, d handlers.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, d)
		return nil
	}}
	b := setupDispatch(t, "cap=github:push>builtin:capture", handlers)
	body := []byte("{\"ref\":\"refs/heads/main\",\n \"repository\":{\"id\":1,\"pushed_at\":1767323045}}")
	d := providers.Delivery{Provider: "github", Scope: "1", DeliveryID: "p-1", Event: "push", Entity: "github:push:1:refs/heads/main",
		EventTime: time.Unix(1767323045, 0), ContentType: "application/json", Body: body}
	if n := b.accept(t, d); n != 1 {
		t.Fatalf("enqueued %d", n)
	}
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "p-1", Route: "cap"}, dispatch.Succeeded)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !bytes.Equal(got[0].Body, body) || got[0].Route != "cap" || got[0].Generation != 1 || got[0].Attempt != 1 ||
		got[0].Entity != d.Entity || got[0].Event != "push" {
		t.Fatalf("handler got %+v (body %q)", got, got[0].Body)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
