package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// cliRun runs one command and returns its output and exit code.
func cliRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), args, &out, io.Discard)
	code := 0
	if err != nil {
		code = cli.ExitFailed
		var exit *cli.ExitError
		if errors.As(err, &exit) {
			code = exit.Code
		}
	}
	return out.String(), code
}

// The operator commands against a real database and a running gateway: send
// signs and posts, list and show read what arrived, replay re-dispatches, and
// exit codes tell scripts what happened.
func TestCLIAgainstRunningGateway(t *testing.T) {
	url := dbtest.URL(t)
	addr := freeAddr(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GITHUB_WEBHOOK_SECRET", secret)
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_cli")
	t.Setenv("GATEWAY_ROUTES", "audit=*:*>builtin:log subs=stripe:customer.subscription>builtin:stripe-subscriptions")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, io.Discard) }()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "http://"+addr+"/readyz", 200, 30*time.Second)

	out, code := cliRun(t, "send", "stripe", "--event", "customer.subscription.updated", "--url", "http://"+addr, "--json")
	var sent struct {
		Status     string `json:"status"`
		DeliveryID string `json:"delivery_id"`
		Routes     int    `json:"routes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &sent) != nil || sent.Status != "accepted" || sent.Routes != 2 {
		t.Fatalf("send stripe: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "send", "github", "--event", "pull_request.opened", "--url", "http://"+addr); code != 0 || !strings.Contains(out, "202") {
		t.Fatalf("send github: exit %d, %s", code, out)
	}
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_wrong")
	if out, code := cliRun(t, "send", "stripe", "--event", "invoice.paid", "--url", "http://"+addr); code != cli.ExitFailed || !strings.Contains(out, "invalid_signature") {
		t.Fatalf("send with a wrong secret: exit %d, %s", code, out)
	}
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_cli")

	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var pending int
		_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_dispatches WHERE state <> 'succeeded'").Scan(&pending)
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dispatches not succeeded", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}

	out, code = cliRun(t, "deliveries", "list", "--provider", "stripe", "--json")
	var listed struct {
		Deliveries []struct {
			DeliveryID string `json:"delivery_id"`
			State      string `json:"state"`
		} `json:"deliveries"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Deliveries) != 1 ||
		listed.Deliveries[0].DeliveryID != sent.DeliveryID || listed.Deliveries[0].State != "succeeded" {
		t.Fatalf("list: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "deliveries", "list"); code != 0 || !strings.Contains(out, "DELIVERY_ID") || !strings.Contains(out, sent.DeliveryID) ||
		!strings.Contains(out, "pull_request.opened") {
		t.Fatalf("list table: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "deliveries", "show", "stripe", sent.DeliveryID); code != 0 || !strings.Contains(out, "stripe:sub_demo") ||
		!strings.Contains(out, "subs") {
		t.Fatalf("show: exit %d, %s", code, out)
	}
	if _, code := cliRun(t, "deliveries", "show", "stripe", "evt_nope"); code != cli.ExitNotFound {
		t.Fatalf("show unknown: exit %d", code)
	}

	// Nothing failed, so nothing to replay without --force; --force makes generation 2.
	out, code = cliRun(t, "replay", "stripe", sent.DeliveryID, "--json")
	if code != 0 || !strings.Contains(out, `"dispatches": []`) {
		t.Fatalf("replay: exit %d, %s", code, out)
	}
	out, code = cliRun(t, "replay", "stripe", sent.DeliveryID, "--route", "subs", "--force", "--reason", "cli test")
	if code != 0 || !strings.Contains(out, "subs generation 2 pending") {
		t.Fatalf("forced replay: exit %d, %s", code, out)
	}
	if _, code := cliRun(t, "replay", "stripe", sent.DeliveryID, "--route", "nope"); code != cli.ExitUsage {
		t.Fatalf("replay of an unknown route: exit %d", code)
	}
	if _, code := cliRun(t, "replay", "stripe", "evt_nope"); code != cli.ExitNotFound {
		t.Fatalf("replay of an unknown delivery: exit %d", code)
	}
	out, code = cliRun(t, "replay", "--state", "succeeded", "--since", "1h", "--force", "--json")
	if code != 0 || !strings.Contains(out, `"deliveries": 2`) {
		t.Fatalf("bulk replay: exit %d, %s", code, out)
	}
	if _, code := cliRun(t, "replay", "--state", "bogus"); code != cli.ExitUsage {
		t.Fatalf("bulk replay with a bad state: exit %d", code)
	}
	if _, code := cliRun(t, "deliveries", "frob"); code != cli.ExitUsage {
		t.Fatalf("unknown subcommand: exit %d", code)
	}
	var actor string
	_ = pool.QueryRow(context.Background(), "SELECT actor FROM hookgate_replays WHERE reason = 'cli test'").Scan(&actor)
	if !strings.HasPrefix(actor, "cli:") {
		t.Fatalf("replay logged by %q", actor)
	}
}
