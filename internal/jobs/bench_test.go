package jobs_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkPickupLatency measures, per dispatch, the time from the commit of
// its receipt to the forward target receiving it, with workers free:
// deliveries are committed one at a time, 2 ms apart.
//
//	go test -run '^$' -bench PickupLatency -benchtime 1000x ./internal/jobs/
func BenchmarkPickupLatency(b *testing.B) {
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	tg := newTarget(b, func(_ int, r *http.Request) (int, map[string]string) {
		mu.Lock()
		arrived[r.Header.Get("X-Hookgate-Delivery")] = time.Now()
		mu.Unlock()
		return 200, nil
	})
	bundle := setupDispatch(b, "fwd=github:push>"+tg.URL, nil, dispatchOpts{workers: 50})
	bundle.start(b)

	committed := make(map[string]time.Time, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("lat-%d", i)
		bundle.accept(b, pushDelivery(id))
		committed[id] = time.Now()
		time.Sleep(2 * time.Millisecond)
	}
	bundle.waitFinal(b, b.N)
	b.StopTimer()

	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, b.N)
	for id, c := range committed {
		lat = append(lat, arrived[id].Sub(c))
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}
