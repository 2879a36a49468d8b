package dispatch_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/replay"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/verify"
)

// received is one request a test target got.
type received struct {
	at     time.Time
	header http.Header
	body   []byte
}

// target is a local forward target that answers from a script.
type target struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int, r *http.Request) (status int, header map[string]string)
}

func newTarget(t testing.TB, answer func(n int, r *http.Request) (int, map[string]string)) *target {
	t.Helper()
	tg := &target{answer: answer}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tg.mu.Lock()
		tg.got = append(tg.got, received{at: time.Now(), header: r.Header.Clone(), body: body})
		n := len(tg.got)
		tg.mu.Unlock()
		status, header := http.StatusOK, map[string]string(nil)
		if tg.answer != nil {
			status, header = tg.answer(n, r)
		}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "answer %d", status)
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) requests() []received {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]received(nil), tg.got...)
}

type dispatchRow struct {
	state, lastError string
	attempts         int
}

func (b *dispatchBundle) row(t *testing.T, deliveryID, route string) dispatchRow {
	t.Helper()
	var r dispatchRow
	var lastError *string
	err := b.pool.QueryRow(context.Background(), `
		SELECT state, attempts, last_error FROM hookgate_dispatches
		WHERE delivery_id = $1 AND route = $2 ORDER BY generation DESC LIMIT 1`, deliveryID, route).Scan(&r.state, &r.attempts, &lastError)
	if err != nil {
		t.Fatalf("read dispatch: %v", err)
	}
	if lastError != nil {
		r.lastError = *lastError
	}
	return r
}

func pushDelivery(id string) providers.Delivery {
	return providers.Delivery{
		Provider: "github", Scope: "9", DeliveryID: id, Event: "push", ContentType: "application/json",
		Body: []byte(`{"ref":"refs/heads/main","repository":{"id":1}}` + "\n"),
	}
}

// What the target receives: the stored bytes, the contract's headers, and
// signatures it can verify: X-Hookgate-Signature with Stripe's scheme and the
// Standard Webhooks headers with the Standard Webhooks library.
func TestForwardSendsBodyAndHeaders(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	b := setupDispatch(t, "ci=github:push>"+tg.URL+"/hook", nil, dispatchOpts{forwardSecrets: []string{"fwd-secret"}})
	d := pushDelivery("g-1")
	d.ContentType = "application/x-www-form-urlencoded"
	d.Body = []byte("payload=%7B%22zen%22%3A1%7D")
	b.accept(t, d)
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "ci"}, dispatch.Succeeded)

	got := tg.requests()
	if len(got) != 1 {
		t.Fatalf("target got %d requests", len(got))
	}
	r := got[0]
	if !bytes.Equal(r.body, d.Body) {
		t.Fatalf("body %q, want %q", r.body, d.Body)
	}
	want := map[string]string{
		"Content-Type":          "application/x-www-form-urlencoded",
		"Idempotency-Key":       "github:g-1:ci",
		"X-Hookgate-Provider":   "github",
		"X-Hookgate-Delivery":   "g-1",
		"X-Hookgate-Event":      "push",
		"X-Hookgate-Route":      "ci",
		"X-Hookgate-Attempt":    "1",
		"X-Hookgate-Generation": "1",
	}
	for k, v := range want {
		if r.header.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, r.header.Get(k), v)
		}
	}
	if _, err := verify.Stripe(verify.Secrets{"fwd-secret"}, r.header.Get("X-Hookgate-Signature"), r.body, time.Now(), time.Minute); err != nil {
		t.Fatalf("X-Hookgate-Signature %q does not verify: %v", r.header.Get("X-Hookgate-Signature"), err)
	}
	if id := r.header.Get("webhook-id"); id != "github:g-1:ci" {
		t.Errorf("webhook-id = %q, want the Idempotency-Key", id)
	}
	wh, err := standardwebhooks.NewWebhookRaw([]byte("fwd-secret"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(r.body, r.header); err != nil {
		t.Fatalf("webhook-signature %q does not verify: %v", r.header.Get("webhook-signature"), err)
	}
	if row := b.row(t, "g-1", "ci"); row.attempts != 1 || row.lastError != "" {
		t.Fatalf("dispatch row %+v", row)
	}
}

// Without a forward secret a forward carries no signature of either scheme.
func TestForwardWithoutSecretIsUnsigned(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	b := setupDispatch(t, "ci=github:push>"+tg.URL, nil)
	b.accept(t, pushDelivery("g-1"))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "ci"}, dispatch.Succeeded)
	for _, name := range []string{"X-Hookgate-Signature", "webhook-id", "webhook-timestamp", "webhook-signature"} {
		if v := tg.requests()[0].header.Get(name); v != "" {
			t.Errorf("unsigned forward carries %s: %q", name, v)
		}
	}
}

// 500, 500, 200: succeeded at attempt 3. The first retry comes by River's
// backoff (about 1 s); the second waits for the target's Retry-After.
func TestForwardRetriesUntilSuccess(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, func(n int, _ *http.Request) (int, map[string]string) {
		switch n {
		case 1:
			return 500, nil
		case 2:
			return 503, map[string]string{"Retry-After": "2"}
		}
		return 200, nil
	})
	b := setupDispatch(t, "ci=github:push>"+tg.URL, nil)
	b.accept(t, pushDelivery("g-1"))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "ci"}, dispatch.Succeeded)

	got := tg.requests()
	if len(got) != 3 {
		t.Fatalf("target got %d requests, want 3", len(got))
	}
	for i, r := range got {
		if r.header.Get("X-Hookgate-Attempt") != strconv.Itoa(i+1) || r.header.Get("Idempotency-Key") != "github:g-1:ci" {
			t.Fatalf("request %d: attempt %q key %q", i+1, r.header.Get("X-Hookgate-Attempt"), r.header.Get("Idempotency-Key"))
		}
	}
	if gap := got[1].at.Sub(got[0].at); gap > 10*time.Second {
		t.Fatalf("first retry after %s, want within 10s", gap)
	}
	if gap := got[2].at.Sub(got[1].at); gap < 2*time.Second || gap > 10*time.Second {
		// River's own backoff before a third attempt is about 16 s.
		t.Fatalf("retry after Retry-After: 2 came %s later", gap)
	}
	if row := b.row(t, "g-1", "ci"); row.attempts != 3 || row.lastError != "" {
		t.Fatalf("dispatch row %+v", row)
	}
}

// A failure records state, attempt and the target's answer on the row.
func TestForwardFailureIsRecorded(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, func(int, *http.Request) (int, map[string]string) {
		return 503, map[string]string{"Retry-After": "3600"}
	})
	b := setupDispatch(t, "ci=github:push>"+tg.URL, nil)
	b.accept(t, pushDelivery("g-1"))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "ci"}, dispatch.Retrying)
	row := b.row(t, "g-1", "ci")
	if row.attempts != 1 || !strings.Contains(row.lastError, "503") || !strings.Contains(row.lastError, "answer 503") {
		t.Fatalf("dispatch row %+v", row)
	}
	b.waitJobs(t, "retryable", 1)
	var scheduled time.Time
	_ = b.pool.QueryRow(context.Background(), "SELECT scheduled_at FROM river_job").Scan(&scheduled)
	if until := time.Until(scheduled); until < 50*time.Minute {
		t.Fatalf("next attempt in %s, want the target's Retry-After (1h)", until)
	}
}

// Any other 4xx fails the dispatch at once.
func TestForwardClientErrorDiscardsAtOnce(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, func(int, *http.Request) (int, map[string]string) { return 400, nil })
	b := setupDispatch(t, "ci=github:push>"+tg.URL, nil)
	b.accept(t, pushDelivery("g-1"))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "ci"}, dispatch.Discarded)
	row := b.row(t, "g-1", "ci")
	if row.attempts != 1 || !strings.Contains(row.lastError, "400") {
		t.Fatalf("dispatch row %+v", row)
	}
	b.waitJobsFinalized(t) // no retry can come
	if n := len(tg.requests()); n != 1 {
		t.Fatalf("target got %d requests", n)
	}
}

// A target that does not answer within the forward timeout is retried.
func TestForwardTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, func(n int, r *http.Request) (int, map[string]string) {
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
		return 200, nil
	})
	b := setupDispatch(t, "ci=github:push>"+tg.URL, nil, dispatchOpts{forwardTimeout: 300 * time.Millisecond})
	b.accept(t, pushDelivery("g-1"))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "ci"}, dispatch.Succeeded)
	if row := b.row(t, "g-1", "ci"); row.attempts != 2 {
		t.Fatalf("dispatch row %+v", row)
	}
}

// Redirects to another host are not followed: the dispatch is discarded.
func TestForwardDoesNotFollowRedirectToAnotherHost(t *testing.T) {
	t.Parallel()
	elsewhere := newTarget(t, nil)
	tg := newTarget(t, func(int, *http.Request) (int, map[string]string) {
		return 307, map[string]string{"Location": elsewhere.URL}
	})
	b := setupDispatch(t, "ci=github:push>"+tg.URL, nil)
	b.accept(t, pushDelivery("g-1"))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "ci"}, dispatch.Discarded)
	if n := len(elsewhere.requests()); n != 0 {
		t.Fatalf("redirect followed to another host (%d requests)", n)
	}
}

// Another hook's copy of an event: one forward per route.
func TestForwardOncePerRouteAcrossHooks(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	b := setupDispatch(t, "ci=github:push>"+tg.URL, nil)
	first := pushDelivery("guid-1")
	second := first
	second.Scope = "10"
	if n := b.accept(t, first); n != 1 {
		t.Fatalf("first copy made %d dispatches", n)
	}
	if n := b.accept(t, second); n != 0 {
		t.Fatalf("second hook's copy made %d dispatches", n)
	}
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "guid-1", Route: "ci"}, dispatch.Succeeded)
	b.waitJobsFinalized(t) // no other forward can come
	if n := len(tg.requests()); n != 1 {
		t.Fatalf("target got %d requests", n)
	}
}

// Two hooks may send one event id with different bodies. A forward is ordered
// by the entity of the event's first receipt, the one it sends, even when
// another receipt names another entity (here one whose watermark is newer).
func TestForwardIsOrderedByTheFirstReceiptsEntity(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	b := setupDispatch(t, "billing=stripe:*>"+tg.URL, nil)
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	first := subscriptionEvent(1, created)
	first.Scope = "z"
	other := subscriptionEvent(1, created)
	other.Scope, other.Entity, other.Body = "a", "stripe:sub_2", []byte(`{"id":"evt_001","other":true}`)
	if n := b.accept(t, first); n != 1 {
		t.Fatalf("first copy made %d dispatches", n)
	}
	if n := b.accept(t, other); n != 0 {
		t.Fatalf("other hook's copy made %d dispatches", n)
	}
	_, err := b.pool.Exec(context.Background(), `INSERT INTO hookgate_watermarks (route, entity, event_time, provider, delivery_id)
		VALUES ('billing', 'stripe:sub_2', now(), 'stripe', 'evt_newer')`)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "evt_001", Route: "billing"}, dispatch.Succeeded)
	if got := tg.requests(); len(got) != 1 || string(got[0].body) != string(first.Body) {
		t.Fatalf("target got %d requests, want the first receipt's body once", len(got))
	}
	var mark time.Time
	err = b.pool.QueryRow(context.Background(),
		`SELECT event_time FROM hookgate_watermarks WHERE route = 'billing' AND entity = 'stripe:sub_1'`).Scan(&mark)
	if err != nil || !mark.Equal(created) {
		t.Fatalf("watermark of stripe:sub_1 = %v, %v; want %v", mark, err, created)
	}
}

func subscriptionEvent(i int, created time.Time) providers.Delivery {
	id := fmt.Sprintf("evt_%03d", i)
	body := fmt.Sprintf(`{"id":%q,"type":"customer.subscription.updated","created":%d,"data":{"object":{"id":"sub_1","customer":"cus_1","status":"s%02d"}}}`,
		id, created.Unix(), i)
	return providers.Delivery{
		Provider: "stripe", DeliveryID: id, Event: "customer.subscription.updated", Entity: "stripe:sub_1",
		EventTime: created, ContentType: "application/json", Body: []byte(body),
	}
}

// Exactly once: River running a finished job again (a rescue after a crash
// lost its completion) does not apply the projection twice.
func TestBuiltinEffectHappensOnceWhenJobRunsAgain(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, "subs=stripe:customer.subscription>builtin:stripe-subscriptions", handlers.Default(discard()))
	b.accept(t, subscriptionEvent(1, time.Unix(1_767_000_000, 0)))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "evt_001", Route: "subs"}, dispatch.Succeeded)
	b.waitJobs(t, "completed", 1)

	// As River's rescuer would: the job is made available again.
	if _, err := b.pool.Exec(context.Background(),
		"UPDATE river_job SET state = 'available', finalized_at = NULL, scheduled_at = now(), attempted_by = NULL"); err != nil {
		t.Fatal(err)
	}
	b.waitJobs(t, "completed", 1)
	var attempt int
	_ = b.pool.QueryRow(context.Background(), "SELECT attempt FROM river_job").Scan(&attempt)
	if attempt != 2 {
		t.Fatalf("job attempt %d: it did not run again", attempt)
	}
	var status string
	var updates int
	if err := b.pool.QueryRow(context.Background(), "SELECT status, updates FROM hookgate_stripe_subscriptions WHERE subscription_id = 'sub_1'").
		Scan(&status, &updates); err != nil {
		t.Fatal(err)
	}
	if status != "s01" || updates != 1 {
		t.Fatalf("projection status %q applied %d times", status, updates)
	}
}

// A handler error rolls back its writes, and the dispatch retries.
func TestBuiltinErrorRollsBackAndRetries(t *testing.T) {
	t.Parallel()
	handlers := handlers.Registry{"flaky": func(ctx context.Context, tx pgx.Tx, d handlers.Delivery) error {
		if _, err := tx.Exec(ctx, "INSERT INTO effects (delivery_id, attempt) VALUES ($1, $2)", d.DeliveryID, d.Attempt); err != nil {
			return err
		}
		if d.Attempt == 1 {
			return fmt.Errorf("flaky on attempt 1")
		}
		return nil
	}}
	b := setupDispatch(t, "f=github:push>builtin:flaky", handlers)
	if _, err := b.pool.Exec(context.Background(), "CREATE TABLE effects (delivery_id text, attempt int)"); err != nil {
		t.Fatal(err)
	}
	b.accept(t, pushDelivery("g-1"))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "f"}, dispatch.Succeeded)
	rows, _ := b.pool.Query(context.Background(), "SELECT attempt FROM effects")
	attempts, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(attempts) != 1 || attempts[0] != 2 {
		t.Fatalf("effects = %v, %v; want one row from attempt 2", attempts, err)
	}
}

// Order: 20 events of one entity, shuffled, worked by 8 workers (or by two
// clients, as two gateway processes would): the target never receives an
// older event after a newer one, each event not forwarded is superseded, and
// the projection ends at the newest.
func TestOrderPerEntity(t *testing.T) {
	t.Parallel()
	for _, clients := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d clients", clients), func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t, nil)
			routes := "fwd=stripe:customer.subscription.*>" + tg.URL + " subs=stripe:customer.subscription>builtin:stripe-subscriptions"
			handlers := handlers.Default(discard())
			b := setupDispatch(t, routes, handlers, dispatchOpts{workers: 8 / clients})
			bundles := []*dispatchBundle{b}
			for range clients - 1 {
				bundles = append(bundles, setupDispatch(t, routes, handlers, dispatchOpts{workers: 8 / clients, pool: b.pool}))
			}
			base := time.Unix(1_767_000_000, 0)
			order := rand.Perm(20)
			for _, i := range order {
				b.accept(t, subscriptionEvent(i, base.Add(time.Duration(i)*time.Second)))
			}
			for _, x := range bundles {
				x.start(t)
			}
			b.waitFinal(t, 40)

			got := tg.requests()
			var last int64
			for _, r := range got {
				var created int64
				fmt.Sscanf(string(r.body[bytes.Index(r.body, []byte(`"created":`))+len(`"created":`):]), "%d", &created)
				if created < last {
					t.Fatalf("target received created=%d after %d", created, last)
				}
				last = created
			}
			for _, route := range []string{"fwd", "subs"} {
				var succeeded, superseded int
				_ = b.pool.QueryRow(context.Background(), `
					SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'superseded')
					FROM hookgate_dispatches WHERE route = $1`, route).Scan(&succeeded, &superseded)
				if succeeded+superseded != 20 {
					t.Fatalf("route %s: %d succeeded + %d superseded", route, succeeded, superseded)
				}
				if route == "fwd" && succeeded != len(got) {
					t.Fatalf("%d forwards succeeded, target got %d", succeeded, len(got))
				}
				if b.row(t, "evt_019", route).state != dispatch.Succeeded {
					t.Fatalf("route %s: the newest event was not handled", route)
				}
			}
			var status string
			_ = b.pool.QueryRow(context.Background(), "SELECT status FROM hookgate_stripe_subscriptions WHERE subscription_id = 'sub_1'").Scan(&status)
			if status != "s19" {
				t.Fatalf("projection ends at %q, want s19", status)
			}
			t.Logf("order of insertion %v: %d of 20 forwarded", order, len(got))
		})
	}
}

// When the commit of a forward's outcome fails after its target accepted
// the event (here a trigger fails the first watermark write), the entity's
// lease is not given back before the outcome and watermark are committed: an
// older event that comes next is superseded, never forwarded after the newer
// one.
func TestOrderHoldsWhenAnOutcomeCommitFails(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	b := setupDispatch(t, "fwd=stripe:customer.subscription.*>"+tg.URL, handlers.Default(discard()), dispatchOpts{workers: 2})
	_, err := b.pool.Exec(context.Background(), `
		CREATE SEQUENCE watermark_writes;
		CREATE FUNCTION fail_first_watermark() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('watermark_writes') = 1 THEN RAISE EXCEPTION 'injected outcome commit failure'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_first_watermark BEFORE INSERT OR UPDATE ON hookgate_watermarks
		FOR EACH ROW EXECUTE FUNCTION fail_first_watermark();`)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1_767_000_000, 0)
	b.accept(t, subscriptionEvent(2, base.Add(2*time.Second))) // the newer event, first
	b.start(t)
	for len(tg.requests()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	b.accept(t, subscriptionEvent(1, base.Add(time.Second))) // then an older one
	b.waitFinal(t, 2)

	if got := tg.requests(); len(got) != 1 || !bytes.Contains(got[0].body, []byte(`"evt_002"`)) {
		t.Fatalf("the target received %d requests; want only evt_002", len(got))
	}
	if s := b.row(t, "evt_002", "fwd").state; s != dispatch.Succeeded {
		t.Fatalf("evt_002: %s", s)
	}
	if s := b.row(t, "evt_001", "fwd").state; s != dispatch.Superseded {
		t.Fatalf("evt_001: %s, want superseded", s)
	}
}

func (b *dispatchBundle) waitJobs(t *testing.T, state string, n int) {
	t.Helper()
	dbtest.Eventually(t, 15*time.Second, fmt.Sprintf("%d jobs %s", n, state), func() error {
		var got int
		_ = b.pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job WHERE state = $1", state).Scan(&got)
		if got != n {
			return fmt.Errorf("%d jobs %s", got, state)
		}
		return nil
	})
}

func (b *dispatchBundle) waitFinal(t testing.TB, n int) {
	t.Helper()
	dbtest.Eventually(t, 60*time.Second, fmt.Sprintf("%d dispatches final", n), func() error {
		var got int
		_ = b.pool.QueryRow(context.Background(),
			"SELECT count(*) FROM hookgate_dispatches WHERE state IN ('succeeded', 'superseded', 'discarded', 'cancelled')").Scan(&got)
		if got != n {
			return fmt.Errorf("%d dispatches final", got)
		}
		return nil
	})
}

// waitJobsFinalized waits until River has finalized every job (completed,
// cancelled or discarded): no attempt of any dispatch is still to come.
func (b *dispatchBundle) waitJobsFinalized(t *testing.T) {
	t.Helper()
	dbtest.Eventually(t, 15*time.Second, "every River job finalized", func() error {
		var open int
		_ = b.pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job WHERE finalized_at IS NULL").Scan(&open)
		if open != 0 {
			return fmt.Errorf("%d jobs not finalized", open)
		}
		return nil
	})
}

// A process killed with SIGKILL while its forward is in flight: the dispatch
// is picked up by another process and completes within 60 s, and the target
// sees the same Idempotency-Key twice.
func TestDispatchSurvivesKilledProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for River's rescuer")
	}
	t.Parallel()
	inflight := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tg := newTarget(t, func(n int, r *http.Request) (int, map[string]string) {
		if n == 1 {
			close(inflight)
			select { // hang until the test ends: the process holding this request dies
			case <-release:
			case <-r.Context().Done():
			}
		}
		return 200, nil
	})
	routes := "ci=github:push>" + tg.URL
	b := setupDispatch(t, routes, nil, dispatchOpts{forwardTimeout: 10 * time.Second})
	b.accept(t, pushDelivery("g-kill"))

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+b.pool.Config().ConnString(), "HOOKGATE_TEST_WORKER_ROUTES="+routes)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	select {
	case <-inflight:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker process never forwarded")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	b.start(t) // the surviving process
	dbtest.Eventually(t, 60*time.Second, "the dispatch completed after the kill", func() error {
		if row := b.row(t, "g-kill", "ci"); row.state != dispatch.Succeeded {
			return fmt.Errorf("dispatch %+v", row)
		}
		return nil
	})
	t.Logf("completed %s after the kill", time.Since(killed).Round(time.Millisecond))
	got := tg.requests()
	if len(got) != 2 || got[0].header.Get("Idempotency-Key") != got[1].header.Get("Idempotency-Key") ||
		got[1].header.Get("X-Hookgate-Attempt") != "2" {
		t.Fatalf("target got %d requests: %v", len(got), got)
	}
}

// An operator cancels a pending dispatch's job in River UI: the dispatch shows
// cancelled at once (its live state) and the reconcile job records it.
func TestReconcileRecordsCancelledJobs(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, "ci=github:push>http://127.0.0.1:1/never", nil)
	b.accept(t, pushDelivery("g-1"))
	var jobID int64
	if err := b.pool.QueryRow(context.Background(), "SELECT job_id FROM hookgate_dispatches").Scan(&jobID); err != nil || jobID == 0 {
		t.Fatalf("job_id %d, %v", jobID, err)
	}
	if _, err := b.client.JobCancel(context.Background(), jobID); err != nil {
		t.Fatal(err)
	}
	if row := b.row(t, "g-1", "ci"); row.state != dispatch.Pending {
		t.Fatalf("row before reconcile: %+v", row)
	}
	w := &dispatch.ReconcileWorker{Pool: b.pool}
	if err := w.Work(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if row := b.row(t, "g-1", "ci"); row.state != dispatch.Cancelled || !strings.Contains(row.lastError, "cancelled") {
		t.Fatalf("row after reconcile: %+v", row)
	}
}

// Retention never deletes a receipt while a dispatch of its event is still in
// progress (here pending: the target has been down longer than the
// retention); once the dispatch has ended (an operator cancelled its job) the
// expired receipt goes.
func TestRetentionKeepsReceiptsOfDispatchesInProgress(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, "ci=github:push>http://127.0.0.1:1/down", nil)
	b.accept(t, pushDelivery("waiting"))
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, "UPDATE hookgate_receipts SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	if n, err := retention.DeleteExpired(ctx, b.pool, retention.Policy{Retention: 72 * time.Hour}); err != nil || n != 0 {
		t.Fatalf("deleted %d, %v while its dispatch is pending", n, err)
	}
	var jobID int64
	if err := b.pool.QueryRow(ctx, "SELECT job_id FROM hookgate_dispatches").Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.JobCancel(ctx, jobID); err != nil {
		t.Fatal(err)
	}
	if n, err := retention.DeleteExpired(ctx, b.pool, retention.Policy{Retention: 72 * time.Hour}); err != nil || n != 1 {
		t.Fatalf("deleted %d, %v after its dispatch ended", n, err)
	}
}

// An operator deletes a pending dispatch's job in River UI: the dispatch is
// cancelled (it will never run), and a replay without force sends it again.
func TestDeletedJobLeavesACancelledReplayableDispatch(t *testing.T) {
	t.Parallel()
	b := setupDispatch(t, "ci=github:push>http://127.0.0.1:1/never", nil)
	b.accept(t, pushDelivery("g-del"))
	ctx := context.Background()
	var jobID int64
	if err := b.pool.QueryRow(ctx, "SELECT job_id FROM hookgate_dispatches").Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.JobDelete(ctx, jobID); err != nil {
		t.Fatal(err)
	}
	d, err := deliveries.Show(ctx, b.pool, "github", "g-del")
	if err != nil || len(d.Dispatches) != 1 || d.Dispatches[0].State != dispatch.Cancelled {
		t.Fatalf("show: %+v, %v", d.Dispatches, err)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	res, err := replay.RedispatchTx(ctx, tx, b.enq, "github", "g-del", replay.Request{})
	if err != nil || len(res.Created) != 1 || res.Created[0].Generation != 2 {
		t.Fatalf("replay created %+v, %v; want generation 2", res.Created, err)
	}
}

// The crash window: a process forwarded a newer event, the target accepted
// it, and the process died before recording the outcome. Its lease outlives
// it: an older event of the entity waits while the newer one is still in
// progress (here its job is rescued three seconds later), is not sent after
// it, and ends superseded once the newer one is recorded.
func TestOlderEventWaitsForANewerOneWhoseProcessDied(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, nil)
	b := setupDispatch(t, "fwd=stripe:customer.subscription.*>"+tg.URL, handlers.Default(discard()), dispatchOpts{workers: 2})
	ctx := context.Background()
	base := time.Unix(1_767_000_000, 0)
	newer, older := subscriptionEvent(2, base.Add(2*time.Second)), subscriptionEvent(1, base.Add(time.Second))
	b.accept(t, newer)
	b.accept(t, older)
	// What the dead process left: the target has the newer event; its lease,
	// expired; its job, to be rescued in three seconds.
	tg.mu.Lock()
	tg.got = append(tg.got, received{at: time.Now(), body: newer.Body})
	tg.mu.Unlock()
	_, err := b.pool.Exec(ctx, `
		INSERT INTO hookgate_leases (route, entity, provider, delivery_id, generation, event_time, expires_at)
		VALUES ('fwd', 'stripe:sub_1', 'stripe', 'evt_002', 1, $1, now() - interval '1 second')`, newer.EventTime)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '3 seconds'
		WHERE id = (SELECT job_id FROM hookgate_dispatches WHERE delivery_id = 'evt_002')`)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t)
	b.waitFinal(t, 2)

	for _, r := range tg.requests() {
		if bytes.Contains(r.body, []byte(`"evt_001"`)) {
			t.Fatal("the older event was sent after the newer one the target had accepted")
		}
	}
	if s := b.row(t, "evt_001", "fwd").state; s != dispatch.Superseded {
		t.Fatalf("evt_001: %s, want superseded", s)
	}
	var leases int
	if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM hookgate_leases").Scan(&leases); err != nil || leases != 0 {
		t.Fatalf("%d leases left, %v", leases, err)
	}
}
