package store

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/dbtest"
)

// The batched statements of a claim and an outcome run on generic plans
// that a connection makes once and keeps (keyedPlans). Made on empty tables,
// the worst a gateway's first batch can meet, each plan still looks every
// key up in an index: none scans a whole table, and none joins by a hash or
// a merge, which would read every row of the table for every batch once it
// has grown.
func TestBatchedStatementsLookEachKeyUp(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range []struct {
		name   string
		sql    string
		params int
	}{
		{"the claim's leases", leaseSQL, 8},
		{"the claim's read", claimReadSQL, 4},
		{"the outcomes", outcomesSQL, 7},
		{"the outcomes' turns", endTurnsSQL, 4},
		{"the outcomes' leases given back", leasesBackSQL, 5},
	} {
		plan := genericPlan(ctx, t, conn, s.sql, s.params)
		for _, bad := range []string{"Seq Scan on", "Hash Join", "Merge Join", "Materialize"} {
			if strings.Contains(plan, bad) {
				t.Errorf("%s: the generic plan made on empty tables has a %s:\n%s", s.name, bad, plan)
			}
		}
		if !strings.Contains(plan, "Index Cond") {
			t.Errorf("%s: the generic plan looks nothing up by key:\n%s", s.name, plan)
		}
	}
}

// genericPlan is the plan a connection keeps for sql after keyedPlans.
func genericPlan(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string, params int) string {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT "+keyedPlans); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "PREPARE keyed AS "+sql); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE keyed") }()
	rows, err := tx.Query(ctx, "EXPLAIN EXECUTE keyed("+strings.TrimSuffix(strings.Repeat("NULL,", params), ",")+")")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// Of several search keys, the list reads the rarest one's index and looks
// the others up: rarestFirst puts it first, whatever order they were given
// in, and keeps the given order among keys as common as one another.
func TestRarestKeyFirst(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `
		INSERT INTO hookgate_search_keys (provider, delivery_id, name, value, received_at)
		SELECT 'stripe', 'evt_' || i, 'customer', 'cus_1', now() FROM generate_series(1, 50) i
		UNION ALL SELECT 'stripe', 'evt_' || i, 'invoice', 'in_' || i, now() FROM generate_series(1, 50) i`); err != nil {
		t.Fatal(err)
	}
	f := DeliveryFilter{Keys: []KeyValue{{"customer", "cus_1"}, {"invoice", "in_7"}, {"customer", "cus_none"}}}
	got, err := rarestFirst(ctx, conn, f)
	if err != nil {
		t.Fatal(err)
	}
	if want := []KeyValue{{"customer", "cus_none"}, {"invoice", "in_7"}, {"customer", "cus_1"}}; !slices.Equal(got.Keys, want) {
		t.Errorf("rarestFirst = %v, want %v", got.Keys, want)
	}
}
