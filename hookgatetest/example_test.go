package hookgatetest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/hookgatetest"
)

// recordInvoice is the service's handler under test: a paid invoice becomes
// a row of its ledger.
func recordInvoice(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
	var event struct {
		Data struct {
			Object struct {
				ID         string `json:"id"`
				AmountPaid int64  `json:"amount_paid"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := d.Decode(&event); err != nil {
		return hookgate.Discard(err)
	}
	if event.Data.Object.ID == "" {
		return hookgate.Discard(errors.New("no invoice"))
	}
	_, err := tx.Exec(ctx, `INSERT INTO ledger (invoice, cents) VALUES ($1, $2)`, event.Data.Object.ID, event.Data.Object.AmountPaid)
	return err
}

// A handler tested as River's rivertest tests a worker: the delivery is built
// from a real Stripe payload and read as the gateway reads it; the handler
// runs in a transaction on the service's test database (its own migration
// applied inside it), which the test rolls back at the end.
func ExampleWork() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // the service's test database
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // nothing the test did stays
	if _, err := tx.Exec(ctx, `CREATE TABLE ledger (invoice text NOT NULL, cents bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	paid, err := hookgatetest.Stripe([]byte(`{"id":"evt_1","type":"invoice.paid","created":1767225600,
		"data":{"object":{"id":"in_1","amount_paid":2000}}}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(paid.Event, paid.Entity, paid.EventTime.UTC().Format("2006-01-02"))
	res := hookgatetest.Work(ctx, tx, recordInvoice, paid)
	fmt.Println(res.State, res.Err)

	odd, _ := hookgatetest.Stripe([]byte(`{"id":"evt_2","type":"invoice.paid","created":1767225600,"data":{"object":{}}}`))
	res = hookgatetest.Work(ctx, tx, recordInvoice, odd)
	fmt.Println(res.State, res.Err)

	var rows int
	_ = tx.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&rows)
	fmt.Println("ledger rows:", rows)
	// Output:
	// invoice.paid stripe:in_1 2026-01-01
	// succeeded <nil>
	// discarded no invoice
	// ledger rows: 1
}
