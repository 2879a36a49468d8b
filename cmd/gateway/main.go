// Command gateway is hookgate: a webhook ingestion gateway that verifies
// GitHub and Stripe deliveries, stores a receipt before any side effect, and
// dispatches the work through River in the same transaction.
//
//	gateway [serve]   run the gateway (the default)
//	gateway migrate   apply pending migrations and exit
//	gateway deliveries list|show, replay, send, routes, recover: the operator's commands
//
// Configuration is read from the environment; see the README.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/hookgate/hookgate/internal/bench"
	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/jobs"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/pgembed"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/recovery"
	"github.com/hookgate/hookgate/internal/rejections"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/schema"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/throttle"
	"github.com/hookgate/hookgate/internal/verify"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 || os.Args[1] == "serve" {
		limitMemory()
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		code := cli.ExitFailed
		var exit *cli.ExitError
		if errors.As(err, &exit) {
			code = exit.Code
		}
		stop()
		os.Exit(code)
	}
}

// memoryHeadroom is what the gateway process needs beside the request bodies
// it holds: its pools, River, the route table, caches and the garbage
// collector's slack (an idle gateway's heap is about 10 MiB).
const memoryHeadroom = 64 << 20

// limitMemory gives Go's runtime a soft memory limit that follows the
// in-flight budget (GATEWAY_MAX_INFLIGHT_BYTES plus memoryHeadroom), unless
// GOMEMLIMIT is set, so that the process's peak is predictable from its
// budget: without it the collector lets the heap grow to twice what is live,
// and a burst of large bodies peaked near twice the budget. Only the gateway
// binary does this; the library never sets a process-wide limit inside
// another service. A configuration that does not load is left to run, which
// reports it.
func limitMemory() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return // the runtime has read it already
	}
	if cfg, err := config.Load(); err == nil {
		debug.SetMemoryLimit(cfg.MaxInflightBytes + memoryHeadroom)
	}
}

const usage = `usage: gateway [command]

  serve     run the gateway (the default)
  migrate   apply pending migrations (River's and hookgate's) and exit
` + cli.Usage + bench.Usage + `
Configuration is read from the environment; see README.md.
`

// shutdownTimeout bounds each step of a graceful stop.
const shutdownTimeout = 30 * time.Second

// run is the whole program; it returns when ctx is cancelled (serve) or the
// command is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	command := "serve"
	if len(args) > 0 {
		command = args[0]
	}
	switch command {
	case "serve", "migrate", "deliveries", "replay", "send", "routes", "bench", "recover":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("unknown command %q", command)}
	}

	cfg, err := config.Load()
	if err != nil {
		if command != "serve" && command != "migrate" {
			// The operator's to fix, as a wrong flag is: exit 2.
			return &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("configuration: %w", err)}
		}
		return fmt.Errorf("configuration: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	// The configuration file's sources are providers as github and stripe
	// are, for every command: routes, filters and the CLI name them.
	handlers := jobs.DefaultHandlers(logger)
	table, sources, fileErr := cfg.LoadRoutesAndSources(handlers.Names())
	for _, src := range sources {
		providers.Register(src.Name())
	}
	if command != "serve" && command != "migrate" {
		if fileErr != nil {
			fmt.Fprintf(stderr, "warning: configuration: %v\n", fileErr)
		}
		quiet := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		open := func(ctx context.Context) (*pgxpool.Pool, func(), error) {
			return openDatabase(ctx, cfg, quiet, shareOrStart, 0)
		}
		if command == "bench" {
			// The load tool measures a running gateway: it uses that
			// gateway's database and never starts one beside it.
			shared := func(ctx context.Context) (*pgxpool.Pool, func(), error) {
				return openDatabase(ctx, cfg, quiet, shareOnly, 0)
			}
			return bench.Run(ctx, bench.Env{Config: cfg, Open: shared, Stdout: stdout}, args[1:])
		}
		return cli.Run(ctx, cli.Env{Config: cfg, Open: open, Stdout: stdout, Stderr: stderr}, args)
	}

	// A bad route table or recovery setting stops serve before anything
	// starts.
	recoverer := &recovery.Recoverer{Lookback: cfg.RecoveryLookback, Retention: cfg.Retention, Logger: logger}
	if command == "serve" {
		if fileErr != nil {
			return fmt.Errorf("configuration: %w", fileErr)
		}
		if recoverer.GitHub, recoverer.Stripe, err = recovery.FromConfig(cfg); err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
	}
	// serve owns the private server; migrate may use the one a gateway runs.
	mode := startOwn // serve owns the private server
	if command == "migrate" {
		mode = shareOrStart
	}
	pool, closeDB, err := openDatabase(ctx, cfg, logger, mode, builtinWorkers(table, cfg.Workers))
	if err != nil {
		return err
	}
	defer closeDB()
	if err := schema.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	if command == "migrate" {
		fmt.Fprintln(stdout, "migrations applied")
		return nil
	}
	return serve(ctx, cfg, pool, table, sources, handlers, recoverer, logger)
}

// builtinWorkers is how many builtin dispatches one process may run at once:
// each holds a database connection while its handler runs.
func builtinWorkers(table fanout.Table, workers int) int {
	n := 0
	for _, r := range table {
		if _, ok := r.Builtin(); ok {
			n += cmp.Or(r.Concurrency, workers)
		}
	}
	return n
}

// dbMode says whether a command may use, or start, the private PostgreSQL
// under GATEWAY_DATA_DIR when DATABASE_URL is unset.
type dbMode int

const (
	// startOwn starts the private server (serve).
	startOwn dbMode = iota
	// shareOrStart uses the one a running gateway started, or starts it
	// (the operator commands, migrate).
	shareOrStart
	// shareOnly uses the one a running gateway started, or fails (bench).
	shareOnly
)

// openDatabase connects to DATABASE_URL, or to the private PostgreSQL as mode
// says. The returned func closes the pool and stops a private server it
// started.
func openDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger, mode dbMode, builtins int) (*pgxpool.Pool, func(), error) {
	url := cfg.DatabaseURL.Value()
	var embedded *pgembed.Server
	if url == "" && mode != startOwn {
		url, _ = pgembed.Running(ctx, cfg.DataDir, "")
		if url == "" && mode == shareOnly {
			return nil, nil, fmt.Errorf("no running gateway's PostgreSQL under %s: set DATABASE_URL or GATEWAY_DATA_DIR as the gateway has them", cfg.DataDir)
		}
	}
	if url == "" {
		var err error
		embedded, err = pgembed.Start(ctx, pgembed.Options{Dir: cfg.DataDir})
		if err != nil {
			return nil, nil, fmt.Errorf("private PostgreSQL (DATABASE_URL is unset): %w", err)
		}
		logger.InfoContext(ctx, "private PostgreSQL started", "data_dir", cfg.DataDir)
		url = embedded.URL()
	}
	stopEmbedded := func() {
		if embedded == nil {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := embedded.Stop(sctx); err != nil {
			logger.Error("stop private PostgreSQL", "error", err)
		}
	}
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		stopEmbedded()
		// Not err itself: it may quote the URL and its password.
		return nil, nil, errors.New("DATABASE_URL: not a valid PostgreSQL URL")
	}
	// A builtin dispatch holds a connection while its handler runs; a forward
	// holds none while its target answers, only for its brief reads and
	// writes. Ingest's committers, the outcome recorder, River and the
	// routes' guard need more.
	// JIT compilation costs hundreds of milliseconds on the console's larger
	// queries and gains nothing on short ones; a URL may still turn it on.
	if _, set := poolCfg.ConnConfig.RuntimeParams["jit"]; !set {
		poolCfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	poolCfg.MaxConns = max(poolCfg.MaxConns, int32(builtins+min(cfg.Workers, 50)+24))
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		stopEmbedded()
		return nil, nil, fmt.Errorf("database: %w", err)
	}
	return pool, func() { pool.Close(); stopEmbedded() }, nil
}

// schemaEvery is how often /readyz checks that the schema is current once it
// was: a check takes several statements, and a schema falls behind only when
// another process migrates it.
const schemaEvery = 30 * time.Second

// readiness is /readyz's check (which the server runs at most once a second):
// the database answers a ping, and its schema is current.
func readiness(pool *pgxpool.Pool) func(context.Context) error {
	current := &throttle.Value[struct{}]{Every: schemaEvery, RetryErrors: true, Read: func(ctx context.Context) (struct{}, error) {
		return struct{}{}, schema.Check(ctx, pool)
	}}
	return func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("database: %w", err)
		}
		_, _, err := current.Get(ctx)
		return err
	}
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

// serve runs the HTTP server and the River client until ctx is cancelled, then
// stops accepting, finishes requests in flight, and stops River softly.
func serve(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, table fanout.Table, sources []providers.Provider,
	handlers jobs.Handlers, recoverer *recovery.Recoverer, logger *slog.Logger) error {
	if err := routes.Sync(ctx, pool, table); err != nil {
		return err
	}
	if err := jobs.QueueDispatches(ctx, pool, table); err != nil {
		return err
	}
	m := metrics.New(pool)
	store := &receipts.Store{Retention: cfg.Retention}
	guard := &routes.Guard{Pool: pool, Table: table, Logger: logger}
	if err := guard.Refresh(ctx); err != nil {
		return err
	}
	m.Routes(guard.Gauges)
	enqueuer := &jobs.Enqueuer{Routes: table, MaxAttempts: cfg.MaxAttempts,
		Filters: &filter.Reporter{Count: m.FilterFailed, Logger: logger}}
	ingester := &ingest.Ingester{Pool: pool, Receipts: store, Enqueuer: enqueuer}
	recoverer.Pool, recoverer.Ingester, recoverer.Metrics = pool, ingester, m
	client, err := jobs.NewClient(pool, jobs.ClientConfig{
		Dispatch: &jobs.DispatchWorker{
			Pool: pool, Routes: table, Handlers: handlers, Receipts: store, Logger: logger, Metrics: m, Guard: guard,
			Forwarder: jobs.NewForwarder(cfg.ForwardSecret.Value(), cfg.ForwardTimeout, cfg.Workers),
		},
		Replay:         &jobs.ReplayBatchWorker{Pool: pool, Enqueuer: enqueuer},
		Retention:      &jobs.RetentionWorker{Pool: pool, Retention: cfg.Retention, Logger: logger},
		Reconcile:      &jobs.ReconcileWorker{Pool: pool, Routes: table},
		Workers:        cfg.Workers,
		ForwardTimeout: cfg.ForwardTimeout,
		Logger:         logger,
		Extra: func(w *river.Workers) error {
			return river.AddWorkerSafely(w, &recovery.Worker{Recoverer: recoverer})
		},
		Periodic: recoverer.PeriodicJobs(cfg.RecoveryInterval),
	})
	if err != nil {
		return err
	}
	enqueuer.Client = client
	guard.Queues = client

	var provs []providers.Provider
	if len(cfg.GitHubSecrets) > 0 {
		provs = append(provs, providers.GitHub{Secrets: verify.Secrets(cfg.GitHubSecrets)})
	}
	if len(cfg.StripeSecrets) > 0 {
		provs = append(provs, providers.Stripe{Secrets: verify.Secrets(cfg.StripeSecrets), Tolerance: cfg.StripeTolerance})
	}
	provs = append(provs, sources...)
	if len(provs) == 0 {
		logger.WarnContext(ctx, "no provider configured: set GITHUB_WEBHOOK_SECRET or STRIPE_WEBHOOK_SECRET, or sources in GATEWAY_CONFIG_FILE")
	}

	// Background services stop when bgCtx ends, after the HTTP server.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	recorder := &rejections.Recorder{Pool: pool, Logger: logger}
	recorderDone := make(chan struct{})
	go func() { recorder.Run(bgCtx, time.Second); close(recorderDone) }()
	guardDone := make(chan struct{})
	go func() { guard.Run(bgCtx); close(guardDone) }()

	var riverUI http.Handler
	if cfg.AdminToken != "" {
		ui, err := riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints: riverui.NewEndpoints(client, nil),
			Logger:    logger,
			Prefix:    "/admin/river",
		})
		if err != nil {
			return fmt.Errorf("river ui: %w", err)
		}
		if err := ui.Start(bgCtx); err != nil {
			return fmt.Errorf("river ui: %w", err)
		}
		riverUI = ui
	}

	handler := server.New(server.Config{
		Logger:           logger,
		Providers:        provs,
		Ingester:         ingester,
		Ready:            readiness(pool),
		MaxBodyBytes:     cfg.MaxBodyBytes,
		MaxInflightBytes: cfg.MaxInflightBytes,
		Metrics:          m,
		MetricsElsewhere: cfg.MetricsAddr != "",
		Rejections:       recorder,
		Admin: server.AdminConfig{Token: cfg.AdminToken.Value(), Pool: pool, Enqueuer: enqueuer, RiverUI: riverUI, Routes: table,
			NoConsole: cfg.Console == "off", PublicURL: cfg.PublicURL},
	})
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("GATEWAY_ADDR: %w", err)
	}
	metricsSrv, err := serveMetrics(cfg.MetricsAddr, m, logger)
	if err != nil {
		ln.Close()
		return err
	}

	// River runs on a context that outlives ctx: it is stopped softly below.
	if err := client.Start(bgCtx); err != nil {
		ln.Close()
		return fmt.Errorf("start river: %w", err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.InfoContext(ctx, "gateway listening", "addr", ln.Addr().String(), "routes", len(table),
		"operator_endpoints", cfg.AdminToken != "", "recovery", recoverer.Providers())

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	logger.Info("shutting down")

	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		logger.Error("http shutdown", "error", serr)
	}
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(sctx)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer rcancel()
	if rerr := client.Stop(rctx); rerr != nil {
		logger.Error("river soft stop did not finish; cancelling jobs", "error", rerr)
		hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer hcancel()
		_ = client.StopAndCancel(hctx)
	}
	stopBackground()
	<-recorderDone
	<-guardDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
