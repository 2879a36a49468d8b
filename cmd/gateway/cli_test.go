package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
)

// cliRun runs one command and returns its output and exit code.
func cliRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, code, _ := cliRunErr(t, args...)
	return out, code
}

// cliRunErr is cliRun that also returns the error main would print.
func cliRunErr(t *testing.T, args ...string) (string, int, string) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), args, &out, io.Discard)
	code, msg := 0, ""
	if err != nil {
		code, msg = cli.ExitFailed, err.Error()
		var exit *cli.ExitError
		if errors.As(err, &exit) {
			code = exit.Code
		}
	}
	return out.String(), code, msg
}

// adminToken is the operator token of the gateways these tests run.
const adminToken = "cli-test-admin-token"

// The operator commands are clients of a running gateway's API: send signs
// and posts, list, show and body read what arrived, replay re-dispatches or
// says why it did not, and exit codes tell scripts what happened.
func TestCLIAgainstRunningGateway(t *testing.T) {
	url := dbtest.URL(t)
	addr := freeAddr(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GATEWAY_ADMIN_TOKEN", adminToken)
	t.Setenv("HOOKGATE_URL", "http://"+addr)
	t.Setenv("GITHUB_WEBHOOK_SECRET", secret)
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_cli")
	t.Setenv("GATEWAY_ROUTES", "audit=*:*>builtin:log subs=stripe:customer.subscription>builtin:stripe-subscriptions")
	keys := filepath.Join(t.TempDir(), "hookgate.yaml")
	if err := os.WriteFile(keys, []byte("search_keys:\n  stripe: {customer: data.object.customer}\n  github: {repo: repository.full_name}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATEWAY_CONFIG_FILE", keys)
	t.Setenv("GATEWAY_ARCHIVE_URL", "file://"+t.TempDir())

	serveInBackground(t, addr)

	out, code := cliRun(t, "send", "stripe", "--event", "customer.subscription.updated", "--json")
	var sent struct {
		Status     string `json:"status"`
		DeliveryID string `json:"delivery_id"`
		Routes     int    `json:"routes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &sent) != nil || sent.Status != "accepted" || sent.Routes != 2 {
		t.Fatalf("send stripe: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "send", "github", "--event", "pull_request.opened"); code != 0 || !strings.Contains(out, "202") {
		t.Fatalf("send github: exit %d, %s", code, out)
	}
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_wrong")
	if out, code := cliRun(t, "send", "stripe", "--event", "invoice.paid"); code != cli.ExitFailed || !strings.Contains(out, "invalid_signature") {
		t.Fatalf("send with a wrong secret: exit %d, %s", code, out)
	}
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_cli")

	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitDispatches(t, pool, "state <> 'succeeded'")

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
	// A search by what the deliveries carry (the API's q).
	if out, code := cliRun(t, "deliveries", "list", "--where", `event == "pull_request.opened" && has(payload.pull_request)`); code != 0 ||
		!strings.Contains(out, "pull_request.opened") || strings.Contains(out, sent.DeliveryID) {
		t.Fatalf("list --where: exit %d, %s", code, out)
	}
	if out, code, err := cliRunErr(t, "deliveries", "list", "--where", "payload.action =="); code != cli.ExitUsage ||
		!strings.Contains(err, "400 bad_request") || !strings.Contains(err, "line 1, column") {
		t.Fatalf("list --where with a mistake: exit %d, %s %s", code, out, err)
	}
	// A search key's value (the configuration's search_keys).
	if out, code := cliRun(t, "deliveries", "list", "--key", "customer=cus_demo"); code != 0 || !strings.Contains(out, sent.DeliveryID) ||
		strings.Contains(out, "pull_request.opened") {
		t.Fatalf("list --key: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "deliveries", "list", "--key", "repo=hookgate/demo", "--key", "customer=cus_demo"); code != 0 || strings.Contains(out, sent.DeliveryID) ||
		strings.Contains(out, "pull_request.opened") {
		t.Fatalf("list with two keys no delivery has both of: exit %d, %s", code, out)
	}
	if out, code, err := cliRunErr(t, "deliveries", "list", "--key", "customer"); code != cli.ExitUsage || !strings.Contains(err, "name=value") {
		t.Fatalf("list --key without a value: exit %d, %s %s", code, out, err)
	}
	if out, code, err := cliRunErr(t, "deliveries", "list", "--key", "customr=cus_demo"); code != cli.ExitUsage || !strings.Contains(err, "the keys are customer, repo") {
		t.Fatalf("list --key of no configured key: exit %d, %s %s", code, out, err)
	}
	if out, code, err := cliRunErr(t, "deliveries", "list", "--key", "customer=cus_demo", "--where", " "); code != cli.ExitUsage || !strings.Contains(err, "--where is empty") {
		t.Fatalf("list --where empty: exit %d, %s %s", code, out, err)
	}
	// The archive: listed, a day archived now, a day never archived.
	if out, code := cliRun(t, "archive", "list"); code != 0 || !strings.Contains(out, "archive: file://") || !strings.Contains(out, "DAY") {
		t.Fatalf("archive list: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "archive", "run", "2026-01-01"); code != 0 || !strings.Contains(out, "2026-01-01: no delivery was received that day: nothing archived") {
		t.Fatalf("archive run: exit %d, %s", code, out)
	}
	if out, code, err := cliRunErr(t, "archive", "restore", "2026-01-02"); code != cli.ExitFailed || !strings.Contains(err, "404 not_found") {
		t.Fatalf("archive restore of a day never archived: exit %d, %s %s", code, out, err)
	}
	if out, code, err := cliRunErr(t, "archive", "run", "yesterday"); code != cli.ExitUsage || !strings.Contains(err, "yyyy-mm-dd") {
		t.Fatalf("archive run with no day: exit %d, %s %s", code, out, err)
	}
	// A personal token: made by the admin, told once, acting within its
	// role (HOOKGATE_TOKEN before GATEWAY_ADMIN_TOKEN), then revoked.
	out, code = cliRun(t, "tokens", "create", "support desk", "--role", "viewer", "--expires-in", "24h")
	viewer := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(viewer, "hgt_") || strings.Contains(viewer, "\n") {
		t.Fatalf("tokens create: exit %d, %s", code, out)
	}
	t.Setenv("HOOKGATE_TOKEN", viewer)
	if out, code := cliRun(t, "deliveries", "list", "--provider", "stripe"); code != 0 || !strings.Contains(out, sent.DeliveryID) {
		t.Fatalf("list as a viewer: exit %d, %s", code, out)
	}
	if out, code, err := cliRunErr(t, "routes", "pause", "audit"); code != cli.ExitFailed || !strings.Contains(err, "403 forbidden") {
		t.Fatalf("pause as a viewer: exit %d, %s %s", code, out, err)
	}
	t.Setenv("HOOKGATE_TOKEN", "")
	out, code = cliRun(t, "tokens", "list")
	id, _, _ := strings.Cut(strings.Split(out, "\n")[1], " ")
	if code != 0 || !strings.HasPrefix(id, "tok_") || !strings.Contains(out, "support desk") || strings.Contains(out, viewer) {
		t.Fatalf("tokens list: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "tokens", "revoke", id); code != 0 || !strings.Contains(out, "revoked "+id) {
		t.Fatalf("tokens revoke: exit %d, %s", code, out)
	}
	t.Setenv("HOOKGATE_TOKEN", viewer)
	if out, code, err := cliRunErr(t, "deliveries", "list"); code != cli.ExitFailed || !strings.Contains(err, "401 unauthorized") {
		t.Fatalf("list with a revoked token: exit %d, %s %s", code, out, err)
	}
	t.Setenv("HOOKGATE_TOKEN", "")
	if out, code, err := cliRunErr(t, "tokens", "create", "x"); code != cli.ExitUsage || !strings.Contains(err, "--role") {
		t.Fatalf("tokens create without a role: exit %d, %s %s", code, out, err)
	}
	// Nothing retrying: a retry by key attempts nothing, and says so.
	if out, code := cliRun(t, "retry", "--key", "customer=cus_demo"); code != 0 || !strings.Contains(out, "retry (key customer=cus_demo): 0 deliveries with a retrying dispatch matched; 0 dispatches attempted now") {
		t.Fatalf("retry --key: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "deliveries", "show", "stripe", sent.DeliveryID); code != 0 || !strings.Contains(out, "stripe:sub_demo") ||
		!strings.Contains(out, "subs") {
		t.Fatalf("show: exit %d, %s", code, out)
	}
	// The body, byte for byte, as the gateway stored it.
	var stored []byte
	if err := pool.QueryRow(context.Background(), "SELECT body FROM hookgate_receipts WHERE delivery_id = $1", sent.DeliveryID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if out, code := cliRun(t, "deliveries", "body", "stripe", sent.DeliveryID); code != 0 || out != string(stored) {
		t.Fatalf("body: exit %d, %q, want %q", code, out, stored)
	}
	// A 404 is the gateway's refusal: exit 1, its message shown.
	if out, code, err := cliRunErr(t, "deliveries", "show", "stripe", "evt_nope"); code != cli.ExitFailed || !strings.Contains(err, "404 not_found") {
		t.Fatalf("show unknown: exit %d, %s %s", code, out, err)
	}
	// An unknown provider is a usage error wherever it is named, listing those the gateway knows.
	for _, args := range [][]string{{"deliveries", "show", "gitlab", "x"}, {"deliveries", "list", "--provider", "gitlab"}, {"replay", "gitlab", "x"}} {
		if out, code, err := cliRunErr(t, args...); code != cli.ExitUsage || !strings.Contains(err, "github, stripe") {
			t.Fatalf("%q: exit %d, %s %s", args, code, out, err)
		}
	}

	// Paging: the first page names the cursor of the next, which --cursor reads.
	out, code = cliRun(t, "deliveries", "list", "--limit", "1")
	_, cursor, found := strings.Cut(out, "more: --cursor ")
	if code != 0 || !found || !strings.Contains(out, "pull_request.opened") {
		t.Fatalf("first page: exit %d, %s", code, out)
	}
	out, code = cliRun(t, "deliveries", "list", "--limit", "1", "--cursor", strings.TrimSpace(cursor))
	if code != 0 || !strings.Contains(out, sent.DeliveryID) || strings.Contains(out, "pull_request.opened") || strings.Contains(out, "more:") {
		t.Fatalf("second page: exit %d, %s", code, out)
	}
	if _, code := cliRun(t, "deliveries", "list", "--cursor", "not-a-cursor"); code != cli.ExitUsage {
		t.Fatalf("bad cursor: exit %d", code)
	}

	// Nothing failed, so nothing to replay without --force, and the answer
	// says why for each route; --force makes generation 2.
	out, code = cliRun(t, "replay", "stripe", sent.DeliveryID, "--json")
	var replayed struct {
		Dispatches []any `json:"dispatches"`
		Skipped    []struct {
			Route, Reason string
		} `json:"skipped"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &replayed) != nil || len(replayed.Dispatches) != 0 || len(replayed.Skipped) != 2 ||
		!strings.Contains(replayed.Skipped[0].Reason, "succeeded; force replays it") {
		t.Fatalf("replay: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "replay", "stripe", sent.DeliveryID); code != 0 || !strings.Contains(out, "subs skipped: its latest dispatch succeeded") {
		t.Fatalf("replay, told: exit %d, %s", code, out)
	}
	out, code = cliRun(t, "replay", "stripe", sent.DeliveryID, "--route", "subs", "--force", "--reason", "cli test")
	if code != 0 || !strings.Contains(out, "subs generation 2 pending") {
		t.Fatalf("forced replay: exit %d, %s", code, out)
	}
	if out, code, err := cliRunErr(t, "replay", "stripe", sent.DeliveryID, "--route", "nope"); code != cli.ExitUsage || !strings.Contains(err, "audit, subs") {
		t.Fatalf("replay of an unknown route: exit %d, %s %s", code, out, err)
	}
	if _, code := cliRun(t, "replay", "stripe", "evt_nope"); code != cli.ExitFailed {
		t.Fatalf("replay of an unknown delivery: exit %d", code)
	}
	out, code = cliRun(t, "replay", "--state", "succeeded", "--since", "1h", "--force", "--yes", "--json")
	if code != 0 || !strings.Contains(out, `"deliveries": 2`) {
		t.Fatalf("bulk replay: exit %d, %s", code, out)
	}
	if _, code := cliRun(t, "replay", "--state", "bogus"); code != cli.ExitUsage {
		t.Fatalf("bulk replay with a bad state: exit %d", code)
	}
	if _, code := cliRun(t, "deliveries", "frob"); code != cli.ExitUsage {
		t.Fatalf("unknown subcommand: exit %d", code)
	}
	// The replay log names the token's identity, and audit shows it.
	if out, code := cliRun(t, "audit"); code != 0 || !strings.Contains(out, "replay") || !strings.Contains(out, "cli test") || !strings.Contains(out, "token:") {
		t.Fatalf("audit: exit %d, %s", code, out)
	}

	// A wrong token is the gateway's refusal; a gateway that is not there is
	// unreachable, naming the URL; plain http to another host is refused
	// before the token leaves.
	if _, code, err := cliRunErr(t, "deliveries", "list", "--token-file", writeTemp(t, "wrong-token")); code != cli.ExitFailed || !strings.Contains(err, "401") {
		t.Fatalf("wrong token: exit %d, %s", code, err)
	}
	down := "http://" + freeAddr(t)
	if _, code, err := cliRunErr(t, "deliveries", "list", "--url", down); code != cli.ExitUnreachable || !strings.Contains(err, down) {
		t.Fatalf("no gateway: exit %d, %s", code, err)
	}
	if _, code, err := cliRunErr(t, "deliveries", "list", "--url", "http://hooks.example.com"); code != cli.ExitUsage || !strings.Contains(err, "plain http://") {
		t.Fatalf("plain http to another host: exit %d, %s", code, err)
	}
	if _, code, err := cliRunErr(t, "deliveries", "list", "--url", "http://hooks.invalid", "--insecure"); code != cli.ExitUnreachable {
		t.Fatalf("plain http with --insecure: exit %d, %s", code, err)
	}
}

// The CLI needs nothing but HOOKGATE_URL and the token: the built binary,
// run from an empty directory with no other variable, lists, shows, replays,
// pauses and reads the audit log, and creates nothing in that directory (no
// database is opened or started).
func TestCLIFromAnEmptyDirectory(t *testing.T) {
	bin := gatewayBinary(t)
	addr := freeAddr(t)
	t.Setenv("DATABASE_URL", dbtest.URL(t))
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GATEWAY_ADMIN_TOKEN", adminToken)
	t.Setenv("GITHUB_WEBHOOK_SECRET", secret)
	t.Setenv("GATEWAY_ROUTES", "audit=*:*>builtin:log")
	serveInBackground(t, addr)
	t.Setenv("HOOKGATE_URL", "http://"+addr)
	if out, code := cliRun(t, "send", "github", "--event", "push"); code != 0 {
		t.Fatalf("send: exit %d, %s", code, out)
	}

	dir := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gateway := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"HOOKGATE_URL=http://" + addr, "GATEWAY_ADMIN_TOKEN_FILE=" + tokenFile}
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil {
			t.Fatalf("%q: %v", args, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := gateway("deliveries", "list", "--json")
	var listed struct {
		Deliveries []struct {
			DeliveryID string `json:"delivery_id"`
		} `json:"deliveries"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Deliveries) != 1 {
		t.Fatalf("list: exit %d, %s", code, out)
	}
	id := listed.Deliveries[0].DeliveryID
	for _, args := range [][]string{
		{"deliveries", "show", "github", id},
		{"deliveries", "body", "github", id},
		{"replay", "github", id, "--force", "--yes", "--reason", "from anywhere"},
		{"retry", "github", id},
		{"routes", "retry", "audit"},
		{"routes", "list"},
		{"routes", "pause", "audit", "--reason", "from anywhere"},
		{"routes", "resume", "audit"},
		{"audit"},
	} {
		if out, code := gateway(args...); code != 0 {
			t.Errorf("%q: exit %d, %s", args, code, out)
		}
	}
	if out, code := gateway("recover", "stripe"); code != cli.ExitFailed || !strings.Contains(out, "409 not_configured") {
		t.Errorf("recover without STRIPE_API_KEY in the gateway: exit %d, %s", code, out)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the CLI left %v in its directory (%v)", entries, err)
	}
}

// writeTemp writes text to a new file and returns its path.
func writeTemp(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Routes from the configuration file, seen, paused and resumed from the
// command line: a paused route's deliveries are accepted and wait; the pause
// holds for the running gateway; resume lets them out.
func TestCLIRoutesWithAConfigFile(t *testing.T) {
	url := dbtest.URL(t)
	addr := freeAddr(t)
	var got atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	defer target.Close()
	file := filepath.Join(t.TempDir(), "hookgate.yaml")
	err := os.WriteFile(file, []byte(`
routes:
  - name: ci
    match: ["github:pull_request"]
    target_env: CI_TARGET
    concurrency: 3
    rate: 100/s
    timeout: 2s
  - name: audit
    match: ["*:*"]
    target: builtin:log
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", url)
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GITHUB_WEBHOOK_SECRET", secret)
	t.Setenv("GATEWAY_CONFIG_FILE", file)
	t.Setenv("CI_TARGET", target.URL+"/hook?key=sekret")
	t.Setenv("GATEWAY_ADMIN_TOKEN", adminToken)
	t.Setenv("HOOKGATE_URL", "http://"+addr)

	serveInBackground(t, addr)

	out, code := cliRun(t, "routes", "list", "--json")
	var listed struct {
		Routes []struct {
			Name, Target, State, Circuit string
			Concurrency                  int
			Rate                         *string
		} `json:"routes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Routes) != 2 || strings.Contains(out, "sekret") {
		t.Fatalf("routes list: exit %d, %s", code, out)
	}
	ci := listed.Routes[0]
	if ci.Name != "ci" || ci.Concurrency != 3 || ci.Rate == nil || *ci.Rate != "100/s" || ci.State != "active" || ci.Circuit != "closed" ||
		ci.Target != target.URL+"/hook?key=" {
		t.Fatalf("ci = %+v", ci)
	}
	if out, code := cliRun(t, "routes", "pause", "ci", "--reason", "deploying the CI service"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("routes pause: exit %d, %s", code, out)
	}
	if _, code, err := cliRunErr(t, "routes", "pause", "nope"); code != cli.ExitUsage || !strings.Contains(err, "its routes: ci, audit") {
		t.Fatalf("pause of an unknown route: exit %d, %s", code, err)
	}
	if _, code := cliRun(t, "routes", "pause"); code != cli.ExitUsage {
		t.Fatalf("pause without a name: exit %d", code)
	}
	if out, code := cliRun(t, "send", "github", "--event", "pull_request.opened"); code != 0 || !strings.Contains(out, "202") {
		t.Fatalf("send: exit %d, %s", code, out)
	}
	// A paused route's River queue is paused, so nothing fetches its job and no
	// signal comes to await: a fixed wait gives a wrongly fetched job time to forward.
	time.Sleep(1500 * time.Millisecond)
	if n := got.Load(); n != 0 {
		t.Fatalf("a paused route's target got %d requests", n)
	}
	if out, code := cliRun(t, "routes", "list"); code != 0 || !strings.Contains(out, "ci") || !strings.Contains(out, "paused") {
		t.Fatalf("routes list table: exit %d, %s", code, out)
	}
	if out, code := cliRun(t, "routes", "resume", "ci"); code != 0 || !strings.Contains(out, "active") {
		t.Fatalf("routes resume: exit %d, %s", code, out)
	}
	dbtest.Eventually(t, 20*time.Second, "the target gets the paused dispatch after resume", func() error {
		if n := got.Load(); n != 1 {
			return fmt.Errorf("the target got %d requests, want 1", n)
		}
		return nil
	})
}

// gateway recover runs recovery in the gateway, with the gateway's own
// configuration (its Stripe key and API URL; the CLI's environment has
// neither): a dry run finds and stores nothing; a run stores what Stripe has
// and the gateway lacks, once.
func TestCLIRecover(t *testing.T) {
	created := time.Now().Add(-time.Hour).Unix()
	// The event appears once the gateway's own run at start is done, so that
	// the commands below are the ones that find it.
	var published atomic.Bool
	stripeAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer rk_test_cli" {
			http.Error(w, `{"error":{"message":"no"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if !published.Load() {
			fmt.Fprint(w, `{"object":"list","has_more":false,"url":"/v1/events","data":[]}`)
			return
		}
		fmt.Fprintf(w, `{"object":"list","has_more":false,"url":"/v1/events","data":[{"id":"evt_cli1","object":"event","type":"invoice.paid","created":%d,"data":{"object":{"id":"in_cli1","object":"invoice"}}}]}`, created)
	}))
	defer stripeAPI.Close()
	addr := freeAddr(t)
	t.Setenv("DATABASE_URL", dbtest.URL(t))
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GATEWAY_ADMIN_TOKEN", adminToken)
	t.Setenv("GATEWAY_ROUTES", "audit=*:*>builtin:log")
	t.Setenv("STRIPE_API_KEY", "rk_test_cli")
	t.Setenv("STRIPE_API_URL", stripeAPI.URL)
	serveInBackground(t, addr)
	t.Setenv("HOOKGATE_URL", "http://"+addr)
	t.Setenv("STRIPE_API_KEY", "")
	t.Setenv("STRIPE_API_URL", "")
	dbtest.Eventually(t, 30*time.Second, "the gateway's recovery run at start", func() error {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if !strings.Contains(string(b), `hookgate_recovery_runs_total{provider="stripe",result="ok"} 1`) {
			return errors.New("no run yet")
		}
		return nil
	})
	published.Store(true)

	if _, code := cliRun(t, "recover", "gitlab"); code != cli.ExitUsage {
		t.Fatalf("recover gitlab: exit %d", code)
	}
	if _, code := cliRun(t, "recover", "stripe", "--since", "2999-01-01T00:00:00Z"); code != cli.ExitUsage {
		t.Fatalf("recover --since in the future: exit %d", code)
	}
	if _, code, err := cliRunErr(t, "recover", "github"); code != cli.ExitFailed || !strings.Contains(err, "409 not_configured") {
		t.Fatalf("recover github, not set up in the gateway: exit %d, %s", code, err)
	}
	var rep struct {
		Provider string   `json:"provider"`
		DryRun   bool     `json:"dry_run"`
		Found    []string `json:"found"`
		Stored   []string `json:"stored"`
	}
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"recover", "stripe", "--dry-run", "--since", "2000h"}, io.Discard, &stderr); err != nil ||
		!strings.Contains(stderr.String(), "--since reaches further back than GATEWAY_RECOVERY_LOOKBACK") {
		t.Fatalf("recover --since past the lookback: %v, %s", err, stderr.String())
	}
	out, code := cliRun(t, "recover", "stripe", "--dry-run", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.DryRun || len(rep.Found) != 1 || len(rep.Stored) != 0 {
		t.Fatalf("dry run: exit %d, %s", code, out)
	}
	out, code = cliRun(t, "recover", "stripe", "--since", "6h")
	if code != 0 || !strings.Contains(out, "1 stored") || !strings.Contains(out, "evt_cli1") {
		t.Fatalf("recover: exit %d, %s", code, out)
	}
	out, code = cliRun(t, "deliveries", "show", "stripe", "evt_cli1", "--json")
	if code != 0 || !strings.Contains(out, `"scope": "recovered"`) {
		t.Fatalf("show of a recovered event: exit %d, %s", code, out)
	}
	out, code = cliRun(t, "recover", "stripe", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Found) != 0 || len(rep.Stored) != 0 {
		t.Fatalf("second run: exit %d, %s", code, out)
	}
	// Every recovered event is an audit entry.
	if out, code := cliRun(t, "audit"); code != 0 || !strings.Contains(out, "recover") || !strings.Contains(out, "stripe evt_cli1") ||
		!strings.Contains(out, "on demand: 1 missing, 0 asked for again, 1 stored") || !strings.Contains(out, "(dry run)") {
		t.Fatalf("audit: exit %d, %s", code, out)
	}
}

// send names the variable to set for a built-in provider that is not
// configured, and lists the known providers for a name that is none.
func TestSendNamesWhatIsMissing(t *testing.T) {
	for _, name := range []string{"GITHUB_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET", "GATEWAY_CONFIG_FILE", "GATEWAY_ROUTES"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	for _, k := range providers.Builtins() {
		err := run(context.Background(), []string{"send", k, "--event", "ping", "--url", "http://127.0.0.1:1"}, io.Discard, io.Discard)
		var exit *cli.ExitError
		if want := "send: " + providers.Kinds[k].Env + " is not set"; !errors.As(err, &exit) || exit.Code != cli.ExitUsage || err.Error() != want {
			t.Errorf("send %s: %v, want exit 2 and %q", k, err, want)
		}
	}
	err := run(context.Background(), []string{"send", "clerk", "--event", "ping"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "usage: send github|stripe --event E") {
		t.Errorf("send clerk: %v", err)
	}
}
