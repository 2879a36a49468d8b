// Package hookgate is a webhook ingestion gateway as a Go library: it
// verifies each delivery's signature on the raw bytes (GitHub, Stripe,
// Standard Webhooks, Shopify, Slack, GitLab, any HMAC), stores a receipt
// keyed by the provider's delivery id before any side effect, and in the same
// PostgreSQL transaction enqueues one River job per matching route, answering
// 2xx only after that commit.
//
// A Go service runs the gateway in its own process and registers its own
// handlers: a route whose target is builtin:<name> runs the Handler given
// with WithHandler(name, h), inside its dispatch's transaction. So the
// handler's writes to the service's own tables happen exactly once, under
// crashes and River's re-runs, and in order per entity: an event older than
// the newest one the route handled for its entity is never handed to it.
//
//	cfg, err := hookgate.ConfigFromEnv() // what `gateway serve` reads
//	if err != nil { ... }
//	gw, err := hookgate.New(cfg,
//		hookgate.WithHandler("ledger", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
//			_, err := tx.Exec(ctx, `INSERT INTO app_ledger (delivery_id) VALUES ($1)`, d.DeliveryID)
//			return err
//		}),
//		hookgate.WithMigration(migrate), // the service's own tables
//	)
//	if err != nil { ... }
//	err = gw.Run(ctx) // serves until ctx ends, then shuts down gracefully
//
// with, in the environment, a route to the handler:
//
//	GATEWAY_ROUTES='ledger=stripe:invoice.*>builtin:ledger'
//
// The service's tables live in the gateway's database (DATABASE_URL, or the
// private PostgreSQL Run starts under GATEWAY_DATA_DIR when it is unset);
// their migrations are the service's own (WithMigration). Its HTTP handlers
// are served beside the gateway's (WithHTTPHandler), and its own River
// workers run on the gateway's River client (WithRiverWorkers,
// WithRiverQueues, WithPeriodicJobs; Gateway.Client). Package hookgatetest
// runs a handler against a delivery in a test, without a gateway.
//
// The `gateway` command (cmd/gateway) serves through this package exactly as
// a service's main does.
package hookgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/recovery"
	"github.com/hookgate/hookgate/internal/replay"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/tracing"
)

// Gateway is one gateway process: its HTTP server, its River client and its
// database, built by New and run by Run.
type Gateway struct {
	cfg      config.Resolved
	opts     options
	handlers handlers.Registry
	// recovery is the Recoverer's configuration, its API clients made: the
	// Recoverer itself needs the database and the ingester, Run's.
	recovery recovery.RecovererConfig

	ran     atomic.Bool
	started chan struct{}
	mu      sync.Mutex
	pool    *pgxpool.Pool
	client  *river.Client[pgx.Tx]
	addr    string
}

// New checks cfg against the options and returns a gateway ready to Run. It
// opens nothing: the database and the listener are Run's. A route whose
// target names a handler that was not given (builtin:<name>, neither
// WithHandler's nor a shipped one: log, stripe-subscriptions) is an error
// naming the route and the handler; so are a bad option and recovery set up
// halfway. Its error holds every one at once, one a line: first the
// configuration's ("configuration: ", what ConfigFromEnv could not read
// among them, then the values, the routes, recovery's settings and the
// handlers the routes name), then the options'.
func New(cfg Config, opts ...Option) (*Gateway, error) {
	var o options
	var optErrs []error
	for i, opt := range opts {
		if opt == nil {
			optErrs = append(optErrs, fmt.Errorf("hookgate.New: option %d is nil", i+1))
			continue
		}
		if err := opt(&o); err != nil {
			optErrs = append(optErrs, fmt.Errorf("hookgate.New: %w", err))
		}
	}
	if o.logger == nil {
		o.logger = slog.Default()
		if cfg.LogFormat != "" || cfg.LogLevel != "" {
			// Asked for by the configuration (GATEWAY_LOG_FORMAT,
			// GATEWAY_LOG_LEVEL); a bad value is Resolve's to report.
			if logger, err := cfg.Logger(os.Stderr); err == nil {
				o.logger = logger
			}
		}
	}
	builtins := handlers.Default(o.logger)
	for _, name := range slices.Sorted(maps.Keys(o.handlers)) {
		if _, shipped := builtins[name]; shipped {
			optErrs = append(optErrs, fmt.Errorf("hookgate.New: WithHandler(%q): a shipped handler's name", name))
			continue
		}
		builtins[name] = builtinHandler(o.handlers[name])
	}
	if err := checkRiver(o); err != nil {
		optErrs = append(optErrs, fmt.Errorf("hookgate.New: %w", err))
	}
	if err := checkPatterns(o.http); err != nil {
		optErrs = append(optErrs, fmt.Errorf("hookgate.New: %w", err))
	}

	// The configuration's errors, all of them, in one place: Resolve's,
	// recovery's, and the handlers of the routes resolved so far (those with
	// a mistake of their own are reported by Resolve).
	var cfgErrs []error
	resolved, err := cfg.Resolve()
	if err != nil {
		cfgErrs = append(cfgErrs, err)
	}
	rec := recovery.RecovererConfig{Lookback: resolved.RecoveryLookback, Retention: resolved.Retention, Logger: o.logger}
	if rec.GitHub, rec.Stripe, err = recovery.Clients(recovery.Settings{
		GitHubHooks: resolved.GitHubRecoveryHooks, GitHubToken: resolved.GitHubToken.Value(), GitHubAppID: resolved.GitHubAppID,
		GitHubAppKeyFile: resolved.GitHubAppKeyFile, GitHubAPIURL: resolved.GitHubAPIURL,
		StripeAPIKey: resolved.StripeAPIKey.Value(), StripeAPIURL: resolved.StripeAPIURL, MaxBodyBytes: resolved.MaxBodyBytes,
	}); err != nil {
		cfgErrs = append(cfgErrs, err)
	}
	if err := resolved.CheckBuiltins(builtins.Names()); err != nil {
		cfgErrs = append(cfgErrs, err)
	}
	if o.tracer == nil {
		// The OTEL_* variables Run would follow (WithTracerProvider: the
		// service's own provider, and its own variables).
		if err := tracing.Check(os.Getenv); err != nil {
			cfgErrs = append(cfgErrs, err)
		}
	}
	var errs []error
	if err := errors.Join(cfgErrs...); err != nil {
		errs = append(errs, fmt.Errorf("configuration: %w", err))
	}
	if err := errors.Join(append(errs, optErrs...)...); err != nil {
		return nil, err
	}
	return &Gateway{cfg: resolved, opts: o, handlers: builtins, recovery: rec, started: make(chan struct{})}, nil
}

// Run starts the database (the private PostgreSQL when DATABASE_URL is
// unset), applies hookgate's migrations and then the service's
// (WithMigration), starts River and serves HTTP until ctx ends. Then it stops
// accepting, finishes the requests in flight, stops River softly (jobs
// running get up to 30 s), and stops the private PostgreSQL, as `gateway
// serve` does on SIGTERM. It returns nil after such a stop, else why it could
// not start or serve. A Gateway runs once.
func (g *Gateway) Run(ctx context.Context) error {
	if !g.ran.CompareAndSwap(false, true) {
		return errors.New("hookgate: a Gateway runs once")
	}
	if g.opts.tracer == nil {
		tp, err := tracing.FromEnv(ctx, g.opts.logger)
		if err != nil {
			return err
		}
		if tp != nil {
			g.opts.tracer = tp
			defer func() {
				// What the batcher holds is sent before the process ends.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = tp.Shutdown(sctx)
			}()
		}
	}
	pool, closeDB, err := g.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	p, err := g.build(ctx, pool)
	if err != nil {
		return err
	}
	return p.run(ctx)
}

// Started is closed once Run has started River and is about to serve: from
// then on Pool and Client are set.
func (g *Gateway) Started() <-chan struct{} { return g.started }

// Pool is the gateway's database pool, for the service's own queries (see
// WithPoolConns); nil until Started.
func (g *Gateway) Pool() *pgxpool.Pool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pool
}

// Addr is the address the gateway listens on (GATEWAY_ADDR's, with the port
// the system chose for ":0"); empty until Started.
func (g *Gateway) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// Client is the gateway's River client, on which the service's own workers
// run (WithRiverWorkers) and through which it inserts their jobs (InsertTx);
// nil until Started.
func (g *Gateway) Client() *river.Client[pgx.Tx] {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.client
}

// gatewayRequests are requests for the gateway's own endpoints, one of
// each shape: a service's pattern matching any of them would shadow the
// gateway's.
var gatewayRequests = []struct{ method, path string }{
	{"POST", "/webhooks/github"}, {"POST", "/webhooks/stripe"}, {"POST", "/webhooks/a-source"}, {"GET", "/webhooks/github"},
	{"POST", "/webhooks"}, {"GET", "/healthz"}, {"GET", "/readyz"}, {"GET", "/metrics"}, {"HEAD", "/healthz"},
	{"GET", "/admin"}, {"GET", "/admin/"}, {"GET", "/admin/openapi.json"}, {"GET", "/admin/deliveries"},
	{"GET", "/admin/deliveries/github/d-1"}, {"GET", "/admin/deliveries/github/d-1/body"},
	{"POST", "/admin/deliveries/github/d-1/replay"}, {"POST", "/admin/routes/ci/pause"}, {"POST", "/admin/recover/github"},
	{"GET", "/admin/river/queues"}, {"GET", "/admin/river/api/jobs/1"}, {"GET", "/admin/ui/routes"}, {"POST", "/admin/ui/sign-in"},
}

// checkPatterns reports patterns that http.ServeMux would refuse (it panics
// on them): malformed, or in conflict with one another; and any pattern that
// would match a request for the gateway's own endpoints (which go to the
// gateway anyway: see mux).
func checkPatterns(ms []mounted) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("WithHTTPHandler: %v", v)
		}
	}()
	for _, m := range ms {
		path := m.pattern
		if _, p, ok := strings.Cut(m.pattern, " "); ok {
			path = strings.TrimSpace(p)
		}
		if literal, _, _ := strings.Cut(path, "{"); reserved(literal) || reserved(strings.TrimSuffix(literal, "/")) {
			return fmt.Errorf("WithHTTPHandler(%q): %s is the gateway's own", m.pattern, strings.TrimSuffix(literal, "/"))
		}
		mux := http.NewServeMux()
		mux.Handle(m.pattern, m.handler)
		for _, r := range gatewayRequests {
			req, _ := http.NewRequest(r.method, "http://gateway"+r.path, nil)
			if _, matched := mux.Handler(req); matched != "" {
				return fmt.Errorf("WithHTTPHandler(%q): it would take %s %s, the gateway's own", m.pattern, r.method, r.path)
			}
		}
	}
	mux := http.NewServeMux()
	for _, m := range ms {
		mux.Handle(m.pattern, m.handler)
	}
	return nil
}

// checkRiver reports what River would refuse when Run builds its client:
// the service's workers registered beside the gateway's job kinds (an error
// of add, or a kind the gateway's or registered twice), and its queues (named
// like the gateway's, or with no workers).
func checkRiver(o options) error {
	w := river.NewWorkers()
	for _, add := range []func() error{
		func() error { return river.AddWorkerSafely(w, &dispatch.Worker{}) },
		func() error { return river.AddWorkerSafely(w, &dispatch.ReconcileWorker{}) },
		func() error { return river.AddWorkerSafely(w, &replay.BatchWorker{}) },
		func() error { return river.AddWorkerSafely(w, &retention.Worker{}) },
		func() error { return river.AddWorkerSafely(w, &recovery.Worker{}) },
	} {
		if err := add(); err != nil {
			return err
		}
	}
	for _, add := range o.workers {
		if err := add(w); err != nil {
			return fmt.Errorf("WithRiverWorkers: %w", err)
		}
	}
	for name, q := range o.queues {
		switch {
		case name == river.QueueDefault || strings.HasPrefix(name, "route"):
			return fmt.Errorf("WithRiverQueues: queue %q is named like the gateway's own (default, route...)", name)
		case !queueNameRE.MatchString(name):
			return fmt.Errorf("WithRiverQueues: queue %q: a name is 1-64 of a-z, 0-9, _ and -, starting with a letter or digit", name)
		case q.MaxWorkers < 1 || q.MaxWorkers > 10_000:
			return fmt.Errorf("WithRiverQueues: queue %q: MaxWorkers must be 1 to 10000, got %d", name, q.MaxWorkers)
		}
	}
	return nil
}

// queueNameRE is what River accepts as a queue's name.
var queueNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// mux serves the service's own HTTP handlers beside the gateway's.
func (g *Gateway) mux(gateway http.Handler) http.Handler {
	if len(g.opts.http) == 0 {
		return gateway
	}
	mux := http.NewServeMux()
	mux.Handle("/", gateway)
	for _, m := range g.opts.http {
		mux.Handle(m.pattern, m.handler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reserved(r.URL.Path) {
			gateway.ServeHTTP(w, r) // the gateway's own, whatever a pattern matches
			return
		}
		mux.ServeHTTP(w, r)
	})
}
