package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/replay"
)

// replayCmd replays one delivery (replay PROVIDER ID) or every delivery a
// filter selects (replay --state discarded ...), through the gateway.
func replayCmd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	conn := addConnFlags(fs)
	ff := addFilterFlags(fs)
	var routes multiFlag
	fs.Var(&routes, "route", "replay only this route (repeatable)")
	force := fs.Bool("force", false, "re-dispatch routes that succeeded too")
	yes := fs.Bool("yes", false, "with --force and no --route: replay without asking")
	reason := fs.String("reason", "", "why, for the replay log")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	single := len(rest) > 0
	switch {
	case single && len(rest) != 2:
		return usageErr("usage: replay PROVIDER ID [--route R] [--force [--yes]] [--reason TEXT]")
	case single && ff.set():
		return usageErr("replay PROVIDER ID takes no filter flags")
	case !single && len(routes) > 0:
		return usageErr("--route is for replay PROVIDER ID")
	case !providers.Printable(*reason):
		return usageErr("--reason must be printable text")
	}
	// Forced, with no route chosen, a replay sends again what every route
	// already handled: said first, and done only when confirmed.
	everyRoute := *force && len(routes) == 0 && !*yes
	if single {
		return replayOne(ctx, env, conn, rest, replayOneBody{Routes: routes, Force: *force, Reason: *reason}, everyRoute, *asJSON)
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	if err := ff.check(ctx, c); err != nil {
		return err
	}
	if everyRoute {
		if err := confirm(env, "replay --force re-dispatches every route that matches each delivery "+describeFilter(ff)+
			", those whose dispatch succeeded too, as a new generation each"); err != nil {
			return err
		}
	}
	req := ff.body()
	req["force"], req["reason"] = *force, *reason
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodPost, "/admin/replays", nil, req, &raw); err != nil {
		return err
	}
	var bulk struct {
		ReplayID   string `json:"replay_id"`
		Deliveries int    `json:"deliveries"`
	}
	if printed, err := answer(env, raw, *asJSON, &bulk); printed || err != nil {
		return err
	}
	if bulk.Deliveries == 0 {
		fmt.Fprintf(env.Stdout, "replay %s: no delivery matches the filter: nothing to replay\n", bulk.ReplayID)
		return nil
	}
	if *ff.where != "" {
		fmt.Fprintf(env.Stdout, "replay %s: --where is evaluated on %d deliveries the other filters select; the gateway replays those it holds for in the background (GET /admin/replays/%s, or the console, shows its progress)\n",
			bulk.ReplayID, bulk.Deliveries, bulk.ReplayID)
		return nil
	}
	fmt.Fprintf(env.Stdout, "replay %s: %d deliveries matched; the gateway replays them in the background (GET /admin/replays/%s, or the console, shows its progress)\n",
		bulk.ReplayID, bulk.Deliveries, bulk.ReplayID)
	return nil
}

// replayOneBody is the body of a replay of one delivery.
type replayOneBody struct {
	Routes []string `json:"routes,omitempty"`
	Force  bool     `json:"force"`
	Reason string   `json:"reason,omitempty"`
}

// replayOne replays PROVIDER ID and says what it created, or why it created
// nothing.
// everyRoute says the replay is forced without a chosen route, and
// unconfirmed: it asks first (confirm).
func replayOne(ctx context.Context, env Env, conn connFlags, rest []string, req replayOneBody, everyRoute, asJSON bool) error {
	c, provider, id, err := oneDelivery(ctx, env, conn, rest, "replay PROVIDER ID [--route R] [--force [--yes]] [--reason TEXT]")
	if err != nil {
		return err
	}
	if everyRoute {
		if err := confirm(env, fmt.Sprintf("replay --force re-dispatches every route of the gateway that matches %s %s, "+
			"those whose dispatch succeeded too, as a new generation each", provider, printable(id)), ", or --route R to choose routes"); err != nil {
			return err
		}
	}
	var raw json.RawMessage
	err = c.do(ctx, http.MethodPost, escape("admin", "deliveries", provider, id, "replay"), nil, req, &raw)
	if statusOf(err) == http.StatusBadRequest && len(req.Routes) > 0 {
		// A route the gateway has not, or one that does not match the event:
		// name the routes it has.
		if names, nerr := c.routeNames(ctx); nerr == nil {
			return usageErr("%v (the gateway's routes: %s)", errors.Unwrap(err), strings.Join(names, ", "))
		}
	}
	if err != nil {
		return err
	}
	var one struct {
		ReplayID string `json:"replay_id"`
		replay.Result
	}
	if printed, err := answer(env, raw, asJSON, &one); printed || err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "replay %s: %d dispatch(es)\n", one.ReplayID, len(one.Created))
	for _, d := range one.Created {
		fmt.Fprintf(env.Stdout, "  %s generation %d %s\n", d.Route, d.Generation, d.State)
	}
	for _, s := range one.Skipped {
		fmt.Fprintf(env.Stdout, "  %s skipped: %s\n", s.Route, printable(s.Reason))
	}
	if len(one.Created) == 0 && len(one.Skipped) == 0 {
		fmt.Fprintln(env.Stdout, "  no route of the gateway matches this event: nothing to replay")
	}
	return nil
}

// confirm says what is about to happen and asks a person at a terminal to
// confirm it. Off a terminal no one can answer: it refuses (exit 2), naming
// --yes (and, for a replay of one delivery, --route), and nothing is sent.
// An answer other than y or yes refuses too.
func confirm(env Env, what string, alternatives ...string) error {
	if !env.Terminal || env.Stdin == nil {
		return usageErr("%s; nothing replayed: pass --yes to replay without being asked%s", what, strings.Join(alternatives, ""))
	}
	fmt.Fprintf(env.Stderr, "%s.\nReplay? [y/N] ", what)
	line, _ := bufio.NewReader(env.Stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return usageErr("nothing replayed (not confirmed)")
}

// describeFilter says which deliveries the filter flags select, as typed,
// to follow "each delivery".
func describeFilter(ff filterFlags) string {
	parts := filterParts(ff)
	if len(parts) == 0 {
		return "stored (no filter is set)"
	}
	return "the filter selects (" + strings.Join(parts, ", ") + ")"
}

// filterParts are the filter's flags as a person reads them.
func filterParts(ff filterFlags) []string {
	var parts []string
	for _, p := range [][2]string{{"provider", *ff.provider}, {"event", *ff.event}, {"state", *ff.state}, {"since", *ff.since}, {"until", *ff.until}, {"where", *ff.where}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+printable(p[1]))
		}
	}
	for _, k := range *ff.keys {
		parts = append(parts, "key "+printable(k))
	}
	return parts
}
