// Command gateway is hookgate: a webhook ingestion gateway that verifies
// deliveries from GitHub, Stripe and the configured sources, stores a receipt
// before any side effect, and dispatches the work through River in the same
// transaction. It only wires: `gateway serve` runs through the public package
// github.com/hookgate/hookgate, as a service's main would.
//
//	gateway [serve]   run the gateway (the default)
//	gateway migrate   apply pending migrations and exit
//	gateway healthcheck   exit 0 when the gateway on GATEWAY_ADDR is ready
//	gateway deliveries list|show|body, replay, retry, routes list|pause|resume|retry, audit, recover:
//	                  the operator's commands, clients of a running gateway's API
//	gateway send      sign a sample delivery locally and post it
//	gateway bench     the load tool
//	gateway version   the release, commit and Go version this binary was built from
//
// Configuration is read from the environment and GATEWAY_CONFIG_FILE; see
// docs/configuration.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/term"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/bench"
	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/database"
	"github.com/hookgate/hookgate/internal/healthcheck"
	"github.com/hookgate/hookgate/internal/schema"
	"github.com/hookgate/hookgate/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 || len(os.Args) == 2 && os.Args[1] == "serve" {
		limitMemory()
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		code := report(os.Stderr, err)
		stop()
		os.Exit(code)
	}
}

// report writes the error that stopped the command to stderr, unless it was
// logged already (serve's, with GATEWAY_LOG_FORMAT=json), and returns the
// exit code.
func report(stderr io.Writer, err error) int {
	if !errors.As(err, new(*loggedError)) {
		fmt.Fprintln(stderr, "gateway:", err)
	}
	var exit *cli.ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	return cli.ExitFailed
}

// loggedError is an error that stopped serve and was logged, a log line for
// each of its lines: main does not write it again.
type loggedError struct{ err error }

func (e *loggedError) Error() string { return e.err.Error() }
func (e *loggedError) Unwrap() error { return e.err }

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
// another service.
// It reads GATEWAY_MAX_INFLIGHT_BYTES alone; a value that does not parse
// is left to the configuration's check, which reports it.
func limitMemory() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return // the runtime has read it already
	}
	inflight := int64(256 << 20) // the default
	if n, err := strconv.ParseInt(strings.TrimSpace(os.Getenv("GATEWAY_MAX_INFLIGHT_BYTES")), 10, 64); err == nil && n > 0 {
		inflight = n
	}
	debug.SetMemoryLimit(inflight + memoryHeadroom)
}

const usage = `usage: gateway [command]

  serve     run the gateway (the default)
  migrate   apply pending migrations (River's and hookgate's) and exit
` + cli.Usage + bench.Usage + healthcheck.Usage + `  version [--json]
            the release, the commit and the Go version this binary was built from

Configuration is read from the environment; see README.md.
`

// atTerminal says a person is there to answer a question: the standard input
// and stderr, where the question goes, are both a terminal. A test's run, whose
// stderr is no file, never asks.
func atTerminal(stderr io.Writer) bool {
	f, ok := stderr.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) && term.IsTerminal(int(os.Stdin.Fd()))
}

// run is the whole program; it returns when ctx is cancelled (serve) or the
// command is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	command := "serve"
	if len(args) > 0 {
		command = args[0]
	}
	switch command {
	case "serve", "migrate", "bench", "send":
	case "deliveries", "replay", "retry", "routes", "audit", "recover", "archive", "tokens", "listen":
		// Clients of a running gateway's operator API: no configuration, no
		// database.
		return cli.Run(ctx, cli.Env{Stdout: stdout, Stderr: stderr, Stdin: os.Stdin, Terminal: atTerminal(stderr)}, args)
	case "healthcheck":
		// The container's HEALTHCHECK: it needs GATEWAY_ADDR alone, not the
		// whole configuration.
		return healthcheck.Run(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version", "--version":
		// Needs nothing but the binary.
		return printVersion(args[1:], stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("unknown command %q", command)}
	}

	if (command == "serve" || command == "migrate") && len(args) > 1 {
		// Their configuration is the environment: an argument is a mistake,
		// or a request for help, never a reason to start a database.
		if args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
			fmt.Fprint(stdout, usage)
			return nil
		}
		return &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("%s takes no arguments (its configuration is the environment: gateway help), got %q", command, args[1])}
	}
	if command == "serve" {
		return serve(ctx, stderr)
	}

	cfg, err := config.Load()
	if err != nil {
		if command != "migrate" {
			// The operator's to fix, as a wrong flag is: exit 2.
			return &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("configuration: %w", err)}
		}
		return fmt.Errorf("configuration: %w", err)
	}
	logger, err := cfg.Logger(stderr)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if command == "migrate" {
		// migrate may use the private server a gateway runs.
		pool, closeDB, err := database.Open(ctx, database.Options{URL: cfg.DatabaseURL.Value(), DataDir: cfg.DataDir,
			Mode: database.ShareOrStart, Schema: cfg.Schema, Logger: logger})
		if err != nil {
			return err
		}
		defer closeDB()
		if err := schema.Migrate(ctx, pool, logger); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "migrations applied")
		return nil
	}

	if command == "send" {
		// A local signer: the provider's secret is the gateway's configuration.
		return cli.Run(ctx, cli.Env{Providers: cfg.Providers, Addr: cfg.Addr, Stdout: stdout, Stderr: stderr}, args)
	}
	// The load tool measures a running gateway: it uses that gateway's
	// database and never starts one beside it.
	quiet := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	open := func(ctx context.Context, conns int) (*pgxpool.Pool, func(), error) {
		return database.Open(ctx, database.Options{URL: cfg.DatabaseURL.Value(), DataDir: cfg.DataDir,
			Mode: database.ShareOnly, Conns: conns, Schema: cfg.Schema, Logger: quiet})
	}
	return bench.Run(ctx, bench.Env{Config: cfg, Providers: cfg.Providers, Open: open, Stdout: stdout}, args[1:])
}

// serve runs the gateway through the public package, as a library user's
// main does, logging to stderr as GATEWAY_LOG_FORMAT and GATEWAY_LOG_LEVEL
// say. The variables that look meant for hookgate and are none it reads are
// logged first, at WARN, configuration errors or not: a misspelt name is
// often why a value seems ignored. Then every configuration error is
// reported at once: what could not be read, the values, the routes,
// recovery's settings and the builtin handlers the routes name, all by New.
// With GATEWAY_LOG_FORMAT=json, the error that stops serve is logged as
// JSON too, a line at ERROR for each of its lines, so that the log stays
// one JSON object a line.
func serve(ctx context.Context, stderr io.Writer) error {
	// Its error is New's too: a Config read in part is handed on, for New
	// to report what it could not read beside what it finds itself.
	cfg, _ := hookgate.ConfigFromEnv()
	logger, asJSON := serveLogger(cfg, stderr)
	for _, s := range config.Strays(os.Environ(), cli.URLVariable, cli.TokenVariable) {
		logger.WarnContext(ctx, s.Message(), s.LogAttrs()...)
	}
	gw, err := hookgate.New(cfg, hookgate.WithLogger(logger))
	if err != nil {
		return logStop(ctx, logger, asJSON, "configuration error", err)
	}
	if err := gw.Run(ctx); err != nil {
		return logStop(ctx, logger, asJSON, "gateway stopped", err)
	}
	return nil
}

// serveLogger is the logger cfg asks for, and whether it writes JSON. A bad
// GATEWAY_LOG_LEVEL (which New reports) leaves the level at info; a bad
// GATEWAY_LOG_FORMAT, the format at text.
func serveLogger(cfg hookgate.Config, stderr io.Writer) (*slog.Logger, bool) {
	if logger, err := cfg.Logger(stderr); err == nil {
		return logger, cfg.LogFormat == "json"
	}
	cfg.LogLevel = ""
	if logger, err := cfg.Logger(stderr); err == nil {
		return logger, cfg.LogFormat == "json"
	}
	return slog.New(slog.NewTextHandler(stderr, nil)), false
}

// logStop logs err, the error that stops serve, when the log is JSON: a
// line at ERROR for each of its lines, msg msg and the line as error
// (without the "configuration: " the first one begins with). The error
// returned is then one main does not write again.
func logStop(ctx context.Context, logger *slog.Logger, asJSON bool, msg string, err error) error {
	if !asJSON {
		return err
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		logger.ErrorContext(ctx, msg, "error", strings.TrimPrefix(line, "configuration: "))
	}
	return &loggedError{err: err}
}

// printVersion is `gateway version`: hookgate <version> (<commit>, <go>), or
// with --json {"version","commit","go"}.
func printVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, `print {"version","commit","go"}`)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return &cli.ExitError{Code: cli.ExitUsage, Err: err}
	}
	if fs.NArg() > 0 {
		return &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf("version takes no arguments, got %q", fs.Arg(0))}
	}
	info := version.Get()
	if !*asJSON {
		_, err := fmt.Fprintln(stdout, info)
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(info)
}
