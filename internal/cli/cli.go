// Package cli is the operator's command line: list and show deliveries,
// replay them, list, pause and resume routes, recover what the providers'
// APIs hold and the gateway missed, and send signed sample
// deliveries to a gateway. It runs the same code as the operator endpoints
// (packages deliveries, jobs and routes), directly against the database, with
// the gateway's own configuration (its routes decide what a replay
// re-dispatches).
//
// Output is a table for people, or JSON with --json for scripts. Exit codes:
// 0 done, 1 failed (including a non-2xx answer to send), 2 usage error,
// 3 no such delivery.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/replay"
)

// Exit codes.
const (
	ExitFailed   = 1
	ExitUsage    = 2
	ExitNotFound = 3
)

// ExitError carries a command's exit code.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

func usageErr(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// Env is what the commands need from the program.
type Env struct {
	// Config is the gateway's configuration.
	Config config.Config
	// Providers are the gateway's providers, from Config and its
	// configuration file (Config.Providers): the names commands take, and
	// what send signs with.
	Providers *providers.Registry
	// Open connects to the gateway's database; the func closes it.
	Open   func(ctx context.Context) (*pgxpool.Pool, func(), error)
	Stdout io.Writer
	Stderr io.Writer
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
}

// Usage describes the operator commands.
const Usage = `  deliveries list [--provider P] [--event E] [--state S] [--since T] [--until T] [--limit N] [--cursor C] [--json]
  deliveries show PROVIDER ID [--json]
  replay PROVIDER ID [--route R]... [--force] [--reason TEXT] [--json]
  replay [--provider P] [--event E] [--state S] [--since T] [--until T] [--force] [--reason TEXT] [--json]
  send github|stripe|SOURCE --event E [--file F] [--url URL] [--json]
  routes list [--json]
  routes pause NAME [--reason TEXT] [--json]
  routes resume NAME [--reason TEXT] [--json]
  recover github|stripe [--since T] [--dry-run] [--json]

  T is an RFC 3339 time or a duration ago (24h). C is the next_cursor a listing printed (the next page).
  Exit codes: 0 done, 1 failed, 2 usage (including an unknown provider), 3 no such delivery or route.
`

// Run runs an operator command: args[0] is "deliveries", "replay", "send" or "routes".
func Run(ctx context.Context, env Env, args []string) error {
	if env.Now == nil {
		env.Now = time.Now
	}
	switch args[0] {
	case "deliveries":
		if len(args) < 2 {
			return usageErr("deliveries: list or show?")
		}
		switch args[1] {
		case "list":
			return list(ctx, env, args[2:])
		case "show":
			return show(ctx, env, args[2:])
		}
		return usageErr("deliveries: unknown command %q", args[1])
	case "replay":
		return replayCmd(ctx, env, args[1:])
	case "send":
		return send(ctx, env, args[1:])
	case "routes":
		return routesCmd(ctx, env, args[1:])
	case "recover":
		return recoverCmd(ctx, env, args[1:])
	}
	return usageErr("unknown command %q", args[0])
}

// parse parses flags, allowing them before and after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageErr("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

type filterFlags struct {
	provider, event, state, since, until *string
}

func addFilterFlags(fs *flag.FlagSet) filterFlags {
	return filterFlags{
		provider: fs.String("provider", "", "github or stripe"),
		event:    fs.String("event", "", "a route pattern"),
		state:    fs.String("state", "", "a dispatch state, or stored"),
		since:    fs.String("since", "", "RFC 3339 time or duration ago"),
		until:    fs.String("until", "", "RFC 3339 time or duration ago"),
	}
}

func (f filterFlags) filter(now time.Time, known *providers.Registry) (deliveries.Filter, error) {
	q := map[string][]string{"provider": {*f.provider}, "event": {*f.event}, "state": {*f.state}, "since": {*f.since}, "until": {*f.until}}
	filter, err := deliveries.FilterFromQuery(q, now, known)
	if err != nil {
		return filter, &ExitError{Code: ExitUsage, Err: err}
	}
	return filter, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func list(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("deliveries list", flag.ContinueOnError)
	ff := addFilterFlags(fs)
	limit := fs.Int("limit", 50, "at most this many, newest first (max 500)")
	cursor := fs.String("cursor", "", "the next_cursor of the previous page")
	asJSON := fs.Bool("json", false, "JSON output")
	if rest, err := parse(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageErr("deliveries list takes no arguments, got %q", rest)
	}
	if *limit < 1 {
		return usageErr("deliveries list: --limit must be a positive integer")
	}
	f, err := ff.filter(env.Now(), env.Providers)
	if err != nil {
		return err
	}
	var after *deliveries.Cursor
	if *cursor != "" {
		c, err := deliveries.DecodeCursor(*cursor)
		if err != nil {
			return &ExitError{Code: ExitUsage, Err: err}
		}
		after = &c
	}
	pool, closeDB, err := env.Open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	items, next, err := deliveries.List(ctx, pool, f, *limit, after)
	if err != nil {
		return err
	}
	var nextCursor *string
	if next != nil {
		c := next.Encode()
		nextCursor = &c
	}
	if *asJSON {
		return writeJSON(env.Stdout, map[string]any{"deliveries": items, "next_cursor": nextCursor})
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RECEIVED_AT\tPROVIDER\tDELIVERY_ID\tEVENT\tSTATE\tRECEIPTS\tENTITY")
	for _, it := range items {
		entity := "-"
		if it.Entity != nil {
			entity = *it.Entity
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", it.ReceivedAt.UTC().Format(time.RFC3339), it.Provider, it.DeliveryID,
			it.Event, it.State, it.Receipts, entity)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if nextCursor != nil {
		fmt.Fprintf(env.Stdout, "\nmore: --cursor %s\n", *nextCursor)
	}
	return nil
}

func show(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("deliveries show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return usageErr("usage: deliveries show PROVIDER ID")
	}
	if err := knownProvider(env.Providers, rest[0]); err != nil {
		return err
	}
	pool, closeDB, err := env.Open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	d, err := deliveries.Show(ctx, pool, rest[0], rest[1])
	if errors.Is(err, deliveries.ErrNotFound) {
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no delivery %s %s", rest[0], rest[1])}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(env.Stdout, d)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	entity := "-"
	if d.Entity != nil {
		entity = *d.Entity
	}
	fmt.Fprintf(tw, "delivery\t%s %s\nevent\t%s\nentity\t%s\n", d.Provider, d.DeliveryID, d.Event, entity)
	if d.EventTime != nil {
		fmt.Fprintf(tw, "event time\t%s\n", d.EventTime.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(tw, "\nRECEIVED_AT\tSCOPE\tCONTENT_TYPE\tBODY_SHA256")
	for _, r := range d.Receipts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ReceivedAt.UTC().Format(time.RFC3339), dash(r.Scope), r.ContentType, r.BodySHA256)
	}
	fmt.Fprintln(tw, "\nROUTE\tGENERATION\tSTATE\tATTEMPTS\tUPDATED_AT\tLAST_ERROR")
	for _, x := range d.Dispatches {
		lastError := "-"
		if x.LastError != nil {
			lastError = *x.LastError
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", x.Route, x.Generation, x.State, x.Attempts, x.UpdatedAt.UTC().Format(time.RFC3339), lastError)
	}
	return tw.Flush()
}

// knownProvider is a usage error for a provider no adapter has, as the
// --provider filter is: such a name is a typo, not a missing delivery.
func knownProvider(known *providers.Registry, name string) error {
	if !known.Known(name) {
		return usageErr("unknown provider %q (known: %s)", name, strings.Join(known.Names(), ", "))
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// actor names the operator in the replay log.
func actor() string {
	if u, err := user.Current(); err == nil {
		return "cli:" + u.Username
	}
	return "cli"
}

func replayCmd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	ff := addFilterFlags(fs)
	var routes multiFlag
	fs.Var(&routes, "route", "replay only this route (repeatable)")
	force := fs.Bool("force", false, "re-dispatch routes that succeeded too")
	reason := fs.String("reason", "", "why, for the replay log")
	asJSON := fs.Bool("json", false, "JSON output")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	single := len(rest) > 0
	switch {
	case single && len(rest) != 2:
		return usageErr("usage: replay PROVIDER ID [--route R] [--force] [--reason TEXT]")
	case single && (*ff.provider != "" || *ff.event != "" || *ff.state != "" || *ff.since != "" || *ff.until != ""):
		return usageErr("replay PROVIDER ID takes no filter flags")
	case !single && len(routes) > 0:
		return usageErr("--route is for replay PROVIDER ID")
	}
	if single {
		if err := knownProvider(env.Providers, rest[0]); err != nil {
			return err
		}
	}
	var f deliveries.Filter
	if !single {
		if f, err = ff.filter(env.Now(), env.Providers); err != nil {
			return err
		}
	}
	pool, enq, closeDB, err := openEnqueuer(ctx, env)
	if err != nil {
		return err
	}
	defer closeDB()

	if single {
		var id string
		var created []dispatch.Created
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			id, created, err = replay.OneTx(ctx, tx, enq, actor(), rest[0], rest[1], replay.Request{Routes: routes, Force: *force}, *reason)
			return err
		})
		switch {
		case errors.Is(err, deliveries.ErrNotFound):
			return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no delivery %s %s", rest[0], rest[1])}
		case errors.Is(err, replay.ErrUnknownRoute):
			return &ExitError{Code: ExitUsage, Err: err}
		case err != nil:
			return err
		}
		if *asJSON {
			return writeJSON(env.Stdout, map[string]any{"replay_id": id, "dispatches": created})
		}
		fmt.Fprintf(env.Stdout, "replay %s: %d dispatch(es)\n", id, len(created))
		for _, c := range created {
			fmt.Fprintf(env.Stdout, "  %s generation %d %s\n", c.Route, c.Generation, c.State)
		}
		if len(created) == 0 && !*force {
			fmt.Fprintln(env.Stdout, "  (no route's latest dispatch was discarded or cancelled; --force replays the others)")
		}
		return nil
	}

	var id string
	var matched int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		id, matched, err = replay.BulkTx(ctx, tx, enq, actor(), f, *force, *reason)
		return err
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(env.Stdout, map[string]any{"replay_id": id, "deliveries": matched})
	}
	fmt.Fprintf(env.Stdout, "replay %s: %d deliveries matched; a running gateway replays them in the background\n", id, matched)
	return nil
}

// openEnqueuer reads the gateway's routes and opens its database, with an
// Enqueuer that creates dispatches as the gateway does: for commands that
// create them (replay, recover).
func openEnqueuer(ctx context.Context, env Env) (*pgxpool.Pool, *dispatch.Enqueuer, func(), error) {
	table, err := env.Config.LoadRoutes(handlers.Default(nil).Names())
	if err != nil {
		return nil, nil, nil, err
	}
	pool, closeDB, err := env.Open(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	client, err := dispatch.NewInsertClient(pool, nil)
	if err != nil {
		closeDB()
		return nil, nil, nil, err
	}
	return pool, &dispatch.Enqueuer{Client: client, Routes: table, MaxAttempts: env.Config.MaxAttempts}, closeDB, nil
}
