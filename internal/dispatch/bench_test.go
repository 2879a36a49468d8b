package dispatch_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/fanout"
)

// BenchmarkPickupLatency measures, per dispatch, the time from the commit of
// its receipt to the forward target receiving it, with workers free:
// deliveries are committed one at a time, 2 ms apart.
//
//	go test -run '^$' -bench PickupLatency -benchtime 1000x ./internal/dispatch/
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

// BenchmarkNoisyNeighbour measures a healthy route's latency (commit of the
// receipt to its target receiving it) for b.N deliveries, 5 ms apart, alone
// and beside a route whose target accepts connections and never answers,
// with 500 of its dispatches waiting, its workers all hung, and its timeout
// (30 s) longer than the run. Both routes have 50 workers, GATEWAY_WORKERS' default until 0.7.0.
//
//	go test -run '^$' -bench NoisyNeighbour -benchtime 400x ./internal/dispatch/
func BenchmarkNoisyNeighbour(b *testing.B) {
	for _, hungDispatches := range []int{0, 500} {
		b.Run(fmt.Sprintf("hung=%d", hungDispatches), func(b *testing.B) {
			var mu sync.Mutex
			arrived := map[string]time.Time{}
			healthy := newTarget(b, func(_ int, r *http.Request) (int, map[string]string) {
				mu.Lock()
				arrived[r.Header.Get("X-Hookgate-Delivery")] = time.Now()
				mu.Unlock()
				return 200, nil
			})
			release := make(chan struct{})
			hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			defer func() { close(release); hung.Close() }()
			table := fanout.Table{
				route("hung", hung.URL, 50, fanout.Rate{}, fanout.Circuit{}),
				route("healthy", healthy.URL, 50, fanout.Rate{}, fanout.Circuit{}),
			}
			bundle := setupDispatch(b, "", nil, dispatchOpts{table: table, forwardTimeout: 30 * time.Second})
			hungOnly := bundle.only(table[:1])
			for i := range hungDispatches {
				hungOnly.accept(b, pushDelivery(fmt.Sprintf("hung-%d", i)))
			}
			bundle = bundle.only(table[1:])
			bundle.start(b)
			time.Sleep(time.Second) // the hung route's workers take their dispatches

			committed := make(map[string]time.Time, b.N)
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("ok-%d", i)
				bundle.accept(b, pushDelivery(id))
				committed[id] = time.Now()
				time.Sleep(5 * time.Millisecond)
			}
			deadline := time.Now().Add(60 * time.Second)
			for {
				mu.Lock()
				n := len(arrived)
				mu.Unlock()
				if n == b.N || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.StopTimer()

			mu.Lock()
			defer mu.Unlock()
			lat := make([]time.Duration, 0, b.N)
			for id, c := range committed {
				at, ok := arrived[id]
				if !ok {
					b.Fatalf("%s never arrived", id)
				}
				lat = append(lat, at.Sub(c))
			}
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
		})
	}
}
