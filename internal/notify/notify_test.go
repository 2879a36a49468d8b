package notify_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/notify"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// counts are a notifier's and a worker's results, by notification and
// result.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) count(notification, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[notification+" "+result]++
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

// String is the counts as fmt prints a map, read under the lock.
func (c *counts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.m)
}

// Two gateways on one database hearing of one route's circuit send it once
// in 10 minutes; a send that fails is tried again by River and sent; once
// 10 minutes have passed, the event is sent again.
func TestOnceIn10MinutesAcrossGateways(t *testing.T) {
	pool := dbtest.NewPool(t)
	var fails atomic.Int32
	fails.Store(1) // the first send fails
	var got atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fails.Add(-1) >= 0 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		got.Add(1)
	}))
	t.Cleanup(receiver.Close)
	ns := []notify.Notification{{Name: "team", Kind: notify.Slack, URL: receiver.URL, Events: []string{notify.CircuitOpened}}}
	c := &counts{}
	workers := river.NewWorkers()
	river.AddWorker(workers, &notify.Worker{Pool: pool, Notifications: ns, Counted: c.count, Logger: slog.New(slog.DiscardHandler)})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers: workers, FetchCooldown: 20 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
		RetryPolicy: retryAtOnce{},
	})
	if err != nil {
		t.Fatal(err)
	}
	dbtest.StartRiver(t, client)

	// Two processes: each its own Notifier (its own memory of what it queued).
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var a, b *notify.Notifier
	for _, n := range []**notify.Notifier{&a, &b} {
		*n = notify.New(ns, client, slog.New(slog.DiscardHandler), c.count)
		go (*n).Run(ctx)
	}
	open := notify.Event{Type: notify.CircuitOpened, Route: "billing", Message: "route billing's circuit opened"}
	a.Notify(open)
	b.Notify(open)
	a.Notify(open)                                                      // this process queued it already: suppressed at once
	a.Notify(notify.Event{Type: notify.RouteFailing, Route: "billing"}) // no notification takes it
	dbtest.Eventually(t, 20*time.Second, "the circuit sent once, after a failed try", func() error {
		if got.Load() != 1 || c.get("team failed") != 1 || c.get("team sent") != 1 {
			return fmt.Errorf("received %d; %v", got.Load(), c)
		}
		return nil
	})
	// The other gateway's event made no second job: River keeps one per
	// notification, event and subject in each 10-minute period.
	var jobs int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = 'hookgate_notify'`).Scan(&jobs); err != nil || jobs != 1 {
		t.Fatalf("%d notification jobs (%v)", jobs, err)
	}
	// Across a period's end (its job gone), a gateway's event within 10
	// minutes of the send is suppressed by the claim.
	if _, err := pool.Exec(context.Background(), `DELETE FROM river_job WHERE kind = 'hookgate_notify'`); err != nil {
		t.Fatal(err)
	}
	late := notify.New(ns, client, slog.New(slog.DiscardHandler), c.count)
	go late.Run(ctx)
	late.Notify(open)
	dbtest.Eventually(t, 20*time.Second, "the late gateway's job suppressed", func() error {
		if c.get("team suppressed") != 2 {
			return fmt.Errorf("%v", c)
		}
		return nil
	})
	if got.Load() != 1 {
		t.Fatalf("received %d", got.Load())
	}

	// Ten minutes later (the claim moved back), a third process's event is
	// sent again; another route's at once.
	if _, err := pool.Exec(context.Background(), `UPDATE hookgate_notifications_sent SET sent_at = sent_at - interval '10 minutes'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `DELETE FROM river_job WHERE kind = 'hookgate_notify'`); err != nil {
		t.Fatal(err)
	}
	third := notify.New(ns, client, slog.New(slog.DiscardHandler), c.count)
	go third.Run(ctx)
	third.Notify(open)
	third.Notify(notify.Event{Type: notify.CircuitOpened, Route: "shipping"})
	dbtest.Eventually(t, 20*time.Second, "sent again after 10 minutes, and another route's", func() error {
		if got.Load() != 3 {
			return fmt.Errorf("received %d; %v", got.Load(), c)
		}
		return nil
	})
}

// Notify never waits: with nothing taking its events, a flood is dropped
// and counted, at once.
func TestNotifyNeverBlocks(t *testing.T) {
	c := &counts{}
	ns := []notify.Notification{{Name: "team", Kind: notify.Slack, URL: "http://127.0.0.1:1", Events: []string{notify.DispatchDiscarded}}}
	n := notify.New(ns, nil, slog.New(slog.DiscardHandler), c.count) // never Run
	// A Notify that waited would wait for ever here: the test would not end.
	for i := range 10_000 {
		n.Notify(notify.Event{Type: notify.DispatchDiscarded, Route: fmt.Sprint("r", i)})
	}
	if c.get("team dropped") != 10_000-256 {
		t.Errorf("%d dropped, want %d", c.get("team dropped"), 10_000-256)
	}
	var nilNotifier *notify.Notifier
	nilNotifier.Notify(notify.Event{Type: notify.DispatchDiscarded}) // no notifications: nothing, no panic
}

// retryAtOnce retries a failed job at once.
type retryAtOnce struct{}

func (retryAtOnce) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }
