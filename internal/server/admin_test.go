package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
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
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/rejections"
	"github.com/hookgate/hookgate/internal/replay"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/verify"
	"github.com/hookgate/hookgate/internal/yield"
)

const adminToken = "operator-token-123"

// adminBundle is a whole gateway in one process: ingest, operator endpoints,
// a working River client, and a forward target whose answers a test scripts.
type adminBundle struct {
	pool     *pgxpool.Pool
	handler  http.Handler
	client   *river.Client[pgx.Tx]
	recorder *rejections.Recorder
	target   *httptest.Server
	guard    *routes.Guard
	answer   atomic.Int32 // the target's status; 0 means 200
	// retryAfter is the Retry-After, in seconds, of the target's answers
	// that are not 200; 0: none.
	retryAfter atomic.Int32
	mu         sync.Mutex
	got        []http.Header
}

func setupAdmin(t *testing.T, token string) *adminBundle {
	t.Helper()
	return setupAdminOn(t, dbtest.NewPool(t), token)
}

// setupAdminOn builds a gateway on an existing database, as a restart does.
// Each dispatch has one attempt.
func setupAdminOn(t *testing.T, pool *pgxpool.Pool, token string, opts ...func(*server.Config)) *adminBundle {
	t.Helper()
	return setupAdminAttempts(t, pool, token, 1, opts...)
}

// setupAdminAttempts is setupAdminOn with attempts attempts per dispatch.
func setupAdminAttempts(t *testing.T, pool *pgxpool.Pool, token string, attempts int, opts ...func(*server.Config)) *adminBundle {
	t.Helper()
	b := &adminBundle{pool: pool}
	b.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.got = append(b.got, r.Header.Clone())
		b.mu.Unlock()
		status := int(b.answer.Load())
		if status == 0 {
			status = 200
		}
		if after := b.retryAfter.Load(); after > 0 && status != 200 {
			w.Header().Set("Retry-After", fmt.Sprint(after))
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(b.target.Close)
	logger := slog.New(slog.DiscardHandler)
	handlers := handlers.Default(logger)
	// hidden is never sent to: its URL's credentials must never be shown.
	table, err := fanout.Parse("fwd=github:push,stripe:invoice.*>"+b.target.URL+" audit=*:*>builtin:log"+
		" hidden=stripe:never.sent>http://user:pw@127.0.0.1:1/x?token=sekret",
		handlers.Names(), fanout.Defaults{Concurrency: 8, Timeout: 5 * time.Second, MaxAttempts: attempts})
	if err != nil {
		t.Fatal(err)
	}
	if err := routes.Sync(context.Background(), b.pool, table); err != nil {
		t.Fatal(err)
	}
	inserter, err := dispatch.NewInserter(b.pool, logger)
	if err != nil {
		t.Fatal(err)
	}
	b.guard = routes.NewGuard(b.pool, table, inserter, logger)
	m := metrics.New(b.pool)
	m.Routes(b.guard.Gauges)
	store := &receipts.Store{Retention: 72 * time.Hour}
	enq := dispatch.NewEnqueuer(inserter, table, dispatch.EnqueuerConfig{MaxAttempts: attempts})
	b.client, err = dispatch.NewClient(b.pool, dispatch.ClientConfig{
		Dispatch: dispatch.NewWorker(b.pool, table, store, handlers, forward.New(nil, 5*time.Second, 8),
			b.guard, yield.Never(), m, logger),
		Extra: func(w *river.Workers) error {
			return river.AddWorkerSafely(w, &replay.BatchWorker{Pool: b.pool, Enqueuer: enq})
		},
		Workers: 8, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{Endpoints: riverui.NewEndpoints(b.client, nil), Logger: logger, Prefix: "/admin/river"})
	if err != nil {
		t.Fatal(err)
	}
	b.recorder = &rejections.Recorder{Pool: b.pool, Logger: logger}
	cfg := server.Config{
		Logger: logger,
		Providers: mustRegistry(t,
			providers.GitHub{Secrets: verify.Secrets{ghSecret}},
			providers.Stripe{Secrets: verify.Secrets{stripeSecret}, Tolerance: 5 * time.Minute},
		),
		Ingester:   ingest.NewIngester(b.pool, store, enq, ingest.Config{}),
		Ready:      func(context.Context) error { return nil },
		Now:        func() time.Time { return now },
		Metrics:    m,
		Rejections: b.recorder,
		Admin:      server.AdminConfig{Token: token, Pool: b.pool, Enqueuer: enq, RiverUI: ui, Routes: table},
	}
	for _, o := range opts {
		o(&cfg)
	}
	store.Keys = cfg.Keys // the ingester's receipts index the server's search keys
	b.handler = server.New(cfg)
	return b
}

func (b *adminBundle) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.guard.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	dbtest.StartRiver(t, b.client)
}

type adminReq struct {
	method, path, body, token, key string
}

func (b *adminBundle) admin(t *testing.T, r adminReq) (int, http.Header, []byte) {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodGet
	}
	req := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
	if r.token != "-" {
		tok := r.token
		if tok == "" {
			tok = adminToken
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if r.key != "" {
		req.Header.Set("Idempotency-Key", r.key)
	}
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return rec.Code, rec.Header(), rec.Body.Bytes()
}

func (b *adminBundle) adminJSON(t *testing.T, r adminReq, wantStatus int, v any) {
	t.Helper()
	status, _, body := b.admin(t, r)
	if status != wantStatus {
		t.Fatalf("%s %s = %d %s, want %d", r.method, r.path, status, body, wantStatus)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
}

func (b *adminBundle) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (b *adminBundle) ingest(t *testing.T, req *http.Request) {
	t.Helper()
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("ingest = %d %s", rec.Code, rec.Body)
	}
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	for _, tt := range []struct {
		name, token string
		want        int
	}{
		{"no token", "-", 401},
		{"wrong token", "operator-token-12", 401},
		{"right token", "", 200},
	} {
		status, header, body := b.admin(t, adminReq{path: "/admin/deliveries", token: tt.token})
		if status != tt.want {
			t.Fatalf("%s: %d %s", tt.name, status, body)
		}
		if status == 401 && (!bytes.Contains(body, []byte(`"error":"unauthorized"`)) || header.Get("WWW-Authenticate") == "") {
			t.Fatalf("%s: 401 body %s", tt.name, body)
		}
	}
	// The scheme's name is case-insensitive (RFC 7235).
	for _, scheme := range []string{"bearer", "BEARER"} {
		req := httptest.NewRequest(http.MethodGet, "/admin/deliveries", nil)
		req.Header.Set("Authorization", scheme+" "+adminToken)
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("Authorization: %s <token>: %d %s", scheme, rec.Code, rec.Body)
		}
	}
	// River UI is behind the same door.
	if status, _, _ := b.admin(t, adminReq{path: "/admin/river/", token: "-"}); status != 401 {
		t.Fatalf("River UI without a token: %d", status)
	}
	if status, _, body := b.admin(t, adminReq{path: "/admin/river/"}); status != 200 || !bytes.Contains(body, []byte("<html")) {
		t.Fatalf("River UI with the token: %d", status)
	}

	off := setupAdmin(t, "")
	for _, path := range []string{"/admin/deliveries", "/admin/river/", "/admin/replays"} {
		status, _, body := off.admin(t, adminReq{path: path})
		if status != 404 || !bytes.Contains(body, []byte(`"error":"not_found"`)) {
			t.Fatalf("%s with no token configured: %d %s", path, status, body)
		}
	}
}

type listed struct {
	Deliveries []struct {
		Provider   string  `json:"provider"`
		DeliveryID string  `json:"delivery_id"`
		Event      string  `json:"event"`
		Entity     *string `json:"entity"`
		Receipts   int     `json:"receipts"`
		State      string  `json:"state"`
		ReceivedAt string  `json:"received_at"`
	} `json:"deliveries"`
	NextCursor *string `json:"next_cursor"`
}

func (l listed) ids() []string {
	var ids []string
	for _, d := range l.Deliveries {
		ids = append(ids, d.DeliveryID)
	}
	return ids
}

func stripeEvent(id, typ string) *http.Request {
	return stripeRequest(fmt.Sprintf(`{"id":%q,"type":%q,"created":1767323045,"data":{"object":{"id":"in_%s"}}}`, id, typ, id), now, stripeSecret)
}

// The list: newest first, filters, and pages that neither repeat nor skip
// when deliveries arrive between them.
func TestAdminListDeliveries(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.ingest(t, githubRequest(ghReq{id: "g-1", event: "ping", body: []byte(`{"zen":"z"}`)}))
	b.ingest(t, githubRequest(ghReq{id: "g-2", hook: "1"}))
	b.ingest(t, githubRequest(ghReq{id: "g-2", hook: "2"}))
	b.ingest(t, githubRequest(ghReq{id: "g-3", event: "pull_request",
		body: []byte(`{"action":"opened","pull_request":{"id":7,"updated_at":"2026-01-01T00:00:00Z"}}`)}))
	b.ingest(t, stripeEvent("evt_1", "invoice.paid"))
	b.ingest(t, stripeEvent("evt_2", "invoice.payment_failed"))
	b.ingest(t, stripeEvent("evt_3", "customer.created"))

	var all listed
	b.adminJSON(t, adminReq{path: "/admin/deliveries"}, 200, &all)
	if got := strings.Join(all.ids(), ","); got != "evt_3,evt_2,evt_1,g-3,g-2,g-1" {
		t.Fatalf("list = %s", got)
	}
	if all.NextCursor != nil {
		t.Fatal("a cursor after the last page")
	}
	d := all.Deliveries[4] // g-2: two hooks, pending dispatches (client not started)
	if d.Receipts != 2 || d.State != "pending" || d.Entity == nil || *d.Entity != "github:push:5678:refs/heads/main" || d.Event != "push" {
		t.Fatalf("g-2 = %+v", d)
	}

	for query, want := range map[string]string{
		"provider=stripe":                   "evt_3,evt_2,evt_1",
		"event=invoice":                     "evt_2,evt_1",
		"event=invoice.*":                   "evt_2,evt_1",
		"event=pull_request":                "g-3",
		"event=*.opened":                    "g-3",
		"provider=github&event=push":        "g-2",
		"state=pending":                     "evt_3,evt_2,evt_1,g-3,g-2,g-1",
		"state=succeeded":                   "",
		"since=2000-01-01T00:00:00Z":        "evt_3,evt_2,evt_1,g-3,g-2,g-1",
		"until=2000-01-01T00:00:00Z":        "",
		"provider=stripe&limit=600&event=*": "evt_3,evt_2,evt_1",
	} {
		var l listed
		b.adminJSON(t, adminReq{path: "/admin/deliveries?" + query}, 200, &l)
		if got := strings.Join(l.ids(), ","); got != want {
			t.Errorf("%s: got %q, want %q", query, got, want)
		}
	}

	// Paging, with deliveries arriving between pages.
	var seen []string
	var page listed
	b.adminJSON(t, adminReq{path: "/admin/deliveries?limit=4"}, 200, &page)
	seen = append(seen, page.ids()...)
	b.ingest(t, stripeEvent("evt_new1", "invoice.paid"))
	b.ingest(t, stripeEvent("evt_new2", "invoice.paid"))
	for page.NextCursor != nil {
		next := *page.NextCursor
		page = listed{}
		b.adminJSON(t, adminReq{path: "/admin/deliveries?limit=4&cursor=" + next}, 200, &page)
		seen = append(seen, page.ids()...)
	}
	if got := strings.Join(seen, ","); got != "evt_3,evt_2,evt_1,g-3,g-2,g-1" {
		t.Fatalf("pages = %s", got)
	}

	for _, bad := range []string{"state=bogus", "provider=gitlab", "since=yesterday", "limit=abc", "limit=0", "cursor=garbage", "event=a%20b"} {
		status, _, body := b.admin(t, adminReq{path: "/admin/deliveries?" + bad})
		if status != 400 || !bytes.Contains(body, []byte(`"bad_request"`)) {
			t.Errorf("%s: %d %s", bad, status, body)
		}
	}
}

type shown struct {
	Provider   string  `json:"provider"`
	DeliveryID string  `json:"delivery_id"`
	Event      string  `json:"event"`
	Entity     *string `json:"entity"`
	EventTime  *string `json:"event_time"`
	Receipts   []struct {
		Scope       string            `json:"scope"`
		ContentType string            `json:"content_type"`
		BodySHA256  string            `json:"body_sha256"`
		Headers     map[string]string `json:"headers"`
	} `json:"receipts"`
	Dispatches []struct {
		Route      string  `json:"route"`
		Generation int     `json:"generation"`
		State      string  `json:"state"`
		Attempts   int     `json:"attempts"`
		LastError  *string `json:"last_error"`
	} `json:"dispatches"`
}

func TestAdminShowAndBody(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	body := []byte("payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D")
	b.ingest(t, githubRequest(ghReq{id: "g-1", hook: "1", body: body, contentType: "application/x-www-form-urlencoded"}))
	b.ingest(t, githubRequest(ghReq{id: "g-1", hook: "2", body: body, contentType: "application/x-www-form-urlencoded"}))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 1}, "succeeded")

	var s shown
	b.adminJSON(t, adminReq{path: "/admin/deliveries/github/g-1"}, 200, &s)
	if s.Event != "push" || len(s.Receipts) != 2 || s.Receipts[0].Scope != "1" || s.Receipts[1].Scope != "2" ||
		s.Receipts[0].ContentType != "application/x-www-form-urlencoded" || len(s.Receipts[0].BodySHA256) != 64 {
		t.Fatalf("show = %+v", s)
	}
	for _, r := range s.Receipts {
		if _, ok := r.Headers["X-Hub-Signature-256"]; ok || r.Headers["X-GitHub-Delivery"] != "g-1" {
			t.Fatalf("headers = %v", r.Headers)
		}
	}
	if len(s.Dispatches) != 2 {
		t.Fatalf("dispatches = %+v", s.Dispatches)
	}

	status, header, got := b.admin(t, adminReq{path: "/admin/deliveries/github/g-1/body"})
	if status != 200 || !bytes.Equal(got, body) || header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		t.Fatalf("body = %d %q %q", status, got, header.Get("Content-Type"))
	}
	for _, path := range []string{"/admin/deliveries/github/nope", "/admin/deliveries/github/nope/body", "/admin/deliveries/stripe/g-1"} {
		if status, _, body := b.admin(t, adminReq{path: path}); status != 404 || !bytes.Contains(body, []byte(`"not_found"`)) {
			t.Fatalf("%s = %d %s", path, status, body)
		}
	}
}

type replayed struct {
	ReplayID   string `json:"replay_id"`
	Dispatches []struct {
		Route      string `json:"route"`
		Generation int    `json:"generation"`
		State      string `json:"state"`
	} `json:"dispatches"`
}

func TestAdminReplayOne(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.answer.Store(400)
	b.ingest(t, githubRequest(ghReq{id: "g-1"}))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 1}, "discarded")
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "audit", Generation: 1}, "succeeded")

	var l listed
	b.adminJSON(t, adminReq{path: "/admin/deliveries?state=discarded"}, 200, &l)
	if len(l.Deliveries) != 1 || l.Deliveries[0].State != "discarded" {
		t.Fatalf("discarded list = %+v", l)
	}

	// Without force: only the discarded route, as generation 2, and it succeeds.
	b.answer.Store(200)
	var r replayed
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/replay", body: `{"reason":"target fixed"}`}, 202, &r)
	if len(r.Dispatches) != 1 || r.Dispatches[0].Route != "fwd" || r.Dispatches[0].Generation != 2 || r.Dispatches[0].State != "pending" || r.ReplayID == "" {
		t.Fatalf("replay = %+v", r)
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 2}, "succeeded")

	// Nothing left to replay without force.
	r = replayed{}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/replay"}, 202, &r)
	if len(r.Dispatches) != 0 {
		t.Fatalf("replay of succeeded routes without force = %+v", r)
	}

	// force: generation 3 of fwd and 2 of audit; the target sees the same key.
	r = replayed{}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/replay", body: `{"force":true,"routes":["fwd"]}`}, 202, &r)
	if len(r.Dispatches) != 1 || r.Dispatches[0].Generation != 3 {
		t.Fatalf("forced replay = %+v", r)
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 3}, "succeeded")
	b.mu.Lock()
	got := append([]http.Header(nil), b.got...)
	b.mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("target got %d requests", len(got))
	}
	for i, h := range got {
		if h.Get("Idempotency-Key") != "github:g-1:fwd" || h.Get("X-Hookgate-Generation") != fmt.Sprint(i+1) {
			t.Fatalf("request %d: key %q generation %q", i, h.Get("Idempotency-Key"), h.Get("X-Hookgate-Generation"))
		}
	}

	// Unknown route or delivery.
	if status, _, body := b.admin(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/replay", body: `{"routes":["nope"]}`}); status != 400 {
		t.Fatalf("unknown route: %d %s", status, body)
	}
	if status, _, _ := b.admin(t, adminReq{method: "POST", path: "/admin/deliveries/github/missing/replay"}); status != 404 {
		t.Fatalf("unknown delivery: %d", status)
	}
	if status, _, _ := b.admin(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/replay", body: `{"forse":true}`}); status != 400 {
		t.Fatalf("misspelt field: %d", status)
	}

	var log struct {
		Replays []struct {
			Actor      string  `json:"actor"`
			Reason     *string `json:"reason"`
			Dispatches int     `json:"dispatches"`
			Force      bool    `json:"force"`
			State      string  `json:"state"`
		} `json:"replays"`
	}
	b.adminJSON(t, adminReq{path: "/admin/replays"}, 200, &log)
	if len(log.Replays) != 3 || !log.Replays[0].Force || log.Replays[2].Reason == nil || *log.Replays[2].Reason != "target fixed" ||
		log.Replays[2].Dispatches != 1 || log.Replays[0].Actor != server.Actor(adminToken) || log.Replays[0].State != "done" {
		t.Fatalf("replay log = %+v", log.Replays)
	}
	if strings.Contains(log.Replays[0].Actor, adminToken) {
		t.Fatal("the actor reveals the token")
	}
}

func TestAdminBulkReplay(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	const n = 5000
	// 5,000 stored Stripe deliveries whose dispatches all succeeded.
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO hookgate_receipts (provider, scope, delivery_id, event, content_type, body, body_sha256, received_at, expires_at)
		SELECT 'stripe', '', 'evt_' || i, 'customer.created', 'application/json', '{}'::bytea, sha256('{}'::bytea),
			now() - make_interval(secs => i), now() + interval '3 days'
		FROM generate_series(1, $1) i`, n)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.pool.Exec(context.Background(), `
		INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation, state, attempts)
		SELECT 'stripe', 'evt_' || i, 'audit', 1, 'succeeded', 1 FROM generate_series(1, $1) i`, n)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t)

	var res struct {
		ReplayID   string `json:"replay_id"`
		Deliveries int    `json:"deliveries"`
	}
	// Without force nothing is re-dispatched, but every match is counted.
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/replays", body: `{"provider":"stripe","state":"succeeded"}`}, 202, &res)
	if res.Deliveries != n {
		t.Fatalf("matched %d", res.Deliveries)
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/replays", body: `{"provider":"stripe","event":"customer","force":true,"reason":"backfill"}`}, 202, &res)
	if res.Deliveries != n {
		t.Fatalf("matched %d", res.Deliveries)
	}
	dbtest.Eventually(t, 120*time.Second, "the bulk replay done", func() error {
		var state string
		var dispatches int
		_ = b.pool.QueryRow(context.Background(), "SELECT state, dispatches FROM hookgate_replays WHERE replay_id = $1", res.ReplayID).Scan(&state, &dispatches)
		if state != "done" {
			return fmt.Errorf("bulk replay still %s (%d dispatches)", state, dispatches)
		}
		if dispatches != n {
			t.Fatalf("bulk replay made %d dispatches, want %d", dispatches, n)
		}
		return nil
	})
	// One replay's progress: every delivery handled.
	var one struct {
		ReplayID   string `json:"replay_id"`
		State      string `json:"state"`
		Deliveries int    `json:"deliveries"`
		Done       int    `json:"done"`
	}
	b.adminJSON(t, adminReq{path: "/admin/replays/" + res.ReplayID}, 200, &one)
	if one.ReplayID != res.ReplayID || one.State != "done" || one.Deliveries != n || one.Done != n {
		t.Fatalf("GET /admin/replays/{id} = %+v", one)
	}
	for _, path := range []string{"/admin/replays/rpl_unknown", "/admin/replays/%00"} {
		if status, _, body := b.admin(t, adminReq{path: path}); status != 404 || !bytes.Contains(body, []byte(`"not_found"`)) {
			t.Fatalf("GET %s = %d %s", path, status, body)
		}
	}

	var gen2, done int
	_ = b.pool.QueryRow(context.Background(), "SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM hookgate_dispatches WHERE generation = 2").Scan(&gen2, &done)
	if gen2 != n {
		t.Fatalf("%d generation-2 dispatches", gen2)
	}
	t.Logf("bulk replay of %d: done; %d of its dispatches already succeeded", n, done)

	var log struct {
		Replays []struct {
			Deliveries int             `json:"deliveries"`
			Dispatches int             `json:"dispatches"`
			Filter     json.RawMessage `json:"filter"`
			State      string          `json:"state"`
		} `json:"replays"`
	}
	b.adminJSON(t, adminReq{path: "/admin/replays"}, 200, &log)
	if len(log.Replays) != 2 || log.Replays[0].Deliveries != n || log.Replays[0].Dispatches != n || log.Replays[1].Dispatches != 0 ||
		!bytes.Contains(log.Replays[0].Filter, []byte(`"event":"customer"`)) {
		t.Fatalf("log = %+v", log.Replays)
	}
	if status, _, _ := b.admin(t, adminReq{method: "POST", path: "/admin/replays", body: `{"state":"nonsense"}`}); status != 400 {
		t.Fatalf("bad filter: %d", status)
	}
}

func TestAdminReplayIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.ingest(t, githubRequest(ghReq{id: "g-1"}))
	path := "/admin/deliveries/github/g-1/replay"
	countReplays := func() int {
		var n int
		_ = b.pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_replays").Scan(&n)
		return n
	}

	// Same key, same request (keys in another order, other spacing): the first answer.
	status1, _, first := b.admin(t, adminReq{method: "POST", path: path, body: `{"force":true,"reason":"r"}`, key: "k-1"})
	status2, h2, second := b.admin(t, adminReq{method: "POST", path: path, body: `{ "reason": "r", "force": true }`, key: "k-1"})
	if status1 != 202 || status2 != 202 || !bytes.Equal(first, second) || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s; second %d %s", status1, first, status2, second)
	}
	if n := countReplays(); n != 1 {
		t.Fatalf("%d replays after a repeated key", n)
	}

	// Same key, another request.
	if status, _, body := b.admin(t, adminReq{method: "POST", path: path, body: `{"force":false}`, key: "k-1"}); status != 422 ||
		!bytes.Contains(body, []byte("idempotency_key_reused")) {
		t.Fatalf("other body: %d %s", status, body)
	}
	// The path is part of the request.
	b.ingest(t, githubRequest(ghReq{id: "g-2"}))
	if status, _, _ := b.admin(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-2/replay", body: `{"force":true,"reason":"r"}`, key: "k-1"}); status != 422 {
		t.Fatalf("same key on another delivery: %d", status)
	}

	// A failed request keeps nothing: the key is free again.
	if status, _, _ := b.admin(t, adminReq{method: "POST", path: path, body: `{"routes":["nope"]}`, key: "k-2"}); status != 400 {
		t.Fatalf("bad route: %d", status)
	}
	if status, _, body := b.admin(t, adminReq{method: "POST", path: path, body: `{"routes":["audit"],"force":true}`, key: "k-2"}); status != 202 {
		t.Fatalf("after a 400 the key should be free: %d %s", status, body)
	}

	// A request holding the key: 409 while it runs.
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "idempotency|"+server.Actor(adminToken)+"|replay|k-3")
	if err != nil {
		t.Fatal(err)
	}
	if status, _, body := b.admin(t, adminReq{method: "POST", path: path, body: `{"force":true}`, key: "k-3"}); status != 409 ||
		!bytes.Contains(body, []byte("idempotency_key_in_flight")) {
		t.Fatalf("in flight: %d %s", status, body)
	}
	_ = tx.Rollback(ctx)

	// Concurrent copies of one keyed request: one replay; every 202 is the same answer.
	before := countReplays()
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[string]int{}
	statuses := map[int]int{}
	for range 10 {
		wg.Go(func() {
			status, _, body := b.admin(t, adminReq{method: "POST", path: path, body: `{"force":true,"reason":"race"}`, key: "k-4"})
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			if status == 202 {
				answers[string(body)]++
			}
		})
	}
	wg.Wait()
	if n := countReplays() - before; n != 1 || len(answers) != 1 || statuses[202]+statuses[409] != 10 {
		t.Fatalf("%d replays, answers %v, statuses %v", n, answers, statuses)
	}
}

// Retention deletes exactly the receipts past their expires_at whose
// dispatches have ended, with the dispatches of events left without a
// receipt, and keeps their ids (GATEWAY_ID_RETENTION): a captured delivery
// re-sent after its body is gone is a duplicate or a conflict, never new,
// until its id expires too.
func TestRetentionDeletesExactlyExpired(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	for _, id := range []string{"old-1", "old-2", "keep"} {
		b.ingest(t, githubRequest(ghReq{id: id, hook: "1"}))
	}
	b.ingest(t, githubRequest(ghReq{id: "half", hook: "1"}))
	b.ingest(t, githubRequest(ghReq{id: "half", hook: "2"}))
	b.start(t) // a dispatch still in progress keeps its receipt: let them end
	for _, id := range []string{"old-1", "old-2", "keep", "half"} {
		dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: id, Route: "fwd", Generation: 1}, "succeeded")
		dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: id, Route: "audit", Generation: 1}, "succeeded")
	}
	_, err := b.pool.Exec(context.Background(), `UPDATE hookgate_receipts SET expires_at = now() - interval '1 second'
		WHERE delivery_id IN ('old-1', 'old-2') OR (delivery_id = 'half' AND scope = '1')`)
	if err != nil {
		t.Fatal(err)
	}
	n, err := retention.DeleteExpired(context.Background(), b.pool, retention.Policy{Retention: 72 * time.Hour})
	if err != nil || n != 3 {
		t.Fatalf("deleted %d, %v; want 3", n, err)
	}
	rows, _ := b.pool.Query(context.Background(), "SELECT delivery_id || '/' || scope FROM hookgate_receipts ORDER BY 1")
	left, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	if strings.Join(left, ",") != "half/2,keep/1" {
		t.Fatalf("receipts left: %v", left)
	}
	rows, _ = b.pool.Query(context.Background(), "SELECT DISTINCT delivery_id FROM hookgate_dispatches ORDER BY 1")
	dispatched, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	if strings.Join(dispatched, ",") != "half,keep" {
		t.Fatalf("dispatches left for %v", dispatched)
	}

	// The expired deliveries' ids are kept: a captured delivery sent again
	// (same id, body and signature) is a duplicate, another body under the
	// id is 409, and neither dispatches anything; show says it expired.
	for _, c := range []struct {
		req    *http.Request
		status int
	}{
		{githubRequest(ghReq{id: "old-1", hook: "1"}), http.StatusOK},
		{githubRequest(ghReq{id: "old-2", hook: "1", body: []byte(`{"ref":"refs/heads/other","repository":{"id":5678}}`)}), http.StatusConflict},
		// The hook id is not signed: a capture sent again under another
		// hook's id (or none) is the same delivery.
		{githubRequest(ghReq{id: "old-1", hook: "3"}), http.StatusOK},
		{githubRequest(ghReq{id: "old-1"}), http.StatusOK},
		{githubRequest(ghReq{id: "old-2", hook: "9", body: []byte(`{"ref":"refs/heads/other","repository":{"id":5678}}`)}), http.StatusConflict},
	} {
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, c.req)
		if rec.Code != c.status {
			t.Errorf("%s sent again after its receipt expired: %d %s, want %d", c.req.Header.Get("X-GitHub-Delivery"), rec.Code, rec.Body, c.status)
		}
	}
	if n := b.count(t, "SELECT count(*) FROM hookgate_dispatches WHERE delivery_id IN ('old-1', 'old-2')"); n != 0 {
		t.Errorf("%d dispatches for expired deliveries sent again", n)
	}
	var show struct {
		Expired    bool   `json:"expired"`
		BodySHA256 string `json:"body_sha256"`
		Receipts   []any  `json:"receipts"`
	}
	b.adminJSON(t, adminReq{path: "/admin/deliveries/github/old-1"}, http.StatusOK, &show)
	sum := sha256.Sum256(githubRequestBody())
	if !show.Expired || show.BodySHA256 != hex.EncodeToString(sum[:]) || len(show.Receipts) != 0 {
		t.Errorf("show of an expired delivery: %+v", show)
	}
	b.adminJSON(t, adminReq{path: "/admin/deliveries/github/keep"}, http.StatusOK, &show)
	if show.Expired {
		t.Error("show of a kept delivery says expired")
	}
	console := newBrowser(t, b.handler)
	console.signIn(adminToken)
	if res, page := console.do("GET", "/admin/ui/deliveries/github/old-1", nil); res.StatusCode != 200 ||
		!strings.Contains(page, `id="expired"`) || !strings.Contains(page, hex.EncodeToString(sum[:])) {
		t.Errorf("the console's page of an expired delivery: %d\n%s", res.StatusCode, page)
	}

	// Once its id has expired too, the delivery is forgotten: sent again, it
	// is new.
	if _, err := b.pool.Exec(context.Background(), `UPDATE hookgate_expired_ids SET expires_at = now() - interval '1 second'
		WHERE delivery_id = 'old-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.DeleteExpired(context.Background(), b.pool, retention.Policy{Retention: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "SELECT count(*) FROM hookgate_expired_ids"); n != 2 {
		t.Errorf("%d ids kept, want 2 (old-2, half/1)", n)
	}
	b.ingest(t, githubRequest(ghReq{id: "old-1", hook: "1"}))
}

func TestRejectionsRecordedAndBounded(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	bad := githubRequest(ghReq{id: "r-1", signature: ptr(githubSignature("wrong", githubRequestBody()))})
	bad.Header.Set("X-Secret-Looking", "hunter2")
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, bad)
	if rec.Code != 401 {
		t.Fatalf("bad signature: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/gitlab", strings.NewReader("{}")))
	if err := b.recorder.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Rejections []rejections.Rejection `json:"rejections"`
	}
	status, _, body := b.admin(t, adminReq{path: "/admin/rejections"})
	if status != 200 || json.Unmarshal(body, &res) != nil || len(res.Rejections) != 2 {
		t.Fatalf("rejections: %d %s", status, body)
	}
	first := res.Rejections[1]
	if first.Provider != "github" || first.Status != 401 || first.Reason != "invalid_signature" || first.RemoteAddr == "" ||
		!strings.Contains(strings.Join(first.HeaderNames, ","), "X-Hub-Signature-256") {
		t.Fatalf("rejection = %+v", first)
	}
	if res.Rejections[0].Reason != "provider_not_configured" {
		t.Fatalf("newest = %+v", res.Rejections[0])
	}
	for _, secret := range []string{"hunter2", ghSecret, "refs/heads/main", adminToken} {
		if bytes.Contains(body, []byte(secret)) {
			t.Fatalf("rejections show %q: %s", secret, body)
		}
	}

	// A flood: 1,500 more in two flushes; the table holds the newest 1,000.
	for i := range 1500 {
		b.recorder.Record(rejections.Rejection{At: time.Now(), Provider: "stripe", Status: 400, Reason: fmt.Sprintf("flood-%d", i), RemoteAddr: "x"})
		if i == 700 {
			if err := b.recorder.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.recorder.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rows int
	_ = b.pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_rejections").Scan(&rows)
	b.adminJSON(t, adminReq{path: "/admin/rejections"}, 200, &res)
	if rows != 1000 || len(res.Rejections) != 1000 || res.Rejections[0].Reason != "flood-1499" || res.Rejections[999].Reason != "flood-500" {
		t.Fatalf("%d rows; newest %q, oldest %q", rows, res.Rejections[0].Reason, res.Rejections[len(res.Rejections)-1].Reason)
	}
}

func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.ingest(t, githubRequest(ghReq{id: "m-1"}))
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, githubRequest(ghReq{id: "m-1"}))
	rec = httptest.NewRecorder()
	b.handler.ServeHTTP(rec, githubRequest(ghReq{id: "m-2", signature: ptr("sha256=00")}))
	rec = httptest.NewRecorder()
	b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if text, _ := io.ReadAll(rec.Body); !bytes.Contains(text, []byte(`hookgate_dispatch_oldest_unfinished_seconds{route="fwd"}`)) {
		t.Errorf("/metrics lacks the age of fwd's oldest waiting dispatch")
	}
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "m-1", Route: "fwd", Generation: 1}, "succeeded")

	rec = httptest.NewRecorder()
	b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`hookgate_ingest_requests_total{outcome="accepted",provider="github"} 1`,
		`hookgate_ingest_requests_total{outcome="duplicate",provider="github"} 1`,
		`hookgate_ingest_requests_total{outcome="invalid_signature",provider="github"} 1`,
		`hookgate_ingest_ack_seconds_count{provider="github"} 2`,
		`hookgate_dispatches_total{route="fwd",state="succeeded"} 1`,
		`hookgate_receipt_to_success_seconds_count{route="fwd"} 1`,
		`hookgate_forward_attempts_total{outcome="succeeded",route="fwd"} 1`,
		`hookgate_queue_depth{state="available"}`,
		`go_goroutines`,
	} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// A replay's success is counted, but does not feed the receipt-to-success
	// histogram: a replay a day later would skew today's figures.
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/m-1/replay", body: `{"routes":["fwd"],"force":true}`}, 202, nil)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "m-1", Route: "fwd", Generation: 2}, "succeeded")
	rec = httptest.NewRecorder()
	b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text, _ = io.ReadAll(rec.Body)
	for _, want := range []string{
		`hookgate_dispatches_total{route="fwd",state="succeeded"} 2`,
		`hookgate_receipt_to_success_seconds_count{route="fwd"} 1`,
	} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("after a replay, /metrics lacks %s", want)
		}
	}
}

// A delivery's path carries its id escaped once, and is decoded exactly once:
// %25 is a literal %, %2F a slash within the id, and a%2541 is the delivery
// a%41, not aA.
func TestAdminDeliveryPathDecodedOnce(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	for _, id := range []string{"aA", "a%41", "x/y"} {
		b.ingest(t, githubRequest(ghReq{id: id}))
	}
	for path, want := range map[string]string{
		"/admin/deliveries/github/aA":       "aA",
		"/admin/deliveries/github/a%41":     "aA",
		"/admin/deliveries/github/a%2541":   "a%41",
		"/admin/deliveries/github/x%2Fy":    "x/y",
		"/admin/deliveries/git%68ub/a%2541": "a%41",
	} {
		var s shown
		b.adminJSON(t, adminReq{path: path}, 200, &s)
		if len(s.Receipts) != 1 || s.Receipts[0].Headers["X-GitHub-Delivery"] != want || s.DeliveryID != want {
			t.Errorf("%s shows %q with receipts %+v, want %q", path, s.DeliveryID, s.Receipts, want)
		}
		if status, _, _ := b.admin(t, adminReq{path: path + "/body"}); status != 200 {
			t.Errorf("%s/body = %d", path, status)
		}
	}

	// A replay names the delivery it was asked for.
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/a%2541/replay", body: `{"force":true}`}, 202, nil)
	var log struct {
		Replays []struct {
			Filter struct {
				DeliveryID string `json:"delivery_id"`
			} `json:"filter"`
		} `json:"replays"`
	}
	b.adminJSON(t, adminReq{path: "/admin/replays"}, 200, &log)
	if len(log.Replays) != 1 || log.Replays[0].Filter.DeliveryID != "a%41" {
		t.Fatalf("replay log = %+v", log.Replays)
	}
}

// storedState is everything an operator request could change.
func (b *adminBundle) storedState(t *testing.T) [6]int {
	t.Helper()
	var n [6]int
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM hookgate_receipts), (SELECT count(*) FROM hookgate_dispatches),
		(SELECT count(*) FROM river_job), (SELECT count(*) FROM hookgate_replays),
		(SELECT count(*) FROM hookgate_idempotency), (SELECT count(*) FROM hookgate_rejections)`).
		Scan(&n[0], &n[1], &n[2], &n[3], &n[4], &n[5])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Operator input that PostgreSQL cannot hold as text (NUL, invalid UTF-8) is
// the operator's mistake, never the server's: a 4xx with the contract's error
// body, and nothing stored changes. A path naming such a delivery is not
// found, since ingest stores only printable UTF-8 ids.
func TestAdminRefusesTextTheDatabaseCannotHold(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.ingest(t, githubRequest(ghReq{id: "g-1"}))
	cursor := func(p, d string) string {
		j, _ := json.Marshal(map[string]string{"t": "2026-11-30T12:00:00Z", "p": p, "d": d})
		return base64.RawURLEncoding.EncodeToString(j)
	}
	const replay = "/admin/deliveries/github/g-1/replay"
	for _, tt := range []struct {
		name   string
		req    adminReq
		status int
		code   string
	}{
		{"cursor with NUL in the provider", adminReq{path: "/admin/deliveries?cursor=" + cursor("github\x00", "g-1")}, 400, "bad_request"},
		{"cursor with NUL in the id", adminReq{path: "/admin/deliveries?cursor=" + cursor("github", "\x00")}, 400, "bad_request"},
		{"cursor with an overlong id", adminReq{path: "/admin/deliveries?cursor=" + cursor("github", strings.Repeat("x", 256))}, 400, "bad_request"},
		{"provider filter with NUL", adminReq{path: "/admin/deliveries?provider=%00"}, 400, "bad_request"},
		{"event filter with invalid UTF-8", adminReq{path: "/admin/deliveries?event=%FF"}, 400, "bad_request"},
		{"state filter with NUL", adminReq{path: "/admin/deliveries?state=%00"}, 400, "bad_request"},
		{"since with invalid UTF-8", adminReq{path: "/admin/deliveries?since=%FF"}, 400, "bad_request"},
		{"since before year 1", adminReq{path: "/admin/deliveries?since=0000-01-01T00:00:00%2B01:00"}, 400, "bad_request"},
		{"show of id NUL", adminReq{path: "/admin/deliveries/github/%00"}, 404, "not_found"},
		{"show of id 0xFF", adminReq{path: "/admin/deliveries/github/%FF"}, 404, "not_found"},
		{"show of provider 0xFF", adminReq{path: "/admin/deliveries/%FF/g-1"}, 404, "not_found"},
		{"show of an escaped NUL", adminReq{path: "/admin/deliveries/github/a%2Fb%00"}, 404, "not_found"},
		{"body of id NUL", adminReq{path: "/admin/deliveries/github/%00/body"}, 404, "not_found"},
		{"body of id 0xFF", adminReq{path: "/admin/deliveries/github/%FF/body"}, 404, "not_found"},
		{"replay of id NUL", adminReq{method: "POST", path: "/admin/deliveries/github/%00/replay"}, 404, "not_found"},
		{"replay of id 0xFF", adminReq{method: "POST", path: "/admin/deliveries/github/%FF/replay", body: `{"force":true}`}, 404, "not_found"},
		{"replay reason with NUL", adminReq{method: "POST", path: replay, body: `{"force":true,"reason":"a\u0000b"}`}, 400, "bad_request"},
		{"replay reason of invalid UTF-8 bytes", adminReq{method: "POST", path: replay, body: "{\"force\":true,\"reason\":\"ok\xff\"}"}, 400, "bad_request"},
		{"replay route with NUL", adminReq{method: "POST", path: replay, body: `{"force":true,"routes":["fwd\u0000"]}`}, 400, "bad_request"},
		{"replay key of invalid UTF-8", adminReq{method: "POST", path: replay, body: `{"force":true}`, key: "k\xff"}, 400, "bad_request"},
		{"replay key with NUL", adminReq{method: "POST", path: replay, body: `{"force":true}`, key: "k\x00"}, 400, "bad_request"},
		{"bulk reason with NUL", adminReq{method: "POST", path: "/admin/replays", body: `{"force":true,"reason":"\u0000"}`}, 400, "bad_request"},
		{"bulk provider with NUL", adminReq{method: "POST", path: "/admin/replays", body: `{"provider":"github\u0000"}`}, 400, "bad_request"},
		{"bulk event with NUL", adminReq{method: "POST", path: "/admin/replays", body: `{"event":"push\u0000"}`}, 400, "bad_request"},
		{"bulk state with NUL", adminReq{method: "POST", path: "/admin/replays", body: `{"state":"\u0000"}`}, 400, "bad_request"},
		{"bulk until with NUL", adminReq{method: "POST", path: "/admin/replays", body: `{"until":"1h\u0000"}`}, 400, "bad_request"},
		{"bulk since before year 1", adminReq{method: "POST", path: "/admin/replays", body: `{"force":true,"since":"0000-01-01T00:00:00+01:00"}`}, 400, "bad_request"},
		{"bulk key of invalid UTF-8", adminReq{method: "POST", path: "/admin/replays", body: `{"force":true}`, key: "\x80\xff"}, 400, "bad_request"},
		{"replay log limit with NUL", adminReq{path: "/admin/replays?limit=%00"}, 400, "bad_request"},
		{"River UI queue of NUL", adminReq{path: "/admin/river/api/queues/%00"}, 400, "bad_request"},
		{"River UI queue of 0xFF", adminReq{path: "/admin/river/api/queues/%FF"}, 400, "bad_request"},
		{"River UI jobs of kind NUL", adminReq{path: "/admin/river/api/jobs?kinds=%00"}, 400, "bad_request"},
		{"River UI jobs of queue 0xFF", adminReq{path: "/admin/river/api/jobs?queues=%FF"}, 400, "bad_request"},
		{"River UI pause of queue NUL", adminReq{method: "PUT", path: "/admin/river/api/queues/%00/pause"}, 400, "bad_request"},
		// A filter Go's Query would drop without a word, selecting everything.
		{"state filter with a broken escape", adminReq{path: "/admin/deliveries?state=superseded%"}, 400, "bad_request"},
		{"event filter with a broken escape", adminReq{path: "/admin/deliveries?event=nomatch%zz"}, 400, "bad_request"},
		{"filters split by a semicolon", adminReq{path: "/admin/deliveries?state=superseded;provider=github"}, 400, "bad_request"},
		{"a console page's broken filter", adminReq{path: "/admin/ui/deliveries?state=superseded%"}, 400, "bad_request"},
	} {
		before := b.storedState(t)
		status, header, body := b.admin(t, tt.req)
		var e struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		if status != tt.status || header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil ||
			e.Error != tt.code || e.Message == "" {
			t.Errorf("%s: %d %s, want %d with error %q", tt.name, status, body, tt.status, tt.code)
		}
		if after := b.storedState(t); after != before {
			t.Errorf("%s: stored counts went from %v to %v", tt.name, before, after)
		}
	}
}

// A body field of the wrong JSON type is a 400 that names the field and the
// type it must be, in JSON's words, never Go's.
func TestAdminBodyTypeErrorsNameTheField(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	for _, c := range []struct{ path, body, want string }{
		{"/admin/recover/stripe", `{"dry_run":"yes"}`, `the body's field "dry_run" must be a JSON boolean`},
		{"/admin/deliveries/github/x/replay", `{"routes":"fwd"}`, `the body's field "routes" must be a JSON array`},
		{"/admin/routes/fwd/pause", `{"reason":7}`, `the body's field "reason" must be a JSON string`},
	} {
		status, _, body := b.admin(t, adminReq{method: "POST", path: c.path, body: c.body})
		var answer struct{ Error, Message string }
		_ = json.Unmarshal(body, &answer)
		if status != http.StatusBadRequest || answer.Error != "bad_request" || !strings.Contains(answer.Message, c.want) || strings.Contains(answer.Message, "Go struct") {
			t.Errorf("POST %s %s = %d %s, want 400 saying %s", c.path, c.body, status, body, c.want)
		}
	}
}
