package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	if len(rest) != 1 || !env.Providers.Known(rest[0]) {
		return usageErr("usage: send %s --event E [--file F] [--url URL] [--insecure]", strings.Join(env.Providers.Names(), "|"))
	}
	provider := rest[0]
	if *event == "" {
		return usageErr("send: --event is required")
	}
	if *target == "" {
		*target = env.getenv(URLVariable)
	}
	if *target == "" {
		*target = localURL(env.Addr)
	}
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErr("send: --url must be an http(s) URL")
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) && !*insecure {
		// A signature is as good as the secret for replaying this very
		// delivery, and a GitLab source's header is the secret itself.
		return usageErr("send: refusing to send a signed delivery over plain http:// to %s: use https://, or --insecure if the network is private", u.Host)
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
