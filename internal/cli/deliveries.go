package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookgate/hookgate/internal/deliveries"
)

// filterFlags are the flags that select deliveries, as the API's query
// parameters name them: the list's filters, a search (--where, the API's
// q) and search keys (--key name=value, the API's key=name:value).
type filterFlags struct {
	fs                                          *flag.FlagSet
	provider, event, state, since, until, where *string
	keys                                        *multiFlag
}

// whereGiven reports whether --where was given, even empty.
func (f filterFlags) whereGiven() bool {
	given := false
	f.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == "where" })
	return given
}

func addFilterFlags(fs *flag.FlagSet) filterFlags {
	f := filterFlags{
		fs:       fs,
		provider: fs.String("provider", "", "a provider the gateway knows"),
		event:    fs.String("event", "", "a route pattern"),
		state:    fs.String("state", "", "a dispatch state, or stored"),
		since:    fs.String("since", "", "RFC 3339 time or duration ago"),
		until:    fs.String("until", "", "RFC 3339 time or duration ago"),
		where:    fs.String("where", "", "a search: a CEL expression over provider, event, headers and payload (the API's q)"),
		keys:     &multiFlag{},
	}
	fs.Var(f.keys, "key", "a search key's value, name=value, from the configuration's search_keys (repeatable: all must match)")
	return f
}

// set reports whether a filter flag is set.
func (f filterFlags) set() bool {
	return *f.provider != "" || *f.event != "" || *f.state != "" || *f.since != "" || *f.until != "" || f.whereGiven() || len(*f.keys) > 0
}

// query is the filter as the API's query parameters.
func (f filterFlags) query() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{"provider": *f.provider, "event": *f.event, "state": *f.state, "since": *f.since, "until": *f.until, "q": *f.where} {
		if v != "" {
			q.Set(name, v)
		}
	}
	for _, k := range f.apiKeys() {
		q.Add("key", k)
	}
	return q
}

// body is the filter as a bulk request's body holds it.
func (f filterFlags) body() map[string]any {
	b := map[string]any{}
	for name, v := range f.query() {
		b[name] = v[0]
	}
	if keys := f.apiKeys(); len(keys) > 0 {
		b["key"] = keys
	}
	return b
}

// apiKeys are the --key flags as the API spells them: name:value.
func (f filterFlags) apiKeys() []string {
	var keys []string
	for _, k := range *f.keys {
		name, value, _ := strings.Cut(k, "=")
		keys = append(keys, name+":"+value)
	}
	return keys
}

// check refuses a --key that is no name=value and a --where given empty,
// and asks the gateway whether the filter's provider is one it knows, for a
// usage error that lists them.
func (f filterFlags) check(ctx context.Context, c *client) error {
	if f.whereGiven() && strings.TrimSpace(*f.where) == "" {
		return usageErr("--where is empty: give an expression, or leave --where out for every delivery")
	}
	for _, k := range *f.keys {
		if name, _, ok := strings.Cut(k, "="); !ok || name == "" {
			return usageErr("--key %s: a key is name=value, such as --key customer=cus_123", printable(k))
		}
	}
	if *f.provider == "" {
		return nil
	}
	return c.knownProvider(ctx, *f.provider)
}

func list(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("deliveries list", flag.ContinueOnError)
	conn := addConnFlags(fs)
	ff := addFilterFlags(fs)
	limit := fs.Int("limit", 50, "at most this many, newest first (max 500)")
	cursor := fs.String("cursor", "", "the next_cursor of the previous page")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if rest, err := parse(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageErr("deliveries list takes no arguments, got %q", rest)
	}
	if *limit < 1 {
		return usageErr("deliveries list: --limit must be a positive integer")
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	if err := ff.check(ctx, c); err != nil {
		return err
	}
	q := ff.query()
	q.Set("limit", strconv.Itoa(*limit))
	if *cursor != "" {
		q.Set("cursor", *cursor)
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/admin/deliveries", q, nil, &raw); err != nil {
		return err
	}
	var page struct {
		Deliveries []deliveries.Item `json:"deliveries"`
		NextCursor *string           `json:"next_cursor"`
		Partial    bool              `json:"partial"`
		Failed     int               `json:"failed"`
	}
	if printed, err := answer(env, raw, *asJSON, &page); printed || err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RECEIVED_AT\tPROVIDER\tDELIVERY_ID\tEVENT\tSTATE\tRECEIPTS\tENTITY")
	for _, it := range page.Deliveries {
		entity := "-"
		if it.Entity != nil {
			entity = printable(*it.Entity)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", it.ReceivedAt.UTC().Format(time.RFC3339), it.Provider, shown(it.DeliveryID),
			printable(it.Event), it.State, it.Receipts, entity)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Failed > 0 {
		fmt.Fprintf(env.Stdout, "\nthe expression failed on %d of the deliveries looked at (a field they lack: guard it with has(); a body not JSON or deleted; the cost limits): none of them is listed\n", page.Failed)
	}
	switch {
	case page.Partial:
		fmt.Fprintf(env.Stdout, "\npartial: the search stopped at its time budget; it goes on with the same --where and --cursor %s\n", *page.NextCursor)
	case page.NextCursor != nil:
		fmt.Fprintf(env.Stdout, "\nmore: --cursor %s\n", *page.NextCursor)
	}
	return nil
}

// oneDelivery reads PROVIDER ID from a command's arguments and returns the
// client, after asking the gateway whether it knows the provider.
func oneDelivery(ctx context.Context, env Env, conn connFlags, rest []string, usage string) (*client, string, string, error) {
	if len(rest) != 2 {
		return nil, "", "", usageErr("usage: %s", usage)
	}
	c, err := conn.client(env)
	if err != nil {
		return nil, "", "", err
	}
	if err := c.knownProvider(ctx, rest[0]); err != nil {
		return nil, "", "", err
	}
	return c, rest[0], rest[1], nil
}

func show(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("deliveries show", flag.ContinueOnError)
	conn := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	c, provider, id, err := oneDelivery(ctx, env, conn, rest, "deliveries show PROVIDER ID")
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, escape("admin", "deliveries", provider, id), nil, nil, &raw); err != nil {
		return err
	}
	var d deliveries.Detail
	if printed, err := answer(env, raw, *asJSON, &d); printed || err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	entity := "-"
	if d.Entity != nil {
		entity = printable(*d.Entity)
	}
	fmt.Fprintf(tw, "delivery\t%s %s\nevent\t%s\nentity\t%s\n", d.Provider, shown(d.DeliveryID), printable(d.Event), entity)
	if d.EventTime != nil {
		fmt.Fprintf(tw, "event time\t%s\n", d.EventTime.UTC().Format(time.RFC3339))
	}
	if d.Expired && d.ReceivedAt != nil && d.ExpiredAt != nil {
		fmt.Fprintf(tw, "expired\t%s: its body and dispatches were deleted; its id is kept, so the same delivery sent again is a duplicate\n"+
			"received at\t%s\nbody sha256\t%s\n", d.ExpiredAt.UTC().Format(time.RFC3339), d.ReceivedAt.UTC().Format(time.RFC3339), d.BodySHA256)
		return tw.Flush()
	}
	if e := d.SchemaError; e != nil {
		fmt.Fprintf(tw, "invalid\tthe payload fails its schema %s at %q (%s): %s; dispatched to no route (a forced replay checks it again)\n",
			printable(e.Schema), printable(e.Path), printable(e.Rule), printable(e.Message))
	}
	fmt.Fprintln(tw, "\nRECEIVED_AT\tSCOPE\tCONTENT_TYPE\tBODY_SHA256")
	for _, r := range d.Receipts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ReceivedAt.UTC().Format(time.RFC3339), dash(printable(r.Scope)), printable(r.ContentType), r.BodySHA256)
	}
	fmt.Fprintln(tw, "\nROUTE\tGENERATION\tSTATE\tATTEMPTS\tUPDATED_AT\tLAST_ERROR")
	for _, x := range d.Dispatches {
		lastError := "-"
		if x.LastError != nil {
			lastError = printable(*x.LastError)
		}
		if x.SupersededBy != "" {
			// Nothing went to the target: the newer event did.
			lastError = "superseded by " + printable(x.SupersededBy)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", x.Route, x.Generation, x.State, x.Attempts, x.UpdatedAt.UTC().Format(time.RFC3339), lastError)
	}
	return tw.Flush()
}

// body prints a delivery's first stored body, byte for byte.
func body(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("deliveries body", flag.ContinueOnError)
	conn := addConnFlags(fs)
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	c, provider, id, err := oneDelivery(ctx, env, conn, rest, "deliveries body PROVIDER ID")
	if err != nil {
		return err
	}
	raw, err := c.send(ctx, http.MethodGet, escape("admin", "deliveries", provider, id, "body"), nil, nil)
	if err != nil {
		return err
	}
	_, err = env.Stdout.Write(raw)
	return err
}

// Exported is one delivery as deliveries export writes it, a line of
// NDJSON, and as send --file reads it back.
type Exported struct {
	Provider    string            `json:"provider"`
	DeliveryID  string            `json:"delivery_id"`
	Event       string            `json:"event"`
	ContentType string            `json:"content_type"`
	Headers     map[string]string `json:"headers"`
	BodyBase64  string            `json:"body_base64"`
}

// export writes the deliveries a filter selects, oldest first, one JSON
// object per line: a fixture file send --file posts again.
func export(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("deliveries export", flag.ContinueOnError)
	conn := addConnFlags(fs)
	ff := addFilterFlags(fs)
	if rest, err := parse(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageErr("deliveries export takes no arguments, got %q", rest)
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	if err := ff.check(ctx, c); err != nil {
		return err
	}
	// The list is newest first; a file is read in its order, so it is
	// written oldest first: posted again, an entity's events come in the
	// order they came (an older one after a newer would be superseded).
	var items []deliveries.Item
	if err := c.eachDelivery(ctx, ff.query(), func(it deliveries.Item) error { items = append(items, it); return nil }); err != nil {
		return err
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	n := 0
	for _, it := range slices.Backward(items) {
		var d deliveries.Detail
		if err := c.do(ctx, http.MethodGet, escape("admin", "deliveries", it.Provider, it.DeliveryID), nil, nil, &d); err != nil {
			return err
		}
		if len(d.Receipts) == 0 {
			continue // expired since it was listed
		}
		raw, err := c.send(ctx, http.MethodGet, escape("admin", "deliveries", it.Provider, it.DeliveryID, "body"), nil, nil)
		var ae *answerError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			continue
		}
		if err != nil {
			return err
		}
		if err := enc.Encode(Exported{Provider: d.Provider, DeliveryID: d.DeliveryID, Event: d.Event, ContentType: d.Receipts[0].ContentType,
			Headers: d.Receipts[0].Headers, BodyBase64: base64.StdEncoding.EncodeToString(raw)}); err != nil {
			return err
		}
		n++
	}
	fmt.Fprintf(env.Stderr, "exported %d deliveries\n", n)
	return nil
}

// eachDelivery calls fn with every delivery the list's query q selects, a
// page of 500 at a time, newest first; an error of fn stops it.
func (c *client) eachDelivery(ctx context.Context, q url.Values, fn func(deliveries.Item) error) error {
	q.Set("limit", "500")
	for {
		var page struct {
			Deliveries []deliveries.Item `json:"deliveries"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := c.do(ctx, http.MethodGet, "/admin/deliveries", q, nil, &page); err != nil {
			return err
		}
		for _, it := range page.Deliveries {
			if err := fn(it); err != nil {
				return err
			}
		}
		if page.NextCursor == nil {
			return nil
		}
		q.Set("cursor", *page.NextCursor)
	}
}
