package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/routes"
)

// routesCmd runs routes list|pause|resume|retry on the gateway's routes.
func routesCmd(ctx context.Context, env Env, args []string) error {
	if len(args) == 0 {
		return usageErr("routes: list, pause, resume or retry?")
	}
	fs := flag.NewFlagSet("routes "+args[0], flag.ContinueOnError)
	conn := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	var reason *string
	changes := args[0] == "pause" || args[0] == "resume" || args[0] == "retry"
	if changes {
		reason = fs.String("reason", "", "why, for the audit log")
	}
	rest, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	switch {
	case args[0] == "list" && len(rest) != 0:
		return usageErr("usage: routes list [--json]")
	case changes:
		if len(rest) != 1 {
			return usageErr("usage: routes %s NAME [--reason TEXT]", args[0])
		}
		if !providers.Printable(*reason) {
			return usageErr("--reason must be printable text")
		}
	case args[0] != "list":
		return usageErr("routes: unknown command %q", args[0])
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	if args[0] == "retry" {
		return routeRetry(ctx, env, c, rest[0], *reason, *asJSON)
	}
	var raw json.RawMessage
	if args[0] == "list" {
		err = c.do(ctx, http.MethodGet, "/admin/routes", nil, nil, &raw)
	} else {
		err = c.do(ctx, http.MethodPost, escape("admin", "routes", rest[0], args[0]), nil, map[string]string{"reason": *reason}, &raw)
		if statusOf(err) == http.StatusNotFound {
			if names, nerr := c.routeNames(ctx); nerr == nil {
				return usageErr("the gateway has no route named %q (its routes: %s)", rest[0], strings.Join(names, ", "))
			}
		}
	}
	if err != nil {
		return err
	}
	// A list is {"routes": [...]}; a pause or a resume answers the route.
	var list struct {
		Routes []routes.View `json:"routes"`
	}
	var one routes.View
	target := any(&one)
	if args[0] == "list" {
		target = &list
	}
	if printed, err := answer(env, raw, *asJSON, target); printed || err != nil {
		return err
	}
	views := list.Routes
	if args[0] != "list" {
		views = []routes.View{one}
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tCIRCUIT\tPENDING\tRUNNING\tRETRYING\tOK 5M\tFAILED 5M\tLAST SUCCESS\tTARGET")
	for _, v := range views {
		last := "-"
		if v.LastSuccessAt != nil {
			last = v.LastSuccessAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", v.Name, v.State, v.Circuit,
			v.Backlog.Pending, v.Backlog.Running, v.Backlog.Retrying, v.Succeeded5m, v.Failed5m, last, printable(v.Target))
	}
	return tw.Flush()
}
