package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/retry"
)

// retryCmd attempts now one delivery's retrying dispatches (retry PROVIDER
// ID [--route R]...), or those of every delivery a filter selects (retry
// --key customer=cus_123 ...), through the gateway.
func retryCmd(ctx context.Context, env Env, args []string) error {
	const usage = "retry PROVIDER ID [--route R]... [--reason TEXT]"
	fs := flag.NewFlagSet("retry", flag.ContinueOnError)
	conn := addConnFlags(fs)
	ff := addFilterFlags(fs)
	var routes multiFlag
	fs.Var(&routes, "route", "retry only this route's dispatches (repeatable)")
	reason := fs.String("reason", "", "why, for the audit log")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if !providers.Printable(*reason) {
		return usageErr("--reason must be printable text")
	}
	switch {
	case len(rest) > 0 && ff.set():
		return usageErr("retry PROVIDER ID takes no filter flags")
	case len(rest) == 0 && len(routes) > 0:
		return usageErr("--route is for retry PROVIDER ID (routes retry NAME retries a route)")
	case len(rest) == 0 && !ff.set():
		return usageErr("usage: %s, or retry with filter flags (--key, --where, --provider ...) for every delivery they select", usage)
	case len(rest) == 0:
		return bulkRetry(ctx, env, conn, ff, *reason, *asJSON)
	}
	c, provider, id, err := oneDelivery(ctx, env, conn, rest, usage)
	if err != nil {
		return err
	}
	req := struct {
		Routes []string `json:"routes,omitempty"`
		Reason string   `json:"reason,omitempty"`
	}{routes, *reason}
	var raw json.RawMessage
	err = c.do(ctx, http.MethodPost, escape("admin", "deliveries", provider, id, "retry"), nil, req, &raw)
	if statusOf(err) == http.StatusBadRequest && len(routes) > 0 {
		if names, nerr := c.routeNames(ctx); nerr == nil {
			return usageErr("%v (the gateway's routes: %s)", errors.Unwrap(err), strings.Join(names, ", "))
		}
	}
	if err != nil {
		return err
	}
	var res retry.Result
	if printed, err := answer(env, raw, *asJSON, &res); printed || err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "retry %s %s: %s attempted now\n", provider, printable(id), countOf(len(res.Retried), "dispatch", "dispatches"))
	for _, d := range res.Retried {
		fmt.Fprintf(env.Stdout, "  %s generation %d\n", d.Route, d.Generation)
	}
	for _, s := range res.Skipped {
		fmt.Fprintf(env.Stdout, "  %s skipped: %s\n", s.Route, printable(s.Reason))
	}
	if len(res.Retried) == 0 && len(res.Skipped) == 0 {
		fmt.Fprintln(env.Stdout, "  no dispatch of it is retrying: nothing to retry (deliveries show lists its dispatches' states)")
	}
	return nil
}

// routeRetry attempts now every retrying dispatch of a route (routes retry
// NAME), through the gateway.
func routeRetry(ctx context.Context, env Env, c *client, name, reason string, asJSON bool) error {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodPost, escape("admin", "routes", name, "retry"), nil, map[string]string{"reason": reason}, &raw)
	if statusOf(err) == http.StatusNotFound {
		if names, nerr := c.routeNames(ctx); nerr == nil {
			return usageErr("the gateway has no route named %q (its routes: %s)", name, strings.Join(names, ", "))
		}
	}
	if err != nil {
		return err
	}
	var res struct {
		Route   string `json:"route"`
		Retried int    `json:"retried"`
	}
	if printed, err := answer(env, raw, asJSON, &res); printed || err != nil {
		return err
	}
	if res.Retried == 0 {
		fmt.Fprintf(env.Stdout, "%s: no dispatch is retrying: nothing to retry\n", res.Route)
		return nil
	}
	fmt.Fprintf(env.Stdout, "%s: %s attempted now, within the route's limits and circuit\n", res.Route,
		countOf(res.Retried, "retrying dispatch", "retrying dispatches"))
	return nil
}

// countOf says n things: countOf(1, "dispatch", "dispatches") is "1 dispatch".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// bulkRetry attempts now the retrying dispatches of every delivery the
// filter selects (POST /admin/retries), following a search's cursor until
// it has looked at every delivery.
func bulkRetry(ctx context.Context, env Env, conn connFlags, ff filterFlags, reason string, asJSON bool) error {
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	if err := ff.check(ctx, c); err != nil {
		return err
	}
	req := ff.body()
	req["reason"] = reason
	var total retry.BulkResult
	for {
		var raw json.RawMessage
		if err := c.do(ctx, http.MethodPost, "/admin/retries", nil, req, &raw); err != nil {
			return err
		}
		var res struct {
			retry.BulkResult
			NextCursor *string `json:"next_cursor"`
		}
		if asJSON {
			fmt.Fprintln(env.Stdout, string(raw))
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return fmt.Errorf("the gateway's answer: %w", err)
		}
		total.Deliveries += res.Deliveries
		total.Retried += res.Retried
		if res.NextCursor == nil {
			break
		}
		req["cursor"] = *res.NextCursor
	}
	if !asJSON {
		fmt.Fprintf(env.Stdout, "retry (%s): %s matched; %s attempted now\n", strings.Join(filterParts(ff), ", "),
			countOf(total.Deliveries, "delivery with a retrying dispatch", "deliveries with a retrying dispatch"), countOf(total.Retried, "dispatch", "dispatches"))
	}
	return nil
}
