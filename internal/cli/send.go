package cli

import (
	"bytes"
	"context"
	"crypto/rand"
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

	"github.com/hookgate/hookgate/internal/jobs"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// send signs a delivery with the configured secret, as the provider would, and
// posts it.
func send(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	event := fs.String("event", "", "event name: ping, push, pull_request.opened, invoice.paid, customer.subscription.updated, ...")
	file := fs.String("file", "", "send this file's bytes as the payload instead of a sample")
	target := fs.String("url", localURL(env.Config.Addr), "the gateway, or its full webhook URL (default: GATEWAY_ADDR on this machine)")
	asJSON := fs.Bool("json", false, "print the gateway's JSON answer")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 || !providers.Known(rest[0]) {
		return usageErr("usage: send %s --event E [--file F] [--url URL]", strings.Join(providers.Names(), "|"))
	}
	provider := rest[0]
	if *event == "" {
		return usageErr("send: --event is required")
	}
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErr("send: --url must be an http(s) URL")
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return usageErr("send: %v", err)
	}
	switch provider {
	case "github":
		if len(env.Config.GitHubSecrets) == 0 {
			return usageErr("send: GITHUB_WEBHOOK_SECRET is not set")
		}
		header, action, _ := strings.Cut(*event, ".")
		if body == nil {
			body = githubSample(header, action, now)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "GitHub-Hookshot/hookgate-send")
		req.Header.Set("X-GitHub-Event", header)
		req.Header.Set("X-GitHub-Delivery", uuid())
		req.Header.Set("X-GitHub-Hook-ID", "1")
		req.Header.Set("X-Hub-Signature-256", verify.SignGitHub(env.Config.GitHubSecrets[0], body))
	case "stripe":
		if len(env.Config.StripeSecrets) == 0 {
			return usageErr("send: STRIPE_WEBHOOK_SECRET is not set")
		}
		if body == nil {
			body = stripeSample(*event, now)
		}
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
		req.Header.Set("Stripe-Signature", verify.SignTimestamped(env.Config.StripeSecrets[0], now, body))
	default:
		// A source of the configuration file, signed as its kind's sender signs.
		src, err := source(env, provider)
		if err != nil {
			return err
		}
		kind := providers.Kinds[src.Kind]
		id := uuid()
		if body == nil {
			body = kind.Sample(src, id, *event, now)
		}
		if err := kind.Sign(src, req.Header, body, id, *event, now); err != nil {
			return usageErr("send: %v", err)
		}
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))

	client := &http.Client{Timeout: 30 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("send: %w", err)
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

// source returns a configured source's configuration.
func source(env Env, name string) (providers.SourceConfig, error) {
	_, sources, err := env.Config.LoadRoutesAndSources(jobs.DefaultHandlers(nil).Names())
	if err != nil {
		return providers.SourceConfig{}, fmt.Errorf("send: %w", err)
	}
	for _, p := range sources {
		if c, ok := p.(providers.Configured); ok && p.Name() == name {
			return c.Source(), nil
		}
	}
	return providers.SourceConfig{}, usageErr("send: %s is not a source of GATEWAY_CONFIG_FILE", name)
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func randomID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// githubSample returns a small but realistic payload for a GitHub event.
func githubSample(event, action string, now time.Time) []byte {
	repo := map[string]any{"id": 5678, "full_name": "hookgate/demo", "pushed_at": now.Unix()}
	sender := map[string]any{"login": "octocat", "id": 1}
	p := map[string]any{"repository": repo, "sender": sender}
	if action != "" {
		p["action"] = action
	}
	stamp := now.UTC().Format(time.RFC3339)
	switch event {
	case "ping":
		p = map[string]any{"zen": "Design for failure.", "hook_id": 1, "hook": map[string]any{"type": "Repository", "events": []string{"*"}}, "repository": repo}
	case "push":
		p["ref"] = "refs/heads/main"
		p["before"] = strings.Repeat("0", 40)
		p["after"] = randomID("")[:24] + strings.Repeat("0", 16)
		p["commits"] = []any{map[string]any{"id": "c0ffee", "message": "Say hello", "timestamp": stamp}}
	case "pull_request", "pull_request_review", "pull_request_review_comment", "pull_request_review_thread":
		p["number"] = 42
		p["pull_request"] = map[string]any{"id": 1234, "number": 42, "state": "open", "title": "Add hookgate", "updated_at": stamp}
	case "issues", "issue_comment":
		p["issue"] = map[string]any{"id": 777, "number": 7, "state": "open", "title": "A bug", "updated_at": stamp}
		if event == "issue_comment" {
			p["comment"] = map[string]any{"id": 99, "body": "Confirmed."}
		}
	case "workflow_run":
		p["workflow_run"] = map[string]any{"id": 31, "status": "completed", "conclusion": "success", "updated_at": stamp}
	}
	return mustJSON(p)
}

// stripeSample returns a Stripe event of the given type.
func stripeSample(eventType string, now time.Time) []byte {
	object := map[string]any{"id": randomID("obj_"), "object": "unknown"}
	switch {
	case strings.HasPrefix(eventType, "customer.subscription."):
		object = map[string]any{"id": "sub_demo", "object": "subscription", "customer": "cus_demo", "status": "active"}
	case strings.HasPrefix(eventType, "invoice."):
		object = map[string]any{"id": randomID("in_"), "object": "invoice", "customer": "cus_demo", "amount_paid": 2000, "currency": "usd"}
	case strings.HasPrefix(eventType, "customer."):
		object = map[string]any{"id": "cus_demo", "object": "customer"}
	case strings.HasPrefix(eventType, "payment_intent."):
		object = map[string]any{"id": randomID("pi_"), "object": "payment_intent", "amount": 2000, "currency": "usd"}
	}
	return mustJSON(map[string]any{
		"id": randomID("evt_"), "object": "event", "api_version": "2024-06-20", "type": eventType,
		"created": now.Unix(), "livemode": false, "data": map[string]any{"object": object},
	})
}
