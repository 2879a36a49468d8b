package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// heldBody sends a body's first bytes, then waits to be let go before
// sending the rest.
type heldBody struct {
	rest    *bytes.Reader
	first   int // bytes sent before it waits
	started chan struct{}
	release chan struct{}
	waited  bool
}

func (h *heldBody) Read(p []byte) (int, error) {
	if !h.waited {
		if h.first > 0 {
			n, err := h.rest.Read(p[:min(len(p), h.first)])
			h.first -= n
			return n, err
		}
		h.waited = true
		close(h.started)
		<-h.release
	}
	return h.rest.Read(p)
}

// signedPing is a valid GitHub ping of about size bytes.
func signedPing(id string, size int) *http.Request {
	body := []byte(`{"zen":"` + strings.Repeat("z", size-10) + `"}`)
	return githubRequest(ghReq{id: id, event: "ping", body: body})
}

// inflightGauge reads hookgate_ingest_inflight_bytes from b's /metrics.
func inflightGauge(b *testBundle) string {
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(line, "hookgate_ingest_inflight_bytes "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "absent"
}

// Bodies held at once never pass GATEWAY_MAX_INFLIGHT_BYTES: a request whose
// bytes would is answered 503 overloaded with Retry-After, nothing of it
// stored, and once the held body is answered its bytes are free again.
func TestInflightBodiesAreBounded(t *testing.T) {
	t.Parallel()
	const size = 60 << 10
	m := metrics.New(nil)
	b := setup(t, setupOpts{maxInflight: 100 << 10, maxPerAddr: 100 << 10, metrics: m})

	first := signedPing("held", size)
	raw, _ := io.ReadAll(first.Body)
	held := &heldBody{rest: bytes.NewReader(raw), first: len(raw) - 1, started: make(chan struct{}), release: make(chan struct{})}
	first.Body = io.NopCloser(held)
	first.ContentLength = int64(len(raw))
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, first)
		done <- rec.Code
	}()
	<-held.started // all but the first body's last byte has arrived, and is held
	if got, want := inflightGauge(b), fmt.Sprint(len(raw)); got != want {
		t.Fatalf("hookgate_ingest_inflight_bytes = %s while one body is held, want %s", got, want)
	}

	res := b.do(t, signedPing("refused", size))
	wantError(t, res, http.StatusServiceUnavailable, "overloaded")
	if res.header.Get("Retry-After") == "" || res.header.Get("Connection") != "close" {
		t.Fatalf("overloaded: Retry-After %q, Connection %q", res.header.Get("Retry-After"), res.header.Get("Connection"))
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
	if got := inflightGauge(b); got != "0" {
		t.Fatalf("hookgate_ingest_inflight_bytes = %s once every request is answered", got)
	}
	if n := b.count(t, "SELECT count(*) FROM hookgate_receipts WHERE delivery_id = 'refused'"); n != 0 {
		t.Fatal("an overloaded delivery was stored")
	}
}

// Senders that declare large bodies hold only what they sent: one that sent
// nothing holds nothing, one that sent a byte holds one piece, so idle
// connections cannot spend the in-flight budget and refuse everyone else.
func TestSlowSendersCannotReserveTheBudget(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	b := setup(t, setupOpts{maxBody: 1 << 20, maxInflight: 2 << 20, maxPerAddr: 2 << 20, metrics: m})
	var releases []chan struct{}
	var answered []chan int
	for i, first := range []int{0, 0, 1, 1} {
		req := signedPing(fmt.Sprint("slow-", i), 1<<20-100)
		raw, _ := io.ReadAll(req.Body)
		held := &heldBody{rest: bytes.NewReader(raw), first: first, started: make(chan struct{}), release: make(chan struct{})}
		req.Body = io.NopCloser(held)
		req.ContentLength = int64(len(raw))
		release, code := held.release, make(chan int, 1)
		releases, answered = append(releases, release), append(answered, code)
		go func() {
			rec := httptest.NewRecorder()
			b.handler.ServeHTTP(rec, req)
			code <- rec.Code
		}()
		select { // it declared 1 MiB and sent at most one byte
		case <-held.started:
		case c := <-code:
			t.Fatalf("slow sender %d refused at once: %d", i, c)
		}
	}
	if got, want := inflightGauge(b), fmt.Sprint(2*16<<10); got != want {
		t.Errorf("hookgate_ingest_inflight_bytes = %s with two senders that sent nothing and two that sent a byte, want %s (a piece each for the two)", got, want)
	}
	if res := b.do(t, signedPing("prompt", 100<<10)); res.status != http.StatusAccepted {
		t.Fatalf("a prompt delivery beside four slow senders: %d %v", res.status, res.body)
	}
	for i := range releases { // each in turn sends the rest, which fits the budget beside the others' first pieces
		close(releases[i])
		if code := <-answered[i]; code != http.StatusAccepted {
			t.Errorf("slow sender %d, once it sent everything: %d", i, code)
		}
	}
}

// One address holds at most its share of the budget and 64 requests whose
// bodies are still arriving: two hundred connections from it that send
// headers (a well-formed signature that is wrong, 64 KiB declared) and then
// trickle or stall, more than the whole budget declared, leave signed
// deliveries from another address accepted as usual; its requests past its
// share are answered 503 overloaded at once; a body slower than the minimum
// rate is answered 408 request_timeout once the grace has passed, and its
// connection closed.
func TestStalledSendersBesideSignedDeliveries(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	b := setup(t, setupOpts{maxBody: 64 << 10, maxInflight: 4 << 20, metrics: m, minRate: 1 << 10, grace: 2 * time.Second})
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	const conns = 200
	var slow []net.Conn
	answers := make(chan string, conns)
	for i := range conns {
		c, err := net.Dial("tcp", addr) // from 127.0.0.1
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_, err = fmt.Fprintf(c, "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"X-GitHub-Event: push\r\nX-GitHub-Delivery: stall-%d\r\nX-Hub-Signature-256: sha256=%s\r\nContent-Length: 65536\r\n\r\n",
			i, strings.Repeat("ab", 32))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			_, _ = c.Write([]byte(`{"zen":"`)) // then trickles, below
			slow = append(slow, c)
		}
		go func() {
			line, _ := bufio.NewReader(c).ReadString('\n')
			answers <- line
		}()
	}
	// The address's requests past 64 unfinished are refused at once; the 64
	// wait for their bodies.
	refused := 0
	for refused < conns-64 {
		select {
		case line := <-answers:
			if !strings.HasPrefix(line, "HTTP/1.1 503") {
				t.Fatalf("a stalled sender past the address's 64 was answered %q", line)
			}
			refused++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d stalled senders past the address's 64 refused", refused, conns-64)
		}
	}
	stop := make(chan struct{})
	var trickling sync.WaitGroup
	trickling.Go(func() { // a byte every 100 ms each: 10 bytes a second, under the minimum rate
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, c := range slow {
				_, _ = c.Write([]byte("z"))
			}
		}
	})
	defer trickling.Wait()
	defer close(stop)

	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	for i := range 50 {
		req := signedPing(fmt.Sprint("signed-", i), 6<<10)
		out, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/github", req.Body)
		if err != nil {
			t.Fatal(err)
		}
		out.Header = req.Header
		res, err := other.Do(out)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("signed delivery %d from another address beside %d stalled senders: %s", i, conns, res.Status)
		}
	}
	if got, _ := strconv.ParseFloat(inflightGauge(b), 64); got > 64*16<<10 {
		t.Errorf("hookgate_ingest_inflight_bytes = %v with stalled senders only, want at most a piece for each of 64", got)
	}

	// Once the grace has passed, the 64 are too slow: each is answered 408
	// and its connection closed.
	for range 64 {
		select {
		case line := <-answers:
			if !strings.HasPrefix(line, "HTTP/1.1 408") {
				t.Fatalf("a stalled sender was answered %q, want 408", line)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a stalled sender was not answered 408 after the grace")
		}
	}
	if got := inflightGauge(b); got != "0" {
		t.Errorf("hookgate_ingest_inflight_bytes = %s once the stalled senders were answered", got)
	}
	if n := b.count(t, "SELECT count(*) FROM hookgate_receipts WHERE delivery_id LIKE 'stall-%'"); n != 0 {
		t.Errorf("%d stalled deliveries stored", n)
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
