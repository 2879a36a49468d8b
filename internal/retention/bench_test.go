package retention_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/retention"
)

// BenchmarkRetentionOfADay times retention's deletion of one day of
// deliveries: HOOKGATE_BENCH_DAY of them (default 10,000), each a receipt of
// about 4.5 KB, a succeeded dispatch and two search keys, all past their
// expires_at, deleted row by row in batches of 1,000 receipts with their ids
// kept (hookgate_expired_ids). The figure to compare is ns/op for the whole
// day, and how it grows with the day's size.
//
//	HOOKGATE_BENCH_DAY=100000 go test -run '^$' -bench RetentionOfADay -benchtime 1x ./internal/retention/
func BenchmarkRetentionOfADay(b *testing.B) {
	day := 10_000
	if v, err := strconv.Atoi(os.Getenv("HOOKGATE_BENCH_DAY")); err == nil && v > 0 {
		day = v
	}
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	seed := func(n int) {
		b.Helper()
		_, err := pool.Exec(ctx, `
			WITH r AS (
				INSERT INTO hookgate_receipts (provider, scope, delivery_id, event, content_type, headers, body, body_sha256, received_at, expires_at)
				SELECT 'stripe', '', 'evt_' || $2::bigint || '_' || i, 'invoice.paid', 'application/json', '{}',
					convert_to(repeat(md5(i::text), 140), 'UTF8'), sha256(i::text::bytea), now() - interval '31 days', now() - interval '1 second'
				FROM generate_series(1, $1) i
				RETURNING provider, delivery_id, received_at),
			d AS (
				INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation, state, attempts)
				SELECT provider, delivery_id, 'fwd', 1, 'succeeded', 1 FROM r)
			INSERT INTO hookgate_search_keys (provider, delivery_id, name, value, received_at)
			SELECT provider, delivery_id, k.name, k.name || '_' || delivery_id, received_at FROM r, (VALUES ('customer'), ('invoice')) k(name)`,
			n, time.Now().UnixNano())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE hookgate_receipts, hookgate_dispatches, hookgate_search_keys`); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		b.StopTimer()
		seed(day)
		b.StartTimer()
		n, err := retention.DeleteExpired(ctx, pool, retention.Policy{Retention: 720 * time.Hour})
		if err != nil || n != day {
			b.Fatalf("deleted %d of %d: %v", n, day, err)
		}
	}
	b.ReportMetric(float64(day), "deliveries/op")
}
