package console

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/rejections"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/store"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// BenchmarkPageQueries times each console page's queries on a big table:
// HOOKGATE_BENCH_RECEIPTS receipts (default 1,000,000), each with one
// dispatch, received over the last 7 days (so about 143,000 in the last
// day), 2% of them discarded. The setup takes a minute or two.
//
//	go test -run '^$' -bench PageQueries -benchtime 20x ./internal/console/
func BenchmarkPageQueries(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("HOOKGATE_BENCH_RECEIPTS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	t0 := time.Now()
	_, err := pool.Exec(ctx, `
		INSERT INTO hookgate_receipts (provider, scope, delivery_id, event, entity, content_type, body, body_sha256, received_at, expires_at)
		SELECT CASE WHEN i % 3 = 0 THEN 'stripe' ELSE 'github' END, '', 'd-' || i,
			CASE WHEN i % 3 = 0 THEN 'invoice.paid' ELSE 'push' END, 'e:' || (i % 1000), 'application/json',
			'{"n":1}', decode(md5(i::text) || md5(i::text), 'hex'),
			now() - make_interval(secs => i * (604800.0 / $1)), now() + interval '30 days'
		FROM generate_series(1, $1) i`, n)
	if err != nil {
		b.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
		INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation, state, attempts, created_at, updated_at)
		SELECT provider, delivery_id, 'fwd', 1, CASE WHEN hashtext(delivery_id) % 50 = 0 THEN 'discarded' ELSE 'succeeded' END, 1,
			received_at, received_at
		FROM hookgate_receipts`)
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range []string{"hookgate_receipts", "hookgate_dispatches"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d receipts and dispatches stored in %s", n, time.Since(t0).Round(time.Second))

	table, err := fanout.Parse("fwd=*:*>http://127.0.0.1:1/", nil, fanout.Defaults{Concurrency: 10, Timeout: time.Second, MaxAttempts: 5})
	if err != nil {
		b.Fatal(err)
	}
	if err := routes.Sync(ctx, pool, table); err != nil {
		b.Fatal(err)
	}
	c := New(Config{Pool: pool, Routes: table, Logger: slog.New(slog.DiscardHandler), Classify: func(error) (int, string) { return 500, "" }})
	day := time.Now().Add(-24 * time.Hour)
	if os.Getenv("HOOKGATE_BENCH_EXPLAIN") != "" {
		explain(b, pool, store.DeliveriesPerBucketSQL, day, chartRanges[1].bucket.Seconds(), deliveries.States)
		sql, args := deliveries.CountSQL(deliveries.Filter{State: "discarded", Since: &day})
		explain(b, pool, sql, args...)
	}
	for _, q := range []struct {
		name string
		run  func() error
	}{
		{"overview/charts-hour", func() error { _, err := c.readCharts(ctx, chartRanges[0]); return err }},
		{"overview/charts-day", func() error { _, err := c.readCharts(ctx, chartRanges[1]); return err }},
		{"overview/routes", func() error { _, err := routes.List(ctx, pool, table); return err }},
		{"deliveries/first-page", func() error { _, _, err := deliveries.List(ctx, pool, deliveries.Filter{}, 50, nil); return err }},
		{"deliveries/provider-event", func() error {
			_, _, err := deliveries.List(ctx, pool, deliveries.Filter{Provider: "stripe", Event: "invoice.*"}, 50, nil)
			return err
		}},
		{"deliveries/state-discarded", func() error {
			items, _, err := deliveries.List(ctx, pool, deliveries.Filter{State: "discarded"}, 50, nil)
			if err == nil {
				_, err = withFailingRoutes(ctx, pool, items)
			}
			return err
		}},
		{"deliveries/last-day-page-2", func() error {
			f := deliveries.Filter{Since: &day}
			_, next, err := deliveries.List(ctx, pool, f, 50, nil)
			if err == nil && next != nil {
				_, _, err = deliveries.List(ctx, pool, f, 50, next)
			}
			return err
		}},
		{"delivery/show-and-timeline", func() error {
			if _, err := deliveries.Show(ctx, pool, "github", "d-"+strconv.Itoa(n/2+2-(n/2+2)%3+1)); err != nil {
				return err
			}
			_, err := c.timeline(ctx, "github", "d-"+strconv.Itoa(n/2+2-(n/2+2)%3+1))
			return err
		}},
		{"bulk-confirm/count-discarded-last-day", func() error {
			_, err := deliveries.Count(ctx, pool, deliveries.Filter{State: "discarded", Since: &day})
			return err
		}},
		{"rejections", func() error { _, err := rejections.List(ctx, pool); return err }},
		{"audit", func() error {
			entries, _, err := audit.List(ctx, pool, 100, "")
			if err == nil {
				_, err = c.auditRows(ctx, entries)
			}
			return err
		}},
	} {
		b.Run(q.name, func(b *testing.B) {
			for b.Loop() {
				if err := q.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// explain logs the plan PostgreSQL ran for a query, with its timings.
func explain(b *testing.B, pool *pgxpool.Pool, sql string, args ...any) {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if set := os.Getenv("HOOKGATE_BENCH_EXPLAIN"); strings.HasPrefix(set, "SET") {
		if _, err := tx.Exec(ctx, set); err != nil {
			b.Fatal(err)
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE) "+sql, args...)
	if err != nil {
		b.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	b.Log("\n" + strings.Join(lines, "\n"))
}
