package hookgate_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// A developer's loop: gateway listen posts each dispatch of a listen route
// to a local URL with the delivery's body and headers, signed with
// HOOKGATE_LISTEN_SECRET, a line per delivery; the dispatches waiting while
// it was away come when it connects; with --from it first replays the
// route's stored deliveries. deliveries export writes them as fixtures, and
// send --file posts them again, keeping their ids: the same gateway answers
// duplicate.
func TestGatewayListenBringsRealDeliveriesToALaptop(t *testing.T) {
	type got struct {
		id, event, body string
		verified        bool
	}
	var mu sync.Mutex
	var local []got
	wh, err := standardwebhooks.NewWebhookRaw([]byte("listen-secret"))
	if err != nil {
		t.Fatal(err)
	}
	laptop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		local = append(local, got{r.Header.Get("X-Hookgate-Delivery"), r.Header.Get("X-Hookgate-Event"), string(b), wh.Verify(b, r.Header) == nil})
		mu.Unlock()
	}))
	t.Cleanup(laptop.Close)
	received := func() []got {
		mu.Lock()
		defer mu.Unlock()
		return append([]got(nil), local...)
	}
	g := runGateway(t, hookgate.Config{GitHubSecrets: hookgate.SecretList{"gh-secret"},
		Routes: []hookgate.Route{{Name: "dev", Match: []string{"stripe:invoice.*"}, Target: "listen"}}})
	vars := map[string]string{cli.URLVariable: "http://" + g.gw.Addr(), cli.TokenVariable: "admin-token", cli.ListenSecretVariable: "listen-secret"}
	reg, err := providers.NewRegistry(providers.GitHub{Secrets: verify.Secrets{"gh-secret"}}, providers.Stripe{Secrets: verify.Secrets{stripeSecret}, Tolerance: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, out io.Writer, args ...string) error {
		return cli.Run(ctx, cli.Env{Getenv: func(k string) string { return vars[k] }, Stdout: out, Stderr: io.Discard, Providers: reg}, args)
	}
	// listenFor runs gateway listen until the laptop has n deliveries.
	listenFor := func(n int, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		out := &dbtest.Buffer{}
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, out, append([]string{"listen", "dev", "--forward-to", laptop.URL + "/hooks"}, args...)...)
		}()
		dbtest.Eventually(t, 20*time.Second, fmt.Sprintf("the laptop gets %d deliveries", n), func() error {
			if got := len(received()); got < n {
				return fmt.Errorf("%d so far; the listener printed %q", got, out.String())
			}
			return nil
		})
		cancel()
		if err := <-done; err != nil {
			t.Errorf("listen: %v", err)
		}
		return out.String()
	}

	// Sent while nobody listens: they wait.
	sendStripe(t, g, invoice("a1", "invoice.paid"))
	sendStripe(t, g, invoice("a2", "invoice.created"))
	out := listenFor(2)
	for _, want := range []string{"stripe invoice.paid evt_a1 → 200", "stripe invoice.created evt_a2 → 200", "listening to route dev"} {
		if !strings.Contains(out, want) {
			t.Errorf("the listener's lines do not say %q:\n%s", want, out)
		}
	}
	for _, r := range received() {
		if !r.verified || !strings.HasPrefix(r.body, `{"id":"`+r.id) {
			t.Errorf("the laptop got %+v; want the body as sent, signed with HOOKGATE_LISTEN_SECRET", r)
		}
	}
	eventually(t, g, "a1", "succeeded")

	// Away, a third one comes; back with --from, the two before come again
	// (replayed) beside it.
	sendStripe(t, g, invoice("a3", "invoice.paid"))
	out = listenFor(5, "--from", "1h")
	// evt_a3's dispatch is still waiting: it comes once, not replayed.
	if !strings.Contains(out, "replaying 2 stored deliveries of route dev since 1h") || !strings.Contains(out, "evt_a3 → 200") {
		t.Errorf("listen --from printed:\n%s", out)
	}

	// Fixtures: exported, oldest first, and sent again to the gateway that
	// has them. A GitHub delivery keeps its hook id, its receipt's scope.
	push := []byte(`{"ref":"refs/heads/main","after":"abc"}`)
	req, err := providers.NewRequest(context.Background(), providers.GitHub{Secrets: verify.Secrets{"gh-secret"}}.Source(),
		"http://"+g.gw.Addr()+"/webhooks/github", push, "gh-a4", "push", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-GitHub-Hook-ID", "777")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusAccepted {
		t.Fatalf("the push: %v %v", res, err)
	}
	var exported bytes.Buffer
	if err := run(context.Background(), &exported, "deliveries", "export"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(exported.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], `"delivery_id":"evt_a1"`) || !strings.Contains(lines[3], `"X-GitHub-Hook-ID":"777"`) {
		t.Fatalf("the export, oldest first: %d lines\n%s", len(lines), exported.String())
	}
	file := t.TempDir() + "/fixtures.ndjson"
	if err := writeFileString(file, exported.String()); err != nil {
		t.Fatal(err)
	}
	var answers bytes.Buffer
	if err := run(context.Background(), &answers, "send", "--file", file); err != nil {
		t.Fatalf("send --file: %v\n%s", err, answers.String())
	}
	if n := strings.Count(answers.String(), `"status":"duplicate"`); n != 4 {
		t.Errorf("send --file to the same gateway: %d duplicates; want 4\n%s", n, answers.String())
	}
	// To a gateway without them, they are new, each with its own id.
	h := runGateway(t, hookgate.Config{GitHubSecrets: hookgate.SecretList{"gh-secret"}})
	answers.Reset()
	vars[cli.URLVariable] = "http://" + h.gw.Addr()
	if err := run(context.Background(), &answers, "send", "--file", file); err != nil {
		t.Fatalf("send --file to another gateway: %v\n%s", err, answers.String())
	}
	if n := strings.Count(answers.String(), `"status":"accepted"`); n != 4 || !strings.Contains(answers.String(), `"delivery_id":"evt_a1"`) {
		t.Errorf("send --file to another gateway:\n%s", answers.String())
	}
	var shown struct{ Receipts []struct{ Scope string } }
	h.admin(t, "/admin/deliveries/github/gh-a4", &shown)
	if len(shown.Receipts) != 1 || shown.Receipts[0].Scope != "777" {
		t.Errorf("the push sent again: receipts %+v; want its hook id 777 as scope", shown.Receipts)
	}
}

func writeFileString(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
