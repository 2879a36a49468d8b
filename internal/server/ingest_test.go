package server_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/schema"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/verify"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const (
	ghSecret     = "gh-secret"
	stripeSecret = "whsec_stripe"
	testRoutes   = "ci=github:push,github:pull_request.*>builtin:log billing=stripe:invoice.*>builtin:log audit=*:*>builtin:log"
	maxBody      = 64 << 10
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// testSources are a source of each kind, at /webhooks/src-<kind>.
var testSources = map[string]providers.SourceConfig{
	"standard-webhooks": {Name: "src-standard-webhooks", Kind: "standard-webhooks", Secrets: verify.Secrets{"whsec_bmV3LXNlY3JldC1rZXktMzItYnl0ZXMtbG9uZyEh"}},
	"shopify":           {Name: "src-shopify", Kind: "shopify", Secrets: verify.Secrets{"shop-secret"}},
	"slack":             {Name: "src-slack", Kind: "slack", Secrets: verify.Secrets{"slack-secret"}},
	"gitlab":            {Name: "src-gitlab", Kind: "gitlab", Secrets: verify.Secrets{"gitlab-token"}},
	"hmac": {Name: "src-hmac", Kind: "hmac", Secrets: verify.Secrets{"acme-secret"}, HMAC: providers.HMACScheme{SignatureHeader: "X-Acme-Signature",
		TimestampHeader: "X-Acme-Timestamp", IDHeader: "X-Acme-Delivery", EventField: "type"}},
}

// testSourceNames are testSources' names, which routes may name.
func testSourceNames() []string {
	var names []string
	for _, c := range testSources {
		names = append(names, c.Name)
	}
	return names
}

type testBundle struct {
	pool    *pgxpool.Pool
	handler http.Handler
}

type setupOpts struct {
	noStripe    bool
	pool        *pgxpool.Pool // the ingester's pool, when not the test database's
	maxInflight int64         // the in-flight budget; 0: the default
	maxPerAddr  int64         // one address's share of it; 0: the default
	minRate     int64         // the slowest a body may arrive, bytes a second; 0: none
	grace       time.Duration // before the rate is measured; 0: the default
	maxBody     int64         // 0: maxBody
	committers  int           // 0: the default
	ready       func(context.Context) error
	metrics     *metrics.Metrics
	routes      fanout.Table     // nil: testRoutes
	filters     *filter.Reporter // hears of filters that fail
}

func setup(t testing.TB, opts setupOpts) *testBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	logger := slog.New(slog.DiscardHandler)
	ingestPool := pool
	if opts.pool != nil {
		ingestPool = opts.pool
	}
	client, err := dispatch.NewInserter(ingestPool, logger)
	if err != nil {
		t.Fatal(err)
	}
	routes := opts.routes
	if routes == nil {
		if routes, err = fanout.Parse(testRoutes, handlers.Default(logger).Names(), fanout.Defaults{}); err != nil {
			t.Fatal(err)
		}
	}
	ready := opts.ready
	if ready == nil {
		ready = func(ctx context.Context) error { return schema.Check(ctx, ingestPool) }
	}
	provs := []providers.Provider{providers.GitHub{Secrets: verify.Secrets{"gh-old", ghSecret}}}
	if !opts.noStripe {
		provs = append(provs, providers.Stripe{Secrets: verify.Secrets{stripeSecret}, Tolerance: 5 * time.Minute})
	}
	for _, k := range providers.KindNames() {
		src, err := providers.NewSource(testSources[k])
		if err != nil {
			t.Fatalf("kind %s: %v", k, err)
		}
		provs = append(provs, src)
	}
	h := server.New(server.Config{
		Logger:    logger,
		Providers: mustRegistry(t, provs...),
		Ingester: ingest.NewIngester(ingestPool, &receipts.Store{Retention: 72 * time.Hour},
			dispatch.NewEnqueuer(client, routes, dispatch.EnqueuerConfig{MaxAttempts: 5, Filters: opts.filters}),
			ingest.Config{Committers: opts.committers}),
		Ready:                   ready,
		MaxBodyBytes:            cmp.Or(opts.maxBody, maxBody),
		MaxInflightBytes:        opts.maxInflight,
		MaxInflightBytesPerAddr: opts.maxPerAddr,
		MinBodyRate:             opts.minRate,
		MinBodyGrace:            opts.grace,
		Metrics:                 opts.metrics,
		Now:                     func() time.Time { return now },
	})
	return &testBundle{pool: pool, handler: h}
}

type response struct {
	status int
	header http.Header
	body   map[string]any
}

func (b *testBundle) do(t testing.TB, req *http.Request) response {
	t.Helper()
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	res := response{status: rec.Code, header: rec.Header()}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%d answer has Content-Type %q; body %s", rec.Code, ct, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &res.body); err != nil {
		t.Fatalf("answer is not JSON: %s", rec.Body)
	}
	return res
}

func (b *testBundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// stored returns how many receipts, dispatch rows and River jobs exist.
func (b *testBundle) stored(t *testing.T) [3]int {
	t.Helper()
	return [3]int{
		b.count(t, "SELECT count(*) FROM hookgate_receipts"),
		b.count(t, "SELECT count(*) FROM hookgate_dispatches"),
		b.count(t, "SELECT count(*) FROM river_job"),
	}
}

// ghSource and stripeSource are the gateway's GitHub and Stripe, whose
// senders the tests sign as.
var (
	ghSource     = providers.GitHub{Secrets: verify.Secrets{ghSecret}}.Source()
	stripeSource = providers.Stripe{Secrets: verify.Secrets{stripeSecret}}.Source()
)

// signedRequest is the request providers.NewRequest builds, c's sender's
// delivery of body signed at at, as the gateway's handler receives it at
// /webhooks/<c.Name> (from httptest.NewRequest's remote address). It panics
// when c cannot sign, which is the test's own mistake.
func signedRequest(c providers.SourceConfig, body []byte, id, event string, at time.Time) *http.Request {
	sent, err := providers.NewRequest(context.Background(), c, "http://example.com/webhooks/"+c.Name, body, id, event, at)
	if err != nil {
		panic(err)
	}
	req := httptest.NewRequest(sent.Method, sent.URL.RequestURI(), sent.Body)
	req.Header, req.ContentLength = sent.Header, sent.ContentLength
	return req
}

// ghReq is a GitHub delivery, changed from what GitHub sends where a test
// says: "-" leaves the id or event header out.
type ghReq struct {
	id, hook, event, contentType string
	body                         []byte
	signature                    *string // nil: signed correctly; "": no X-Hub-Signature-256
}

// githubRequest is r as GitHub sends it (signedRequest), from hook r.hook
// (no X-GitHub-Hook-ID when empty), with the changes r asks for.
func githubRequest(r ghReq) *http.Request {
	if r.id == "" {
		r.id = "d-1"
	}
	if r.event == "" {
		r.event = "push"
	}
	if r.body == nil {
		r.body = []byte(`{"ref":"refs/heads/main","repository":{"id":5678,"pushed_at":1767323045}}`)
	}
	req := signedRequest(ghSource, r.body, r.id, r.event, now)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.id == "-" {
		req.Header.Del("X-GitHub-Delivery")
	}
	if r.event == "-" {
		req.Header.Del("X-GitHub-Event")
	}
	req.Header.Del("X-GitHub-Hook-ID")
	if r.hook != "" {
		req.Header.Set("X-GitHub-Hook-ID", r.hook)
	}
	if r.signature != nil {
		req.Header.Del("X-Hub-Signature-256")
		if *r.signature != "" {
			req.Header.Set("X-Hub-Signature-256", *r.signature)
		}
	}
	return req
}

// stripeRequest is body as Stripe sends it, signed at signedAt with secret.
func stripeRequest(body string, signedAt time.Time, secret string) *http.Request {
	c := stripeSource
	c.Secrets = verify.Secrets{secret}
	return signedRequest(c, []byte(body), "", "", signedAt)
}

// githubSignature is the X-Hub-Signature-256 that GitHub would send with body
// if its secret were secret: a signature the gateway's secret does not match.
func githubSignature(secret string, body []byte) string {
	c := ghSource
	c.Secrets = verify.Secrets{secret}
	return signedRequest(c, body, "d-1", "push", now).Header.Get("X-Hub-Signature-256")
}

func ptr(s string) *string { return &s }

func wantError(t *testing.T, res response, status int, code string) {
	t.Helper()
	if res.status != status || res.body["error"] != code {
		t.Fatalf("got %d %v, want %d %s", res.status, res.body, status, code)
	}
	if msg, _ := res.body["message"].(string); msg == "" {
		t.Fatalf("error without a message: %v", res.body)
	}
}

// The contract's response table, row by row, through the real router and
// database. Nothing is stored for a request that fails.
func TestIngestResponses(t *testing.T) {
	t.Parallel()

	t.Run("new verified GitHub delivery: 202 after receipt and jobs are committed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		res := b.do(t, githubRequest(ghReq{hook: "42"}))
		if res.status != http.StatusAccepted || res.body["status"] != "accepted" || res.body["provider"] != "github" ||
			res.body["delivery_id"] != "d-1" || res.body["event"] != "push" || res.body["routes"] != float64(2) {
			t.Fatalf("got %d %v", res.status, res.body)
		}
		if got := b.stored(t); got != [3]int{1, 2, 2} {
			t.Fatalf("receipts, dispatches, jobs = %v, want [1 2 2]", got)
		}
		var entity, scope string
		var body []byte
		_ = b.pool.QueryRow(context.Background(), "SELECT entity, scope, body FROM hookgate_receipts").Scan(&entity, &scope, &body)
		if entity != "github:push:5678:refs/heads/main" || scope != "42" || string(body) != string(githubRequestBody()) {
			t.Fatalf("stored entity %q scope %q body %q", entity, scope, body)
		}
	})

	t.Run("new Stripe delivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		res := b.do(t, stripeRequest(`{"id":"evt_1","type":"invoice.paid","created":1767323045,"data":{"object":{"id":"in_1"}}}`, now, stripeSecret))
		if res.status != http.StatusAccepted || res.body["event"] != "invoice.paid" || res.body["routes"] != float64(2) {
			t.Fatalf("got %d %v", res.status, res.body)
		}
	})

	t.Run("GitHub form-encoded delivery is stored as the raw form", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		form := []byte("payload=" + url.QueryEscape(`{"action":"opened","pull_request":{"id":1,"updated_at":"2026-01-01T00:00:00Z"}}`))
		res := b.do(t, githubRequest(ghReq{event: "pull_request", body: form, contentType: "application/x-www-form-urlencoded"}))
		if res.status != http.StatusAccepted || res.body["event"] != "pull_request.opened" {
			t.Fatalf("got %d %v", res.status, res.body)
		}
		var body []byte
		var ct string
		_ = b.pool.QueryRow(context.Background(), "SELECT body, content_type FROM hookgate_receipts").Scan(&body, &ct)
		if !bytes.Equal(body, form) || ct != "application/x-www-form-urlencoded" {
			t.Fatalf("stored %q as %q", body, ct)
		}
	})

	t.Run("same key, same body: 200 duplicate, nothing new enqueued", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.do(t, githubRequest(ghReq{}))
		before := b.stored(t)
		res := b.do(t, githubRequest(ghReq{}))
		if res.status != http.StatusOK || res.body["status"] != "duplicate" || res.body["delivery_id"] != "d-1" || res.body["routes"] != float64(0) {
			t.Fatalf("got %d %v", res.status, res.body)
		}
		if after := b.stored(t); after != before {
			t.Fatalf("stored %v, then %v", before, after)
		}
	})

	t.Run("same key, different body: 409, the stored receipt untouched", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		b.do(t, githubRequest(ghReq{}))
		before := b.stored(t)
		other := []byte(`{"ref":"refs/heads/evil","repository":{"id":5678,"pushed_at":1767323046}}`)
		wantError(t, b.do(t, githubRequest(ghReq{body: other})), http.StatusConflict, "delivery_conflict")
		var body []byte
		_ = b.pool.QueryRow(context.Background(), "SELECT body FROM hookgate_receipts").Scan(&body)
		if !bytes.Equal(body, githubRequestBody()) {
			t.Fatalf("stored body changed to %q", body)
		}
		if after := b.stored(t); after != before {
			t.Fatalf("stored %v, then %v", before, after)
		}
	})

	failures := []struct {
		name   string
		req    func() *http.Request
		status int
		code   string
		opts   setupOpts
	}{
		{"signature missing", func() *http.Request { return githubRequest(ghReq{signature: ptr("")}) }, 401, "invalid_signature", setupOpts{}},
		{"only the SHA-1 signature", func() *http.Request {
			r := githubRequest(ghReq{signature: ptr("")})
			r.Header.Set("X-Hub-Signature", "sha1=0123")
			return r
		}, 401, "invalid_signature", setupOpts{}},
		{"wrong signature", func() *http.Request {
			return githubRequest(ghReq{signature: ptr(githubSignature("guess", githubRequestBody()))})
		}, 401, "invalid_signature", setupOpts{}},
		{"no Stripe secret matches", func() *http.Request { return stripeRequest(`{"id":"evt_1","type":"x"}`, now, "whsec_guess") }, 401, "invalid_signature", setupOpts{}},
		{"unparseable Stripe-Signature", func() *http.Request {
			r := stripeRequest(`{"id":"evt_1","type":"x"}`, now, stripeSecret)
			r.Header.Set("Stripe-Signature", "t=1,v1")
			return r
		}, 401, "invalid_signature", setupOpts{}},
		{"Stripe t too old", func() *http.Request {
			return stripeRequest(`{"id":"evt_1","type":"x"}`, now.Add(-6*time.Minute), stripeSecret)
		}, 401, "timestamp_out_of_tolerance", setupOpts{}},
		{"Stripe t too new", func() *http.Request {
			return stripeRequest(`{"id":"evt_1","type":"x"}`, now.Add(6*time.Minute), stripeSecret)
		}, 401, "timestamp_out_of_tolerance", setupOpts{}},
		{"required header missing", func() *http.Request { return githubRequest(ghReq{event: "-"}) }, 400, "bad_request", setupOpts{}},
		{"delivery id missing", func() *http.Request { return githubRequest(ghReq{id: "-"}) }, 400, "bad_request", setupOpts{}},
		{"payload not JSON", func() *http.Request { return githubRequest(ghReq{body: []byte("hello")}) }, 400, "bad_request", setupOpts{}},
		{"Stripe payload without id", func() *http.Request { return stripeRequest(`{"type":"invoice.paid"}`, now, stripeSecret) }, 400, "bad_request", setupOpts{}},
		{"body too large, declared", func() *http.Request { return githubRequest(ghReq{body: bytes.Repeat([]byte("a"), maxBody+1)}) }, 413, "body_too_large", setupOpts{}},
		{"body too large, chunked", func() *http.Request {
			r := githubRequest(ghReq{body: bytes.Repeat([]byte("a"), maxBody+1)})
			r.ContentLength = -1
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("a"), maxBody+1))))
			return r
		}, 413, "body_too_large", setupOpts{}},
		{"content type not accepted", func() *http.Request { return githubRequest(ghReq{contentType: "text/plain"}) }, 415, "unsupported_media_type", setupOpts{}},
		{"Stripe form is not accepted", func() *http.Request {
			r := stripeRequest(`{"id":"evt_1","type":"x"}`, now, stripeSecret)
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		}, 415, "unsupported_media_type", setupOpts{}},
		{"provider not configured", func() *http.Request { return stripeRequest(`{"id":"evt_1","type":"x"}`, now, stripeSecret) }, 404, "provider_not_configured", setupOpts{noStripe: true}},
		{"unknown provider", func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "/webhooks/gitlab", strings.NewReader("{}"))
		}, 404, "provider_not_configured", setupOpts{}},

		// The contract's order: the first failure answers.
		{"size before content type", func() *http.Request {
			return githubRequest(ghReq{contentType: "text/plain", body: bytes.Repeat([]byte("a"), maxBody+1)})
		}, 413, "body_too_large", setupOpts{}},
		{"content type before headers", func() *http.Request { return githubRequest(ghReq{contentType: "text/plain", event: "-"}) }, 415, "unsupported_media_type", setupOpts{}},
		{"headers before signature", func() *http.Request { return githubRequest(ghReq{event: "-", signature: ptr("sha256=00")}) }, 400, "bad_request", setupOpts{}},
		{"signature before payload", func() *http.Request {
			return githubRequest(ghReq{body: []byte("hello"), signature: ptr(githubSignature("guess", []byte("hello")))})
		}, 401, "invalid_signature", setupOpts{}},
		{"provider before size", func() *http.Request {
			return httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(bytes.Repeat([]byte("a"), maxBody+1)))
		}, 404, "provider_not_configured", setupOpts{noStripe: true}},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.opts)
			wantError(t, b.do(t, tt.req()), tt.status, tt.code)
			if got := b.stored(t); got != [3]int{} {
				t.Fatalf("stored %v after a failed request", got)
			}
		})
	}

	t.Run("database unreachable: 503 with Retry-After", func(t *testing.T) {
		t.Parallel()
		dead, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		defer dead.Close()
		b := setup(t, setupOpts{pool: dead})
		res := b.do(t, githubRequest(ghReq{}))
		wantError(t, res, http.StatusServiceUnavailable, "unavailable")
		if res.header.Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("readyz = %d while the database is down", rec.Code)
		}
	})
}

func githubRequestBody() []byte {
	return []byte(`{"ref":"refs/heads/main","repository":{"id":5678,"pushed_at":1767323045}}`)
}

// A commit that fails after the receipt insert leaves neither receipt nor job,
// and the sender is told to retry. The failure is real: a deferred constraint
// trigger raises at COMMIT.
func TestIngestCommitFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	_, err := b.pool.Exec(context.Background(), `
		CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected commit failure'; END $$;
		CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON hookgate_receipts
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_at_commit();`)
	if err != nil {
		t.Fatal(err)
	}
	res := b.do(t, githubRequest(ghReq{}))
	wantError(t, res, http.StatusServiceUnavailable, "unavailable")
	if res.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if got := b.stored(t); got != [3]int{} {
		t.Fatalf("stored %v after a failed commit", got)
	}

	// Once the fault is gone, the provider's retry is accepted as new.
	if _, err := b.pool.Exec(context.Background(), "DROP TRIGGER fail_at_commit ON hookgate_receipts"); err != nil {
		t.Fatal(err)
	}
	if res := b.do(t, githubRequest(ghReq{})); res.status != http.StatusAccepted {
		t.Fatalf("retry got %d %v", res.status, res.body)
	}
}

// A 503 may follow a commit: a delivery whose commit waited past the
// request's time (here on a lock another transaction holds, as a stalled
// database would) is answered 503 unavailable, its answer not claiming that
// nothing was stored; its batch then commits, and the sender's retry answers
// duplicate. Nothing answered 2xx is lost, and nothing answered 503 is
// dispatched twice.
func TestA503MayFollowACommit(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	stall, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The same receipt, uncommitted: the delivery's insert waits for it.
	sum := sha256.Sum256(githubRequestBody())
	if _, err := stall.Exec(ctx, `INSERT INTO hookgate_receipts (provider, scope, delivery_id, event, content_type, headers, body, body_sha256, received_at, expires_at)
		VALUES ('github', '', 'stalled', 'push', 'application/json', '{}', '', $1, now(), now() + interval '3 days')`, sum[:]); err != nil {
		t.Fatal(err)
	}
	req := githubRequest(ghReq{id: "stalled"})
	reqCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	res := b.do(t, req.WithContext(reqCtx))
	wantError(t, res, http.StatusServiceUnavailable, "unavailable")
	if msg := res.body["message"].(string); strings.Contains(msg, "nothing was stored") || !strings.Contains(msg, "duplicate") {
		t.Errorf("the 503's message %q: it must not say nothing was stored, and should say a retry is safe", msg)
	}
	if err := stall.Rollback(ctx); err != nil { // the database answers again
		t.Fatal(err)
	}
	dbtest.Eventually(t, 10*time.Second, "the delivery answered 503 committed", func() error {
		if n := b.count(t, "SELECT count(*) FROM hookgate_receipts WHERE delivery_id = 'stalled'"); n != 1 {
			return fmt.Errorf("%d receipts", n)
		}
		return nil
	})
	res = b.do(t, githubRequest(ghReq{id: "stalled"}))
	if res.status != http.StatusOK || res.body["status"] != "duplicate" {
		t.Fatalf("the retry of a delivery answered 503 and stored: %d %v, want 200 duplicate", res.status, res.body)
	}
	if n := b.count(t, "SELECT count(*) FROM river_job"); n != 2 { // ci and audit, once
		t.Errorf("%d jobs after the 503 and its retry", n)
	}
}

// 50 concurrent copies of one delivery: the primary key decides, once.
func TestIngestConcurrentCopies(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var wg sync.WaitGroup
	statuses := make(chan int, 50)
	for range 50 {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			b.handler.ServeHTTP(rec, githubRequest(ghReq{id: "same"}))
			statuses <- rec.Code
		})
	}
	wg.Wait()
	close(statuses)
	counts := map[int]int{}
	for s := range statuses {
		counts[s]++
	}
	if counts[http.StatusAccepted] != 1 || counts[http.StatusOK] != 49 || len(counts) != 2 {
		t.Fatalf("statuses = %v, want one 202 and 49 200", counts)
	}
	if got := b.stored(t); got != [3]int{1, 2, 2} {
		t.Fatalf("receipts, dispatches, jobs = %v, want [1 2 2]", got)
	}
}

// GitHub sends one event's GUID to every hook: each hook's copy is a receipt
// of its own, and each route gets the event once.
func TestIngestOneEventThroughTwoHooks(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	first := b.do(t, githubRequest(ghReq{id: "guid-1", hook: "1"}))
	second := b.do(t, githubRequest(ghReq{id: "guid-1", hook: "2"}))
	if first.status != http.StatusAccepted || first.body["routes"] != float64(2) {
		t.Fatalf("first hook: %d %v", first.status, first.body)
	}
	if second.status != http.StatusAccepted || second.body["status"] != "accepted" || second.body["routes"] != float64(0) {
		t.Fatalf("second hook: %d %v", second.status, second.body)
	}
	if got := b.stored(t); got != [3]int{2, 2, 2} {
		t.Fatalf("receipts, dispatches, jobs = %v, want [2 2 2]", got)
	}
	if dup := b.do(t, githubRequest(ghReq{id: "guid-1", hook: "2"})); dup.status != http.StatusOK {
		t.Fatalf("second hook's retry: %d %v", dup.status, dup.body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Fatalf("%s = %d %s", path, rec.Code, rec.Body)
		}
	}
	// A schema that is behind is not ready, once the answer cached for a
	// second has expired.
	if _, err := b.pool.Exec(context.Background(), "DELETE FROM hookgate_migrations"); err != nil {
		t.Fatal(err)
	}
	dbtest.Eventually(t, 3*time.Second, "readyz answers 503 with a schema behind", func() error {
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != http.StatusServiceUnavailable {
			return fmt.Errorf("readyz = %d", rec.Code)
		}
		return nil
	})

	res := b.do(t, httptest.NewRequest(http.MethodGet, "/webhooks/github", nil))
	wantError(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
	wantError(t, b.do(t, httptest.NewRequest(http.MethodGet, "/nope", nil)), http.StatusNotFound, "not_found")
}

// mustRegistry is the registry of provs.
func mustRegistry(t testing.TB, provs ...providers.Provider) *providers.Registry {
	t.Helper()
	r, err := providers.NewRegistry(provs...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
