package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// sendPush sends a signed GitHub push of branch through the running gateway
// and returns its delivery id. Each branch is an entity of its own: a push
// waits for none of another branch's.
func sendPush(t *testing.T, branch string) string {
	t.Helper()
	file := writeTemp(t, `{"ref":"refs/heads/`+branch+`","repository":{"id":5678,"pushed_at":1767323045}}`)
	out, code := cliRun(t, "send", "github", "--event", "push", "--file", file, "--json")
	var sent struct {
		DeliveryID string `json:"delivery_id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &sent) != nil || sent.DeliveryID == "" {
		t.Fatalf("send: exit %d, %s", code, out)
	}
	return sent.DeliveryID
}

// gateway retry and gateway routes retry attempt now, through the running
// gateway, the dispatches a target's Retry-After: 3600 holds back for an
// hour; they say what they did, refuse a paused route, and name the routes
// or providers the gateway has when given one it has not.
func TestCLIRetry(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer target.Close()
	url := dbtest.URL(t)
	addr := freeAddr(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GATEWAY_ADMIN_TOKEN", adminToken)
	t.Setenv("HOOKGATE_URL", "http://"+addr)
	t.Setenv("GITHUB_WEBHOOK_SECRET", secret)
	t.Setenv("GATEWAY_ROUTES", "fwd=github:push>"+target.URL+" audit=*:*>builtin:log")
	serveInBackground(t, addr)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	first, second := sendPush(t, "first"), sendPush(t, "second")
	dbtest.Eventually(t, 20*time.Second, "both forwards wait an hour to retry", func() error {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM hookgate_dispatches d JOIN river_job j ON j.id = d.job_id
			WHERE d.route = 'fwd' AND d.state = 'retrying' AND j.state = 'retryable' AND j.scheduled_at > now() + interval '50 minutes'`).Scan(&n)
		if err != nil || n != 2 {
			return fmt.Errorf("%d of 2 (%v)", n, err)
		}
		return nil
	})
	failing.Store(false) // the target is back

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"retry", "github", first, "--route", "nope"}, cli.ExitUsage, "fwd, audit"},
		{[]string{"routes", "retry", "nope"}, cli.ExitUsage, "its routes: fwd, audit"},
		{[]string{"retry", "gitlab", first}, cli.ExitUsage, "github"},
		{[]string{"retry", "github"}, cli.ExitUsage, "usage: retry PROVIDER ID"},
		{[]string{"routes", "retry"}, cli.ExitUsage, "usage: routes retry NAME"},
		{[]string{"retry", "github", "no-such-delivery"}, cli.ExitFailed, "404 not_found"},
	} {
		if out, code, err := cliRunErr(t, c.args...); code != c.code || !strings.Contains(err, c.want) {
			t.Errorf("%q: exit %d, %s %s; want exit %d naming %q", c.args, code, out, err, c.code, c.want)
		}
	}

	out, code := cliRun(t, "retry", "github", first, "--reason", "target back")
	if code != 0 || !strings.Contains(out, "1 dispatch attempted now") || !strings.Contains(out, "fwd generation 1") {
		t.Fatalf("retry: exit %d, %s", code, out)
	}
	waitDispatches(t, pool, "delivery_id = '"+first+"' AND state <> 'succeeded'")
	if out, code := cliRun(t, "retry", "github", first); code != 0 || !strings.Contains(out, "nothing to retry") {
		t.Fatalf("retry of a delivery with nothing retrying: exit %d, %s", code, out)
	}

	if out, code := cliRun(t, "routes", "pause", "fwd"); code != 0 {
		t.Fatalf("pause: exit %d, %s", code, out)
	}
	if out, code, err := cliRunErr(t, "routes", "retry", "fwd"); code != cli.ExitFailed || !strings.Contains(err, "409 route_paused") {
		t.Fatalf("retry of a paused route: exit %d, %s %s", code, out, err)
	}
	if out, code := cliRun(t, "retry", "github", second); code != 0 || !strings.Contains(out, "fwd skipped: the route is paused") {
		t.Fatalf("retry of a delivery of a paused route: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "routes", "resume", "fwd"); code != 0 {
		t.Fatalf("resume: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "routes", "retry", "fwd"); code != 0 || !strings.Contains(out, "fwd: 1 retrying dispatch attempted now") {
		t.Fatalf("routes retry: exit %d, %s", code, out)
	}
	waitDispatches(t, pool, "state <> 'succeeded'")
	out, code = cliRun(t, "routes", "retry", "fwd", "--json")
	var res struct {
		Route   string `json:"route"`
		Retried *int   `json:"retried"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Route != "fwd" || res.Retried == nil || *res.Retried != 0 {
		t.Fatalf("routes retry --json with nothing retrying: exit %d, %s", code, out)
	}
	// Every retry asked for is in the audit log, the refused ones excepted.
	if out, code := cliRun(t, "audit"); code != 0 || !strings.Contains(out, "github "+first) || !strings.Contains(out, "route fwd") ||
		!strings.Contains(out, "target back") || strings.Count(out, " retry ") != 5 {
		t.Fatalf("audit: exit %d, %s", code, out)
	}
}

// replay --force without --route re-dispatches every matching route, so it
// says so first: off a terminal it replays nothing, exits 2 and names --yes;
// on a terminal it asks, and replays only when told yes; --yes, or a chosen
// route, replays without asking.
func TestCLIReplayForceAsksFirst(t *testing.T) {
	url := dbtest.URL(t)
	addr := freeAddr(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GATEWAY_ADMIN_TOKEN", adminToken)
	t.Setenv("HOOKGATE_URL", "http://"+addr)
	t.Setenv("GITHUB_WEBHOOK_SECRET", secret)
	t.Setenv("GATEWAY_ROUTES", "audit=*:*>builtin:log")
	serveInBackground(t, addr)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id := sendPush(t, "main")
	waitDispatches(t, pool, "state <> 'succeeded'")
	replays := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_replays").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Off a terminal (a script, a pipe, these tests' run): nothing replayed.
	for _, args := range [][]string{
		{"replay", "github", id, "--force"},
		{"replay", "--provider", "github", "--since", "1h", "--force"},
		{"replay", "--force", "--json"},
	} {
		out, code, msg := cliRunErr(t, args...)
		if code != cli.ExitUsage || !strings.Contains(msg, "--yes") || !strings.Contains(msg, "every route") || !strings.Contains(msg, "nothing replayed") {
			t.Errorf("%q off a terminal: exit %d, %s %s; want exit 2 naming --yes", args, code, out, msg)
		}
	}
	if n := replays(); n != 0 {
		t.Fatalf("%d replays made without confirmation", n)
	}

	// On a terminal: asked; anything but yes replays nothing.
	onTerminal := func(answer string, args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := cli.Run(context.Background(), cli.Env{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader(answer), Terminal: true}, args)
		return stdout.String(), stderr.String(), err
	}
	for _, answer := range []string{"n\n", "\n", ""} {
		_, asked, err := onTerminal(answer, "replay", "github", id, "--force")
		if !strings.Contains(asked, "re-dispatches every route of the gateway that matches github "+id) || !strings.Contains(asked, "Replay? [y/N]") ||
			err == nil || !strings.Contains(err.Error(), "nothing replayed") {
			t.Fatalf("answered %q: asked %q, %v", answer, asked, err)
		}
	}
	if n := replays(); n != 0 {
		t.Fatalf("%d replays made though not confirmed", n)
	}
	out, asked, err := onTerminal("y\n", "replay", "github", id, "--force", "--reason", "asked")
	if err != nil || !strings.Contains(asked, "Replay? [y/N]") || !strings.Contains(out, "audit generation 2") {
		t.Fatalf("answered y: %s %s %v", out, asked, err)
	}
	waitDispatches(t, pool, "state <> 'succeeded'")
	out, asked, err = onTerminal("yes\n", "replay", "--provider", "github", "--force")
	if err != nil || !strings.Contains(asked, "each delivery the filter selects (provider github)") || !strings.Contains(out, "matched") {
		t.Fatalf("bulk, answered yes: %s %s %v", out, asked, err)
	}
	dbtest.Eventually(t, 20*time.Second, "the bulk replay's generation 3", func() error {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_dispatches WHERE generation = 3 AND state = 'succeeded'").Scan(&n); err != nil || n != 1 {
			return fmt.Errorf("%d (%v)", n, err)
		}
		return nil
	})

	// --yes, or a chosen route, asks nothing.
	if out, code := cliRun(t, "replay", "github", id, "--force", "--yes"); code != 0 || !strings.Contains(out, "generation 4") {
		t.Fatalf("--yes: exit %d, %s", code, out)
	}
	waitDispatches(t, pool, "state <> 'succeeded'")
	if out, code := cliRun(t, "replay", "github", id, "--force", "--route", "audit"); code != 0 || !strings.Contains(out, "generation 5") {
		t.Fatalf("--route: exit %d, %s", code, out)
	}
	if n := replays(); n != 4 {
		t.Fatalf("%d replays, want 4", n)
	}
}
