package deploy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// startGateway runs a gateway, as `gateway serve` does, with providers, a
// route and recovery for both providers (their APIs faked: nothing to
// recover), until the test ends, and returns its address once it serves.
func startGateway(t *testing.T) string {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			w.Write([]byte(`{"object":"list","url":"/v1/events","data":[],"has_more":false}`))
			return
		}
		w.Write([]byte(`[]`))
	}))
	t.Cleanup(api.Close)
	for name, value := range map[string]string{
		"DATABASE_URL":          dbtest.URL(t),
		"GATEWAY_ADDR":          "127.0.0.1:0",
		"GATEWAY_METRICS_ADDR":  "",
		"GATEWAY_CONFIG_FILE":   "",
		"GITHUB_WEBHOOK_SECRET": "It's a Secret to Everybody",
		"STRIPE_WEBHOOK_SECRET": "whsec_deploy",
		"GATEWAY_ROUTES":        "ci=github:push>http://127.0.0.1:9/ci billing=stripe:invoice.*>http://127.0.0.1:9/billing",
		"GITHUB_RECOVERY_HOOKS": "repo:acme/api:1",
		"GITHUB_TOKEN":          "ghp_deploytest",
		"GITHUB_API_URL":        api.URL,
		"STRIPE_API_KEY":        "sk_test_deploy",
		"STRIPE_API_URL":        api.URL,
	} {
		t.Setenv(name, value)
	}
	cfg, err := hookgate.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	gw, err := hookgate.New(cfg, hookgate.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case <-gw.Started():
	case err := <-done:
		t.Fatalf("the gateway stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not start within 60 s")
	}
	return gw.Addr()
}

// Every metric an alerting rule or a dashboard panel queries, with the label
// values it names, is exported by a gateway from its start, before any
// delivery, dispatch or recovery: an alert on a series that does not exist
// yet cannot fire, and a counter that first appears at 1 hides that increase.
func TestQueriedMetricsExportedFromStart(t *testing.T) {
	addr := startGateway(t)
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", res.StatusCode)
	}
	exported := series(string(b))
	n := 0
	for where, sels := range queried(t) {
		for _, s := range sels {
			n++
			for _, m := range s.missing(exported) {
				t.Errorf("%s reads %s, which a gateway does not export from its start", where, m)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d selectors found in the rules and the dashboard", n)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", b)
	}
}
