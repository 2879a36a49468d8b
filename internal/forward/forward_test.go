package forward_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/version"
)

// newTarget is a local forward target that answers from a script.
func newTarget(t testing.TB, answer func(r *http.Request) (int, map[string]string)) *httptest.Server {
	t.Helper()
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server see the client hang up (and end
		// r's context) while the answer is held back.
		_, _ = io.ReadAll(r.Body)
		status, header := answer(r)
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(tg.Close)
	return tg
}

// A target URL's userinfo and query values never reach an error, and so
// never the dispatch's last_error or the log.
func TestForwardErrorsRedactTheTargetURL(t *testing.T) {
	t.Parallel()
	redirect := newTarget(t, func(*http.Request) (int, map[string]string) {
		return http.StatusFound, map[string]string{"Location": "http://other:pw3@example.invalid/x?sig=secret3"}
	})
	f := forward.New(nil, 2*time.Second, 1)
	d := handlers.Delivery{Provider: "github", DeliveryID: "d-1", Route: "r", Body: []byte(`{}`), ContentType: "application/json"}
	for _, target := range []string{
		"http://user:pw1@127.0.0.1:1/hook?token=secret1&b=2", // refused connection
		"http://user:pw2@[::1%25zz]:1/?token=secret2",        // not a URL a request can be made of
		redirect.URL + "/?token=secret3",                     // a redirect that is not followed
	} {
		err := f.Forward(context.Background(), target, d)
		if err == nil {
			t.Fatalf("%s: no error", target)
		}
		for _, secret := range []string{"pw1", "pw2", "pw3", "secret1", "secret2", "secret3"} {
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error shows %q: %v", secret, err)
			}
		}
		t.Logf("%v", err)
	}
	if got := fanout.RedactURL("https://u:p@h.example/p?token=t&x=1#frag"); got != "https://h.example/p?token=&x=" {
		t.Fatalf("RedactURL = %q", got)
	}
}

// Each forward attempt's outcome has a name for metrics, by what the target
// did.
func TestForwardAttemptOutcomes(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	tg := newTarget(t, func(r *http.Request) (int, map[string]string) {
		switch r.URL.Path {
		case "/busy":
			return 503, nil
		case "/gone":
			return 404, nil
		case "/hang":
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
		return 200, nil
	})
	f := forward.New(nil, 300*time.Millisecond, 1)
	d := handlers.Delivery{Provider: "github", DeliveryID: "d-1", Route: "r", Body: []byte(`{}`), ContentType: "application/json"}
	for target, want := range map[string]string{
		tg.URL + "/ok": "succeeded", tg.URL + "/busy": "status_5xx", tg.URL + "/gone": "status_4xx",
		tg.URL + "/hang": "timeout", "http://127.0.0.1:1/": "connection",
	} {
		if got := forward.Outcome(f.Forward(context.Background(), target, d)); got != want {
			t.Errorf("%s: %s, want %s", target, got, want)
		}
	}
}

// forwardOnce forwards d once with a Client holding secrets to a target that
// keeps what it received, and returns the request's headers and body.
func forwardOnce(t *testing.T, secrets []string, d handlers.Delivery) (http.Header, []byte) {
	t.Helper()
	var header http.Header
	var body []byte
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Clone()
		body, _ = io.ReadAll(r.Body)
	}))
	t.Cleanup(tg.Close)
	if err := forward.New(secrets, 2*time.Second, 1).Forward(context.Background(), tg.URL, d); err != nil {
		t.Fatal(err)
	}
	return header, body
}

// receiver is a target that holds one secret and verifies webhook-signature
// with the Standard Webhooks library: NewWebhook, which base64-decodes a
// whsec_ secret, or, raw, NewWebhookRaw, which keys by the secret's bytes.
type receiver struct {
	secret string
	raw    bool
}

func (rc receiver) String() string {
	if rc.raw {
		return "NewWebhookRaw(" + rc.secret + ")"
	}
	return "NewWebhook(" + rc.secret + ")"
}

func (rc receiver) verify(body []byte, header http.Header) error {
	wh, err := standardwebhooks.NewWebhook(rc.secret)
	if rc.raw {
		wh, err = standardwebhooks.NewWebhookRaw([]byte(rc.secret))
	}
	if err != nil {
		return err
	}
	return wh.Verify(body, header)
}

// A forward is signed with each configured secret, in both schemes, so an
// off-the-shelf verifier holding any one of them accepts it:
// webhook-signature through the Standard Webhooks library, as NewWebhook
// (for a whsec_<base64> secret, keyed by its decoded bytes) or NewWebhookRaw
// (for any other secret, keyed by its own bytes); X-Hookgate-Signature
// through Stripe's library, keyed by the secret's own bytes, whsec_ or not.
// A receiver with another secret, or the wrong kind of constructor, refuses
// it, and every receiver refuses a tampered body.
func TestForwardSignaturesVerifyWithEachSecret(t *testing.T) {
	t.Parallel()
	const (
		whsecOld = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		whsecNew = "whsec_bmV3LWZvcndhcmQta2V5LXRoaXJ0eS10d28hIQ=="
		plain    = "fwd-secret"
		// Base64 without the whsec_ prefix is still a plain secret.
		plainB64 = "c2VjcmV0LWtleQ=="
		// whsec_ without base64 after it is not the Standard Webhooks form.
		notWhsec = "whsec_not base64!"
	)
	tests := []struct {
		name    string
		secrets []string
		accept  []receiver
		refuse  []receiver
	}{
		{"a whsec_ secret", []string{whsecOld},
			[]receiver{{whsecOld, false}},
			[]receiver{{whsecOld, true}, {whsecNew, false}}},
		{"a plain secret", []string{plain},
			[]receiver{{plain, true}},
			[]receiver{{"fwd-secret2", true}}},
		{"a plain secret that reads as base64", []string{plainB64},
			[]receiver{{plainB64, true}},
			[]receiver{{plainB64, false}}},
		{"whsec_ without base64", []string{notWhsec},
			[]receiver{{notWhsec, true}},
			[]receiver{{whsecOld, false}}},
		{"rotation: two whsec_ secrets", []string{whsecOld, whsecNew},
			[]receiver{{whsecOld, false}, {whsecNew, false}},
			[]receiver{{"whsec_d3JvbmctZm9yd2FyZC1rZXk=", false}}},
		{"rotation: a whsec_ secret and a plain one", []string{whsecOld, plain},
			[]receiver{{whsecOld, false}, {plain, true}},
			[]receiver{{plainB64, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := handlers.Delivery{Provider: "github", DeliveryID: "d-1", Event: "push", Route: "r",
				Body: []byte(`{"zen":"Design for failure."}`), ContentType: "application/json"}
			header, body := forwardOnce(t, tt.secrets, d)
			tampered := []byte(`{"zen":"Design for failure!"}`)

			if id := header.Get("webhook-id"); id != "github:d-1:r" || id != header.Get("Idempotency-Key") {
				t.Errorf("webhook-id = %q, want the Idempotency-Key %q", id, header.Get("Idempotency-Key"))
			}
			ts := header.Get("webhook-timestamp")
			if unix, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(unix, 0)).Abs() > time.Minute {
				t.Errorf("webhook-timestamp = %q, want this attempt's unix time", ts)
			}
			sig := header.Get("X-Hookgate-Signature")
			if !strings.HasPrefix(sig, "t="+ts+",") || strings.Count(sig, ",v1=") != len(tt.secrets) {
				t.Errorf("X-Hookgate-Signature = %q, want t=%s and one v1= per secret", sig, ts)
			}
			if n := len(strings.Fields(header.Get("webhook-signature"))); n != len(tt.secrets) {
				t.Errorf("webhook-signature = %q, want one v1, per secret", header.Get("webhook-signature"))
			}

			for _, rc := range tt.accept {
				if err := rc.verify(body, header); err != nil {
					t.Errorf("%s refuses the forward: %v", rc, err)
				}
				if err := rc.verify(tampered, header); err == nil {
					t.Errorf("%s accepts a tampered body", rc)
				}
			}
			for _, rc := range tt.refuse {
				if err := rc.verify(body, header); err == nil {
					t.Errorf("%s accepts the forward", rc)
				}
			}
			for _, secret := range tt.secrets {
				if err := webhook.ValidatePayload(body, sig, secret); err != nil {
					t.Errorf("X-Hookgate-Signature does not verify with %s alone: %v", secret, err)
				}
				if err := webhook.ValidatePayload(tampered, sig, secret); err == nil {
					t.Errorf("X-Hookgate-Signature verifies a tampered body with %s", secret)
				}
			}
			if err := webhook.ValidatePayload(body, sig, "wrong-secret"); err == nil {
				t.Error("X-Hookgate-Signature verifies with a wrong secret")
			}
		})
	}
}

// Without a secret a forward carries no signature of either scheme; an empty
// secret is none.
func TestForwardWithoutSecretsIsUnsigned(t *testing.T) {
	t.Parallel()
	d := handlers.Delivery{Provider: "github", DeliveryID: "d-1", Route: "r", Body: []byte(`{}`), ContentType: "application/json"}
	for _, secrets := range [][]string{nil, {""}} {
		header, _ := forwardOnce(t, secrets, d)
		for _, name := range []string{"X-Hookgate-Signature", "webhook-id", "webhook-timestamp", "webhook-signature"} {
			if v := header.Get(name); v != "" {
				t.Errorf("secrets %q: the forward carries %s: %q", secrets, name, v)
			}
		}
	}
}

// A forward names the release that sent it, so that a target sees, during a
// rolling upgrade, which gateways still run the older one.
func TestForwardNamesItsRelease(t *testing.T) {
	t.Parallel()
	d := handlers.Delivery{Provider: "github", DeliveryID: "d-1", Route: "r", Body: []byte(`{}`), ContentType: "application/json"}
	header, _ := forwardOnce(t, nil, d)
	if got, want := header.Get("User-Agent"), "hookgate/"+version.Number; got != want {
		t.Errorf("User-Agent = %q; want %q", got, want)
	}
}

// A delivery id travels in headers as printable ASCII: any other byte, and
// %, percent-encoded, so that a receiver reading headers as Latin-1 (Node's,
// Python's servers) verifies the same bytes hookgate signed.
func TestHeaderSafeIDs(t *testing.T) {
	for id, want := range map[string]string{
		"72d3162e-cc78-11e3-81ab-4c9367dc0958": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		"evt/with?odd&chars #1":                "evt/with?odd&chars #1",
		"gh-ünï":                               "gh-%C3%BCn%C3%AF",
		"50%":                                  "50%25",
		"tab\there":                            "tab%09here",
	} {
		if got := forward.HeaderSafe(id); got != want {
			t.Errorf("HeaderSafe(%q) = %q, want %q", id, got, want)
		}
	}
	if got := forward.IdempotencyKey("github", "gh-ü", "ci"); got != "github:gh-%C3%BC:ci" {
		t.Errorf("IdempotencyKey = %q", got)
	}
}
