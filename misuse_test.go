package hookgate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// running is a gateway a test runs with its own environment, stopped when
// the test ends.
type running struct {
	gw   *hookgate.Gateway
	stop func() (time.Duration, error) // cancels Run; how long it took to return, and its error
}

// parallel holds the tests runGateway has made parallel (a test that runs
// two gateways calls it twice).
var parallel sync.Map

// runGateway runs a gateway on a database of the test's own, with a Stripe
// secret, the admin token "admin-token" and what cfg sets besides, until the
// test ends. Its configuration is in code: the tests run in parallel.
func runGateway(t *testing.T, cfg hookgate.Config, opts ...hookgate.Option) *running {
	t.Helper()
	if _, made := parallel.LoadOrStore(t, true); !made {
		t.Parallel()
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = hookgate.Secret(dbtest.URL(t))
	}
	cfg.StripeSecrets = hookgate.SecretList{stripeSecret}
	cfg.Addr = "127.0.0.1:0"
	cfg.AdminToken = "admin-token"
	gw, err := hookgate.New(cfg, append([]hookgate.Option{hookgate.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	var stopped atomic.Bool
	r := &running{gw: gw, stop: func() (time.Duration, error) {
		if !stopped.CompareAndSwap(false, true) {
			return 0, nil
		}
		start := time.Now()
		cancel()
		err := <-done
		return time.Since(start), err
	}}
	t.Cleanup(func() {
		if _, err := r.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-gw.Started():
	case err := <-done:
		stopped.Store(true) // Run has returned: nothing is left to stop
		t.Fatalf("Run: %v", err)
	}
	return r
}

// admin GETs an operator endpoint and decodes its JSON answer into v.
func (r *running) admin(t *testing.T, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+r.gw.Addr()+path, nil)
	req.Header.Set("Authorization", "Bearer admin-token")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// invoice is a Stripe event of type typ about invoice in_<id>.
func invoice(id, typ string) string {
	return fmt.Sprintf(`{"id":"evt_%s","type":"%s","created":1767225600,"data":{"object":{"id":"in_%s"}}}`, id, typ, id)
}

// storable says what is wrong with an error text the gateway stored or
// showed, or "" when PostgreSQL and a log line can hold it.
func storable(text string) string {
	switch {
	case len(text) > 2048:
		return fmt.Sprintf("%d bytes", len(text))
	case !utf8.ValidString(text):
		return "invalid UTF-8"
	case strings.ContainsRune(text, 0):
		return "a NUL byte"
	}
	return ""
}

// No target's answer and no handler's error can stop River from completing
// other jobs: targets that answer NUL bytes, invalid UTF-8 and 1 MiB, and
// handlers that return a NUL and a 32 MiB error, end discarded with a clean,
// bounded last_error, while the dispatches of another route on the same
// deliveries succeed and every River job is finished; each route's
// backlog.running is back to 0 once its attempts have ended.
func TestBadErrorTextsNeverStopCompletions(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		switch r.URL.Path {
		case "/nul":
			_, _ = w.Write([]byte("boom\x00\x00 at offset 4"))
		case "/binary":
			_, _ = w.Write([]byte{0x1f, 0x8b, 0x08, 0x00, 0xff, 0xfe, 0xc3, 0x28})
		case "/huge":
			_, _ = w.Write([]byte(strings.Repeat("é", 512<<10))) // 1 MiB
		}
	}))
	t.Cleanup(target.Close)
	var good atomic.Int32
	route := func(name, target string) hookgate.Route {
		return hookgate.Route{Name: name, Match: []string{"stripe:invoice.*"}, Target: target}
	}
	g := runGateway(t, hookgate.Config{MaxAttempts: 2, Routes: []hookgate.Route{
		route("nul", target.URL+"/nul"), route("binary", target.URL+"/binary"), route("huge", target.URL+"/huge"),
		route("hnul", "builtin:nul"), route("hhuge", "builtin:huge"), route("good", "builtin:good"),
	}},
		hookgate.WithHandler("nul", func(context.Context, pgx.Tx, hookgate.Delivery) error {
			return errors.New("no\x00such\x00row \xff")
		}),
		hookgate.WithHandler("huge", func(context.Context, pgx.Tx, hookgate.Delivery) error {
			return errors.New(strings.Repeat("\x00x", 16<<20)) // 32 MiB
		}),
		hookgate.WithHandler("good", func(context.Context, pgx.Tx, hookgate.Delivery) error {
			good.Add(1)
			return nil
		}))

	const n = 5
	for i := range n {
		if got := stripeSends(g.gw.Addr(), invoice(fmt.Sprint(i), "invoice.paid")); got != "202 accepted" {
			t.Fatalf("delivery %d: %s", i, got)
		}
	}
	pool := g.gw.Pool()
	dbtest.Eventually(t, 60*time.Second, "every dispatch decided and every River job finished", func() error {
		var undecided, unfinished int
		if err := pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM hookgate_dispatches WHERE state NOT IN ('succeeded', 'discarded')),
			(SELECT count(*) FROM river_job WHERE kind = 'hookgate_dispatch' AND finalized_at IS NULL)`).Scan(&undecided, &unfinished); err != nil {
			return err
		}
		if undecided > 0 || unfinished > 0 {
			return fmt.Errorf("%d dispatches undecided, %d River jobs unfinished", undecided, unfinished)
		}
		return nil
	})
	if good.Load() != n {
		t.Errorf("the good route's handler ran %d times, want %d", good.Load(), n)
	}
	rows, err := pool.Query(context.Background(), `SELECT d.route, d.state, d.attempts, coalesce(d.last_error, ''),
		coalesce(j.errors[array_length(j.errors, 1)]->>'error', '')
		FROM hookgate_dispatches d JOIN river_job j ON j.kind = 'hookgate_dispatch'
			AND j.args->>'delivery_id' = d.delivery_id AND j.args->>'route' = d.route`)
	if err != nil {
		t.Fatal(err)
	}
	type dispatch struct {
		route, state        string
		attempts            int
		lastError, jobError string
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dispatch, error) {
		var d dispatch
		return d, row.Scan(&d.route, &d.state, &d.attempts, &d.lastError, &d.jobError)
	})
	if err != nil || len(ds) != 6*n {
		t.Fatalf("%d dispatches with their jobs, %v; want %d", len(ds), err, 6*n)
	}
	for _, d := range ds {
		if d.route == "good" {
			if d.state != "succeeded" {
				t.Errorf("good: %s", d.state)
			}
			continue
		}
		if d.state != "discarded" || d.attempts != 2 {
			t.Errorf("%s: %s after %d attempts, want discarded after 2", d.route, d.state, d.attempts)
		}
		for what, text := range map[string]string{"last_error": d.lastError, "River's job error": d.jobError} {
			if text == "" {
				t.Errorf("%s: no %s", d.route, what)
			}
			if bad := storable(text); bad != "" {
				t.Errorf("%s: %s holds %s", d.route, what, bad)
			}
		}
	}

	var show struct {
		Dispatches []struct {
			Route     string  `json:"route"`
			LastError *string `json:"last_error"`
		} `json:"dispatches"`
	}
	g.admin(t, "/admin/deliveries/stripe/evt_0", &show)
	for _, d := range show.Dispatches {
		if d.LastError != nil && storable(*d.LastError) != "" {
			t.Errorf("the show answer's %s last_error holds %s", d.Route, storable(*d.LastError))
		}
		if d.Route == "huge" && (d.LastError == nil || !strings.HasPrefix(*d.LastError, "forward: target answered 500: éé")) {
			t.Errorf("huge: last_error %v, want the target's answer quoted", d.LastError)
		}
	}
	dbtest.Eventually(t, 10*time.Second, "no route's backlog running", func() error {
		var list struct {
			Routes []struct {
				Name    string `json:"name"`
				Backlog struct {
					Running int `json:"running"`
				} `json:"backlog"`
			} `json:"routes"`
		}
		g.admin(t, "/admin/routes", &list)
		for _, r := range list.Routes {
			if r.Backlog.Running != 0 {
				return fmt.Errorf("%s has %d running", r.Name, r.Backlog.Running)
			}
		}
		return nil
	})
}

// A handler runs inside a transaction it does not own, on a goroutine that
// is not the worker's: one that commits ends its attempts discarded with
// none of its writes committed (it used to commit one effect per attempt),
// and one that ends its goroutine fails that attempt only (retried, then
// succeeded once), leaving no job running, and the gateway stops within
// GATEWAY_FORWARD_TIMEOUT plus 5 s.
func TestAHandlerCannotEndItsTransactionOrItsGoroutine(t *testing.T) {
	var exits atomic.Int32
	effect := func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2, $3)`, d.Route, d.DeliveryID, d.Attempt)
		return err
	}
	g := runGateway(t, hookgate.Config{MaxAttempts: 2, ForwardTimeout: 2 * time.Second, Routes: []hookgate.Route{
		{Name: "committer", Match: []string{"stripe:invoice.commit"}, Target: "builtin:committer"},
		{Name: "exiter", Match: []string{"stripe:invoice.exit"}, Target: "builtin:exiter"},
	}},
		hookgate.WithMigration(func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS effects (route text, id text, attempt int)`)
			return err
		}),
		hookgate.WithHandler("committer", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			if err := effect(ctx, tx, d); err != nil {
				return err
			}
			return tx.Commit(ctx) // the mistake under test
		}),
		hookgate.WithHandler("exiter", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			if err := effect(ctx, tx, d); err != nil {
				return err
			}
			if exits.Add(1) == 1 {
				runtime.Goexit() // as t.FailNow in a shared helper does
			}
			return nil
		}))
	for _, event := range []string{invoice("c", "invoice.commit"), invoice("x", "invoice.exit")} {
		if got := stripeSends(g.gw.Addr(), event); got != "202 accepted" {
			t.Fatalf("%s: %s", event, got)
		}
	}
	pool := g.gw.Pool()
	state := func(route string) (string, int, string) {
		var s, lastError string
		var attempts int
		_ = pool.QueryRow(context.Background(), `SELECT state, attempts, coalesce(last_error, '') FROM hookgate_dispatches WHERE route = $1`,
			route).Scan(&s, &attempts, &lastError)
		return s, attempts, lastError
	}
	dbtest.Eventually(t, 30*time.Second, "both dispatches decided", func() error {
		c, _, _ := state("committer")
		x, _, _ := state("exiter")
		if c != "discarded" || x != "succeeded" {
			return fmt.Errorf("committer %s, exiter %s", c, x)
		}
		return nil
	})
	if _, attempts, lastError := state("committer"); attempts != 2 || !strings.Contains(lastError, "called Commit") {
		t.Errorf("committer: %d attempts, last error %q; want 2, naming Commit", attempts, lastError)
	}
	if _, attempts, _ := state("exiter"); attempts != 2 {
		t.Errorf("exiter: succeeded after %d attempts, want 2", attempts)
	}
	var committed, exited int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE route = 'committer'),
		count(*) FILTER (WHERE route = 'exiter' AND attempt = 2) + 10 * count(*) FILTER (WHERE route = 'exiter' AND attempt <> 2)
		FROM effects`).Scan(&committed, &exited); err != nil {
		t.Fatal(err)
	}
	if committed != 0 || exited != 1 {
		t.Errorf("effects: committer %d (want 0), exiter %d (want 1: the second attempt's alone)", committed, exited)
	}
	took, err := g.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if took > 7*time.Second {
		t.Errorf("Run took %s to stop, want at most GATEWAY_FORWARD_TIMEOUT plus 5 s", took)
	}
}

// A request carrying both Transfer-Encoding and Content-Length (RFC 9112
// §6.3: ambiguous framing, the mark of request smuggling) is answered 400
// bad_request and its connection closed, wherever it comes on a connection;
// requests framed one way are served on a kept-alive connection as before.
func TestAmbiguousFramingIsRefusedAndClosed(t *testing.T) {
	g := runGateway(t, hookgate.Config{})
	c, err := net.Dial("tcp", g.gw.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	send := func(head, body string) *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "POST /webhooks/stripe HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+head+"\r\n"+body); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Framed one way, unsigned: refused for its signature, the connection kept.
	if res := send("Content-Length: 2\r\n", "{}"); res.StatusCode != http.StatusUnauthorized || res.Close {
		t.Fatalf("a plain request: %s, close %v", res.Status, res.Close)
	} else {
		io.Copy(io.Discard, res.Body)
	}
	res := send("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n")
	var body struct{ Error string }
	_ = json.NewDecoder(res.Body).Decode(&body)
	if res.StatusCode != http.StatusBadRequest || body.Error != "bad_request" || !res.Close {
		t.Fatalf("both Transfer-Encoding and Content-Length: %s %q, close %v; want 400 bad_request, closed", res.Status, body.Error, res.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the connection after the refusal: %v, want it closed (EOF)", err)
	}
}

// A service's migration that changes its session (SET search_path to a schema
// of its own) changes nothing of the gateway's connections: the gateway
// starts, stores and dispatches, and the migration's table is where it put it.
func TestAMigrationsSessionSettingsStayOnItsOwnConnection(t *testing.T) {
	var handled atomic.Int32
	g := runGateway(t, hookgate.Config{Routes: []hookgate.Route{{Name: "app", Match: []string{"stripe:*"}, Target: "builtin:app"}}},
		hookgate.WithMigration(func(ctx context.Context, pool *pgxpool.Pool) error {
			for _, sql := range []string{`CREATE SCHEMA IF NOT EXISTS app`, `SET search_path = app`,
				`CREATE TABLE IF NOT EXISTS effects (id text)`} {
				if _, err := pool.Exec(ctx, sql); err != nil {
					return err
				}
			}
			return nil
		}),
		hookgate.WithHandler("app", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			handled.Add(1)
			_, err := tx.Exec(ctx, `INSERT INTO app.effects VALUES ($1)`, d.DeliveryID)
			return err
		}))
	if got := stripeSends(g.gw.Addr(), invoice("m", "invoice.paid")); got != "202 accepted" {
		t.Fatalf("a delivery: %s", got)
	}
	dbtest.Eventually(t, 20*time.Second, "the handler's effect", func() error {
		var n int
		if err := g.gw.Pool().QueryRow(context.Background(), `SELECT count(*) FROM app.effects`).Scan(&n); err != nil || n != 1 {
			return fmt.Errorf("%d effects, %v", n, err)
		}
		return nil
	})
	for range 8 { // every connection of the pool, as far as a few acquires reach
		var path string
		if err := g.gw.Pool().QueryRow(context.Background(), `SHOW search_path`).Scan(&path); err != nil || strings.Contains(path, "app") {
			t.Fatalf("a gateway connection's search_path: %q, %v", path, err)
		}
	}
}
