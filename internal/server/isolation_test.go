package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/server"
)

// One delivery whose Content-Type carries a parameter that is not UTF-8 (it
// passes mime.ParseMediaType, the signature does not cover it, and
// PostgreSQL refuses it as text) arrives in a burst of 64 that share
// commits: it alone is refused, and the 63 others are accepted.
func TestOneBadDeliveryInABurstFailsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{committers: 1})
	const n, poisoned = 64, 23
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := ghReq{id: fmt.Sprint("burst-", i)}
			if i == poisoned {
				r.contentType = "application/json; charset=\"\xff\""
			}
			rec := httptest.NewRecorder()
			b.handler.ServeHTTP(rec, githubRequest(r))
			statuses[i] = rec.Code
		})
	}
	wg.Wait()
	for i, status := range statuses {
		if i == poisoned && status != http.StatusBadRequest {
			t.Errorf("the poisoned delivery: %d, want 400", status)
		}
		if i != poisoned && status != http.StatusAccepted {
			t.Errorf("delivery %d: %d, want 202", i, status)
		}
	}
	if got := b.stored(t); got != [3]int{n - 1, 2 * (n - 1), 2 * (n - 1)} {
		t.Fatalf("receipts, dispatches, jobs = %v", got)
	}
}

// tripwire is a body that records whether anyone read it.
type tripwire struct{ read atomic.Bool }

func (t *tripwire) Read([]byte) (int, error) {
	t.read.Store(true)
	return 0, io.EOF
}

// What the headers alone can refuse is refused before a byte of the body is
// read: a sender of a 25 MiB body with a bad header costs nothing.
func TestHeadersAreCheckedBeforeTheBody(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	// Stripe-Signature headers, as Stripe signs them now and an hour ago.
	fresh := stripeRequest(`{}`, now, stripeSecret).Header.Get("Stripe-Signature")
	stale := stripeRequest(`{}`, now.Add(-time.Hour), stripeSecret).Header.Get("Stripe-Signature")
	tests := []struct {
		name, path   string
		header       map[string]string
		length       int64
		status       int
		code         string
		withoutStamp bool
	}{
		{"provider not configured", "/webhooks/gitlab", nil, 10, 404, "provider_not_configured", false},
		{"declared size over the limit", "/webhooks/github", nil, maxBody + 1, 413, "body_too_large", false},
		{"content type", "/webhooks/github", map[string]string{"Content-Type": "text/plain"}, 10, 415, "unsupported_media_type", false},
		{"content type that the database would refuse", "/webhooks/github", map[string]string{"Content-Type": "application/json; charset=\"\xff\""}, 10, 400, "bad_request", false},
		{"required header", "/webhooks/github", map[string]string{"X-GitHub-Event": ""}, 10, 400, "bad_request", false},
		{"signature header missing", "/webhooks/github", map[string]string{"X-Hub-Signature-256": ""}, 10, 401, "invalid_signature", false},
		{"signature header that does not parse", "/webhooks/github", map[string]string{"X-Hub-Signature-256": "sha256=xyz"}, 10, 401, "invalid_signature", false},
		{"Stripe signature that does not parse", "/webhooks/stripe", map[string]string{"Stripe-Signature": "v1=00"}, 10, 401, "invalid_signature", false},
		{"Stripe timestamp out of tolerance", "/webhooks/stripe", map[string]string{"Stripe-Signature": stale}, 10, 401, "timestamp_out_of_tolerance", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := &tripwire{}
			req := httptest.NewRequest(http.MethodPost, tt.path, body)
			req.ContentLength = tt.length
			for name, value := range map[string]string{
				"Content-Type": "application/json", "X-GitHub-Delivery": "d-1", "X-GitHub-Event": "push",
				"X-Hub-Signature-256": "sha256=" + strings.Repeat("ab", 32), "Stripe-Signature": fresh,
			} {
				req.Header.Set(name, value)
			}
			for name, value := range tt.header {
				req.Header.Set(name, value)
			}
			wantError(t, b.do(t, req), tt.status, tt.code)
			if body.read.Load() {
				t.Fatal("the body was read")
			}
		})
	}
	if got := b.stored(t); got != [3]int{} {
		t.Fatalf("stored %v", got)
	}
}

// heldBody sends the first half of a body, then waits to be let go before
// sending the rest.
type heldBody struct {
	rest    io.Reader
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *heldBody) Read(p []byte) (int, error) {
	h.once.Do(func() {
		close(h.started)
		<-h.release
	})
	return h.rest.Read(p)
}

// signedPing is a valid GitHub ping of about size bytes.
func signedPing(id string, size int) *http.Request {
	body := []byte(`{"zen":"` + strings.Repeat("z", size-10) + `"}`)
	return githubRequest(ghReq{id: id, event: "ping", body: body})
}

// Bodies held at once never pass GATEWAY_MAX_INFLIGHT_BYTES: a request that
// would is answered 503 overloaded with Retry-After before its body is read,
// and once the held body is answered its bytes are free again.
func TestInflightBodiesAreBounded(t *testing.T) {
	t.Parallel()
	const size = 60 << 10
	m := metrics.New(nil)
	b := setup(t, setupOpts{maxInflight: 100 << 10, metrics: m})
	inflight := func() string {
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		for line := range strings.Lines(rec.Body.String()) {
			if v, ok := strings.CutPrefix(line, "hookgate_ingest_inflight_bytes "); ok {
				return strings.TrimSpace(v)
			}
		}
		return "absent"
	}

	first := signedPing("held", size)
	raw, _ := io.ReadAll(first.Body)
	held := &heldBody{rest: bytes.NewReader(raw), started: make(chan struct{}), release: make(chan struct{})}
	first.Body = io.NopCloser(held)
	first.ContentLength = int64(len(raw))
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, first)
		done <- rec.Code
	}()
	<-held.started // the first body's 60 KiB are taken from the budget
	if got, want := inflight(), fmt.Sprint(len(raw)); got != want {
		t.Fatalf("hookgate_ingest_inflight_bytes = %s while one body is held, want %s", got, want)
	}

	second := signedPing("refused", size)
	wire := &tripwire{}
	second.Body = io.NopCloser(wire)
	res := b.do(t, second)
	wantError(t, res, http.StatusServiceUnavailable, "overloaded")
	if res.header.Get("Retry-After") == "" || wire.read.Load() {
		t.Fatalf("overloaded: Retry-After %q, body read %v", res.header.Get("Retry-After"), wire.read.Load())
	}
	// A small body still fits beside the held one.
	if res := b.do(t, signedPing("small", 1<<10)); res.status != http.StatusAccepted {
		t.Fatalf("small delivery: %d %v", res.status, res.body)
	}

	close(held.release)
	if code := <-done; code != http.StatusAccepted {
		t.Fatalf("held delivery: %d", code)
	}
	if res := b.do(t, signedPing("after", size)); res.status != http.StatusAccepted {
		t.Fatalf("after the held one was answered: %d %v", res.status, res.body)
	}
	if got := inflight(); got != "0" {
		t.Fatalf("hookgate_ingest_inflight_bytes = %s once every request is answered", got)
	}
	if n := b.count(t, "SELECT count(*) FROM hookgate_receipts WHERE delivery_id = 'refused'"); n != 0 {
		t.Fatal("an overloaded delivery was stored")
	}
}

// Slow senders that declare large bodies and send a byte hold only what
// they sent (and one step of buffer), not what they declared: a few idle
// connections cannot spend the in-flight budget and refuse everyone else.
func TestSlowSendersCannotReserveTheBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{maxBody: 1 << 20, maxInflight: 2 << 20})
	releases := make([]chan struct{}, 4)
	answered := make([]chan int, 4)
	for i := range releases {
		req := signedPing(fmt.Sprint("slow-", i), 1<<20-100)
		raw, _ := io.ReadAll(req.Body)
		held := &heldBody{rest: bytes.NewReader(raw[1:]), started: make(chan struct{}), release: make(chan struct{})}
		req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(raw[:1]), held))
		req.ContentLength = int64(len(raw))
		releases[i], answered[i] = held.release, make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			b.handler.ServeHTTP(rec, req)
			answered[i] <- rec.Code
		}()
		select { // it declared 1 MiB and sent one byte
		case <-held.started:
		case code := <-answered[i]:
			t.Fatalf("slow sender %d refused at once: %d", i, code)
		}
	}
	if res := b.do(t, signedPing("prompt", 100<<10)); res.status != http.StatusAccepted {
		t.Fatalf("a prompt delivery beside four slow senders: %d %v", res.status, res.body)
	}
	for i := range releases { // each in turn sends the rest, which fits the budget beside the others' first steps
		close(releases[i])
		if code := <-answered[i]; code != http.StatusAccepted {
			t.Errorf("slow sender %d, once it sent everything: %d", i, code)
		}
	}
}

// With the database down, /readyz says so without the database's own error
// (which names its user and database), however often it is asked, and asks
// the database at most about once a second.
func TestReadyzIsCheapAndDiscreet(t *testing.T) {
	t.Parallel()
	down := deadPool(t)
	var checks atomic.Int64
	b := setup(t, setupOpts{ready: func(ctx context.Context) error {
		checks.Add(1)
		return down.Ping(ctx)
	}})

	start := time.Now()
	var wg sync.WaitGroup
	for range 500 {
		wg.Go(func() {
			res := b.do(t, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			wantError(t, res, http.StatusServiceUnavailable, "unavailable")
			if msg := fmt.Sprint(res.body); strings.Contains(msg, "secret") || strings.Contains(msg, "127.0.0.1") {
				t.Errorf("readyz shows the database's error: %s", msg)
			}
			if res.header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		})
	}
	wg.Wait()
	if n, seconds := checks.Load(), time.Since(start).Seconds(); float64(n) > seconds+1 {
		t.Fatalf("%d database checks for 500 probes in %.1f s", n, seconds)
	}
}

// deadPool is a pool to a database that does not answer, as a recognisable
// user: no answer may name it.
func deadPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("postgres://secretuser:secretpass@127.0.0.1:1/secretdb?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// With the database down, the operator endpoints (River UI's too, which would
// answer a 400 of its own) answer 503 unavailable with Retry-After, as ingest
// does, never 500, and name nothing of the database.
func TestOperatorEndpointsWithTheDatabaseDown(t *testing.T) {
	t.Parallel()
	down := deadPool(t)
	h := server.New(server.Config{
		Logger: slog.New(slog.DiscardHandler),
		Ready:  func(ctx context.Context) error { return down.Ping(ctx) },
		Admin: server.AdminConfig{Token: adminToken, Pool: down,
			RiverUI: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) })},
	})
	for _, path := range []string{"/admin/deliveries", "/admin/deliveries/github/d-1", "/admin/replays", "/admin/rejections", "/admin/river/api/jobs"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"unavailable"`) ||
			rec.Header().Get("Retry-After") == "" || strings.Contains(rec.Body.String(), "secret") {
			t.Errorf("GET %s with the database down: %d %s", path, rec.Code, rec.Body)
		}
	}
}

// queryCounter counts the queries a pool sends.
type queryCounter struct{ n atomic.Int64 }

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A flood of scrapes of /metrics (which needs no token) costs the database at
// most about one query a second, and still shows the queue's depth.
func TestMetricsCostAtMostAQueryASecond(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := &queryCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := setup(t, setupOpts{metrics: metrics.New(pool)})

	start := time.Now()
	for range 300 {
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `hookgate_queue_depth{state="available"} 0`) {
			t.Fatalf("/metrics: %d %.300s", rec.Code, rec.Body)
		}
	}
	if n, seconds := counter.n.Load(), time.Since(start).Seconds(); float64(n) > seconds+1 {
		t.Fatalf("%d queries for 300 scrapes in %.1f s", n, seconds)
	}
}
