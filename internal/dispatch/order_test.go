package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/store"
)

// orderTable is a forward route to url and a builtin route to ledger, both
// with the given order and window, for Stripe's subscription events.
func orderTable(t *testing.T, url string, order fanout.Order, window time.Duration) fanout.Table {
	t.Helper()
	rs, err := fanout.Parse("fwd=stripe:customer.subscription.*>"+url+" ledger=stripe:customer.subscription.*>builtin:ledger",
		[]string{"ledger"}, fanout.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rs {
		rs[i].Order, rs[i].OrderWindow = order, window
	}
	return rs
}

// ledger is a builtin handler that appends every event it is handed to a
// table in its transaction, and tells whether two of one entity were ever
// handled at once.
type ledger struct {
	mu      sync.Mutex
	running map[string]int
	overlap bool
}

func newLedger(t *testing.T, b *dispatchBundle) *ledger {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS test_ledger (
		seq bigserial PRIMARY KEY, delivery_id text NOT NULL UNIQUE, entity text NOT NULL, event_time timestamptz NOT NULL, late boolean NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &ledger{running: map[string]int{}}
}

func (l *ledger) handle(ctx context.Context, tx pgx.Tx, d handlers.Delivery) error {
	l.mu.Lock()
	l.running[d.Entity]++
	if l.running[d.Entity] > 1 {
		l.overlap = true
	}
	l.mu.Unlock()
	defer func() { l.mu.Lock(); l.running[d.Entity]--; l.mu.Unlock() }()
	time.Sleep(2 * time.Millisecond) // long enough for a second one to overlap, were it let in
	_, err := tx.Exec(ctx, "INSERT INTO test_ledger (delivery_id, entity, event_time, late) VALUES ($1, $2, $3, $4)",
		d.DeliveryID, d.Entity, d.EventTime, d.Late)
	return err
}

type ledgerRow struct {
	id   string
	late bool
}

func ledgerRows(t *testing.T, b *dispatchBundle) []ledgerRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT delivery_id, late FROM test_ledger ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledgerRow, error) {
		var x ledgerRow
		return x, r.Scan(&x.id, &x.late)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A route with order all, for a target that sums or appends: every event is
// handled, none superseded, one at a time per entity (two processes
// working the route), the oldest of those waiting at once first; an event
// older than one already handled comes after it, late (X-Hookgate-Late,
// Delivery.Late), and is handled all the same.
func TestOrderAllHandlesEveryEventOneAtATimeOldestFirst(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inFlight, overlapped := 0, false
	tg := newTarget(t, func(int, *http.Request) (int, map[string]string) {
		mu.Lock()
		inFlight++
		if inFlight > 1 {
			overlapped = true
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return http.StatusOK, nil
	})
	var l *ledger
	hs := handlers.Registry{"ledger": func(ctx context.Context, tx pgx.Tx, d handlers.Delivery) error { return l.handle(ctx, tx, d) }}
	table := orderTable(t, tg.URL, fanout.OrderAll, 0)
	b := setupDispatch(t, "", hs, dispatchOpts{table: table, workers: 4})
	other := setupDispatch(t, "", hs, dispatchOpts{table: table, workers: 4, pool: b.pool})
	l = newLedger(t, b)

	base := time.Unix(1_767_000_000, 0)
	order := rand.Perm(12)
	for _, i := range order {
		b.accept(t, subscriptionEvent(i+1, base.Add(time.Duration(i+1)*time.Second)))
	}
	b.start(t)
	other.start(t)
	b.waitFinal(t, 24)

	want := make([]string, 12)
	for i := range want {
		want[i] = fmt.Sprintf("evt_%03d", i+1)
	}
	var sent []string
	for _, r := range tg.requests() {
		if r.header.Get("X-Hookgate-Late") != "" {
			t.Errorf("%s was sent late while every event waited at once", r.header.Get("X-Hookgate-Delivery"))
		}
		sent = append(sent, r.header.Get("X-Hookgate-Delivery"))
	}
	if !slices.Equal(sent, want) {
		t.Fatalf("order of insertion %v: the target got %v, want every event, oldest first: %v", order, sent, want)
	}
	var handled []string
	for _, r := range ledgerRows(t, b) {
		handled = append(handled, r.id)
	}
	if !slices.Equal(handled, want) {
		t.Fatalf("order of insertion %v: the ledger holds %v, want %v", order, handled, want)
	}

	// An event older than every one handled: late, and handled.
	b.accept(t, subscriptionEvent(0, base))
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: "evt_000", Route: "fwd"}, dispatch.Succeeded)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: "evt_000", Route: "ledger"}, dispatch.Succeeded)
	got := tg.requests()
	if last := got[len(got)-1]; last.header.Get("X-Hookgate-Delivery") != "evt_000" || last.header.Get("X-Hookgate-Late") != "true" {
		t.Fatalf("the late event reached the target as %v", last.header)
	}
	rows := ledgerRows(t, b)
	if last := rows[len(rows)-1]; last.id != "evt_000" || !last.late || len(rows) != 13 {
		t.Fatalf("the ledger's last row %+v of %d; want evt_000, late, of 13", last, len(rows))
	}
	var superseded int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_dispatches WHERE state = 'superseded'").Scan(&superseded); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if superseded != 0 || overlapped || l.overlap {
		t.Fatalf("superseded %d; two forwards of the entity at once %v; two handlers at once %v", superseded, overlapped, l.overlap)
	}
	var turns int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_turns").Scan(&turns); err != nil || turns != 0 {
		t.Fatalf("%d turns left after every dispatch ended (%v)", turns, err)
	}
}

// An order window holds each new dispatch back: an older event that arrives
// within it, after a newer one of its entity, is handled first, in order,
// on a route with order latest as well as all.
func TestOrderWindowLetsAnOlderEventInFlightGoFirst(t *testing.T) {
	t.Parallel()
	for _, order := range []fanout.Order{fanout.OrderLatest, fanout.OrderAll} {
		t.Run(string(order), func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t, nil)
			var l *ledger
			hs := handlers.Registry{"ledger": func(ctx context.Context, tx pgx.Tx, d handlers.Delivery) error { return l.handle(ctx, tx, d) }}
			b := setupDispatch(t, "", hs, dispatchOpts{table: orderTable(t, tg.URL, order, 2*time.Second)})
			l = newLedger(t, b)
			b.start(t)
			base := time.Unix(1_767_000_000, 0)
			b.accept(t, subscriptionEvent(2, base.Add(2*time.Second)))
			time.Sleep(300 * time.Millisecond) // the older one arrives after, within the window
			b.accept(t, subscriptionEvent(1, base.Add(time.Second)))
			b.waitFinal(t, 4)
			var sent []string
			for _, r := range tg.requests() {
				sent = append(sent, r.header.Get("X-Hookgate-Delivery")+" late="+strconv.FormatBool(r.header.Get("X-Hookgate-Late") == "true"))
			}
			if want := []string{"evt_001 late=false", "evt_002 late=false"}; !slices.Equal(sent, want) {
				t.Fatalf("the target got %v, want %v", sent, want)
			}
			var handled []string
			for _, r := range ledgerRows(t, b) {
				handled = append(handled, r.id)
			}
			if want := []string{"evt_001", "evt_002"}; !slices.Equal(handled, want) {
				t.Fatalf("the ledger holds %v, want %v", handled, want)
			}
		})
	}
}

// A route with order none keeps no order and takes no lease: an older event
// after a newer one is forwarded, not superseded, and never late.
func TestOrderNoneHandsEventsAsTheyCome(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	table := orderTable(t, tg.URL, fanout.OrderNone, 0)[:1]
	b := setupDispatch(t, "", handlers.Registry{}, dispatchOpts{table: table})
	b.start(t)
	base := time.Unix(1_767_000_000, 0)
	b.accept(t, subscriptionEvent(2, base.Add(2*time.Second)))
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: "evt_002", Route: "fwd"}, dispatch.Succeeded)
	b.accept(t, subscriptionEvent(1, base.Add(time.Second)))
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: "evt_001", Route: "fwd"}, dispatch.Succeeded)
	for _, r := range tg.requests() {
		if r.header.Get("X-Hookgate-Late") != "" {
			t.Fatalf("a route with order none sent %s late", r.header.Get("X-Hookgate-Delivery"))
		}
	}
	var leases, marks int
	if err := b.pool.QueryRow(context.Background(), "SELECT (SELECT count(*) FROM hookgate_leases), (SELECT count(*) FROM hookgate_watermarks)").Scan(&leases, &marks); err != nil {
		t.Fatal(err)
	}
	if leases != 0 || marks != 0 {
		t.Fatalf("a route with order none left %d leases and %d watermarks", leases, marks)
	}
}

// A superseded dispatch names the newer event that superseded it, for a
// forward and for a builtin, in the delivery's dispatches and in one log
// line at INFO each.
func TestASupersededDispatchNamesTheEventThatSupersededIt(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	var l *ledger
	hs := handlers.Registry{"ledger": func(ctx context.Context, tx pgx.Tx, d handlers.Delivery) error { return l.handle(ctx, tx, d) }}
	var logs dbtest.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	b := setupDispatch(t, "", hs, dispatchOpts{table: orderTable(t, tg.URL, fanout.OrderLatest, 0), logger: logger})
	l = newLedger(t, b)
	b.start(t)
	base := time.Unix(1_767_000_000, 0)
	b.accept(t, subscriptionEvent(2, base.Add(2*time.Second)))
	b.waitFinal(t, 2)
	b.accept(t, subscriptionEvent(1, base.Add(time.Second)))
	b.waitFinal(t, 4)
	ds, err := store.DispatchesOf(context.Background(), b.pool, "stripe", "evt_001")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 {
		t.Fatalf("%d dispatches of evt_001", len(ds))
	}
	for _, d := range ds {
		if d.State != dispatch.Superseded || d.SupersededBy != "evt_002" {
			t.Errorf("route %s: %s superseded by %q; want superseded by evt_002", d.Route, d.State, d.SupersededBy)
		}
	}
	lines := map[string]bool{}
	for line := range strings.SplitSeq(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "dispatch superseded" && rec["level"] == "INFO" &&
			rec["entity"] == "stripe:sub_1" && rec["delivery_id"] == "evt_001" && rec["superseded_by"] == "evt_002" {
			lines[fmt.Sprint(rec["route"])] = true
		}
	}
	if !lines["fwd"] || !lines["ledger"] {
		t.Fatalf("dispatch superseded lines at INFO for routes %v, want fwd and ledger; the log:\n%s", lines, logs.String())
	}
}
