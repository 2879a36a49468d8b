package providers

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/verify"
)

// Stripe verifies and parses Stripe webhook deliveries, as Stripe documents
// them: https://docs.stripe.com/webhooks#verify-manually (Stripe-Signature,
// t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">) and
// https://docs.stripe.com/api/events/object.
type Stripe struct {
	// Secrets are the endpoint's whsec_... signing secrets; any may match.
	Secrets verify.Secrets
	// Tolerance is how far the signature's t may be from the clock, either way.
	Tolerance time.Duration
}

// stripeKind is Stripe's, built in: STRIPE_WEBHOOK_SECRET (and
// STRIPE_TOLERANCE) configures it.
var stripeKind = Kind{
	New:   func(c SourceConfig) (Provider, error) { return Stripe{Secrets: c.Secrets, Tolerance: c.Tolerance}, nil },
	Timed: timed,
	Env:   "STRIPE_WEBHOOK_SECRET",
	Sign: func(c SourceConfig, h http.Header, body []byte, _, _ string, now time.Time) error {
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
		h.Set("Stripe-Signature", verify.SignTimestamped(c.Secrets[0], now, body))
		return nil
	},
	Sample: stripeSample,
}

// Source returns Stripe's configuration as a source of kind stripe.
func (s Stripe) Source() SourceConfig {
	return SourceConfig{Name: "stripe", Kind: "stripe", Secrets: s.Secrets, Tolerance: s.Tolerance}
}

// Name returns "stripe".
func (Stripe) Name() string { return "stripe" }

// Check implements Provider: the content type, and a Stripe-Signature that
// parses and whose t is within the tolerance of now.
func (s Stripe) Check(h http.Header, now time.Time) (Request, error) {
	contentType, _, err := checkContentType(h, "Stripe", "application/json")
	if err != nil {
		return Request{}, err
	}
	sig, err := verify.ParseStripeHeader(h.Get("Stripe-Signature"))
	if err != nil {
		return Request{}, fmt.Errorf("Stripe-Signature: %w", err)
	}
	if err := sig.Fresh(now, s.Tolerance); err != nil {
		return Request{}, fmt.Errorf("Stripe-Signature: %w", err)
	}
	return Request{
		ContentType:  contentType,
		Headers:      keptHeaders(h, "User-Agent"),
		signedPrefix: [][]byte{strconv.AppendInt(nil, sig.Timestamp.Unix(), 10), []byte(".")},
		signatures:   sig.V1,
	}, nil
}

// Verify implements Provider: HMAC-SHA256 of "<t>.<body>", then the payload's
// id, type, object and time.
func (s Stripe) Verify(req Request, pieces Body) (Delivery, error) {
	idx, err := s.Secrets.MatchParts(append(slices.Clip(req.signedPrefix), pieces...), req.signatures)
	if err != nil {
		return Delivery{}, fmt.Errorf("Stripe-Signature: %w", err)
	}
	d, err := StripeEvent(pieces.Bytes())
	if err != nil {
		return Delivery{}, err
	}
	d.ContentType, d.Headers, d.SecretIndex = req.ContentType, req.Headers, idx
	return d, nil
}

// StripeEvent reads a Stripe event's id, type, object and time into a
// delivery of body, as Verify does after the signature: recovery uses it for
// an event read from Stripe's API.
func StripeEvent(body []byte) (Delivery, error) {
	var id, typ, object string
	var created time.Time
	v, err := readObject(body)
	if err != nil {
		return Delivery{}, err
	}
	id, typ = v.Get("id").Text(), v.Get("type").Text()
	if object = idText(v.Get("data", "object", "id")); object != "" {
		created = v.Get("created").Time()
	}
	if id == "" || !ValidID(id) {
		return Delivery{}, fmt.Errorf("%w: the payload's id must be a non-empty printable string of at most %d bytes", ErrBadPayload, MaxIDLen)
	}
	if typ == "" || !ValidID(typ) {
		return Delivery{}, fmt.Errorf("%w: the payload's type must be a non-empty printable string of at most %d bytes", ErrBadPayload, MaxIDLen)
	}
	d := Delivery{Provider: "stripe", DeliveryID: id, Event: typ, Body: body}
	if object != "" {
		d.Entity, d.EventTime = "stripe:"+object, created
	}
	return d, nil
}

// stripeSample is a Stripe event of type eventType whose id is evt_<id>.
func stripeSample(_ SourceConfig, id, eventType string, now time.Time) []byte {
	id = strings.ReplaceAll(id, "-", "")
	object := map[string]any{"id": "obj_" + id, "object": "unknown"}
	switch {
	case strings.HasPrefix(eventType, "customer.subscription."):
		object = map[string]any{"id": "sub_demo", "object": "subscription", "customer": "cus_demo", "status": "active"}
	case strings.HasPrefix(eventType, "invoice."):
		object = map[string]any{"id": "in_" + id, "object": "invoice", "customer": "cus_demo", "amount_paid": 2000, "currency": "usd"}
	case strings.HasPrefix(eventType, "customer."):
		object = map[string]any{"id": "cus_demo", "object": "customer"}
	case strings.HasPrefix(eventType, "payment_intent."):
		object = map[string]any{"id": "pi_" + id, "object": "payment_intent", "amount": 2000, "currency": "usd"}
	}
	return sample(map[string]any{
		"id": "evt_" + id, "object": "event", "api_version": "2024-06-20", "type": eventType,
		"created": now.Unix(), "livemode": false, "data": map[string]any{"object": object},
	})
}
