package recovery_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/recovery"
)

// watched is a Recoverer's metrics and WARN log, for a test to read.
type watched struct {
	m   *metrics.Metrics
	log dbtest.Buffer
}

// watchedRecoverer returns a Recoverer of g's database with the given
// clients, fresh metrics and a logger of what is WARN or worse, and those
// metrics and that log.
func (g *gateway) watchedRecoverer(gh *recovery.GitHub, st *recovery.Stripe) (*recovery.Recoverer, *watched) {
	w := &watched{m: metrics.New(nil)}
	r := recovery.NewRecoverer(g.pool, g.ingester, w.m, recovery.RecovererConfig{GitHub: gh, Stripe: st, MinAge: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&w.log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	return r, w
}

// metric returns a series' value as /metrics shows it, "" when absent.
func (w *watched) metric(series string) string {
	rec := httptest.NewRecorder()
	w.m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// failedOnce checks that the run was counted failed, not ok, and logged at
// WARN.
func (w *watched) failedOnce(t *testing.T, provider string) {
	t.Helper()
	if got := w.metric(`hookgate_recovery_runs_total{provider="` + provider + `",result="failed"}`); got != "1" {
		t.Errorf("failed runs counted: %q, want 1", got)
	}
	if got := w.metric(`hookgate_recovery_runs_total{provider="` + provider + `",result="ok"}`); got != "" {
		t.Errorf("ok runs counted: %s, want none", got)
	}
	log := w.log.String()
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "a run failed") {
		t.Errorf("the failed run was not logged at WARN: %q", log)
	}
}

// setCheckpoint puts source's checkpoint at a known time and returns it.
func setCheckpoint(t *testing.T, g *gateway, source string) time.Time {
	t.Helper()
	at := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	if _, err := g.pool.Exec(context.Background(), `INSERT INTO hookgate_recovery_checkpoints (source, checkpoint) VALUES ($1, $2)
		ON CONFLICT (source) DO UPDATE SET checkpoint = excluded.checkpoint`, source, at); err != nil {
		t.Fatal(err)
	}
	return at
}

func checkpointUnchanged(t *testing.T, g *gateway, source string, want time.Time) {
	t.Helper()
	var got time.Time
	if err := g.pool.QueryRow(context.Background(), `SELECT checkpoint FROM hookgate_recovery_checkpoints WHERE source = $1`, source).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) {
		t.Errorf("checkpoint of %s moved from %s to %s", source, want, got)
	}
}

// neverSeen checks that the other server got no request, so no credential.
func neverSeen(t *testing.T, e *elsewhere) {
	t.Helper()
	if got := e.seen(); len(got) > 0 {
		t.Errorf("the other server got %d requests: %q", len(got), got)
	}
}

func redirectWhen(method, path string, code int) func(*http.Request) int {
	re := regexp.MustCompile(path)
	return func(r *http.Request) int {
		if r.Method == method && re.MatchString(r.URL.Path) {
			return code
		}
		return 0
	}
}

// A redirect of GitHub's API to another port of the same host is not
// followed, on the deliveries' listing (302) or on a redelivery request
// (307): the other server never sees the token, and the run fails, counted
// and logged, its checkpoint where it was. Followed, the other server's
// empty answers passed for the truth.
func TestRecoveryFollowsNoRedirectAwayFromGitHub(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	for _, c := range []struct {
		name     string
		redirect func(*http.Request) int
	}{
		{"the listing", redirectWhen(http.MethodGet, `/deliveries$`, http.StatusFound)},
		{"a redelivery request", redirectWhen(http.MethodPost, `/attempts$`, http.StatusTemporaryRedirect)},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeGitHub(t, ghSecret)
			f.target = g.srv.URL + "/webhooks/github"
			other := newElsewhere(t)
			f.redirect, f.redirectTo = c.redirect, other.srv.URL
			guid := fmt.Sprintf("ab000000-0000-4000-8000-%012d", len(c.name))
			f.add("acme/api/42", 42, guid, "push", pushBody(len(c.name)), time.Now().Add(-time.Hour), 503)
			cp := setCheckpoint(t, g, "github:repo:acme/api:42")
			r, w := g.watchedRecoverer(githubClient(t, f, "repo:acme/api:42"), nil)
			rep, err := r.Run(context.Background(), "github", recovery.Options{})
			if !errors.Is(err, recovery.ErrRedirectRefused) {
				t.Errorf("run: %v, want ErrRedirectRefused", err)
			}
			if len(rep.Requested) != 0 {
				t.Errorf("requested %v", rep.Requested)
			}
			neverSeen(t, other)
			w.failedOnce(t, "github")
			checkpointUnchanged(t, g, "github:repo:acme/api:42", cp)
			// A request GitHub never had is no ask.
			if n := count(t, g.pool, `SELECT count(*) FROM hookgate_recovery_requests WHERE delivery_id = $1`, guid); n != 0 {
				t.Errorf("the redirected request was counted as an ask")
			}
		})
	}
}

// The same with a GitHub App: a redirect of the installation's lookup, of
// the token exchange (POST /app/installations/{id}/access_tokens), of the
// App's own hook's listing (all with the App's JWT), and of a listing or a
// redelivery with the installation token.
func TestRecoveryFollowsNoRedirectWithAGitHubApp(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name, hook string
		redirect   func(*http.Request) int
	}{
		{"the installation's lookup", "repo:acme/api:42", redirectWhen(http.MethodGet, `^/repos/acme/api/installation$`, http.StatusFound)},
		{"the token exchange", "repo:acme/api:42", redirectWhen(http.MethodPost, `^/app/installations/99/access_tokens$`, http.StatusTemporaryRedirect)},
		{"the App hook's listing", "app", redirectWhen(http.MethodGet, `^/app/hook/deliveries$`, http.StatusFound)},
		{"a listing with the installation token", "repo:acme/api:42", redirectWhen(http.MethodGet, `^/repos/acme/api/hooks/42/deliveries$`, http.StatusFound)},
		{"a redelivery with the installation token", "repo:acme/api:42", redirectWhen(http.MethodPost, `/attempts$`, http.StatusTemporaryRedirect)},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeGitHub(t, ghSecret)
			f.target = g.srv.URL + "/webhooks/github"
			f.appID, f.appKey, f.installation, f.installToken, f.token = 314, &key.PublicKey, 99, "ghs_installation", "-"
			other := newElsewhere(t)
			f.redirect, f.redirectTo = c.redirect, other.srv.URL
			logKey := "acme/api/42"
			if c.hook == "app" {
				logKey = "app"
			}
			f.add(logKey, 555, fmt.Sprintf("ac000000-0000-4000-8000-%012d", i), "push", pushBody(i), time.Now().Add(-time.Hour), 503)
			source := "github:" + c.hook
			cp := setCheckpoint(t, g, source)
			hooks, _ := recovery.ParseHooks(c.hook)
			gh, err := recovery.NewGitHub(recovery.GitHubConfig{Hooks: hooks, AppID: 314, AppKeyFile: keyFile, APIURL: f.srv.URL, MutationGap: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			r, w := g.watchedRecoverer(gh, nil)
			rep, err := r.Run(context.Background(), "github", recovery.Options{})
			if !errors.Is(err, recovery.ErrRedirectRefused) {
				t.Errorf("run: %v, want ErrRedirectRefused", err)
			}
			if len(rep.Requested) != 0 {
				t.Errorf("requested %v", rep.Requested)
			}
			neverSeen(t, other)
			w.failedOnce(t, "github")
			checkpointUnchanged(t, g, source, cp)
		})
	}
}

// A redirect of Stripe's listing to another port of the same host is not
// followed: the other server never sees the key, and the run fails, counted
// and logged, its checkpoint where it was. Followed, stripe-go sent the key
// there (Go keeps Authorization for another port of the same host) and the
// other server's empty list passed for "0 events".
func TestStripeRecoveryFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			st := newFakeStripe(t, stripeKey)
			other := newElsewhere(t)
			st.redirect, st.redirectTo = code, other.srv.URL
			st.events = append(st.events, stripeEvent("evt_redirected", "invoice.paid", "in_r", time.Now().Add(-time.Hour)))
			cp := setCheckpoint(t, g, "stripe")
			client, err := recovery.NewStripe(recovery.StripeConfig{APIKey: stripeKey, APIURL: st.srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			r, w := g.watchedRecoverer(nil, client)
			_, err = r.Run(context.Background(), "stripe", recovery.Options{})
			if !errors.Is(err, recovery.ErrRedirectRefused) {
				t.Errorf("run: %v, want ErrRedirectRefused", err)
			}
			neverSeen(t, other)
			w.failedOnce(t, "stripe")
			checkpointUnchanged(t, g, "stripe", cp)
		})
	}
}

// An answer that is not the API's well-formed answer (an empty or null
// body, a delivery without an id or a time, an HTML page for GitHub; an
// object that is not a list of events, or an HTML page, for Stripe) fails
// the run, counted and logged, its checkpoint where it was: it never passes
// for "nothing missing".
func TestRecoveryTakesNoMalformedAnswerForNothingMissing(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	for _, c := range []struct {
		provider, name, contentType, body string
	}{
		{"github", "an empty body", "application/json", ``},
		{"github", "null", "application/json", `null`},
		{"github", "an object", "application/json", `{"deliveries":[]}`},
		{"github", "a delivery without an id or a time", "application/json", `[{}]`},
		{"github", "an HTML page", "text/html", `<html><body>Sign in</body></html>`},
		{"stripe", "an empty object", "application/json", `{}`},
		{"stripe", "a list without data", "application/json", `{"object":"list","has_more":false,"url":"/v1/events"}`},
		{"stripe", "data that is not an array", "application/json", `{"object":"list","data":{},"has_more":false}`},
		{"stripe", "another object", "application/json", `{"object":"event","data":[],"has_more":false}`},
		{"stripe", "an empty body", "application/json", ``},
		{"stripe", "an HTML page", "text/html", `<html><body>Sign in</body></html>`},
	} {
		t.Run(c.provider+" "+c.name, func(t *testing.T) {
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", c.contentType)
				fmt.Fprint(w, c.body)
			}))
			defer api.Close()
			var gh *recovery.GitHub
			var st *recovery.Stripe
			var err error
			source := "stripe"
			if c.provider == "github" {
				hooks, _ := recovery.ParseHooks("repo:acme/api:42")
				if gh, err = recovery.NewGitHub(recovery.GitHubConfig{Hooks: hooks, Token: "t", APIURL: api.URL}); err != nil {
					t.Fatal(err)
				}
				source = "github:repo:acme/api:42"
			} else if st, err = recovery.NewStripe(recovery.StripeConfig{APIKey: "rk_test", APIURL: api.URL}); err != nil {
				t.Fatal(err)
			}
			cp := setCheckpoint(t, g, source)
			r, w := g.watchedRecoverer(gh, st)
			if _, err := r.Run(context.Background(), c.provider, recovery.Options{}); err == nil {
				t.Errorf("%s taken for nothing missing", c.name)
			}
			w.failedOnce(t, c.provider)
			checkpointUnchanged(t, g, source, cp)
		})
	}
}

// A Stripe event larger than GATEWAY_MAX_BODY_BYTES is skipped, reported
// with why, logged and counted, and never stored; the others are stored
// byte for byte.
func TestStripeRecoverySkipsAnEventPastTheMaxBodyBytes(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	st := newFakeStripe(t, stripeKey)
	at := time.Now().Add(-time.Hour)
	big := stripeEvent("evt_big", "invoice.paid", "in_big", at.Add(time.Minute))
	big["data"].(map[string]any)["object"].(map[string]any)["lines"] = strings.Repeat("x", 8<<10)
	st.events = []map[string]any{
		stripeEvent("evt_small1", "invoice.paid", "in_s1", at),
		big,
		stripeEvent("evt_small2", "invoice.paid", "in_s2", at.Add(2*time.Minute)),
	}
	// Through Clients, as the gateway builds it.
	_, client, err := recovery.Clients(recovery.Settings{StripeAPIKey: stripeKey, StripeAPIURL: st.srv.URL, MaxBodyBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	r, w := g.watchedRecoverer(nil, client)
	rep, err := r.Run(context.Background(), "stripe", recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rep.Stored) != "[evt_small1 evt_small2]" {
		t.Errorf("stored %v, want the two small events", rep.Stored)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].DeliveryID != "evt_big" || !strings.Contains(rep.Skipped[0].Reason, "GATEWAY_MAX_BODY_BYTES") {
		t.Errorf("skipped %+v, want evt_big, past GATEWAY_MAX_BODY_BYTES", rep.Skipped)
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_receipts WHERE delivery_id = 'evt_big'`); n != 0 {
		t.Errorf("the event past the max body bytes was stored")
	}
	for _, i := range []int{0, 2} {
		var body []byte
		if err := g.pool.QueryRow(context.Background(), `SELECT body FROM hookgate_receipts WHERE delivery_id = $1`, st.events[i]["id"]).Scan(&body); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body, st.raw(st.events[i])) {
			t.Errorf("%s stored as\n%s\nthe API returned\n%s", st.events[i]["id"], body, st.raw(st.events[i]))
		}
	}
	if got := w.metric(`hookgate_recovery_total{outcome="skipped",provider="stripe"}`); got != "1" {
		t.Errorf("skipped counted: %q, want 1", got)
	}
	log := w.log.String()
	if !strings.Contains(log, "evt_big") {
		t.Errorf("the skipped event was not logged: %q", log)
	}
}
