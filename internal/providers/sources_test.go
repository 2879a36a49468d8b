package providers_test

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// Signatures checked against each sender's published example.

// The Standard Webhooks specification's test vector (also Svix's libraries'
// testSignFunctionWorks): its signature is reproduced, and a delivery with
// these headers passes verification; it fails only for its payload, which
// has no type.
func TestStandardWebhooksPublishedVector(t *testing.T) {
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	at := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	got, err := verify.SignStandard(secret, id, at, body)
	if err != nil || got != want {
		t.Fatalf("SignStandard = %q, %v; want %q", got, err, want)
	}
	p := source(t, providers.SourceConfig{Name: "clerk", Kind: "standard-webhooks", Secrets: verify.Secrets{secret}})
	h := http.Header{"Content-Type": {"application/json"}, "Webhook-Id": {id}, "Webhook-Timestamp": {"1614265330"},
		"Webhook-Signature": {"v1a,bm90IGEgc2lnbmF0dXJl v1,bm9wZQ== " + want}}
	_, err = providers.Parse(p, h, body, at)
	if !errors.Is(err, providers.ErrBadPayload) || !strings.Contains(err.Error(), "type") {
		t.Fatalf("the vector's delivery: %v, want it verified and refused for its missing type", err)
	}
	// Svix's header names are the same scheme.
	h = http.Header{"Content-Type": {"application/json"}, "Svix-Id": {id}, "Svix-Timestamp": {"1614265330"}, "Svix-Signature": {want}}
	d, err := providers.Parse(p, h, []byte(`{"test": 2432232314, "type": "user.created"}`), at)
	if !errors.Is(err, verify.ErrSignatureMismatch) {
		t.Fatalf("another body under the vector's signature: %v, %+v", err, d)
	}
}

// A Standard Webhooks delivery keeps the headers of the family whose
// signature was checked (webhook-* or Svix's svix-*), never the other's:
// those are signed by nothing, and what is kept is shown to operators and
// filters as the delivery's.
func TestStandardWebhooksKeepsOnlyTheVerifiedFamily(t *testing.T) {
	c := kindConfigs()["standard-webhooks"]
	p := source(t, c)
	now := time.Unix(1767225600, 0)
	ts := "1767225600"
	body := providers.Kinds[c.Kind].Sample(c, "msg_1", "user.created", now)
	sig := signedHeader(c, body, "msg_1", "user.created", now).Get("Webhook-Signature")
	for _, tt := range []struct {
		name    string
		headers map[string]string
		want    map[string]string // nil: refused
	}{
		{"webhook-* signed, stray svix-*",
			map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": sig,
				"svix-id": "spoofed-svix", "svix-timestamp": "1", "svix-signature": "v1,c3Bvb2ZlZA=="},
			map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts}},
		{"svix-* signed, stray webhook-timestamp and webhook-signature",
			map[string]string{"svix-id": "msg_1", "svix-timestamp": ts, "svix-signature": sig,
				"webhook-timestamp": "1", "webhook-signature": "v1,c3Bvb2ZlZA=="},
			map[string]string{"svix-id": "msg_1", "svix-timestamp": ts}},
		{"svix-* signed, stray webhook-id: the webhook-* family is the one checked, and it is unsigned",
			map[string]string{"svix-id": "msg_1", "svix-timestamp": ts, "svix-signature": sig, "webhook-id": "spoofed-webhook"},
			nil},
		{"webhook-* signed, User-Agent kept",
			map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": sig, "User-Agent": "Svix-Webhooks/1.0",
				"svix-timestamp": ts},
			map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "User-Agent": "Svix-Webhooks/1.0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {"application/json"}}
			for name, v := range tt.headers {
				h.Set(name, v)
			}
			d, err := providers.Parse(p, h, body, now)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("accepted, keeping %v", d.Headers)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(d.Headers, tt.want) {
				t.Errorf("kept %v, want %v", d.Headers, tt.want)
			}
		})
	}
}

// No kind keeps a header it did not read as its own: a delivery that also
// carries every other kind's headers, and Svix's, keeps none of them.
func TestNoKindKeepsStrayHeaders(t *testing.T) {
	now := time.Now()
	for kind, c := range kindConfigs() {
		t.Run(kind, func(t *testing.T) {
			body := providers.Kinds[kind].Sample(c, "id-1", "thing.created", now)
			h := signedHeader(c, body, "id-1", "thing.created", now)
			stray := http.Header{"Svix-Id": {"x"}, "Svix-Timestamp": {"x"}, "Svix-Signature": {"x"}}
			for other, oc := range kindConfigs() {
				if other != kind {
					maps.Copy(stray, signedHeader(oc, body, "x", "x", now))
				}
			}
			for name, v := range stray {
				if h.Get(name) == "" {
					h[name] = v
				}
			}
			d, err := providers.Parse(source(t, c), h, body, now)
			if err != nil {
				t.Fatal(err)
			}
			for name, v := range d.Headers {
				if stray.Get(name) != "" && h.Get(name) == stray.Get(name) && name != "User-Agent" {
					t.Errorf("kept another kind's header %s: %q", name, v)
				}
			}
		})
	}
}

// slackExample is the body of Slack's "Verifying requests from Slack" worked example.
var slackExample = []byte("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")

// Slack's "Verifying requests from Slack" worked example.
func TestSlackPublishedVector(t *testing.T) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	body := slackExample
	if got := verify.SignSlack(secret, time.Unix(1531420618, 0), body); got != "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503" {
		t.Fatalf("SignSlack = %s", got)
	}
}

// shopifyOrder is an order as Shopify's webhooks send it.
var shopifyOrder = []byte(`{"id":820982911946154508,"email":"jon@example.com","closed_at":null,"created_at":"2021-12-31T19:00:00-05:00","total_price":"403.00","currency":"USD"}`)

// Shopify and the hmac kind publish no fixed vector; these were computed
// with OpenSSL (openssl dgst -<hash> -hmac <secret>), not with this code.
func TestShopifyAndHMACVectorsFromOpenSSL(t *testing.T) {
	order := shopifyOrder
	shop := source(t, providers.SourceConfig{Name: "shop", Kind: "shopify", Secrets: verify.Secrets{"shpss_example_secret"}})
	h := http.Header{"Content-Type": {"application/json"}, "X-Shopify-Webhook-Id": {"b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"},
		"X-Shopify-Topic": {"orders/create"}, "X-Shopify-Shop-Domain": {"example.myshopify.com"},
		"X-Shopify-Hmac-Sha256": {"eMLOYqjwC/1fQ0q9PTeH238wBKchfP3+kCgtHXChmxI="}}
	d, err := providers.Parse(shop, h, order, time.Now())
	if err != nil || d.Event != "orders.create" || d.DeliveryID != "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043" {
		t.Fatalf("Shopify: %+v, %v", d, err)
	}
	// The shop is not signed: kept as a header, never the receipt's scope.
	if d.Scope != "" || d.Headers["X-Shopify-Shop-Domain"] != "example.myshopify.com" {
		t.Errorf("Shopify's scope %q, headers %v", d.Scope, d.Headers)
	}
	// A MAC of the wrong length is refused from the headers alone.
	h.Set("X-Shopify-Hmac-Sha256", "AAAA")
	if _, err := shop.Check(h, time.Now()); !errors.Is(err, verify.ErrSignatureMismatch) {
		t.Errorf("a 3-byte MAC: %v", err)
	}

	paid := []byte(`{"event":"order.paid","order":{"id":"ord_1","paid_at":1767225600}}`)
	at := time.Unix(1767225600, 0)
	for _, c := range []struct {
		scheme providers.HMACScheme
		header http.Header
	}{
		{providers.HMACScheme{SignatureHeader: "X-Acme-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=",
			TimestampHeader: "X-Acme-Timestamp", IDHeader: "X-Acme-Delivery", EventField: "event"},
			http.Header{"X-Acme-Signature": {"sha512=HsOVzTY6qHlwpgqWs2wCMXZhVdw5XMvjz9K9IEW0UjGwWegF/hjbgmD3pG/zfijC1BblF2uLINoOSERuk7gDlQ=="},
				"X-Acme-Timestamp": {"1767225600"}, "X-Acme-Delivery": {"dlv_1"}}},
		{providers.HMACScheme{SignatureHeader: "X-Acme-Signature", Algorithm: "sha1", IDField: "order.id", EventHeader: "X-Acme-Event"},
			http.Header{"X-Acme-Signature": {"e593521ade4ebbff7dc9082de04b061d3e8051d5"}, "X-Acme-Event": {"order.paid"}}},
	} {
		p := source(t, providers.SourceConfig{Name: "acme", Kind: "hmac", Secrets: verify.Secrets{"acme-secret"}, HMAC: c.scheme,
			Order: &providers.OrderPaths{Entity: "order.id", Time: "order.paid_at"}})
		c.header.Set("Content-Type", "application/json")
		d, err := providers.Parse(p, c.header, paid, at)
		if err != nil || d.Event != "order.paid" || (d.DeliveryID != "dlv_1" && d.DeliveryID != "ord_1") ||
			d.Entity != "acme:ord_1" || !d.EventTime.Equal(at) {
			t.Errorf("%s: %+v, %v", c.scheme.Algorithm, d, err)
		}
	}
}

// source is c's Provider, of any kind.
func source(t *testing.T, c providers.SourceConfig) providers.Provider {
	t.Helper()
	p, err := providers.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kindConfigs are a source of each kind, as the tests configure them.
func kindConfigs() map[string]providers.SourceConfig {
	secrets := verify.Secrets{"whsec_bmV3LXNlY3JldC1rZXktMzItYnl0ZXMtbG9uZyEh", "whsec_b2xkLXNlY3JldC1rZXktMzItYnl0ZXMtbG9uZyEh"}
	plain := verify.Secrets{"new-secret", "old-secret"}
	return map[string]providers.SourceConfig{
		"github":            {Name: "github", Kind: "github", Secrets: plain},
		"stripe":            {Name: "stripe", Kind: "stripe", Secrets: secrets},
		"standard-webhooks": {Name: "clerk", Kind: "standard-webhooks", Secrets: secrets},
		"shopify":           {Name: "shop", Kind: "shopify", Secrets: plain},
		"slack":             {Name: "slack", Kind: "slack", Secrets: plain},
		"gitlab":            {Name: "gitlab", Kind: "gitlab", Secrets: plain},
		"hmac": {Name: "acme", Kind: "hmac", Secrets: plain, HMAC: providers.HMACScheme{SignatureHeader: "X-Acme-Signature",
			Prefix: "sha256=", TimestampHeader: "X-Acme-Timestamp", IDHeader: "X-Acme-Delivery", EventHeader: "X-Acme-Event"}},
	}
}

// Every kind in the registry, built in or not, has a configuration in this
// test, so a new kind without one fails here.
func TestEveryKindIsTested(t *testing.T) {
	configs := kindConfigs()
	for _, k := range slices.Sorted(maps.Keys(providers.Kinds)) {
		if _, ok := configs[k]; !ok {
			t.Errorf("kind %s has no configuration in kindConfigs: add one, and it is tested everywhere", k)
		}
	}
}

// vector is a request a sender signed, from its documentation (or, for a
// sender that publishes none, computed with OpenSSL, not with this code).
type vector struct {
	cfg       providers.SourceConfig
	at        time.Time
	id, event string // what the kind's Sign is given
	body      []byte
	header    http.Header // the request's headers, as the sender sent them
	signature string      // the header that carries the signature
	// wantErr is nil when the delivery is accepted, or the error it is
	// refused with once its signature verified: the documentation's payload
	// is not always a delivery (ErrBadPayload).
	wantErr error
}

// vectors are each kind's published vector, by kind.
func vectors() map[string]vector {
	at := time.Unix(1767225600, 0)
	stripeBody := []byte(`{"id":"evt_1","object":"event","type":"invoice.paid","created":1767225600,"data":{"object":{"id":"in_1","object":"invoice"}}}`)
	return map[string]vector{
		// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
		"github": {cfg: providers.SourceConfig{Name: "github", Kind: "github", Secrets: verify.Secrets{"It's a Secret to Everybody"}},
			at: at, id: "72d3162e-cc78-11e3-81ab-4c9367dc0958", event: "ping", body: []byte("Hello, World!"),
			header: http.Header{"Content-Type": {"application/json"}, "X-Github-Delivery": {"72d3162e-cc78-11e3-81ab-4c9367dc0958"},
				"X-Github-Event": {"ping"}, "X-Github-Hook-Id": {"1"},
				"X-Hub-Signature-256": {"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}},
			signature: "X-Hub-Signature-256", wantErr: providers.ErrBadPayload},
		// Stripe's scheme (https://docs.stripe.com/webhooks#verify-manually):
		// openssl dgst -sha256 -hmac whsec_test_secret of "<t>.<body>".
		"stripe": {cfg: providers.SourceConfig{Name: "stripe", Kind: "stripe", Secrets: verify.Secrets{"whsec_test_secret"}},
			at: at, id: "evt_1", event: "invoice.paid", body: stripeBody,
			header: http.Header{"Content-Type": {"application/json; charset=utf-8"},
				"Stripe-Signature": {"t=1767225600,v1=c5f117a15d9cf24dcd28ccbc8b62f60b11e2c4f30b299c0613a0166f3c79693f"}},
			signature: "Stripe-Signature"},
		// The Standard Webhooks specification's test vector; its payload has no type.
		"standard-webhooks": {cfg: providers.SourceConfig{Name: "clerk", Kind: "standard-webhooks", Secrets: verify.Secrets{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}},
			at: time.Unix(1614265330, 0), id: "msg_p5jXN8AQM9LWM0D4loKWxJek", body: []byte(`{"test": 2432232314}`),
			header: http.Header{"Content-Type": {"application/json"}, "Webhook-Id": {"msg_p5jXN8AQM9LWM0D4loKWxJek"},
				"Webhook-Timestamp": {"1614265330"}, "Webhook-Signature": {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}},
			signature: "Webhook-Signature", wantErr: providers.ErrBadPayload},
		// Slack's "Verifying requests from Slack" worked example (a slash
		// command's form body, so not an Events API delivery).
		"slack": {cfg: providers.SourceConfig{Name: "slack", Kind: "slack", Secrets: verify.Secrets{"8f742231b10e8888abcd99yyyzzz85a5"}},
			at: time.Unix(1531420618, 0), body: slackExample,
			header: http.Header{"Content-Type": {"application/json"}, "X-Slack-Request-Timestamp": {"1531420618"},
				"X-Slack-Signature": {"v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"}},
			signature: "X-Slack-Signature", wantErr: providers.ErrBadPayload},
		// Computed with openssl dgst -sha256 -hmac shpss_example_secret -binary | base64.
		"shopify": {cfg: providers.SourceConfig{Name: "shop", Kind: "shopify", Secrets: verify.Secrets{"shpss_example_secret"}},
			at: at, id: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", event: "orders.create", body: shopifyOrder,
			header: http.Header{"Content-Type": {"application/json"}, "X-Shopify-Webhook-Id": {"b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"},
				"X-Shopify-Topic": {"orders/create"}, "X-Shopify-Hmac-Sha256": {"eMLOYqjwC/1fQ0q9PTeH238wBKchfP3+kCgtHXChmxI="}},
			signature: "X-Shopify-Hmac-Sha256"},
		// GitLab's webhook token (https://docs.gitlab.com/user/project/integrations/webhooks/#validate-payloads-by-using-a-secret-token):
		// X-Gitlab-Token is the secret itself.
		"gitlab": {cfg: providers.SourceConfig{Name: "gitlab", Kind: "gitlab", Secrets: verify.Secrets{"glpat-like-secret-token"}},
			at: at, id: "13792a34-cac6-4fda-95a8-c58e00a3954e", event: "push", body: []byte(`{"object_kind":"push","ref":"refs/heads/main"}`),
			header: http.Header{"Content-Type": {"application/json"}, "X-Gitlab-Event": {"Push Hook"},
				"X-Gitlab-Event-Uuid": {"13792a34-cac6-4fda-95a8-c58e00a3954e"}, "X-Gitlab-Token": {"glpat-like-secret-token"}},
			signature: "X-Gitlab-Token"},
		// Computed with openssl dgst -sha512 -hmac acme-secret -binary | base64 of "<t>.<body>".
		"hmac": {cfg: providers.SourceConfig{Name: "acme", Kind: "hmac", Secrets: verify.Secrets{"acme-secret"},
			HMAC: providers.HMACScheme{SignatureHeader: "X-Acme-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=",
				TimestampHeader: "X-Acme-Timestamp", IDHeader: "X-Acme-Delivery", EventField: "event"}},
			at: at, id: "dlv_1", event: "order.paid", body: []byte(`{"event":"order.paid","order":{"id":"ord_1","paid_at":1767225600}}`),
			header: http.Header{"Content-Type": {"application/json"}, "X-Acme-Timestamp": {"1767225600"}, "X-Acme-Delivery": {"dlv_1"},
				"X-Acme-Signature": {"sha512=HsOVzTY6qHlwpgqWs2wCMXZhVdw5XMvjz9K9IEW0UjGwWegF/hjbgmD3pG/zfijC1BblF2uLINoOSERuk7gDlQ=="}},
			signature: "X-Acme-Signature"},
	}
}

// Every kind has a published vector, which its verification accepts and its
// Sign (what gateway send, the bench and the tests send) reproduces: a kind
// added without one fails here.
func TestEveryKindHasAPublishedVector(t *testing.T) {
	all := vectors()
	for _, kind := range slices.Sorted(maps.Keys(providers.Kinds)) {
		t.Run(kind, func(t *testing.T) {
			v, ok := all[kind]
			if !ok {
				t.Fatalf("kind %s has no published vector in vectors(): add the sender's documented example", kind)
			}
			if v.cfg.Kind != kind {
				t.Fatalf("the vector of %s is of kind %s", kind, v.cfg.Kind)
			}
			h := http.Header{}
			if err := providers.Kinds[kind].Sign(v.cfg, h, v.body, v.id, v.event, v.at); err != nil {
				t.Fatal(err)
			}
			if got, want := h.Get(v.signature), v.header.Get(v.signature); got != want {
				t.Errorf("Sign: %s = %q, want the vector's %q", v.signature, got, want)
			}
			_, err := providers.Parse(source(t, v.cfg), v.header, v.body, v.at)
			if v.wantErr == nil && err != nil || v.wantErr != nil && !errors.Is(err, v.wantErr) {
				t.Errorf("the vector's delivery: %v, want %v", err, v.wantErr)
			}
			// Another body under the vector's signature is refused (GitLab's
			// token covers no body).
			if kind != "gitlab" {
				other := append(slices.Clip(v.body), ' ')
				if _, err := providers.Parse(source(t, v.cfg), v.header, other, v.at); !errors.Is(err, verify.ErrSignatureMismatch) {
					t.Errorf("another body: %v", err)
				}
			}
		})
	}
}

// For every kind: what its sender signs (a request providers.NewRequest
// builds) is verified, with either secret (rotation); another secret, a
// changed body, a missing signature, a missing id and stale or future
// timestamps are refused with the contract's errors.
func TestEveryKindVerifiesAsItsSenderSigns(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for kind, c := range kindConfigs() {
		t.Run(kind, func(t *testing.T) {
			k := providers.Kinds[kind]
			p := source(t, c)
			sign := func(c providers.SourceConfig, body []byte, at time.Time) http.Header {
				req, err := providers.NewRequest(t.Context(), c, "https://gateway.example/webhooks/"+c.Name, body, "id-1", "thing.created", at)
				if err != nil {
					t.Fatal(err)
				}
				return req.Header
			}
			body := k.Sample(c, "id-1", "thing.created", now)
			req, err := providers.NewRequest(t.Context(), c, "https://gateway.example/webhooks/"+c.Name, body, "id-1", "thing.created", now)
			if err != nil {
				t.Fatal(err)
			}
			sent, err := io.ReadAll(req.Body)
			if err != nil || req.Method != http.MethodPost || req.URL.String() != "https://gateway.example/webhooks/"+c.Name ||
				req.ContentLength != int64(len(body)) || !bytes.Equal(sent, body) {
				t.Fatalf("NewRequest: %s %s of %d bytes, %q, %v; want a POST of %q", req.Method, req.URL, req.ContentLength, sent, err, body)
			}
			d, err := providers.Parse(p, req.Header, sent, now)
			if err != nil || d.Provider != c.Name || d.DeliveryID == "" || d.Event == "" || d.SecretIndex != 0 || string(d.Body) != string(body) {
				t.Fatalf("signed as the sender signs: %+v, %v", d, err)
			}
			for name := range d.Headers {
				if strings.Contains(strings.ToLower(name), "signature") || strings.Contains(strings.ToLower(name), "token") || strings.Contains(strings.ToLower(name), "hmac") {
					t.Errorf("kept header %s carries a signature", name)
				}
			}
			// Rotation: the old secret still passes, and says so.
			old := c
			old.Secrets = verify.Secrets{c.Secrets[1]}
			if d, err := providers.Parse(p, sign(old, body, now), body, now); err != nil || d.SecretIndex != 1 {
				t.Errorf("signed with the second secret: %d, %v", d.SecretIndex, err)
			}
			// An unknown secret.
			other := c
			other.Secrets = verify.Secrets{"whsec_c29tZW9uZS1lbHNlcy1rZXktMzItYnl0ZXMhISE="}
			if _, err := providers.Parse(p, sign(other, body, now), body, now); !errors.Is(err, verify.ErrSignatureMismatch) {
				t.Errorf("signed with another secret: %v", err)
			}
			// Tampered: GitLab's token does not cover the body; every other kind's signature does.
			tampered := append(body[:len(body)-1:len(body)-1], []byte(` }`)...)
			_, err = providers.Parse(p, sign(c, body, now), tampered, now)
			if kind != "gitlab" && !errors.Is(err, verify.ErrSignatureMismatch) {
				t.Errorf("a changed body: %v", err)
			}
			// No signature at all.
			h := sign(c, body, now)
			for _, name := range []string{"X-Hub-Signature-256", "Stripe-Signature", "Webhook-Signature", "X-Shopify-Hmac-Sha256", "X-Slack-Signature", "X-Gitlab-Token", "X-Acme-Signature"} {
				h.Del(name)
			}
			if _, err := providers.Parse(p, h, body, now); !errors.Is(err, verify.ErrMissingSignature) {
				t.Errorf("no signature: %v", err)
			}
			// A JSON body is required.
			h = sign(c, body, now)
			h.Set("Content-Type", "text/plain")
			if _, err := providers.Parse(p, h, body, now); !errors.Is(err, providers.ErrUnsupportedMediaType) {
				t.Errorf("text/plain: %v", err)
			}
			// The id, where a header carries it.
			for _, name := range []string{"X-Github-Delivery", "Webhook-Id", "X-Shopify-Webhook-Id", "X-Gitlab-Event-Uuid", "X-Acme-Delivery"} {
				h = sign(c, body, now)
				if h.Get(name) == "" {
					continue
				}
				h.Del(name)
				if _, err := providers.Parse(p, h, body, now); !errors.Is(err, providers.ErrMissingHeader) {
					t.Errorf("no %s: %v", name, err)
				}
			}
			// Timestamps: signed 6 minutes ago, or 6 minutes ahead.
			for _, skew := range []time.Duration{-6 * time.Minute, 6 * time.Minute} {
				_, err := providers.Parse(p, sign(c, body, now.Add(skew)), body, now)
				timestamped := k.Timed(c)
				if timestamped && !errors.Is(err, verify.ErrTimestampOutOfTolerance) {
					t.Errorf("signed %s from now: %v", skew, err)
				}
				if !timestamped && err != nil {
					t.Errorf("%s carries no signed time, yet: %v", kind, err)
				}
			}
		})
	}
}

// NewRequest signs only for a kind it knows, with a secret.
func TestNewRequestRefusesWhatCannotBeSigned(t *testing.T) {
	for _, c := range []providers.SourceConfig{
		{Name: "acme", Kind: "bitbucket", Secrets: verify.Secrets{"x"}},
		{Name: "acme", Secrets: verify.Secrets{"x"}},
		{Name: "acme", Kind: "gitlab"},
		{Name: "github", Kind: "github", Secrets: verify.Secrets{}},
	} {
		if req, err := providers.NewRequest(t.Context(), c, "http://gateway/webhooks/acme", []byte(`{}`), "id-1", "push", time.Now()); err == nil {
			t.Errorf("%+v: signed %v", c, req.Header)
		}
	}
	c := kindConfigs()["github"]
	if _, err := providers.NewRequest(t.Context(), c, "http://gateway/%zz", []byte(`{}`), "id-1", "push", time.Now()); err == nil {
		t.Error("a URL that does not parse: no error")
	}
}

// Slack's url_verification is answered with its challenge, once verified.
func TestSlackURLVerification(t *testing.T) {
	c := kindConfigs()["slack"]
	p := source(t, c)
	now := time.Now()
	body := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	h := signedHeader(c, body, "", "", now)
	d, err := providers.Parse(p, h, body, now)
	if err != nil || d.Challenge != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" || d.DeliveryID != "" {
		t.Fatalf("url_verification: %+v, %v", d, err)
	}
	h.Set("X-Slack-Signature", "v0="+strings.Repeat("0", 64))
	if _, err := providers.Parse(p, h, body, now); !errors.Is(err, verify.ErrSignatureMismatch) {
		t.Fatalf("an unsigned url_verification: %v", err)
	}
	noChallenge := []byte(`{"type":"url_verification","challenge":42}`)
	h = signedHeader(c, noChallenge, "", "", now)
	if _, err := providers.Parse(p, h, noChallenge, now); !errors.Is(err, providers.ErrBadPayload) || !strings.Contains(err.Error(), "challenge") {
		t.Fatalf("a url_verification without a text challenge: %v", err)
	}
}

// Slack's app_rate_limited notice has no event_id: it is keyed by its team
// and minute, so Slack's retries of it are duplicates.
func TestSlackAppRateLimited(t *testing.T) {
	c := kindConfigs()["slack"]
	p := source(t, c)
	now := time.Now()
	body := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","type":"app_rate_limited","team_id":"T123456","minute_rate_limited":1518467820,"api_app_id":"A123456"}`)
	d, err := providers.Parse(p, signedHeader(c, body, "", "", now), body, now)
	if err != nil || d.Event != "app_rate_limited" || d.DeliveryID != "app_rate_limited:T123456:1518467820" || d.Scope != "T123456" {
		t.Fatalf("app_rate_limited: %+v, %v", d, err)
	}
}

// GitLab's event is the payload's object_kind, and its action when there is one.
func TestGitLabEventNames(t *testing.T) {
	c := kindConfigs()["gitlab"]
	p := source(t, c)
	for body, want := range map[string]string{
		`{"object_kind":"push","ref":"refs/heads/main"}`:                                "push",
		`{"object_kind":"merge_request","object_attributes":{"id":99,"action":"open"}}`: "merge_request.open",
		`{"object_kind":"pipeline","object_attributes":{"id":31,"status":"success"}}`:   "pipeline",
	} {
		h := signedHeader(c, []byte(body), "0b9d4a4c-64e5-4e94-9a11-4a3b2b4c5d6e", "", time.Now())
		d, err := providers.Parse(p, h, []byte(body), time.Now())
		if err != nil || d.Event != want {
			t.Errorf("%s: %q, %v; want %q", body, d.Event, err, want)
		}
	}
	h := signedHeader(c, []byte(`{"ref":"x"}`), "x", "", time.Now())
	if _, err := providers.Parse(p, h, []byte(`{"ref":"x"}`), time.Now()); !errors.Is(err, providers.ErrBadPayload) {
		t.Errorf("no object_kind: %v", err)
	}
}

// A source's configuration is refused when it cannot work, saying which key.
func TestNewSourceRefusesWhatCannotWork(t *testing.T) {
	s := verify.Secrets{"x"}
	hm := func(m func(*providers.HMACScheme)) providers.SourceConfig {
		c := providers.SourceConfig{Name: "acme", Kind: "hmac", Secrets: s, HMAC: providers.HMACScheme{SignatureHeader: "X-Sig", IDHeader: "X-Id", EventField: "type"}}
		m(&c.HMAC)
		return c
	}
	for _, c := range []struct {
		cfg  providers.SourceConfig
		want string
	}{
		{providers.SourceConfig{Name: "github", Kind: "gitlab", Secrets: s}, "built in"},
		{providers.SourceConfig{Name: "Acme", Kind: "gitlab", Secrets: s}, "key name"},
		{providers.SourceConfig{Name: "acme", Kind: "bitbucket", Secrets: s}, "key kind: must be one of gitlab, hmac, shopify, slack, standard-webhooks"},
		{providers.SourceConfig{Name: "acme", Kind: "github", Secrets: s}, "key kind: must be one of gitlab, hmac, shopify, slack, standard-webhooks"},
		{providers.SourceConfig{Name: "stripe", Kind: "stripe", Secrets: s}, "key name: stripe is built in"},
		{providers.SourceConfig{Name: "acme", Kind: "gitlab"}, "key secret_env: the variable it names holds no secret"},
		{providers.SourceConfig{Name: "acme", Kind: "standard-webhooks", Secrets: verify.Secrets{"whsec_!!"}}, "key secret_env: each secret the variable it names holds must be whsec_ followed by base64"},
		{providers.SourceConfig{Name: "acme", Kind: "gitlab", Secrets: s, Order: &providers.OrderPaths{Entity: "a..b", Time: "t"}}, "key order"},
		{providers.SourceConfig{Name: "acme", Kind: "gitlab", Secrets: s, HMAC: providers.HMACScheme{SignatureHeader: "X"}}, "for kind hmac"},
		{hm(func(h *providers.HMACScheme) { h.Algorithm = "md5" }), "key algorithm"},
		{hm(func(h *providers.HMACScheme) { h.Encoding = "base32" }), "key encoding"},
		{hm(func(h *providers.HMACScheme) { h.SignatureHeader = "X Sig" }), "key signature_header"},
		{hm(func(h *providers.HMACScheme) { h.IDField = "id" }), "id_header and id_field: give one"},
		{hm(func(h *providers.HMACScheme) { h.EventField = "" }), "event_header and event_field: give one"},
		{hm(func(h *providers.HMACScheme) { h.IDHeader = "x-sig" }), "keys signature_header and id_header name the same header"},
		{hm(func(h *providers.HMACScheme) { h.TimestampHeader = "X-Id" }), "keys timestamp_header and id_header name the same header"},
		{providers.SourceConfig{Name: "acme", Kind: "shopify", Secrets: s, Tolerance: time.Minute}, "key tolerance: a shopify source signs no time"},
	} {
		_, err := providers.NewSource(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.cfg, err, c.want)
		}
		// The file says on which line a key is.
		var ke *providers.KeyError
		if key, ok := strings.CutPrefix(c.want, "key "); ok && (!errors.As(err, &ke) || !strings.HasPrefix(key+":", ke.Key+":")) {
			t.Errorf("%+v: %v is not a KeyError of its key", c.cfg, err)
		}
	}
}

// A source's order paths make its deliveries order-aware.
func TestSourceOrderPaths(t *testing.T) {
	c := kindConfigs()["standard-webhooks"]
	c.Order = &providers.OrderPaths{Entity: "data.id", Time: "timestamp"}
	p := source(t, c)
	now := time.Now().Truncate(time.Second)
	body := providers.Kinds[c.Kind].Sample(c, "id-1", "user.updated", now)
	d, err := providers.Parse(p, signedHeader(c, body, "id-1", "user.updated", now), body, now)
	if err != nil || d.Entity != "clerk:obj_id-1" || !d.EventTime.Equal(now) {
		t.Fatalf("order: %q %v, %v", d.Entity, d.EventTime, err)
	}
}
