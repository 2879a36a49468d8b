package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/listen"
	"github.com/hookgate/hookgate/internal/transform"
)

// ListenSecretVariable holds the secrets gateway listen signs what it posts
// locally with (comma-separated), as forwards are signed: the Standard
// Webhooks headers and X-Hookgate-Signature. Unset: unsigned.
const ListenSecretVariable = "HOOKGATE_LISTEN_SECRET"

// listenCmd connects to a listen route's stream and posts each dispatch to
// a local URL, answering the gateway with the local status, until
// interrupted; it reconnects by itself, resuming where the stream was.
func listenCmd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("listen", flag.ContinueOnError)
	conn := addConnFlags(fs)
	to := fs.String("forward-to", "", "the local URL each delivery is posted to, such as http://localhost:3000/hooks")
	from := fs.String("from", "", "first replay the route's stored deliveries since this RFC 3339 time or duration ago (1h)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErr("usage: listen ROUTE --forward-to URL [--from T]")
	}
	route := rest[0]
	target, err := url.Parse(*to)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return usageErr("listen: --forward-to must be an http(s) URL, such as http://localhost:3000/hooks")
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	if *from != "" {
		if _, err := deliveries.ParseTime(*from, env.Now()); err != nil {
			return usageErr("listen: --from: %v", err)
		}
		if err := replaySince(ctx, env, c, route, *from); err != nil {
			return err
		}
	}
	var secrets []string
	for _, s := range strings.Split(env.getenv(ListenSecretVariable), ",") {
		if s = strings.TrimSpace(s); s != "" {
			secrets = append(secrets, s)
		}
	}
	l := &listener{env: env, c: c, route: route, target: target.String(), secrets: secrets,
		local: &http.Client{Timeout: 30 * time.Second}, stream: &http.Client{Transport: env.httpClient().Transport}}
	return l.run(ctx)
}

// replaySince replays the route's stored deliveries since from, newest
// first: each one whose event the route matches gets a new dispatch of it
// (force), which the stream then brings (in the order of their events'
// times, where the route keeps order).
func replaySince(ctx context.Context, env Env, c *client, route, from string) error {
	replayed := 0
	err := c.eachDelivery(ctx, url.Values{"since": {from}}, func(it deliveries.Item) error {
		var res struct {
			Dispatches []json.RawMessage `json:"dispatches"`
		}
		err := c.do(ctx, http.MethodPost, escape("admin", "deliveries", it.Provider, it.DeliveryID, "replay"), nil,
			map[string]any{"routes": []string{route}, "force": true, "reason": "gateway listen --from " + from}, &res)
		var ae *answerError
		switch {
		case errors.As(err, &ae) && ae.Status == http.StatusBadRequest:
			// The route does not take this event.
		case err != nil:
			return err
		case len(res.Dispatches) > 0:
			// Not one still in progress: it comes anyway.
			replayed++
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "replaying %d stored deliver%s of route %s since %s\n", replayed, map[bool]string{true: "y", false: "ies"}[replayed == 1], route, from)
	return nil
}

// listener is one gateway listen.
type listener struct {
	env           Env
	c             *client
	route, target string
	secrets       []string
	local, stream *http.Client
	lastID        string
}

// run keeps a stream open, reconnecting after a pause that grows to 10 s,
// until ctx ends.
func (l *listener) run(ctx context.Context) error {
	wait := time.Second
	for {
		connected, err := l.once(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var ae *answerError
		if errors.As(err, &ae) && ae.Status != http.StatusServiceUnavailable && ae.Status != http.StatusBadGateway && ae.Status != http.StatusTooManyRequests {
			// The gateway refused: a route that does not listen, a token
			// without the operator role. Trying again would not help.
			return &ExitError{Code: ExitFailed, Err: fmt.Errorf("listen: %w", err)}
		}
		if connected {
			wait = time.Second
		}
		fmt.Fprintf(l.env.Stderr, "%s the stream ended (%v); connecting again in %s\n", l.env.Now().UTC().Format(time.RFC3339), err, wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// once reads one stream until it ends, and reports whether it connected.
func (l *listener) once(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.c.base.String()+escape("admin", "listen", l.route), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+l.c.token)
	req.Header.Set("Accept", "text/event-stream")
	if l.lastID != "" {
		req.Header.Set("Last-Event-ID", l.lastID)
	}
	res, err := keepOrigin(l.stream).Do(req)
	if err != nil {
		return false, unwrapURL(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		var e apiError
		_ = json.Unmarshal(raw, &e)
		return false, &answerError{Status: res.StatusCode, Code: e.Error, Message: e.Message, Body: raw}
	}
	fmt.Fprintf(l.env.Stdout, "%s listening to route %s, posting to %s\n", l.env.Now().UTC().Format(time.RFC3339), l.route, l.target)
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var id, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		case line == "" && data != "":
			var ev listen.Event
			if err := json.Unmarshal([]byte(data), &ev); err == nil {
				l.deliver(ctx, ev)
			}
			if id != "" {
				l.lastID = id
			}
			id, data = "", ""
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	return true, io.EOF
}

// deliver posts one dispatch to the local URL, prints a line, and answers
// the gateway with the local status (502 when the local URL gave none).
func (l *listener) deliver(ctx context.Context, ev listen.Event) {
	start := time.Now()
	status, detail := l.post(ctx, ev)
	took := time.Since(start).Milliseconds()
	line := fmt.Sprintf("%s %s %s %s → %d %dms", l.env.Now().UTC().Format(time.RFC3339), printable(ev.Provider), printable(ev.Event),
		shown(ev.DeliveryID), status, took)
	if ev.Attempt > 1 {
		line += fmt.Sprintf(" (attempt %d)", ev.Attempt)
	}
	if detail != "" {
		line += " " + printable(detail)
	}
	err := l.c.do(ctx, http.MethodPost, escape("admin", "listen", l.route, ev.DispatchID), nil, map[string]int{"status": status}, nil)
	var ae *answerError
	switch {
	case errors.As(err, &ae) && ae.Code == "not_awaited":
		line += " (the gateway had taken it back: it comes again)"
	case err != nil && ctx.Err() == nil:
		line += " (the answer was not taken: " + err.Error() + ")"
	}
	fmt.Fprintln(l.env.Stdout, line)
}

// post sends ev to the local URL as a forward would: its headers and body,
// hookgate's headers, and the signatures when HOOKGATE_LISTEN_SECRET is set.
func (l *listener) post(ctx context.Context, ev listen.Event) (int, string) {
	body, err := base64.StdEncoding.DecodeString(ev.BodyBase64)
	if err != nil {
		return http.StatusBadGateway, "the event's body is not base64"
	}
	to, err := transform.Target(l.target, ev.Path)
	if err != nil {
		return http.StatusBadGateway, err.Error()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to, bytes.NewReader(body))
	if err != nil {
		return http.StatusBadGateway, err.Error()
	}
	h := req.Header
	for k, v := range ev.Headers {
		h.Set(k, v)
	}
	key := forward.SetHeaders(h, handlers.Delivery{Provider: ev.Provider, DeliveryID: ev.DeliveryID, Event: ev.Event, ContentType: ev.ContentType,
		Route: ev.Route, Generation: ev.Generation, Attempt: ev.Attempt})
	if err := forward.Sign(l.secrets, h, key, time.Now(), body); err != nil {
		return http.StatusBadGateway, err.Error()
	}
	res, err := l.local.Do(req)
	if err != nil {
		return http.StatusBadGateway, unwrapURL(err).Error()
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, ""
}
