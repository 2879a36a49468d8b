package hookgate_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/verify"
)

// received are the requests a notification's receiver got.
type received struct {
	mu   sync.Mutex
	reqs []receivedReq
}

type receivedReq struct {
	header http.Header
	body   []byte
}

func (r *received) server(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, receivedReq{req.Header.Clone(), b})
		r.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (r *received) all() []receivedReq {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedReq(nil), r.reqs...)
}

// A dispatch discarded reaches a Slack notification and a webhook
// notification signed like forwards, each once however many dispatches of
// the route are discarded within 10 minutes; the gateway's signature
// failures reach the webhook too.
func TestNotificationsReachPeopleOnceIn10Minutes(t *testing.T) {
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such customer", http.StatusUnprocessableEntity) // refused for good: discarded at once
	}))
	t.Cleanup(refusing.Close)
	var slack, hook received
	slackURL, hookURL := slack.server(t).URL, hook.server(t).URL
	const forwardSecret = "forward-secret-for-notifications"
	g := runGateway(t, hookgate.Config{
		PublicURL:      "https://hookgate.example.com",
		ForwardSecrets: hookgate.SecretList{forwardSecret},
		Routes:         []hookgate.Route{{Name: "billing", Match: []string{"stripe:invoice.*"}, Target: refusing.URL}},
		Notifications: []hookgate.Notification{
			{Name: "oncall", Kind: "slack", URL: slackURL, Events: []string{"dispatch.discarded"}},
			{Name: "pager", Kind: "webhook", URL: hookURL, Events: []string{"dispatch.discarded", "ingest.signature_failures"}},
		},
	})
	for i := range 3 {
		if got := stripeSends(g.gw.Addr(), invoice(fmt.Sprint("ntf", i), "invoice.paid")); got != "202 accepted" {
			t.Fatalf("delivery %d: %s", i, got)
		}
	}
	dbtest.Eventually(t, 30*time.Second, "a discard notified to both", func() error {
		if len(slack.all()) == 0 || len(hook.all()) == 0 {
			return fmt.Errorf("slack %d, webhook %d", len(slack.all()), len(hook.all()))
		}
		return nil
	})
	// Every dispatch is discarded by now or soon; give the others time to
	// (not) notify.
	dbtest.Eventually(t, 30*time.Second, "every dispatch discarded", func() error {
		var n int
		if err := g.gw.Pool().QueryRow(t.Context(), `SELECT count(*) FROM hookgate_dispatches WHERE state = 'discarded'`).Scan(&n); err != nil {
			return err
		}
		if n != 3 {
			return fmt.Errorf("%d discarded", n)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	if n := len(slack.all()); n != 1 {
		t.Errorf("slack got %d notifications of one route's discards, want 1", n)
	}
	var text struct{ Text string }
	if err := json.Unmarshal(slack.all()[0].body, &text); err != nil || !strings.Contains(text.Text, "route billing discarded") ||
		!strings.Contains(text.Text, "https://hookgate.example.com/admin/ui/deliveries/stripe/evt_ntf") {
		t.Errorf("slack's text %s (%v)", slack.all()[0].body, err)
	}

	discards := 0
	for _, r := range hook.all() {
		var p struct {
			Type       string  `json:"type"`
			Route      *string `json:"route"`
			Provider   *string `json:"provider"`
			Count      int     `json:"count"`
			Since      string  `json:"since"`
			Message    string  `json:"message"`
			ConsoleURL *string `json:"console_url"`
		}
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("webhook body %s: %v", r.body, err)
		}
		// Signed as forwards are: Standard Webhooks over id, time and body.
		id, ts := r.header.Get("webhook-id"), r.header.Get("webhook-timestamp")
		at, err := time.Parse(time.RFC3339, p.Since)
		if err != nil || !strings.HasPrefix(id, "ntf_") || ts == "" {
			t.Fatalf("webhook headers %v, since %q", r.header, p.Since)
		}
		sec, _ := time.ParseDuration(ts + "s")
		want, err := verify.SignStandard("whsec_"+b64(forwardSecret), id, time.Unix(int64(sec.Seconds()), 0), r.body)
		if err != nil || r.header.Get("webhook-signature") != want {
			t.Errorf("webhook-signature %q, want %q (%v)", r.header.Get("webhook-signature"), want, err)
		}
		if p.Type == "dispatch.discarded" {
			discards++
			if p.Route == nil || *p.Route != "billing" || p.Provider == nil || *p.Provider != "stripe" || p.Count != 1 ||
				at.IsZero() || !strings.Contains(p.Message, "no such customer") || p.ConsoleURL == nil {
				t.Errorf("webhook notification %s", r.body)
			}
		}
	}
	if discards != 1 {
		t.Errorf("the webhook got %d notifications of one route's discards, want 1", discards)
	}

	// A delivery whose signature is wrong: told to the webhook.
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.gw.Addr()+"/webhooks/stripe", strings.NewReader(invoice("forged", "invoice.paid")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", fmt.Sprintf("t=%d,v1=%064x", time.Now().Unix(), 0))
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a forged delivery: %v %v", res, err)
	}
	res.Body.Close()
	dbtest.Eventually(t, 30*time.Second, "the signature failure notified", func() error {
		for _, r := range hook.all() {
			if strings.Contains(string(r.body), `"type":"ingest.signature_failures"`) && strings.Contains(string(r.body), `"provider":"stripe"`) {
				return nil
			}
		}
		return fmt.Errorf("%d webhook notifications", len(hook.all()))
	})

	dbtest.Eventually(t, 10*time.Second, "the notifications counted", func() error {
		m := metricsOf(t, g)
		for _, want := range []string{
			`hookgate_notifications_total{notification="oncall",result="sent"} 1`,
			`hookgate_notifications_total{notification="pager",result="sent"} 2`,
			`hookgate_notifications_total{notification="oncall",result="failed"} 0`,
			`hookgate_notifications_total{notification="oncall",result="suppressed"} 2`,
		} {
			if !strings.Contains(m, want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		return nil
	})
}

// A notification's mistakes stop the gateway, each named: a webhook kind
// without GATEWAY_FORWARD_SECRET, an unknown event, a name used twice.
func TestNotificationsRefusedAtStart(t *testing.T) {
	t.Parallel()
	cfg := hookgate.Config{
		DatabaseURL:   "postgres://127.0.0.1:1/none",
		StripeSecrets: hookgate.SecretList{"whsec_x"},
		Notifications: []hookgate.Notification{
			{Name: "pager", Kind: "webhook", URL: "https://example.com/h", Events: []string{"dispatch.discarded"}},
			{Name: "pager", Kind: "slack", URL: "https://example.com/s", Events: []string{"route.on_fire"}},
			{Name: "x", Kind: "email", URL: "ftp://example.com", Events: nil},
		},
	}
	_, err := hookgate.New(cfg, hookgate.WithLogger(quiet))
	if err == nil {
		t.Fatal("New accepted bad notifications")
	}
	for _, want := range []string{"GATEWAY_FORWARD_SECRET", `"route.on_fire" is none of`, "used by another notification",
		`kind: slack or webhook, not "email"`, "absolute http(s) URL", "events: name at least one"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// metricsOf is the gateway's /metrics page.
func metricsOf(t *testing.T, g *running) string {
	t.Helper()
	res, err := http.Get("http://" + g.gw.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
