package receipts_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/searchkeys"
)

// BenchmarkInsertManyTx times one transaction storing a batch of receipts,
// as the ingester commits them: a batch of one, a full batch (64, the
// ingester's MaxBatch) of new deliveries, and a full batch half of whose keys
// are already stored (their hashes are read back and compared); and a full
// batch of new deliveries beside a million kept ids of expired receipts
// (hookgate_expired_ids, which each new receipt's key is looked up in); and
// a full batch whose deliveries have two search keys each, indexed with them.
//
//	go test -run '^$' -bench InsertManyTx -benchmem ./internal/receipts/
func BenchmarkInsertManyTx(b *testing.B) {
	for _, c := range []struct {
		name                  string
		size, stored, expired int
		keys                  bool
	}{
		{"new_1", 1, 0, 0, false},
		{"new_64", 64, 0, 0, false},
		{"half_stored_64", 64, 32, 0, false},
		{"new_64_beside_1M_expired_ids", 64, 0, 1_000_000, false},
		{"new_64_with_2_search_keys", 64, 0, 0, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			pool := dbtest.NewPool(b)
			if c.expired > 0 {
				if _, err := pool.Exec(ctx, `INSERT INTO hookgate_expired_ids (provider, delivery_id, scope, event, body_sha256, received_at, expires_at)
					SELECT 'github', 'expired-' || i, '7', 'push', sha256(i::text::bytea), now() - interval '40 days', now() + interval '300 days'
					FROM generate_series(1, $1) i`, c.expired); err != nil {
					b.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `VACUUM ANALYZE hookgate_expired_ids`); err != nil {
					b.Fatal(err)
				}
			}
			s := &receipts.Store{Retention: 72 * time.Hour}
			if c.keys {
				keys, err := searchkeys.New(searchkeys.Paths{"github": {"ref": "ref", "repo": "repository.full_name"}})
				if err != nil {
					b.Fatal(err)
				}
				s.Keys = keys
			}
			body := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"acme/api"},"pad":"` + strings.Repeat("x", 2048) + `"}`)
			batch := func(n int) []providers.Delivery {
				ds := make([]providers.Delivery, c.size)
				for i := range ds {
					id := n*c.size + i
					if i < c.stored && n > 0 {
						id = (n-1)*c.size + c.size - c.stored + i // new in the previous batch
					}
					ds[i] = providers.Delivery{
						Provider: "github", Scope: "7", DeliveryID: fmt.Sprintf("d-%d", id), Event: "push",
						Entity: "github:repo:1", EventTime: time.Now(), ContentType: "application/json",
						Headers: map[string]string{"X-GitHub-Event": "push", "X-GitHub-Hook-ID": "7"}, Body: body,
					}
					// Read before the transaction, as the ingester does.
					ds[i].Keys = s.KeysOf(ds[i])
				}
				return ds
			}
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				b.StopTimer()
				ds := batch(n)
				b.StartTimer()
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.InsertManyTx(ctx, tx, ds); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
