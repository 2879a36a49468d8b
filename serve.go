package hookgate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"riverqueue.com/riverui"

	"github.com/hookgate/hookgate/internal/archive"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/database"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/framing"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/proxies"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/recovery"
	"github.com/hookgate/hookgate/internal/rejections"
	"github.com/hookgate/hookgate/internal/replay"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/schema"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/sso"
	"github.com/hookgate/hookgate/internal/tracing"
	"github.com/hookgate/hookgate/internal/yield"
)

// shutdownTimeout bounds each step of a graceful stop.
var shutdownTimeout = 30 * time.Second

// open starts or connects to the database, sized for the gateway and the
// service, and brings both schemas up to date.
func (g *Gateway) open(ctx context.Context) (*pgxpool.Pool, func(), error) {
	env := g.cfg
	// A builtin dispatch holds a connection while its handler runs; a forward
	// holds none while its target answers, only for its brief reads and
	// writes. Ingest's committers, the outcome recorder, River and the
	// routes' guard need more.
	builtins := 0
	for _, r := range g.cfg.Table {
		if _, ok := r.Builtin(); ok {
			builtins += cmp.Or(r.Concurrency, env.Workers)
		}
	}
	pool, closeDB, err := database.Open(ctx, database.Options{
		URL: env.DatabaseURL.Value(), DataDir: env.DataDir, Mode: database.StartOwn, Schema: env.Schema,
		Conns: builtins + min(env.Workers, 50) + 24 + g.opts.conns, Logger: g.opts.logger,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := schema.Migrate(ctx, pool, g.opts.logger); err != nil {
		closeDB()
		return nil, nil, err
	}
	for _, migrate := range g.opts.migrations {
		if err := runMigration(ctx, pool, migrate); err != nil {
			closeDB()
			return nil, nil, fmt.Errorf("the service's migration: %w", err)
		}
	}
	return pool, closeDB, nil
}

// runMigration runs one of the service's migrations on a pool of its own,
// closed when the migration returns, so that whatever session settings it
// makes (SET search_path, SET ROLE) never reach a connection of the
// gateway's pool; a panic is an error, so that the private PostgreSQL is
// still stopped.
func runMigration(ctx context.Context, pool *pgxpool.Pool, migrate func(context.Context, *pgxpool.Pool) error) (err error) {
	cfg := pool.Config()
	// A few: a migration library may hold its lock on one connection and
	// migrate on another.
	cfg.MinConns, cfg.MaxConns = 0, 4
	// The service's tables are its own schema's, not hookgate's: its
	// connections keep the service's own search_path (the URL's, the role's
	// or the server's), which database.Open put after hookgate's schema.
	_, servicePath, _ := strings.Cut(cfg.ConnConfig.RuntimeParams["search_path"], ",")
	cfg.ConnConfig.RuntimeParams["search_path"] = cmp.Or(strings.TrimSpace(servicePath), "public")
	own, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("open its pool: %w", err)
	}
	defer own.Close()
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return migrate(ctx, own)
}

// process is a gateway built on its database, ready to run.
type process struct {
	// stopping is closed when the gateway begins to stop: open streams
	// (listeners') end then, for the HTTP server's shutdown not to wait on
	// them.
	stopping chan struct{}
	logger   *slog.Logger
	addr     string
	metrics  string // GATEWAY_METRICS_ADDR
	m        *metrics.Metrics
	srv      *http.Server
	client   *river.Client[pgx.Tx]
	guard    *routes.Guard
	recorder *rejections.Recorder
	notifier *notify.Notifier
	// follower keeps the routes those the database holds; nil when the
	// configuration owns them.
	follower *follower
	riverUI  *riverui.Handler
	summary  []any             // what the "gateway listening" line says
	started  func(addr string) // says the gateway serves on addr
}

// parts are what ingest, dispatch and the operator API share on one pool.
type parts struct {
	pool  *pgxpool.Pool
	table fanout.Table
	// live is the table in force, which the database's routes change
	// while the gateway runs (GATEWAY_ROUTES_FROM=database; see follower).
	live *fanout.Live
	// version is the stored routes' version the table was read at.
	version  int64
	m        *metrics.Metrics
	store    *receipts.Store
	guard    *routes.Guard
	enqueuer *dispatch.Enqueuer
	ingester *ingest.Ingester
	rec      *recovery.Recoverer
	yield    *yield.Gate
	// archive is GATEWAY_ARCHIVE_URL's store; nil without one.
	archive archive.Store
	// notifier sends operators' events to the configured notifications;
	// nil without any.
	notifier *notify.Notifier
}

// build makes every part of the gateway on pool: the route table synced to
// the database, ingest, dispatch, recovery, River, and the HTTP server.
func (g *Gateway) build(ctx context.Context, pool *pgxpool.Pool) (*process, error) {
	env, logger := g.cfg, g.opts.logger
	pt, err := g.parts(ctx, pool)
	if err != nil {
		return nil, err
	}
	client, err := g.riverClient(pt)
	if err != nil {
		return nil, err
	}

	p := &process{stopping: make(chan struct{}), logger: logger, addr: env.Addr, metrics: env.MetricsAddr, m: pt.m, client: client, guard: pt.guard, notifier: pt.notifier,
		recorder: &rejections.Recorder{Pool: pool, Logger: logger},
		summary:  []any{"routes", len(pt.table), "routes_from", env.RoutesFrom, "operator_endpoints", env.AdminToken != "", "recovery", pt.rec.Providers()},
		started: func(addr string) {
			g.mu.Lock()
			g.pool, g.client, g.addr = pool, client, addr
			g.mu.Unlock()
			close(g.started)
		},
	}
	if env.RoutesFrom == "database" {
		p.follower = newFollower(pt, client, env, g.handlers.Names(), logger)
	}
	if env.AdminToken != "" {
		if p.riverUI, err = riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints: riverui.NewEndpoints(client, nil),
			Logger:    logger,
			Prefix:    "/admin/river",
		}); err != nil {
			return nil, fmt.Errorf("river ui: %w", err)
		}
	}
	if len(env.Providers.Providers()) == 0 {
		logger.WarnContext(ctx, "no provider configured: set GITHUB_WEBHOOK_SECRET or STRIPE_WEBHOOK_SECRET, or sources in GATEWAY_CONFIG_FILE")
	}
	p.srv = &http.Server{
		Handler:           server.Framing(logger, g.mux(g.handler(pt, p))),
		ConnContext:       framing.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       readTimeout,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return p, nil
}

// parts syncs the route table to the database and makes what ingest and
// dispatch share: metrics, receipts, the River client that inserts, the
// routes' guard, the enqueuer, ingest and recovery.
func (g *Gateway) parts(ctx context.Context, pool *pgxpool.Pool) (parts, error) {
	env, table, logger := g.cfg, g.cfg.Table, g.opts.logger
	var version int64
	var retired fanout.Table
	if env.RoutesFrom == "database" {
		var err error
		if table, retired, version, err = storedTable(ctx, pool, env, g.handlers.Names()); err != nil {
			return parts{}, err
		}
	}
	if err := routes.Sync(ctx, pool, table); err != nil {
		return parts{}, err
	}
	if err := dispatch.QueueByRoute(ctx, pool, slices.Concat(table, retired)); err != nil {
		return parts{}, err
	}
	// The River client that works the jobs needs its workers, and they need
	// the enqueuer: the enqueuer, the guard and the operators' pause and
	// resume insert and pause through a client that does only that, made
	// first.
	inserter, err := dispatch.NewInserter(pool, logger)
	if err != nil {
		return parts{}, err
	}
	live := fanout.NewLive(table, retired)
	pt := parts{pool: pool, table: table, live: live, version: version, m: metrics.New(pool),
		store: &receipts.Store{Retention: env.Retention, Keys: env.Keys}, guard: routes.NewGuard(pool, live, inserter, logger)}
	if env.ArchiveURL != "" {
		if pt.archive, err = archive.Open(env.ArchiveURL, env.ArchiveEndpoint); err != nil {
			return parts{}, err
		}
	}
	if err := pt.guard.Refresh(ctx); err != nil {
		return parts{}, err
	}
	pt.m.Routes(pt.guard.Gauges)
	pt.enqueuer = dispatch.NewEnqueuer(inserter, live, dispatch.EnqueuerConfig{MaxAttempts: env.MaxAttempts,
		Filters: &filter.Reporter{Count: pt.m.FilterFailed, Logger: logger}, Schemas: env.Schemas})
	// Forwarding yields to acknowledgements while the machine is full
	// (package yield): ingest never waits, and forwarding takes one dispatch
	// per yield.AcksPerDispatch acknowledgements until a core is free or
	// ingest is idle (or after MaxYield).
	pt.yield = yield.NewGate(yield.NewMachine().Full)
	pt.ingester = ingest.NewIngester(pool, pt.store, pt.enqueuer, ingest.Config{Acks: pt.yield})
	pt.m.Gauge("hookgate_dispatch_yielding", "Dispatches held back while every core is taken and deliveries wait for their acknowledgement (at most "+
		dispatch.MaxYield.String()+" each).", func() float64 { return float64(pt.yield.Waiting()) })
	pt.rec = recovery.NewRecoverer(pool, pt.ingester, pt.m, g.recovery)
	if len(env.Notifications) > 0 {
		pt.notifier = notify.New(env.Notifications, inserter, logger, pt.m.Notification)
		pt.guard.Events, pt.rec.Events = pt.notifier.Notify, pt.notifier.Notify
	}
	// The series alerts and dashboards read are there, at zero, from the start.
	known := metrics.Known{Recovery: pt.rec.Providers()}
	for _, n := range env.Notifications {
		known.Notifications = append(known.Notifications, n.Name)
	}
	for _, p := range env.Providers.Providers() {
		known.Providers = append(known.Providers, p.Name())
	}
	for _, r := range table {
		known.Routes = append(known.Routes, r.Name)
	}
	pt.m.Declare(known)
	return pt, nil
}

// riverClient is the one River client: the dispatch and reconcile workers,
// replay, retention and recovery, and the service's own workers, queues and
// periodic jobs (WithRiverWorkers, WithRiverQueues, WithPeriodicJobs).
func (g *Gateway) riverClient(pt parts) (*river.Client[pgx.Tx], error) {
	env, logger, pool := g.cfg, g.opts.logger, pt.pool
	dispatcher := dispatch.NewWorker(pool, pt.live, pt.store, g.handlers, forward.New(env.ForwardSecrets, env.ForwardTimeout, env.Workers),
		pt.guard, pt.yield, pt.m, logger)
	if pt.notifier != nil {
		dispatcher.Events = pt.notifier.Notify
	}
	var middleware []rivertype.Middleware
	if tp := g.opts.tracer; tp != nil {
		dispatcher.Tracer = tracing.Tracer(tp)
		middleware = append(middleware, otelriver.NewMiddleware(&otelriver.MiddlewareConfig{TracerProvider: tp,
			EnableWorkSpanJobKindSuffix: true}))
	}
	return dispatch.NewClient(pool, dispatch.ClientConfig{
		Dispatch:       dispatcher,
		Reconcile:      &dispatch.ReconcileWorker{Pool: pool, Routes: pt.live},
		Workers:        env.Workers,
		ForwardTimeout: env.ForwardTimeout,
		Logger:         logger,
		Extra: func(w *river.Workers) error {
			if err := river.AddWorkerSafely(w, &replay.BatchWorker{Pool: pool, Enqueuer: pt.enqueuer}); err != nil {
				return fmt.Errorf("register replay worker: %w", err)
			}
			rw := &retention.Worker{Pool: pool, Policy: retention.Policy{Retention: env.Retention, IDRetention: env.IDRetention,
				Archive: pt.archive}, Logger: logger, Counted: pt.m.ArchivedDay}
			if pt.notifier != nil {
				rw.Events = pt.notifier.Notify
			}
			if err := river.AddWorkerSafely(w, rw); err != nil {
				return fmt.Errorf("register retention worker: %w", err)
			}
			// Registered with or without notifications: a job queued before
			// they were taken out is cancelled, not left unworkable.
			if err := river.AddWorkerSafely(w, &notify.Worker{Pool: pool, Notifications: env.Notifications, Secrets: env.ForwardSecrets,
				PublicURL: env.PublicURL, Counted: pt.m.Notification, Logger: logger}); err != nil {
				return fmt.Errorf("register notification worker: %w", err)
			}
			if err := river.AddWorkerSafely(w, &recovery.Worker{Recoverer: pt.rec}); err != nil {
				return err
			}
			for _, add := range g.opts.workers {
				if err := add(w); err != nil {
					return fmt.Errorf("the service's workers: %w", err)
				}
			}
			return nil
		},
		Queues:     g.opts.queues,
		Middleware: middleware,
		Periodic:   append(append([]*river.PeriodicJob{retention.PeriodicJob()}, pt.rec.PeriodicJobs(env.RecoveryInterval)...), g.opts.periodic...),
	})
}

// handler is the gateway's HTTP handler: webhooks, health, metrics and,
// with GATEWAY_ADMIN_TOKEN, the operator API, console and River UI.
func (g *Gateway) handler(pt parts, p *process) http.Handler {
	env := g.cfg
	trusted, _ := proxies.Parse(env.TrustedProxies) // checked by Resolve
	var riverUI http.Handler
	if p.riverUI != nil {
		riverUI = p.riverUI
	}
	var checkRoute func(string, []byte) ([]byte, error)
	var routesChanged func()
	if p.follower != nil {
		names := g.handlers.Names()
		checkRoute = func(name string, body []byte) ([]byte, error) {
			_, spec, err := env.LiveRoute(name, body, names)
			return spec, err
		}
		routesChanged = p.follower.Now
	}
	return server.New(server.Config{
		Logger:                  g.opts.logger,
		Providers:               env.Providers,
		Keys:                    env.Keys,
		Ingester:                pt.ingester,
		Ready:                   database.Readiness(pt.pool),
		MaxBodyBytes:            env.MaxBodyBytes,
		MaxInflightBytes:        env.MaxInflightBytes,
		MaxInflightBytesPerAddr: env.MaxInflightBytesPerAddr,
		MinBodyRate:             env.BodyRate(),
		ReadTimeout:             readTimeout,
		Metrics:                 pt.m,
		MetricsElsewhere:        env.MetricsAddr != "",
		Rejections:              p.recorder,
		Events:                  pt.notifier.Notify,
		Tracer:                  tracing.Tracer(g.opts.tracer),
		TrustedProxies:          trusted,
		Admin: server.AdminConfig{Token: env.AdminToken.Value(), Pool: pt.pool, Enqueuer: pt.enqueuer, RiverUI: riverUI, Routes: pt.live,
			NoConsole: env.Console == "off", PublicURL: env.PublicURL, SSO: signIn(env), CheckRoute: checkRoute, RoutesChanged: routesChanged, Recoverer: pt.rec, SearchBudget: env.SearchBudget,
			Archive: pt.archive, Retention: env.Retention, Stopping: p.stopping},
	})
}

// readTimeout bounds the reading of a whole request, its body included.
const readTimeout = 60 * time.Second

// run serves until ctx ends, then stops accepting, finishes requests in
// flight, and stops River softly.
func (p *process) run(ctx context.Context) error {
	// Background services stop when bgCtx ends, after the HTTP server.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	recorderDone := make(chan struct{})
	go func() { p.recorder.Run(bgCtx, time.Second); close(recorderDone) }()
	guardDone := make(chan struct{})
	go func() { p.guard.Run(bgCtx); close(guardDone) }()
	notifierDone := make(chan struct{})
	go func() { p.notifier.Run(bgCtx); close(notifierDone) }()
	followerDone := make(chan struct{})
	go func() {
		if p.follower != nil {
			p.follower.run(bgCtx)
		}
		close(followerDone)
	}()
	defer func() {
		stopBackground()
		<-recorderDone
		<-guardDone
		<-notifierDone
		<-followerDone
	}()
	if p.riverUI != nil {
		if err := p.riverUI.Start(bgCtx); err != nil {
			return fmt.Errorf("river ui: %w", err)
		}
	}

	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("GATEWAY_ADDR: %w", err)
	}
	metricsSrv, err := serveMetrics(p.metrics, p.m, p.logger)
	if err != nil {
		ln.Close()
		return err
	}
	// River runs on a context that outlives ctx: it is stopped softly below.
	if err := p.client.Start(bgCtx); err != nil {
		ln.Close()
		return fmt.Errorf("start river: %w", err)
	}
	p.started(ln.Addr().String())
	serveErr := make(chan error, 1)
	// A head longer than net/http takes (MaxHeaderBytes and its 4 KiB of
	// slack) is handed on as it comes, for net/http to refuse.
	go func() { serveErr <- p.srv.Serve(framing.Listen(ln, p.srv.MaxHeaderBytes+4<<10)) }()
	p.logger.InfoContext(ctx, "gateway listening", append([]any{"addr", ln.Addr().String()}, p.summary...)...)

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	p.logger.Info("shutting down")
	stopErr := p.stop(metricsSrv)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return cmp.Or(err, stopErr)
}

// stop stops the HTTP servers, then River softly, each within
// shutdownTimeout, on fresh contexts (the run's has ended); then River's jobs
// are cancelled, and given 10 s more. A job still running after that is an
// error: its code ignores its context.
func (p *process) stop(metricsSrv *http.Server) error {
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	close(p.stopping)
	if err := p.srv.Shutdown(sctx); err != nil {
		p.logger.Error("http shutdown", "error", err)
	}
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(sctx)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer rcancel()
	if err := p.client.Stop(rctx); err != nil {
		p.logger.Error("river soft stop did not finish; cancelling jobs", "error", err)
		hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer hcancel()
		if err := p.client.StopAndCancel(hctx); err != nil {
			return fmt.Errorf("stop: a job did not return within 10 s of its cancellation (does its code ignore its context?): %w", err)
		}
	}
	return nil
}

// serveMetrics serves /metrics alone on addr, an internal port, when addr is
// set; nil otherwise.
func serveMetrics(addr string, m *metrics.Metrics, logger *slog.Logger) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("GATEWAY_METRICS_ADDR: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("metrics listening", "addr", ln.Addr().String())
	return srv, nil
}

// signIn is the console's OpenID Connect sign-in the configuration asks
// for; nil without GATEWAY_OIDC_ISSUER. Resolve has checked the values.
func signIn(env config.Resolved) *sso.SSO {
	if env.OIDCIssuer == "" {
		return nil
	}
	roles, _ := sso.ParseRoles(env.OIDCRoles)
	return sso.New(sso.Config{Issuer: env.OIDCIssuer, ClientID: env.OIDCClientID, ClientSecret: env.OIDCClientSecret.Value(),
		RedirectURL: strings.TrimSuffix(env.PublicURL, "/") + sso.CallbackPath, Scopes: strings.Fields(env.OIDCScopes),
		Roles: roles})
}
