package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/schema"
)

// ClientConfig configures the River client that works hookgate's jobs.
type ClientConfig struct {
	// Dispatch works dispatches (NewWorker). Required.
	Dispatch *Worker
	// Reconcile is the periodic reconcile job (every minute, and at start);
	// nil: not scheduled.
	Reconcile *ReconcileWorker
	// Workers is how many dispatches of a route one process works at once,
	// when the route sets no concurrency. Defaults to 50 (the gateway passes GATEWAY_WORKERS, which follows the cores).
	Workers int
	// ForwardTimeout is one forward attempt's limit; the job timeout and the
	// rescue of stuck jobs are derived from it. Defaults to 10s.
	ForwardTimeout time.Duration
	// Logger receives River's logs, its periodic statistics at DEBUG.
	Logger *slog.Logger
	// Extra registers more workers (bulk replay's, retention's, recovery's,
	// a library user's), and Periodic schedules
	// their jobs; both optional.
	Extra    func(*river.Workers) error
	Periodic []*river.PeriodicJob
	// Queues are more queues for Extra's workers (a library user's); none
	// may be named like the gateway's own.
	Queues map[string]river.QueueConfig
	// Middleware are River's, besides the client's own (River's
	// OpenTelemetry middleware, when tracing).
	Middleware []rivertype.Middleware
}

// Timings derived from the forward timeout. A job may wait MaxYield for
// ingest, then run for the forward plus its database work; a job still
// "running" well past that belongs to a process that died, and River's
// rescuer (which looks every 30 s) makes it available again. With the default
// 10 s forward timeout a dispatch whose process died is picked up again
// within about 25 s + 30 s.
func jobTimeout(forward time.Duration) time.Duration  { return MaxYield + forward + 5*time.Second }
func rescueAfter(forward time.Duration) time.Duration { return jobTimeout(forward) + 5*time.Second }

// fetchCooldown is the least time between two fetches of a queue by the
// working client, and between two notifications of inserts into a queue by
// a client that inserts: see NewClient.
const fetchCooldown = 20 * time.Millisecond

// NewClient returns a River client that works cfg's workers. It is not started.
func NewClient(pool *pgxpool.Pool, cfg ClientConfig) (*river.Client[pgx.Tx], error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 50
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = 10 * time.Second
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, cfg.Dispatch); err != nil {
		return nil, fmt.Errorf("register dispatch worker: %w", err)
	}
	var periodic []*river.PeriodicJob
	if cfg.Reconcile != nil {
		if err := river.AddWorkerSafely(workers, cfg.Reconcile); err != nil {
			return nil, fmt.Errorf("register reconcile worker: %w", err)
		}
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(time.Minute),
			func() (river.JobArgs, *river.InsertOpts) { return ReconcileArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true}))
	}
	if cfg.Extra != nil {
		if err := cfg.Extra(workers); err != nil {
			return nil, fmt.Errorf("register workers: %w", err)
		}
	}
	periodic = append(periodic, cfg.Periodic...)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: riverLogger(cfg.Logger),
		// A new dispatch is announced by LISTEN/NOTIFY when its transaction
		// commits, and fetched at most FetchCooldown after the previous fetch:
		// 20 ms keeps pickup well under 50 ms, while under load each fetch
		// takes many jobs. Measured (CHANGELOG.md, measurement log): 10 ms made twice the
		// fetches and cost ingest throughput; 30 ms raised the end-to-end p99
		// at 1,000 deliveries/s past 250 ms. The poll catches snoozed
		// dispatches (waiting on an entity lock) quickly.
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: 100 * time.Millisecond,
		// Dispatch rows are the lasting record; completed River jobs are kept
		// an hour for River UI, so that a busy gateway's job table stays small.
		CompletedJobRetentionPeriod: time.Hour,
		// Not the GIN indexes hookgate's schema drops (migration 0015).
		ReindexerIndexNames:  schema.RiverReindexed(),
		JobTimeout:           jobTimeout(cfg.ForwardTimeout),
		RescueStuckJobsAfter: rescueAfter(cfg.Dispatch.routes.Routes().MaxTimeout(cfg.ForwardTimeout)),
		PeriodicJobs:         periodic,
		// The client's own middleware runs innermost: what the others see
		// of a job's error is its cleaned text.
		Middleware: append(slices.Clip(cfg.Middleware), rivertype.Middleware(cleanErrors(cfg.Logger))),
		Queues:     queues(cfg.Dispatch.routes.Known(), cfg.Workers, cfg.Queues),
		Workers:    workers,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}

// cleanErrors is the middleware every job of the client runs through: the
// error a worker returns, or the value it panics with, reaches River with its
// text cleaned and bounded (package errtext). River stores that text in the
// job's errors, in batches of many jobs' completions: one NUL byte or invalid
// UTF-8 sequence, or a text of many megabytes, would fail every completion of
// the batch, and River would try the same batch again and again. A panic
// becomes an error ("panic: " and its value), logged with its stack.
func cleanErrors(logger *slog.Logger) rivertype.WorkerMiddleware {
	if logger == nil {
		logger = slog.Default()
	}
	return river.WorkerMiddlewareFunc(func(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) (err error) {
		defer func() {
			if v := recover(); v != nil {
				value := errtext.Clean(fmt.Sprint(v))
				logger.ErrorContext(ctx, "job panicked", "kind", job.Kind, "job_id", job.ID, "panic", value, "stack", string(debug.Stack()))
				err = errors.New("panic: " + value)
			}
		}()
		return errtext.Wrap(doInner(ctx))
	})
}

// defaultQueueWorkers works the default queue: maintenance, bulk replays, and
// the dispatches of a route no longer configured (they are discarded).
const defaultQueueWorkers = 10

// queues are a River queue per route, with the route's concurrency (workers
// when it sets none), and the default queue. A route's workers are its own:
// a target that hangs holds only its route's.
func queues(table fanout.Table, workers int, extra map[string]river.QueueConfig) map[string]river.QueueConfig {
	qs := maps.Clone(extra)
	if qs == nil {
		qs = map[string]river.QueueConfig{}
	}
	qs[river.QueueDefault] = river.QueueConfig{MaxWorkers: defaultQueueWorkers}
	for _, r := range table {
		qs[r.Queue()] = RouteQueue(r, workers)
	}
	return qs
}

// NewInserter returns a River client that only inserts jobs and pauses,
// resumes and lists queues: it works none and is never started. The
// enqueuer, the routes' guard and the operators' pause and resume use it,
// made before the client that works the jobs (NewClient), whose workers need
// the enqueuer. A client notifies the working clients of its inserts into a
// queue at most once per its FetchCooldown: the working client's own here,
// so that a new dispatch is announced as often as it may be fetched.
func NewInserter(pool *pgxpool.Pool, logger *slog.Logger) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: riverLogger(logger), FetchCooldown: fetchCooldown})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}

// RouteQueue is the River queue configuration of route r: its concurrency,
// workers when it sets none. A route added while the gateway runs gets its
// queue with it (client.Queues().Add).
func RouteQueue(r fanout.Route, workers int) river.QueueConfig {
	return river.QueueConfig{MaxWorkers: cmp.Or(r.Concurrency, workers)}
}
