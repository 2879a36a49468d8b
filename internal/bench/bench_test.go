package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// The load tool sends what a gateway accepts: every generated delivery
// verifies and parses, has a distinct id, is several KB, and the mix covers
// both providers and entities.
func TestGeneratorMakesAcceptableDeliveries(t *testing.T) {
	t.Parallel()
	env := benchEnv(t)
	gen, err := newGenerator(env.Providers, 6000)
	if err != nil {
		t.Fatal(err)
	}
	provs := map[string]providers.Provider{}
	for _, p := range env.Providers.Providers() {
		provs[p.Name()] = p
	}
	seen := map[string]bool{}
	events := map[string]bool{}
	for range 40 {
		req, id := gen.next("http://gateway")
		body, _ := io.ReadAll(req.Body)
		d, err := providers.Parse(provs[filepath.Base(req.URL.Path)], req.Header, body, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", req.URL.Path, err)
		}
		if d.DeliveryID != id || seen[id] {
			t.Fatalf("delivery id %q (tool says %q), seen before: %v", d.DeliveryID, id, seen[id])
		}
		seen[id] = true
		if len(body) < 5000 || d.Entity == "" || d.EventTime.IsZero() {
			t.Fatalf("%s: %d bytes, entity %q", d.Event, len(body), d.Entity)
		}
		events[d.Provider+" "+d.Event] = true
	}
	if len(events) != 4 {
		t.Fatalf("events: %v", events)
	}
}

// --ceiling without the gateway's routes would measure receipts alone (no
// dispatch rows, no River jobs) and flatter the gateway's ratio: it is refused
// before anything is sent.
func TestCeilingNeedsTheGatewaysRoutes(t *testing.T) {
	t.Parallel()
	env := benchEnv(t)
	env.Open = func(context.Context, int) (*pgxpool.Pool, func(), error) {
		t.Fatal("the database was opened")
		return nil, nil, nil
	}
	err := Run(context.Background(), env, []string{"--ceiling", "--url", "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "GATEWAY_ROUTES") {
		t.Fatalf("Run = %v, want an error naming GATEWAY_ROUTES", err)
	}
}

// The ceiling is one transaction per sender at once: its pool has a
// connection for each, or the senders would queue for connections and the
// ceiling would measure the pool.
func TestCeilingHasAConnectionPerSender(t *testing.T) {
	t.Parallel()
	ready := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ready.Close()
	env := benchEnv(t)
	routes, err := fanout.Parse("fwd=*:*>http://127.0.0.1:9/", nil, fanout.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	env.Config.Table = routes
	var conns int
	env.Open = func(_ context.Context, n int) (*pgxpool.Pool, func(), error) {
		conns = n
		return nil, nil, errors.New("no database in this test")
	}
	err = Run(context.Background(), env, []string{"--ceiling", "--concurrency", "48", "--url", ready.URL, "--target-addr", "127.0.0.1:0"})
	if err == nil || conns < 48 {
		t.Fatalf("Run = %v; the ceiling's pool has %d connections for 48 senders", err, conns)
	}
}

// The tool measures a gateway that is up: it waits for /readyz, and gives up
// with an error (not figures of a dead gateway) when it never is.
func TestBenchWaitsForAReadyGateway(t *testing.T) {
	t.Parallel()
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer notReady.Close()
	err := Run(context.Background(), benchEnv(t), []string{"--url", notReady.URL, "--wait", "1s", "--duration", "100ms"})
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("Run = %v, want not ready", err)
	}
}

// The tool needs every provider its workload sends for, configured as the
// gateway has it, and says which variables to set.
func TestBenchNeedsTheWorkloadsProviders(t *testing.T) {
	t.Parallel()
	env := benchEnv(t)
	env.Providers = nil // nothing configured
	err := Run(context.Background(), env, []string{"--url", "http://127.0.0.1:1"})
	if err == nil || err.Error() != "bench: set GITHUB_WEBHOOK_SECRET and STRIPE_WEBHOOK_SECRET as the gateway has them" {
		t.Fatalf("Run = %v", err)
	}
}

// When most requests fail the tool exits non-zero, whatever it printed.
func TestBenchFailsWhenMostRequestsFail(t *testing.T) {
	t.Parallel()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer refusing.Close()
	var out strings.Builder
	env := benchEnv(t)
	env.Stdout = &out
	err := Run(context.Background(), env, []string{"--url", refusing.URL, "--duration", "200ms", "--concurrency", "2",
		"--target-addr", "127.0.0.1:0", "--drain", "0"})
	if err == nil || !strings.Contains(err.Error(), "only 0 of") || !strings.Contains(out.String(), "401:") {
		t.Fatalf("Run = %v; printed %s", err, out.String())
	}
}

// benchEnv is the environment of a gateway with GitHub and Stripe
// configured, and no database.
func benchEnv(t *testing.T) Env {
	var configured []providers.Provider
	for _, src := range []providers.SourceConfig{
		{Name: "github", Kind: "github", Secrets: verify.Secrets{"gh"}},
		{Name: "stripe", Kind: "stripe", Secrets: verify.Secrets{"whsec_s"}, Tolerance: time.Minute},
	} {
		p, err := providers.New(src)
		if err != nil {
			t.Fatal(err)
		}
		configured = append(configured, p)
	}
	registry, err := providers.NewRegistry(configured...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Resolved{Config: config.Config{GitHubSecrets: config.SecretList{"gh"}, StripeSecrets: config.SecretList{"whsec_s"},
		StripeTolerance: time.Minute}, Providers: registry}
	return Env{
		Config:    cfg,
		Providers: registry,
		Open: func(context.Context, int) (*pgxpool.Pool, func(), error) {
			return nil, nil, errors.New("no database in this test")
		},
		Stdout: io.Discard,
	}
}

// The gateway's process is the one that listens on the measured port, not
// any process named gateway.
func TestListeningPIDFindsTheListener(t *testing.T) {
	if os.Getenv("BENCH_LISTEN_HELPER") == "1" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(1)
		}
		fmt.Println(ln.Addr().String())
		time.Sleep(time.Minute) // a listener to be found, until the test kills it; no wait on the code under test
		os.Exit(0)
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestListeningPIDFindsTheListener$")
	cmd.Env = append(os.Environ(), "BENCH_LISTEN_HELPER=1")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if got := listeningPID("http://" + strings.TrimSpace(addr)); got != cmd.Process.Pid {
		t.Fatalf("listeningPID = %d, want the helper's %d", got, cmd.Process.Pid)
	}
	if got := listeningPID("http://127.0.0.1:1"); got != 0 {
		t.Fatalf("nothing listens on port 1, yet listeningPID = %d", got)
	}
}
