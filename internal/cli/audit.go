package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/hookgate/hookgate/internal/audit"
)

// auditCmd prints the audit log, newest first: replays, pauses, resumes and
// recovery's requests, who did them and why.
func auditCmd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	conn := addConnFlags(fs)
	limit := fs.Int("limit", 50, "at most this many, newest first")
	cursor := fs.String("cursor", "", "the next_cursor of the previous page")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if rest, err := parse(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageErr("audit takes no arguments, got %q", rest)
	}
	if *limit < 1 {
		return usageErr("audit: --limit must be a positive integer")
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if *cursor != "" {
		q.Set("cursor", *cursor)
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/admin/audit", q, nil, &raw); err != nil {
		return err
	}
	var page struct {
		Entries    []audit.Entry `json:"entries"`
		NextCursor *string       `json:"next_cursor"`
	}
	if printed, err := answer(env, raw, *asJSON, &page); printed || err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tACTOR\tACTION\tWHAT\tREASON")
	for _, e := range page.Entries {
		what := "-"
		switch {
		case e.Route != nil && e.Provider != nil && e.DeliveryID != nil: // a replay or retry of one route of one delivery
			what = *e.Provider + " " + shown(*e.DeliveryID) + ", route " + *e.Route
		case e.Route != nil:
			what = "route " + *e.Route
		case e.Provider != nil && e.DeliveryID != nil:
			what = *e.Provider + " " + shown(*e.DeliveryID)
		case e.Provider != nil:
			what = *e.Provider
		case e.ReplayID != nil:
			what = *e.ReplayID
		}
		reason := "-"
		if e.Reason != nil && *e.Reason != "" {
			reason = printable(*e.Reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), printable(e.Actor), e.Action, printable(what), reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != nil {
		fmt.Fprintf(env.Stdout, "\nmore: --cursor %s\n", *page.NextCursor)
	}
	return nil
}
