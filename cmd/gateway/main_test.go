package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const secret = "It's a Secret to Everybody"

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serveInBackground runs gateway serve, with the environment the test set,
// until the test ends, and waits until it is ready on addr.
func serveInBackground(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitFor(t, "http://"+addr+"/readyz", 200, 30*time.Second)
}

// waitDispatches waits until no dispatch is where (a condition on
// hookgate_dispatches), for up to 20 s.
func waitDispatches(t *testing.T, pool *pgxpool.Pool, where string) {
	t.Helper()
	dbtest.Eventually(t, 20*time.Second, "no dispatch "+where, func() error {
		var n int
		_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_dispatches WHERE "+where).Scan(&n)
		if n != 0 {
			return fmt.Errorf("%d dispatches still %s", n, where)
		}
		return nil
	})
}

func waitFor(t *testing.T, url string, want int, within time.Duration) {
	t.Helper()
	dbtest.Eventually(t, within, fmt.Sprintf("%s answers %d", url, want), func() error {
		res, err := http.Get(url)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != want {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	})
}

// github is the gateway's GitHub, whose sender the tests sign as.
var github = providers.GitHub{Secrets: verify.Secrets{secret}}.Source()

// signedRequest is the request providers.NewRequest builds: c's sender's
// delivery of body to the gateway at addr, signed now.
func signedRequest(t *testing.T, c providers.SourceConfig, addr string, body []byte, id, event string) *http.Request {
	t.Helper()
	req, err := providers.NewRequest(t.Context(), c, "http://"+addr+"/webhooks/"+c.Name, body, id, event, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// sendPing posts a signed GitHub ping and returns the status and the body's status field.
func sendPing(t *testing.T, addr, id string) (int, string) {
	t.Helper()
	req := signedRequest(t, github, addr, []byte(`{"zen":"Design for failure.","hook_id":1}`), id, "ping")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Status string }
	b, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(b, &out)
	return res.StatusCode, out.Status
}

// The embedded default: the built binary starts a private PostgreSQL, serves,
// exits 0 on SIGTERM with the server stopped, and finds its data again on the
// next start.
func TestEmbeddedDefaultServesAndStopsOnSIGTERM(t *testing.T) {
	tmp := dbtest.SharedDir(t, "hookgate-cmd-")
	bin := gatewayBinary(t)

	start := func() (*exec.Cmd, string, *bytes.Buffer) {
		addr := freeAddr(t)
		cmd := exec.Command(bin, "serve")
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			"GATEWAY_DATA_DIR=" + filepath.Join(tmp, "data"),
			"GATEWAY_ADDR=" + addr,
			"GITHUB_WEBHOOK_SECRET=" + secret,
			"GATEWAY_ROUTES=audit=*:*>builtin:log",
		}
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		waitFor(t, "http://"+addr+"/readyz", 200, 90*time.Second)
		return cmd, addr, &logs
	}
	stop := func(cmd *exec.Cmd, logs *bytes.Buffer) {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("exit after SIGTERM: %v\n%s", err, logs)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("no exit within 60s of SIGTERM\n%s", logs)
		}
	}

	cmd, addr, logs := start()
	if status, body := sendPing(t, addr, "embedded-1"); status != 202 || body != "accepted" {
		t.Fatalf("first ping: %d %s", status, body)
	}
	if status, body := sendPing(t, addr, "embedded-1"); status != 200 || body != "duplicate" {
		t.Fatalf("second ping: %d %s", status, body)
	}
	stop(cmd, logs)
	if pid, err := os.ReadFile(filepath.Join(tmp, "data", "pgdata", "postmaster.pid")); err == nil {
		t.Fatalf("PostgreSQL still running after the gateway exited: %s", pid)
	}

	cmd, addr, logs = start()
	if status, body := sendPing(t, addr, "embedded-1"); status != 200 || body != "duplicate" {
		t.Fatalf("after restart: %d %s, want the stored receipt to be found", status, body)
	}

	// The private PostgreSQL belongs to one process: a second gateway on the
	// same directory exits 1, saying how gateways share a database, and the
	// first keeps serving.
	second := exec.Command(bin, "serve")
	second.Env = []string{"PATH=" + os.Getenv("PATH"), "GATEWAY_DATA_DIR=" + filepath.Join(tmp, "data"), "GATEWAY_ADDR=" + freeAddr(t),
		"GITHUB_WEBHOOK_SECRET=" + secret, "GATEWAY_ROUTES=audit=*:*>builtin:log"}
	out, err := second.CombinedOutput()
	if second.ProcessState == nil || second.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "DATABASE_URL") ||
		!strings.Contains(string(out), "in use") {
		t.Fatalf("a second gateway on the same directory: %v\n%s", err, out)
	}
	if status, body := sendPing(t, addr, "embedded-2"); status != 202 || body != "accepted" {
		t.Fatalf("the first gateway after the second was refused: %d %s", status, body)
	}

	// A gateway killed with SIGKILL leaves its PostgreSQL behind; the next
	// one takes the directory over instead of being refused.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cmd, addr, logs = start()
	if status, body := sendPing(t, addr, "embedded-2"); status != 200 || body != "duplicate" {
		t.Fatalf("after kill -9 and restart: %d %s, want the stored receipt to be found", status, body)
	}
	stop(cmd, logs)
}

// run against DATABASE_URL: a delivery to a builtin:log route is dispatched
// end to end, and run returns nil when its context ends.
func TestRunDispatchesAndStops(t *testing.T) {
	url := dbtest.URL(t)
	addr := freeAddr(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GITHUB_WEBHOOK_SECRET", "old-secret,"+secret)
	t.Setenv("GATEWAY_ROUTES", "audit=github:*>builtin:log")
	t.Setenv("GATEWAY_LOG_FORMAT", "json")
	metricsAddr := freeAddr(t)
	t.Setenv("GATEWAY_METRICS_ADDR", metricsAddr)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs dbtest.Buffer
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, &logs) }()
	waitFor(t, "http://"+addr+"/readyz", 200, 30*time.Second)

	if status, _ := sendPing(t, addr, "run-1"); status != 202 {
		t.Fatalf("ping: %d", status)
	}
	// With GATEWAY_METRICS_ADDR, /metrics is served there only.
	waitFor(t, "http://"+addr+"/metrics", http.StatusNotFound, time.Second)
	res, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scraped, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(scraped), `hookgate_ingest_requests_total{outcome="accepted",provider="github"} 1`) {
		t.Fatalf("metrics address: %d %.300s", res.StatusCode, scraped)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	dbtest.WaitDispatch(t, pool, dbtest.Dispatch{DeliveryID: "run-1", Route: "audit"}, "succeeded")
	var attempts int
	if err := pool.QueryRow(context.Background(),
		"SELECT attempts FROM hookgate_dispatches WHERE delivery_id = 'run-1' AND route = 'audit'").Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("attempts = %d (%v)", attempts, err)
	}
	var jobState string
	if err := pool.QueryRow(context.Background(), "SELECT state FROM river_job").Scan(&jobState); err != nil || jobState != "completed" {
		t.Fatalf("river job state %q, %v", jobState, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("a secret was logged")
	}
	// GATEWAY_LOG_FORMAT=json: one JSON object a line, time, level and
	// msg in each; River's periodic statistics are below the default level.
	var listening bool
	for line := range strings.Lines(logs.String()) {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil || l["time"] == nil || l["level"] == nil || l["msg"] == nil {
			t.Fatalf("a log line that is not a JSON object with time, level and msg: %q", line)
		}
		listening = listening || l["msg"] == "gateway listening" && l["addr"] != nil
		if l["level"] == "DEBUG" || strings.Contains(fmt.Sprint(l["msg"]), "Producer job counts") {
			t.Errorf("logged at the default level: %q", line)
		}
	}
	if !listening {
		t.Errorf("no gateway listening line:\n%s", logs.String())
	}
}

func TestRunRefusesBadConfiguration(t *testing.T) {
	t.Setenv("GATEWAY_RETENTION", "1h")
	err := run(context.Background(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "GATEWAY_RETENTION") {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("GATEWAY_RETENTION", "72h")
	t.Setenv("DATABASE_URL", dbtest.URL(t))
	t.Setenv("GATEWAY_ROUTES", "x=github:push>builtin:missing")
	err = run(context.Background(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "GATEWAY_ROUTES") {
		t.Fatalf("err = %v", err)
	}
	// Recovery set up halfway stops it before anything starts.
	t.Setenv("GATEWAY_ROUTES", "")
	t.Setenv("GITHUB_RECOVERY_HOOKS", "repo:acme/api:42")
	t.Setenv("GITHUB_TOKEN", "")
	err = run(context.Background(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "GITHUB_TOKEN") {
		t.Fatalf("recovery hooks without credentials: err = %v", err)
	}
	t.Setenv("GITHUB_RECOVERY_HOOKS", "repo:acme:42")
	err = run(context.Background(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "GITHUB_RECOVERY_HOOKS") {
		t.Fatalf("a bad hook: err = %v", err)
	}
	t.Setenv("GITHUB_RECOVERY_HOOKS", "")
	t.Setenv("GATEWAY_ROUTES", "x=github:push>builtin:missing")
	if err := run(context.Background(), []string{"frobnicate"}, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown command accepted")
	}

	// Routes in the configuration file and in GATEWAY_ROUTES: refused, naming both.
	file := filepath.Join(t.TempDir(), "hookgate.yaml")
	if err := os.WriteFile(file, []byte("routes:\n  - {name: a, match: [\"github:push\"], target: builtin:log}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATEWAY_ROUTES", "x=github:push>builtin:log")
	t.Setenv("GATEWAY_CONFIG_FILE", file)
	err = run(context.Background(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "GATEWAY_ROUTES") || !strings.Contains(err.Error(), file) {
		t.Fatalf("routes in both places: err = %v", err)
	}
	// An unknown key stops it, naming the file, the route and the key.
	if err := os.WriteFile(file, []byte("routes:\n  - {name: a, match: [\"github:push\"], target: builtin:log, concurency: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATEWAY_ROUTES", "")
	err = run(context.Background(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), `route "a"`) || !strings.Contains(err.Error(), `"concurency"`) {
		t.Fatalf("unknown key: err = %v", err)
	}
	// A filter that does not compile, or is not a bool, stops it naming the route.
	for _, bad := range []string{`payload.action`, `payload.action ==`} {
		text := fmt.Sprintf("routes:\n  - {name: a, match: [\"github:push\"], target: builtin:log, filter: '%s'}\n", bad)
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		err = run(context.Background(), nil, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `route "a"`) || !strings.Contains(err.Error(), "key filter") {
			t.Fatalf("filter %s: err = %v", bad, err)
		}
	}
}

// gateway serve reports every configuration error at once, one a line, a
// value that does not parse among them, every bad route and a route whose
// provider is not configured; and before them it warns, at WARN, of each
// variable that looks meant for hookgate and is none it reads, naming the
// closest one and never the value.
func TestServeReportsEveryConfigurationErrorAtOnce(t *testing.T) {
	t.Setenv("GITHUB_WEBHOOK_SECRET", "")
	t.Setenv("STRIPE_WEBHOOK_SECRET", "")
	t.Setenv("STRIPE_TOLERANCE", "5")
	t.Setenv("GATEWAY_RETENTION", "1h")
	t.Setenv("GATEWAY_WORKERS", "0")
	t.Setenv("GATEWAY_LOG_FORMAT", "xml")
	t.Setenv("GATEWAY_ROUTES", "ci=github:push>http://ci.internal/hook nothing")
	t.Setenv("GATEWAY_ROUTE", "leaked-topsecret")
	t.Setenv("GATEWAY_SERVICE_PORT_HTTP", "8080") // Kubernetes': no warning
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve"}, io.Discard, &stderr)
	if err == nil {
		t.Fatal("serve started")
	}
	want := []string{
		"configuration: STRIPE_TOLERANCE: must be a duration such as 30s, 5m or 72h",
		"GATEWAY_WORKERS: must be 1 to 10000, got 0",
		"GATEWAY_ROUTES: bad route, entry 2: want name=provider:pattern[,...]>target",
		"GATEWAY_RETENTION: must be from 72h0m0s (providers retry for 3 days) to 87600h0m0s, got 1h0m0s",
		"GATEWAY_LOG_FORMAT: must be text or json",
		`GATEWAY_ROUTES: bad route, entry 1 ("ci"): key match: provider github is not configured (GITHUB_WEBHOOK_SECRET is unset); the configured ones: none`,
	}
	lines := strings.Split(err.Error(), "\n")
	for _, w := range want {
		// A line may go on to name the Config field, for a Config filled
		// in code.
		if !slices.ContainsFunc(lines, func(l string) bool { return l == w || strings.HasPrefix(l, w+" (Config.") }) {
			t.Errorf("no line %q in:\n%v", w, err)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d lines, want one for each of the %d errors:\n%v", len(lines), len(want), err)
	}
	logged := stderr.String()
	if !strings.Contains(logged, `level=WARN msg="GATEWAY_ROUTE: not a variable hookgate reads; did you mean GATEWAY_ROUTES?" variable=GATEWAY_ROUTE did_you_mean=GATEWAY_ROUTES`) {
		t.Errorf("no warning of GATEWAY_ROUTE:\n%s", logged)
	}
	if strings.Contains(logged, "topsecret") || strings.Contains(err.Error(), "topsecret") || strings.Contains(logged, "SERVICE_PORT") {
		t.Errorf("a stray's value, or Kubernetes' variable, logged:\n%s", logged)
	}
}

// serve with STRIPE_API_KEY runs recovery at start: an event Stripe holds and
// the gateway lacks is stored and dispatched, audited and counted.
func TestServeRecoversAtStart(t *testing.T) {
	url := dbtest.URL(t)
	addr := freeAddr(t)
	created := time.Now().Add(-time.Hour).Unix()
	stripeAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","has_more":false,"url":"/v1/events","data":[{"id":"evt_start1","object":"event","type":"invoice.paid","created":%d,"data":{"object":{"id":"in_s1","object":"invoice"}}}]}`, created)
	}))
	defer stripeAPI.Close()
	t.Setenv("DATABASE_URL", url)
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_start")
	t.Setenv("STRIPE_API_KEY", "rk_test_start")
	t.Setenv("STRIPE_API_URL", stripeAPI.URL)
	t.Setenv("GATEWAY_ROUTES", "audit=stripe:*>builtin:log")

	serveInBackground(t, addr)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	dbtest.Eventually(t, 20*time.Second, "the event Stripe holds recovered and dispatched", func() error {
		var state string
		err := pool.QueryRow(context.Background(), `SELECT d.state FROM hookgate_dispatches d JOIN hookgate_receipts r USING (provider, delivery_id)
			WHERE r.delivery_id = 'evt_start1' AND r.scope = 'recovered'`).Scan(&state)
		if err == nil && state != "succeeded" {
			err = fmt.Errorf("state %q", state)
		}
		return err
	})
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scraped, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(scraped), `hookgate_recovery_total{outcome="stored",provider="stripe"} 1`) {
		t.Fatalf("metrics after recovery: %.2000s", scraped)
	}
}
