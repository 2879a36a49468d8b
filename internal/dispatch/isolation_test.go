package dispatch_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/routes"
)

// route is a forward route to target with the given limits.
func route(name, target string, concurrency int, rate fanout.Rate, circuit fanout.Circuit) fanout.Route {
	return fanout.Route{Name: name, Matches: []fanout.Match{{Provider: "github", Pattern: "push"}}, Target: target,
		Concurrency: concurrency, Rate: rate, Circuit: circuit, Timeout: 30 * time.Second, MaxAttempts: 10}
}

// hungTarget accepts requests and answers none until the test ends; it counts
// those it holds.
type hungTarget struct {
	*httptest.Server
	inFlight, most atomic.Int64
	release        func()
}

func newHungTarget(t *testing.T) *hungTarget {
	release := make(chan struct{})
	h := &hungTarget{release: sync.OnceFunc(func() { close(release) })}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server notices a client hanging up
		n := h.inFlight.Add(1)
		for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		h.inFlight.Add(-1)
	}))
	t.Cleanup(func() { h.release(); h.Close() })
	return h
}

// A target that accepts connections and never answers holds its own route's
// workers (its concurrency, in each process) and no other route's: the
// healthy route's deliveries all arrive while every one of the hung route's
// many dispatches is still waiting. Before routes had queues of their own,
// the hung route's dispatches took every worker and the healthy ones waited
// behind them.
func TestHungTargetHoldsOnlyItsOwnRoute(t *testing.T) {
	t.Parallel()
	hung := newHungTarget(t)
	healthy := newTarget(t, nil)
	table := fanout.Table{
		route("hung", hung.URL, 2, fanout.Rate{}, fanout.Circuit{}),
		route("healthy", healthy.URL, 2, fanout.Rate{}, fanout.Circuit{}),
	}
	// Two processes on one database, each with the routes' concurrency.
	a := setupDispatch(t, "", nil, dispatchOpts{table: table, forwardTimeout: 30 * time.Second})
	b := setupDispatch(t, "", nil, dispatchOpts{table: table, forwardTimeout: 30 * time.Second, pool: a.pool})

	hungOnly := a.only(fanout.Table{table[0]})
	healthyOnly := a.only(fanout.Table{table[1]})
	for i := range 60 {
		hungOnly.accept(t, pushDelivery(fmt.Sprintf("hung-%d", i)))
	}
	for i := range 20 {
		healthyOnly.accept(t, pushDelivery(fmt.Sprintf("ok-%d", i)))
	}
	a.start(t)
	b.start(t)
	t.Cleanup(hung.release) // before the workers stop: they wait for their forwards
	for i := range 20 {
		dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: fmt.Sprintf("ok-%d", i), Route: "healthy"}, dispatch.Succeeded)
	}
	if n := len(healthy.requests()); n != 20 {
		t.Fatalf("the healthy target got %d requests, want 20", n)
	}
	// The hung route holds two workers in each process, no more.
	dbtest.Eventually(t, 10*time.Second, "the hung target holds 4 requests", func() error {
		if in := hung.inFlight.Load(); in < 4 {
			return fmt.Errorf("it holds %d", in)
		}
		return nil
	})
	// A fifth request is a negative with no signal to await (the guard just
	// does not admit it): a fixed wait gives one time to arrive.
	time.Sleep(300 * time.Millisecond)
	if in, most := hung.inFlight.Load(), hung.most.Load(); in != 4 || most != 4 {
		t.Fatalf("the hung target holds %d requests (at most %d), want 4: concurrency 2 in each of 2 processes", in, most)
	}
	v, err := routes.Get(context.Background(), a.pool, table, "hung")
	if err != nil {
		t.Fatal(err)
	}
	if v.Backlog.Running != 4 || v.Backlog.Pending != 56 {
		t.Fatalf("the hung route's backlog is %+v, want 4 running and 56 pending", v.Backlog)
	}
}

// A route's rate holds for all gateway processes together: two processes
// forwarding one route limited to 4/s start no more than 4 attempts in any
// second.
func TestRateHoldsAcrossProcesses(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	table := fanout.Table{route("limited", tg.URL, 8, fanout.Rate{N: 4, Per: time.Second}, fanout.Circuit{})}
	a := setupDispatch(t, "", nil, dispatchOpts{table: table})
	b := setupDispatch(t, "", nil, dispatchOpts{table: table, pool: a.pool})
	const n = 14
	for i := range n {
		a.accept(t, pushDelivery(fmt.Sprintf("r-%d", i)))
	}
	a.start(t)
	b.start(t)
	a.waitFinal(t, n)
	got := tg.requests()
	if len(got) != n {
		t.Fatalf("the target got %d requests, want %d", len(got), n)
	}
	at := make([]time.Time, len(got))
	for i, r := range got {
		at[i] = r.at
	}
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	// Any 5 arrivals span a second, less what the network may shift an
	// arrival by after its start was counted.
	for i := 0; i+4 < len(at); i++ {
		if span := at[i+4].Sub(at[i]); span < 900*time.Millisecond {
			t.Fatalf("arrivals %d to %d came within %s: more than 4 in a second", i, i+4, span)
		}
	}
}

// After circuit.failures consecutive failures no attempt starts for the
// cooldown; then one probe runs: a failed probe opens the circuit again, a
// successful one closes it and the waiting dispatches go out. Waiting spends
// no attempt: each dispatch's attempt numbers, as its target saw them, run
// 1, 2, ... without a gap, and its row counts exactly those.
func TestCircuitOpensProbesAndCloses(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, func(n int, _ *http.Request) (int, map[string]string) {
		if n <= 4 {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusOK, nil
	})
	table := fanout.Table{route("flaky", tg.URL, 1, fanout.Rate{}, fanout.Circuit{Failures: 3, Cooldown: 1500 * time.Millisecond})}
	b := setupDispatch(t, "", nil, dispatchOpts{table: table})
	const n = 6
	for i := range n {
		b.accept(t, pushDelivery(fmt.Sprintf("c-%d", i)))
	}
	b.start(t)

	// Open after the third failure.
	dbtest.Eventually(t, 15*time.Second, "the target gets 3 requests", func() error {
		if n := len(tg.requests()); n < 3 {
			return fmt.Errorf("it got %d", n)
		}
		return nil
	})
	// The third failure is recorded after the target answered: await the open
	// circuit, well inside the 1.5 s cooldown.
	dbtest.Eventually(t, time.Second, "the circuit open after 3 failures", func() error {
		if v, err := routes.Get(context.Background(), b.pool, table, "flaky"); err != nil || v.Circuit != routes.CircuitOpen {
			return fmt.Errorf("the circuit is %q (%v)", v.Circuit, err)
		}
		return nil
	})
	b.waitFinal(t, n)

	got := tg.requests()
	for i := range got {
		if i+1 < len(got) {
			t.Logf("request %d: %s %s, then %s", i+1, got[i].header.Get("X-Hookgate-Delivery"), got[i].header.Get("X-Hookgate-Attempt"),
				got[i+1].at.Sub(got[i].at))
		}
	}
	// Request 4 is the first probe (a cooldown after request 3), request 5
	// the second (a cooldown after the first failed).
	for _, i := range []int{3, 4} {
		if gap := got[i].at.Sub(got[i-1].at); gap < 1400*time.Millisecond {
			t.Errorf("request %d came %s after request %d, inside the 1.5 s cooldown", i+1, gap, i)
		}
	}
	// Every request after the fifth is a waiting dispatch going out at once.
	if len(got) < 5 {
		t.Fatalf("the target got %d requests", len(got))
	}
	attempts := map[string][]int{}
	for _, r := range got {
		id := r.header.Get("X-Hookgate-Delivery")
		a, _ := strconv.Atoi(r.header.Get("X-Hookgate-Attempt"))
		attempts[id] = append(attempts[id], a)
	}
	for i := range n {
		id := fmt.Sprintf("c-%d", i)
		row := b.row(t, id, "flaky")
		seen := attempts[id]
		for j, a := range seen {
			if a != j+1 {
				t.Errorf("%s: attempts seen by the target %v, want 1, 2, ... without a gap", id, seen)
				break
			}
		}
		if row.state != dispatch.Succeeded || row.attempts != len(seen) {
			t.Errorf("%s: %s after %d attempts, the target saw %d", id, row.state, row.attempts, len(seen))
		}
	}
	if v, _ := routes.Get(context.Background(), b.pool, table, "flaky"); v.Circuit != routes.CircuitClosed {
		t.Errorf("after a successful probe the circuit is %q, want closed", v.Circuit)
	}
}

// A pause is stored in the database: a gateway that starts later does not
// attempt the paused route's dispatches, which are created (pending) as
// deliveries arrive, and goes on once the route is resumed. Both are in the
// audit log.
func TestPauseHoldsAcrossARestart(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	table := fanout.Table{route("ci", tg.URL, 4, fanout.Rate{}, fanout.DefaultCircuit)}
	first := setupDispatch(t, "", nil, dispatchOpts{table: table})
	ctx := context.Background()
	v, err := routes.Pause(ctx, first.pool, first.client, table, "ci", routes.Change{Actor: "test", Reason: "target migrating"})
	if err != nil || v.State != "paused" || v.PauseReason == nil || *v.PauseReason != "target migrating" {
		t.Fatalf("pause: %+v, %v", v, err)
	}
	// Pausing again changes nothing.
	if _, err := routes.Pause(ctx, first.pool, first.client, table, "ci", routes.Change{Actor: "other", Reason: "again"}); err != nil {
		t.Fatal(err)
	}

	// A new process (new River client, new guard) on the same database.
	second := setupDispatch(t, "", nil, dispatchOpts{table: table, pool: first.pool})
	for i := range 3 {
		second.accept(t, pushDelivery(fmt.Sprintf("p-%d", i)))
	}
	second.start(t)
	// A paused route's River queue is paused: nothing fetches its dispatches,
	// so no signal comes; a fixed wait gives a wrongly fetched one time to run.
	time.Sleep(1500 * time.Millisecond)
	if n := len(tg.requests()); n != 0 {
		t.Fatalf("a paused route's target got %d requests", n)
	}
	for i := range 3 {
		if row := second.row(t, fmt.Sprintf("p-%d", i), "ci"); row.state != dispatch.Pending || row.attempts != 0 {
			t.Fatalf("a paused route's dispatch is %s after %d attempts, want pending", row.state, row.attempts)
		}
	}
	if v, err := routes.Resume(ctx, first.pool, first.client, table, "ci", routes.Change{Actor: "test"}); err != nil || v.State != "active" {
		t.Fatalf("resume: %+v, %v", v, err)
	}
	second.waitFinal(t, 3)
	if n := len(tg.requests()); n != 3 {
		t.Fatalf("after resume the target got %d requests, want 3", n)
	}

	var actions []string
	rows, err := first.pool.Query(ctx, "SELECT action || ':' || actor FROM hookgate_audit ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		_ = rows.Scan(&a)
		actions = append(actions, a)
	}
	if !slices.Equal(actions, []string{"pause:test", "resume:test"}) {
		t.Fatalf("audit log %v, want one pause and one resume", actions)
	}
}

// Pausing or resuming a route that is not configured is ErrNotFound.
func TestPauseOfAnUnknownRoute(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, "ci=github:push>http://127.0.0.1:1/x", nil)
	if _, err := routes.Pause(context.Background(), b.pool, b.client, b.table, "nope", routes.Change{Actor: "t"}); err != routes.ErrNotFound {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}
