package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// archiveCmd lists the archive (archive list), archives a day now (archive
// run DAY) or brings one back (archive restore DAY [--provider P]), through
// the gateway.
func archiveCmd(ctx context.Context, env Env, args []string) error {
	const usage = "archive list | archive run DAY | archive restore DAY [--provider P]"
	if len(args) == 0 {
		return usageErr("usage: %s", usage)
	}
	fs := flag.NewFlagSet("archive "+args[0], flag.ContinueOnError)
	conn := addConnFlags(fs)
	provider := fs.String("provider", "", "restore only this provider's deliveries of the day")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	rest, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	var method, path string
	var q url.Values
	switch {
	case args[0] == "list" && len(rest) == 0 && *provider == "":
		method, path = http.MethodGet, "/admin/archive"
	case args[0] == "run" && len(rest) == 1 && *provider == "":
		method, path = http.MethodPost, escape("admin", "archive", rest[0])
	case args[0] == "restore" && len(rest) == 1:
		method, path = http.MethodPost, escape("admin", "archive", rest[0], "restore")
		if *provider != "" {
			q = url.Values{"provider": {*provider}}
		}
	default:
		return usageErr("usage: %s (DAY is yyyy-mm-dd, a UTC day that has ended)", usage)
	}
	if len(rest) == 1 {
		if _, err := time.Parse(time.DateOnly, rest[0]); err != nil {
			return usageErr("archive %s: %q is no day: DAY is yyyy-mm-dd", args[0], printable(rest[0]))
		}
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.do(ctx, method, path, q, nil, &raw); err != nil {
		return err
	}
	if args[0] == "list" {
		var list struct {
			Store *string             `json:"store"`
			Days  []store.ArchivedDay `json:"days"`
		}
		if printed, err := answer(env, raw, *asJSON, &list); printed || err != nil {
			return err
		}
		if list.Store == nil {
			fmt.Fprintln(env.Stdout, "no archive is configured (GATEWAY_ARCHIVE_URL)")
		} else {
			fmt.Fprintf(env.Stdout, "archive: %s\n", printable(*list.Store))
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "DAY\tPROVIDER\tDELIVERIES\tOBJECT\tARCHIVED_AT")
		for _, d := range list.Days {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.Date, d.Provider, d.Count, printable(d.Object), d.ArchivedAt.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	}
	var day struct {
		Day       string `json:"day"`
		Providers []struct {
			Provider   string `json:"provider"`
			Deliveries int    `json:"deliveries"`
		} `json:"providers"`
	}
	if printed, err := answer(env, raw, *asJSON, &day); printed || err != nil {
		return err
	}
	done := map[string]string{"run": "archived", "restore": "restored"}[args[0]]
	if len(day.Providers) == 0 {
		fmt.Fprintf(env.Stdout, "%s: no delivery was received that day: nothing %s\n", day.Day, done)
	}
	for _, p := range day.Providers {
		fmt.Fprintf(env.Stdout, "%s %s: %s %s\n", day.Day, p.Provider, countOf(p.Deliveries, "delivery", "deliveries"), done)
	}
	return nil
}
