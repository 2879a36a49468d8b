package hookgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures a Gateway in New.
type Option func(*options) error

// options are what the Options set.
type options struct {
	logger     *slog.Logger
	handlers   map[string]Handler
	http       []mounted
	migrations []func(context.Context, *pgxpool.Pool) error
	workers    []func(*river.Workers) error
	queues     map[string]river.QueueConfig
	periodic   []*river.PeriodicJob
	conns      int
	tracer     trace.TracerProvider
}

type mounted struct {
	pattern string
	handler http.Handler
}

// WithTracerProvider makes the gateway trace with tp (the service's own
// OpenTelemetry provider) instead of one made from the OTEL_* variables:
// a span per ingest request and per dispatch attempt, River's job spans,
// the sender's traceparent continued and a forward carrying one. The
// service shuts tp down itself.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error {
		if tp == nil {
			return errors.New("WithTracerProvider: the provider is nil")
		}
		o.tracer = tp
		return nil
	}
}

// WithHandler registers h as the Go handler of routes whose target is
// builtin:<name>. A name is 1-64 of a-z, 0-9, _ and -; it may not be given
// twice, nor be a shipped handler's (log, stripe-subscriptions).
func WithHandler(name string, h Handler) Option {
	return func(o *options) error {
		switch {
		case h == nil:
			return fmt.Errorf("WithHandler(%q): the handler is nil", name)
		case !handlerName(name):
			return fmt.Errorf("WithHandler(%q): a handler's name is 1-64 of a-z, 0-9, _ and -", name)
		case o.handlers[name] != nil:
			return fmt.Errorf("WithHandler(%q): given twice", name)
		}
		if o.handlers == nil {
			o.handlers = map[string]Handler{}
		}
		o.handlers[name] = h
		return nil
	}
}

func handlerName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// WithLogger makes the gateway log to logger (and River, through it).
// Defaults to the logger Config.LogFormat and Config.LogLevel ask for,
// writing to standard error, when either is set; else slog.Default().
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) error {
		if logger == nil {
			return errors.New("WithLogger: the logger is nil")
		}
		o.logger = logger
		return nil
	}
}

// reserved reports whether path is one of the gateway's own: /webhooks and
// under it, /admin and under it, /healthz, /readyz, /metrics. A request for
// one always goes to the gateway, whatever the service's patterns match.
func reserved(path string) bool {
	for _, prefix := range []string{"/webhooks", "/admin"} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// WithHTTPHandler serves h beside the gateway's own endpoints, on the same
// listener, for requests matching pattern (an http.ServeMux pattern such as
// "/app/" or "GET /app/status"). The gateway's own paths (/webhooks and under
// it, /admin and under it, /healthz, /readyz, /metrics) always go to the
// gateway: a pattern that would match one of them (a literal one, or
// wildcards such as "/{a}/{b}") is an error from New.
func WithHTTPHandler(pattern string, h http.Handler) Option {
	return func(o *options) error {
		if h == nil {
			return fmt.Errorf("WithHTTPHandler(%q): the handler is nil", pattern)
		}
		path := pattern
		if _, p, ok := strings.Cut(pattern, " "); ok {
			path = strings.TrimSpace(p)
		}
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("WithHTTPHandler(%q): the pattern must be a path beginning with / (a method and a space may come first)", pattern)
		}
		o.http = append(o.http, mounted{pattern: pattern, handler: h})
		return nil
	}
}

// WithMigration gives the service's own schema migration: Run calls migrate
// once the database is up (the private PostgreSQL exists only once Run starts
// it) and hookgate's schema is current, before it serves. It must be safe to
// run at every start and by several processes at once (CREATE TABLE IF NOT
// EXISTS under an advisory lock, or a migration library's own lock).
// Migrations run in the order given; an error (or a panic) stops Run. Each
// gets a pool of its own (up to four connections, closed when it returns),
// so that its session settings (SET search_path, SET ROLE) never reach the
// gateway's connections; its connections have the service's own search_path
// (DATABASE_URL's when it sets one, else the role's or the server's),
// without hookgate's schema (nor "$user" when the user is named like it),
// so its tables go to public, or to the schemas that path names.
//
// The service's tables share the database with hookgate's and River's,
// which live in a schema of their own (GATEWAY_DATABASE_SCHEMA, hookgate by
// default). The gateway's connections (a handler's tx, Gateway.Pool) put
// that schema first on their search_path and the service's own search_path
// after it: a handler finds the service's tables by their plain names,
// wherever its migration made them, as long as they are named unlike
// hookgate's and River's own tables. To look at them on the private PostgreSQL,
// connect as Gateway.Pool does, as the user the gateway runs as (or root):
// user and database hookgate, over the Unix socket in
// <GATEWAY_DATA_DIR>/socket (psql -h "$GATEWAY_DATA_DIR/socket" -p PORT -U
// hookgate hookgate, PORT the number in the socket's name .s.PGSQL.PORT);
// or set DATABASE_URL to a server of the service's own.
func WithMigration(migrate func(ctx context.Context, pool *pgxpool.Pool) error) Option {
	return func(o *options) error {
		if migrate == nil {
			return errors.New("WithMigration: the function is nil")
		}
		o.migrations = append(o.migrations, migrate)
		return nil
	}
}

// WithRiverWorkers registers the service's own River workers on the
// gateway's River client (one client for the gateway's jobs and the
// service's): add calls river.AddWorkerSafely for each. Their jobs run in the
// queues WithRiverQueues adds, or River's default queue. The client's job
// time limit is the gateway's (GATEWAY_FORWARD_TIMEOUT plus 10 s, 20 s by
// default), not River's minute: a worker whose jobs take longer implements
// Timeout. add runs once in New, to check the kinds, and again in Run.
func WithRiverWorkers(add func(*river.Workers) error) Option {
	return func(o *options) error {
		if add == nil {
			return errors.New("WithRiverWorkers: the function is nil")
		}
		o.workers = append(o.workers, add)
		return nil
	}
}

// WithRiverQueues adds the service's own River queues. A queue named like
// one of the gateway's (River's default, or route_<name>) is an error from
// New.
func WithRiverQueues(queues map[string]river.QueueConfig) Option {
	return func(o *options) error {
		if o.queues == nil {
			o.queues = map[string]river.QueueConfig{}
		}
		for name, q := range queues {
			if _, dup := o.queues[name]; dup {
				return fmt.Errorf("WithRiverQueues: queue %q given twice", name)
			}
			o.queues[name] = q
		}
		return nil
	}
}

// WithPeriodicJobs schedules the service's own periodic River jobs.
func WithPeriodicJobs(jobs ...*river.PeriodicJob) Option {
	return func(o *options) error {
		for i, j := range jobs {
			if j == nil {
				return fmt.Errorf("WithPeriodicJobs: job %d is nil", i+1)
			}
		}
		o.periodic = append(o.periodic, jobs...)
		return nil
	}
}

// WithPoolConns adds n connections to the gateway's database pool for the
// service's own use (its HTTP handlers, its workers). Defaults to 0: the
// pool is sized for the gateway alone, with some slack.
func WithPoolConns(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("WithPoolConns(%d): must be 0 or more", n)
		}
		o.conns += n
		return nil
	}
}
