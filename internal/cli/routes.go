package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/routes"
)

// routesCmd runs routes list|pause|resume, on the gateway's configured routes.
func routesCmd(ctx context.Context, env Env, args []string) error {
	if len(args) == 0 {
		return usageErr("routes: list, pause or resume?")
	}
	fs := flag.NewFlagSet("routes "+args[0], flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	var reason *string
	if args[0] == "pause" || args[0] == "resume" {
		reason = fs.String("reason", "", "why, for the audit log")
	}
	rest, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	switch {
	case args[0] == "list" && len(rest) != 0:
		return usageErr("usage: routes list [--json]")
	case args[0] == "pause" || args[0] == "resume":
		if len(rest) != 1 {
			return usageErr("usage: routes %s NAME [--reason TEXT]", args[0])
		}
		if !providers.Printable(*reason) {
			return usageErr("--reason must be printable text")
		}
	case args[0] != "list":
		return usageErr("routes: unknown command %q", args[0])
	}
	table, err := env.Config.LoadRoutes(handlers.Default(nil).Names())
	if err != nil {
		return err
	}
	pool, closeDB, err := env.Open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()

	var views []routes.View
	switch args[0] {
	case "list":
		views, err = routes.List(ctx, pool, table)
	default:
		client, cerr := dispatch.NewInsertClient(pool, nil)
		if cerr != nil {
			return cerr
		}
		change := routes.Pause
		if args[0] == "resume" {
			change = routes.Resume
		}
		var v routes.View
		v, err = change(ctx, pool, client, table, rest[0], routes.Change{Actor: actor(), Reason: *reason})
		views = []routes.View{v}
	}
	switch {
	case errors.Is(err, routes.ErrNotFound):
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no route named %q is configured", rest[0])}
	case err != nil:
		return err
	}
	if *asJSON {
		if args[0] == "list" {
			return writeJSON(env.Stdout, map[string]any{"routes": views})
		}
		return writeJSON(env.Stdout, views[0])
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tCIRCUIT\tPENDING\tRUNNING\tRETRYING\tOK 5M\tFAILED 5M\tLAST SUCCESS\tTARGET")
	for _, v := range views {
		last := "-"
		if v.LastSuccessAt != nil {
			last = v.LastSuccessAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", v.Name, v.State, v.Circuit,
			v.Backlog.Pending, v.Backlog.Running, v.Backlog.Retrying, v.Succeeded5m, v.Failed5m, last, v.Target)
	}
	return tw.Flush()
}
