package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
)

// send signs a delivery with the configured secret, as the provider would, and
// posts it: a local signer, the one command that reads the gateway's own
// configuration (the provider's secret) instead of asking its API.
func send(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	event := fs.String("event", "", "event name: ping, push, pull_request.opened, invoice.paid, customer.subscription.updated, ...")
	file := fs.String("file", "", "send this file's bytes as the payload instead of a sample")
	target := fs.String("url", "", "the gateway, or its full webhook URL (default: HOOKGATE_URL, else GATEWAY_ADDR on this machine)")
	asJSON := fs.Bool("json", false, "print the gateway's JSON answer")
	insecure := fs.Bool("insecure", false, "allow sending over plain http:// to a host that is not loopback")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 && *file != "" && *event == "" {
		return sendFile(ctx, env, *file, *target, *insecure, *asJSON)
	}
	if len(rest) != 1 || !env.Providers.Known(rest[0]) {
		return usageErr("usage: send %s --event E [--file F] [--url URL] [--insecure]", strings.Join(env.Providers.Names(), "|"))
	}
	provider := rest[0]
	if *event == "" {
		return usageErr("send: --event is required")
	}
	u, err := sendURL(env, *target, *insecure)
	if err != nil {
		return err
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/webhooks/" + provider
	}
	now := env.Now()

	var body []byte
	if *file != "" {
		if body, err = os.ReadFile(*file); err != nil {
			return &ExitError{Code: ExitUsage, Err: fmt.Errorf("send: %w", err)}
		}
	}
	// Signed as the provider's kind's sender signs, with its first secret.
	src, kind, ok := env.Providers.Source(provider)
	if !ok {
		// A known name that is not configured is a built-in one whose
		// variable is unset.
		return usageErr("send: %s is not set", providers.Kinds[provider].Env)
	}
	id := uuid()
	if body == nil {
		body = kind.Sample(src, id, *event, now)
	}
	req, err := providers.NewRequest(ctx, src, u.String(), body, id, *event, now)
	if err != nil {
		return usageErr("send: %v", err)
	}

	client := keepOrigin(&http.Client{Timeout: 30 * time.Second})
	if env.HTTP != nil {
		client = keepOrigin(env.HTTP)
	}
	res, err := client.Do(req)
	if err != nil {
		return reachError("send: the gateway at "+u.Redacted(), err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if *asJSON {
		_, _ = env.Stdout.Write(answer)
	} else {
		fmt.Fprintf(env.Stdout, "%s %s\n", res.Status, strings.TrimSpace(string(answer)))
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("send: the gateway answered %s", res.Status)}
	}
	return nil
}

// localURL is the URL of a gateway listening on addr on this machine.
func localURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://localhost:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// sendURL is where send posts: --url, HOOKGATE_URL, or GATEWAY_ADDR on this
// machine; plain http:// only to this machine unless insecure.
func sendURL(env Env, target string, insecure bool) (*url.URL, error) {
	if target == "" {
		target = env.getenv(URLVariable)
	}
	if target == "" {
		target = localURL(env.Addr)
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErr("send: --url must be an http(s) URL")
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) && !insecure {
		// A signature is as good as the secret for replaying this very
		// delivery, and a GitLab source's header is the secret itself.
		return nil, usageErr("send: refusing to send a signed delivery over plain http:// to %s: use https://, or --insecure if the network is private", u.Host)
	}
	return u, nil
}

// sendFile posts each line of a file deliveries export wrote: signed with
// its provider's secret (this machine's configuration), keeping its
// delivery id, event, content type and kept headers, so that the same
// gateway answers duplicate and another stores it anew. It prints each
// answer, and fails (exit 1) when any is not a 2xx.
func sendFile(ctx context.Context, env Env, path, target string, insecure, asJSON bool) error {
	u, err := sendURL(env, target, insecure)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("send: %w", err)}
	}
	defer f.Close()
	client := keepOrigin(&http.Client{Timeout: 30 * time.Second})
	if env.HTTP != nil {
		client = keepOrigin(env.HTTP)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	failed, sent := 0, 0
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var d Exported
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil || d.Provider == "" || d.DeliveryID == "" {
			return usageErr("send: %s line %d is not a delivery of deliveries export (provider, delivery_id, event, content_type, headers, body_base64)", path, line)
		}
		body, err := base64.StdEncoding.DecodeString(d.BodyBase64)
		if err != nil {
			return usageErr("send: %s line %d: body_base64 is not base64", path, line)
		}
		src, _, ok := env.Providers.Source(d.Provider)
		if !ok {
			return usageErr("send: %s line %d: provider %s is not configured here (its secret signs the delivery)", path, line, printable(d.Provider))
		}
		to := *u
		if to.Path == "" || to.Path == "/" {
			to.Path = "/webhooks/" + d.Provider
		}
		req, err := providers.NewRequest(ctx, src, to.String(), body, d.DeliveryID, d.Event, env.Now())
		if err != nil {
			return usageErr("send: %v", err)
		}
		for k, v := range d.Headers {
			// The kept headers as they came (GitHub's hook id, which is the
			// receipt's scope, and its User-Agent), but what the signature
			// covers now: a kept header never is a signature, and a
			// timestamp is now's.
			if n := strings.ToLower(k); !strings.Contains(n, "signature") && !strings.Contains(n, "timestamp") {
				req.Header.Set(k, v)
			}
		}
		if d.ContentType != "" {
			req.Header.Set("Content-Type", d.ContentType)
		}
		res, err := client.Do(req)
		if err != nil {
			return reachError("send: the gateway at "+u.Redacted(), err)
		}
		answer, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		sent++
		if asJSON {
			_, _ = env.Stdout.Write(append(bytes.TrimSpace(answer), '\n'))
		} else {
			// The id the gateway took (a Stripe event's is its body's).
			id := d.DeliveryID
			var took struct {
				DeliveryID string `json:"delivery_id"`
			}
			if json.Unmarshal(answer, &took) == nil && took.DeliveryID != "" {
				id = took.DeliveryID
			}
			fmt.Fprintf(env.Stdout, "%s %s %s %s\n", d.Provider, shown(id), res.Status, strings.TrimSpace(string(answer)))
		}
		if res.StatusCode < 200 || res.StatusCode > 299 {
			failed++
		}
	}
	if err := sc.Err(); err != nil {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("send: %s: %w", path, err)}
	}
	if failed > 0 {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("send: %d of %d deliveries were not accepted", failed, sent)}
	}
	return nil
}
