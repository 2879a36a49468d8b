package hookgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// New refuses what cannot work, naming it: a route whose handler was not
// given (naming the route and the handler), a handler given twice or under a
// shipped handler's name, a service's HTTP pattern over the gateway's own
// paths or in conflict with another, a River queue named like the gateway's.
func TestNewRefusesWhatCannotWork(t *testing.T) {
	ok := func(context.Context, pgx.Tx, hookgate.Delivery) error { return nil }
	h := http.NotFoundHandler()
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_new") // the routes' provider
	for _, c := range []struct {
		name, routes string
		opts         []hookgate.Option
		want         string
	}{
		{"a route names a handler not given", "ledger=stripe:*>builtin:ledger", nil, `GATEWAY_ROUTES: bad route: route "ledger": no builtin handler named "ledger"`},
		{"the handler is given", "ledger=stripe:*>builtin:ledger", []hookgate.Option{hookgate.WithHandler("ledger", ok)}, ""},
		{"a handler given twice", "", []hookgate.Option{hookgate.WithHandler("a", ok), hookgate.WithHandler("a", ok)}, `WithHandler("a"): given twice`},
		{"a shipped handler's name", "", []hookgate.Option{hookgate.WithHandler("log", ok)}, "shipped"},
		{"a bad handler name", "", []hookgate.Option{hookgate.WithHandler("Ledger!", ok)}, "a handler's name is"},
		{"a nil handler", "", []hookgate.Option{hookgate.WithHandler("a", nil)}, "nil"},
		{"a pattern over the webhooks", "", []hookgate.Option{hookgate.WithHTTPHandler("/webhooks/mine", h)}, "/webhooks/mine is the gateway's own"},
		{"a pattern over everything", "", []hookgate.Option{hookgate.WithHTTPHandler("/", h)}, "the gateway's own"},
		{"a pattern over the admin API", "", []hookgate.Option{hookgate.WithHTTPHandler("GET /admin/x", h)}, "/admin/x is the gateway's own"},
		{"wildcards over the webhooks", "", []hookgate.Option{hookgate.WithHTTPHandler("/{a}/{b}", h)}, "it would take POST /webhooks/github"},
		{"a wildcard over the probes", "", []hookgate.Option{hookgate.WithHTTPHandler("/{x}", h)}, "it would take POST /webhooks"},
		{"a wildcard over a method's path", "", []hookgate.Option{hookgate.WithHTTPHandler("GET /{a}/github", h)}, "it would take GET /webhooks/github"},
		{"a path beside the admin API's", "", []hookgate.Option{hookgate.WithHTTPHandler("/adminx", h)}, ""},
		{"a nil option", "", []hookgate.Option{nil}, "option 1 is nil"},
		{"a nil periodic job", "", []hookgate.Option{hookgate.WithPeriodicJobs(nil)}, "WithPeriodicJobs: job 1 is nil"},
		{"workers that fail to register", "", []hookgate.Option{hookgate.WithRiverWorkers(func(*river.Workers) error { return errors.New("my add failed") })}, "my add failed"},
		{"a worker of the gateway's kind", "", []hookgate.Option{hookgate.WithRiverWorkers(func(w *river.Workers) error {
			return river.AddWorkerSafely(w, river.WorkFunc(func(context.Context, *river.Job[gatewayKind]) error { return nil }))
		})}, `"hookgate_dispatch" is already registered`},
		{"a queue without workers", "", []hookgate.Option{hookgate.WithRiverQueues(map[string]river.QueueConfig{"mine": {}})}, "MaxWorkers must be 1 to 10000"},
		{"a queue River cannot name", "", []hookgate.Option{hookgate.WithRiverQueues(map[string]river.QueueConfig{"My Queue": {MaxWorkers: 1}})}, "a name is"},
		{"two patterns in conflict", "", []hookgate.Option{hookgate.WithHTTPHandler("/app/", h), hookgate.WithHTTPHandler("/app/", h)}, "WithHTTPHandler"},
		{"a pattern that is no path", "", []hookgate.Option{hookgate.WithHTTPHandler("app", h)}, "must be a path"},
		{"River's default queue", "", []hookgate.Option{hookgate.WithRiverQueues(map[string]river.QueueConfig{"default": {MaxWorkers: 1}})}, "gateway's own"},
		{"a route's queue", "", []hookgate.Option{hookgate.WithRiverQueues(map[string]river.QueueConfig{"route_x": {MaxWorkers: 1}})}, "gateway's own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GATEWAY_ROUTES", c.routes)
			cfg, err := hookgate.ConfigFromEnv()
			if err != nil {
				t.Fatal(err)
			}
			_, err = hookgate.New(cfg, c.opts...)
			if c.want == "" && err != nil {
				t.Fatalf("New: %v", err)
			}
			if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("New: %v, want an error saying %q", err, c.want)
			}
		})
	}
	// The zero Config is a gateway on its defaults; New checks what a
	// Config filled in code holds, every error at once.
	if _, err := hookgate.New(hookgate.Config{}); err != nil {
		t.Errorf("New refused the zero Config: %v", err)
	}
	_, err := hookgate.New(hookgate.Config{Workers: -1, Retention: time.Hour,
		Routes: []hookgate.Route{{Name: "a", Match: []string{"github:push"}, Target: "ftp://x/"}, {Name: "B"}}})
	for _, want := range []string{"GATEWAY_WORKERS: must be 1 to 10000", "GATEWAY_RETENTION: must be from 72h", `route 1 ("a"): key target`, `route 2 ("B"): key name`,
		`route 1 ("a"): key match: provider github is not configured (GITHUB_WEBHOOK_SECRET is unset); the configured ones: none`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New of a Config with five mistakes: %v; want it to say %q", err, want)
		}
	}
	// Every mistake of one route, every route naming a handler not given,
	// and every bad option, beside the Config's own.
	okh := func(context.Context, pgx.Tx, hookgate.Delivery) error { return nil }
	_, err = hookgate.New(hookgate.Config{Workers: -1, Routes: []hookgate.Route{
		{Name: "r", Match: []string{"nosuchprov:x"}, Concurrency: -1, MaxAttempts: -2, Rate: "fast", Timeout: -1,
			Order: "newest", OrderWindow: time.Hour},
		{Name: "n1", Match: []string{"stripe:*"}, Target: "builtin:nope1"},
		{Name: "n2", Match: []string{"stripe:*"}, Target: "builtin:nope2"},
	}}, hookgate.WithHandler("Bad Name", okh), hookgate.WithHandler("log", okh))
	for _, want := range []string{"GATEWAY_WORKERS", `route 1 ("r"): key match`, `route 1 ("r"): key concurrency`, `route 1 ("r"): key max_attempts`,
		`route 1 ("r"): key rate`, `route 1 ("r"): key timeout`, `route 1 ("r"): key order: must be latest, all or none`,
		`route 1 ("r"): key order_window: must be a duration from 0s to 1m0s`, `no builtin handler named "nope1"`, `no builtin handler named "nope2"`,
		`WithHandler("Bad Name")`, `WithHandler("log"): a shipped handler's name`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New of a Config and options with twelve mistakes: %v; want it to say %q", err, want)
		}
	}
	// A wrong budget is one mistake, not a second one of the per-address
	// budget derived from it.
	_, err = hookgate.New(hookgate.Config{MaxInflightBytes: -5})
	if err == nil || strings.Contains(err.Error(), "PER_ADDR") {
		t.Errorf("New with a negative budget: %v; want one error, of GATEWAY_MAX_INFLIGHT_BYTES alone", err)
	}
}

// A Config that ConfigFromEnv could read only in part never runs: New
// refuses it with ConfigFromEnv's errors, once each, beside its own (the
// handlers the routes name, recovery's settings, the options), so a main
// that hands it on reports every error at once.
func TestNewReportsWhatConfigFromEnvCouldNotRead(t *testing.T) {
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_new")
	t.Setenv("GATEWAY_RETENTION", "soon")
	t.Setenv("GATEWAY_ROUTES", "ledger=stripe:*>builtin:ledger")
	t.Setenv("STRIPE_API_KEY", "rk_x")
	t.Setenv("STRIPE_API_URL", "ftp://x")
	cfg, err := hookgate.ConfigFromEnv()
	if err == nil || err.Error() != "configuration: GATEWAY_RETENTION: must be a duration such as 30s, 5m or 72h" {
		t.Fatalf("ConfigFromEnv: %v", err)
	}
	_, err = hookgate.New(cfg, hookgate.WithHandler("Bad Name", func(context.Context, pgx.Tx, hookgate.Delivery) error { return nil }))
	want := []string{
		"configuration: GATEWAY_RETENTION: must be a duration such as 30s, 5m or 72h",
		"STRIPE_API_URL: must be an http(s) URL without a user, password, query or fragment, such as https://api.example.com",
		`GATEWAY_ROUTES: bad route: route "ledger": no builtin handler named "ledger" (have log, stripe-subscriptions)`,
		`hookgate.New: WithHandler("Bad Name"): a handler's name is 1-64 of a-z, 0-9, _ and -`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("New: %v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// gatewayKind is a job kind of the gateway's own, which a service's worker
// may not take.
type gatewayKind struct{}

func (gatewayKind) Kind() string { return "hookgate_dispatch" }

// A service's handler gets every promise of a builtin one: a panic is an
// error (the dispatch is retried, the process lives, the panicking attempt's
// writes are rolled back), an error wrapped by Discard discards the dispatch
// at once, and a success commits the handler's write with the dispatch.
func TestAServicesHandlerGetsEveryPromise(t *testing.T) {
	var calls atomic.Int32
	g := runGateway(t, hookgate.Config{Routes: []hookgate.Route{
		{Name: "flaky", Match: []string{"stripe:invoice.flaky"}, Target: "builtin:flaky"},
		{Name: "refusing", Match: []string{"stripe:invoice.refused"}, Target: "builtin:refusing"},
	}},
		hookgate.WithHandler("flaky", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, d.DeliveryID, d.Attempt); err != nil {
				return err
			}
			if calls.Add(1) == 1 {
				var m map[string]int
				m["boom"]++ // a nil map: the first attempt panics after its write
			}
			return nil
		}),
		hookgate.WithHandler("refusing", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			return hookgate.Discard(errors.New("not an invoice we know"))
		}),
		hookgate.WithMigration(func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS effects (id text, attempt int)`)
			return err
		}),
	)
	gw, ctx := g.gw, context.Background()

	for _, event := range []string{
		`{"id":"evt_flaky","type":"invoice.flaky","created":1767225600,"data":{"object":{"id":"in_1"}}}`,
		`{"id":"evt_refused","type":"invoice.refused","created":1767225600,"data":{"object":{"id":"in_2"}}}`,
	} {
		if got := stripeSends(gw.Addr(), event); got != "202 accepted" {
			t.Fatalf("%s: %s", event, got)
		}
	}
	dispatch := func(id string) (state string, attempts int, lastError string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+gw.Addr()+"/admin/deliveries/stripe/"+id, nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var show struct {
			Dispatches []struct {
				State     string  `json:"state"`
				Attempts  int     `json:"attempts"`
				LastError *string `json:"last_error"`
			} `json:"dispatches"`
		}
		if err := json.NewDecoder(res.Body).Decode(&show); err != nil || len(show.Dispatches) != 1 {
			t.Fatalf("show %s: %v %+v", id, err, show)
		}
		d := show.Dispatches[0]
		if d.LastError != nil {
			lastError = *d.LastError
		}
		return d.State, d.Attempts, lastError
	}
	wait := func(id, state string) (attempts int, lastError string) {
		dbtest.Eventually(t, 30*time.Second, id+" "+state, func() error {
			var got string
			got, attempts, lastError = dispatch(id)
			if got != state {
				return fmt.Errorf("%s after %d attempts (%s)", got, attempts, lastError)
			}
			return nil
		})
		return attempts, lastError
	}

	if attempts, lastError := wait("evt_refused", "discarded"); attempts != 1 || !strings.Contains(lastError, "not an invoice we know") {
		t.Errorf("a Discard: %d attempts, last error %q; want discarded at once, saying why", attempts, lastError)
	}
	if attempts, _ := wait("evt_flaky", "succeeded"); attempts != 2 {
		t.Errorf("a panic then a success: %d attempts, want 2", attempts)
	}
	rows, _ := gw.Pool().Query(ctx, `SELECT attempt FROM effects WHERE id = 'evt_flaky'`)
	effects, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(effects) != 1 || effects[0] != 2 {
		t.Errorf("effects of evt_flaky by attempt: %v, %v; want only the second attempt's", effects, err)
	}
}

// A configuration marshalled as JSON, or logged through slog's JSON
// handler, shows no secret, no database password and no forward target.
func TestAConfigAsJSONShowsNoSecret(t *testing.T) {
	t.Parallel()
	cfg := hookgate.Config{DatabaseURL: "postgres://u:hunter2@db/x", StripeSecrets: hookgate.SecretList{"whsec_SUPERSECRET"},
		AdminToken: "admin-SECRET", Routes: []hookgate.Route{{Name: "r", Match: []string{"stripe:*"}, Target: "https://user:pw-SECRET@x.example/hook-SECRET"}}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("starting", "config", cfg, "route", cfg.Routes[0], "secret", cfg.AdminToken)
	for _, out := range []string{string(b), logged.String()} {
		for _, secret := range []string{"hunter2", "SUPERSECRET", "admin-SECRET", "pw-SECRET", "hook-SECRET"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows %q", out, secret)
			}
		}
	}
	if !strings.Contains(string(b), `"Name":"r"`) {
		t.Errorf("%s: want the route's name kept", b)
	}
}
