package hookgate_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate"
)

// A ledger: every paid Stripe invoice becomes one row of the service's own
// table, in the same transaction as its dispatch, so exactly once however
// often Stripe sends the event; the invoice as the table's key keeps it one
// row even when an operator forces a replay. The service's table is created
// by its own migration, which Run calls once the database is up. The route's
// order is all: a ledger appends, so every event is handed over, none
// superseded by a newer one of its invoice.
func Example() {
	// The configuration, filled in code: its zero fields take their
	// defaults (hookgate.ConfigFromEnv reads it as `gateway serve` does,
	// from the environment). Without DatabaseURL, Run starts a private
	// PostgreSQL under DataDir.
	cfg := hookgate.Config{
		DatabaseURL:   hookgate.Secret(os.Getenv("DATABASE_URL")),
		Addr:          "127.0.0.1:0",
		StripeSecrets: hookgate.SecretList{stripeSecret},
		Routes: []hookgate.Route{
			{Name: "ledger", Match: []string{"stripe:invoice.paid"}, Target: "builtin:ledger", Order: "all"},
		},
	}

	gw, err := hookgate.New(cfg,
		hookgate.WithHandler("ledger", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			var event struct {
				Data struct {
					Object struct {
						ID         string `json:"id"`
						AmountPaid int64  `json:"amount_paid"`
					} `json:"object"`
				} `json:"data"`
			}
			if err := d.Decode(&event); err != nil {
				return hookgate.Discard(err) // retrying cannot mend a payload
			}
			_, err := tx.Exec(ctx, `INSERT INTO ledger (invoice, cents) VALUES ($1, $2) ON CONFLICT (invoice) DO NOTHING`,
				event.Data.Object.ID, event.Data.Object.AmountPaid)
			return err
		}),
		hookgate.WithMigration(func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS ledger (invoice text PRIMARY KEY, cents bigint NOT NULL)`)
			return err
		}),
		hookgate.WithLogger(quiet),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	<-gw.Started()

	// Stripe sends the event, and again (as it does when an answer is lost).
	event := `{"id":"evt_ledger_1","type":"invoice.paid","created":1767225600,"data":{"object":{"id":"in_1","amount_paid":2000}}}`
	fmt.Println(stripeSends(gw.Addr(), event))
	fmt.Println(stripeSends(gw.Addr(), event))

	waitUntil(gw.Pool(), `SELECT count(*) > 0 FROM ledger`)
	var n, cents int64
	_ = gw.Pool().QueryRow(ctx, `SELECT count(*), sum(cents) FROM ledger`).Scan(&n, &cents)
	fmt.Println("ledger rows:", n, "cents:", cents)

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// 202 accepted
	// 200 duplicate
	// ledger rows: 1 cents: 2000
}

// A subscription's status, kept by a handler in the service's own table.
// Stripe's events arrive out of order; per entity (here the subscription) a
// handler is never given an event older than the newest its route handled,
// so an older status never overwrites a newer one.
func ExampleWithHandler() {
	os.Setenv("STRIPE_WEBHOOK_SECRET", stripeSecret)
	os.Setenv("GATEWAY_ROUTES", "subscriptions=stripe:customer.subscription.*>builtin:subscriptions")
	os.Setenv("GATEWAY_ADDR", "127.0.0.1:0")
	cfg, err := hookgate.ConfigFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	gw, err := hookgate.New(cfg,
		hookgate.WithHandler("subscriptions", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
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
			_, err := tx.Exec(ctx, `INSERT INTO subscriptions (id, status, event_time) VALUES ($1, $2, $3)
				ON CONFLICT (id) DO UPDATE SET status = excluded.status, event_time = excluded.event_time`,
				sub.ID, sub.Status, d.EventTime)
			return err
		}),
		hookgate.WithMigration(func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS subscriptions (
				id text PRIMARY KEY, status text NOT NULL, event_time timestamptz NOT NULL)`)
			return err
		}),
		hookgate.WithLogger(quiet),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	<-gw.Started()

	update := func(id string, created int64, status string) string {
		return fmt.Sprintf(`{"id":%q,"type":"customer.subscription.updated","created":%d,"data":{"object":{"id":"sub_1","status":%q}}}`,
			id, created, status)
	}
	// The newer event arrives first and is applied; the older one, delivered
	// late, is accepted and stored but never handed to the handler.
	fmt.Println(stripeSends(gw.Addr(), update("evt_sub_2", 1767225700, "active")))
	waitUntil(gw.Pool(), `SELECT count(*) > 0 FROM subscriptions WHERE status = 'active'`)
	fmt.Println(stripeSends(gw.Addr(), update("evt_sub_1", 1767225600, "trialing")))
	fmt.Println(stripeSends(gw.Addr(), update("evt_sub_3", 1767225800, "past_due")))
	waitUntil(gw.Pool(), `SELECT count(*) > 0 FROM subscriptions WHERE status = 'past_due'`)

	var status string
	_ = gw.Pool().QueryRow(ctx, `SELECT status FROM subscriptions WHERE id = 'sub_1'`).Scan(&status)
	fmt.Println("sub_1:", status)
	stop()
	<-done
	// Output:
	// 202 accepted
	// 202 accepted
	// 202 accepted
	// sub_1: past_due
}

// The service's own HTTP endpoints are served beside the gateway's, on the
// same listener, and reach the gateway's pool; its own River workers run on
// the gateway's River client, which it reaches once the gateway started.
func ExampleWithHTTPHandler() {
	os.Setenv("GATEWAY_ROUTES", "")
	os.Setenv("GATEWAY_ADDR", "127.0.0.1:0")
	cfg, err := hookgate.ConfigFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	var gw *hookgate.Gateway
	greeted := make(chan string, 1)
	gw, err = hookgate.New(cfg,
		hookgate.WithHTTPHandler("POST /greet/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The service's job is inserted through the gateway's River client.
			if _, err := gw.Client().Insert(r.Context(), greetArgs{Name: r.PathValue("name")}, nil); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		})),
		hookgate.WithRiverWorkers(func(w *river.Workers) error {
			return river.AddWorkerSafely(w, &greetWorker{greeted: greeted})
		}),
		hookgate.WithRiverQueues(map[string]river.QueueConfig{"greetings": {MaxWorkers: 2}}),
		hookgate.WithLogger(quiet),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	<-gw.Started()

	res, err := http.Post("http://"+gw.Addr()+"/greet/ada", "text/plain", nil)
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println(res.StatusCode)
	fmt.Println(<-greeted)
	stop()
	<-done
	// Output:
	// 202
	// hello, ada
}

// greetArgs is the service's own River job.
type greetArgs struct {
	Name string `json:"name"`
}

func (greetArgs) Kind() string { return "greet" }

// InsertOpts puts greetings in the service's own queue.
func (greetArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: "greetings"} }

type greetWorker struct {
	river.WorkerDefaults[greetArgs]
	greeted chan string
}

func (w *greetWorker) Work(ctx context.Context, job *river.Job[greetArgs]) error {
	w.greeted <- "hello, " + job.Args.Name
	return nil
}
