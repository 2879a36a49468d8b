package providers

import (
	"fmt"
	"net/http"
	"time"

	"github.com/valyala/fastjson"

	"github.com/hookgate/hookgate/internal/verify"
)

// Stripe verifies and parses Stripe webhook deliveries.
type Stripe struct {
	// Secrets are the endpoint's whsec_... signing secrets; any may match.
	Secrets verify.Secrets
	// Tolerance is how far the signature's t may be from the clock, either way.
	Tolerance time.Duration
}

// Name returns "stripe".
func (Stripe) Name() string { return "stripe" }

// Parse implements Provider.
func (s Stripe) Parse(h http.Header, body []byte, now time.Time) (Delivery, error) {
	contentType := h.Get("Content-Type")
	if mediaType(contentType) != "application/json" {
		return Delivery{}, fmt.Errorf("%w: Stripe deliveries must be application/json, got %q", ErrUnsupportedMediaType, truncate(contentType))
	}
	idx, err := verify.Stripe(s.Secrets, h.Get("Stripe-Signature"), body, now, s.Tolerance)
	if err != nil {
		return Delivery{}, fmt.Errorf("Stripe-Signature: %w", err)
	}
	var id, typ, object string
	var created time.Time
	err = parseObject(body, func(v *fastjson.Value) {
		id, typ = text(v.Get("id")), text(v.Get("type"))
		if object = idText(v.Get("data", "object", "id")); object != "" {
			created = timeValue(v.Get("created"))
		}
	})
	if err != nil {
		return Delivery{}, err
	}
	if id == "" || len(id) > maxIDLen || !printable(id) {
		return Delivery{}, fmt.Errorf("%w: the payload's id must be a non-empty printable string of at most %d bytes", ErrBadPayload, maxIDLen)
	}
	if typ == "" || len(typ) > maxIDLen || !printable(typ) {
		return Delivery{}, fmt.Errorf("%w: the payload's type must be a non-empty printable string of at most %d bytes", ErrBadPayload, maxIDLen)
	}
	d := Delivery{
		Provider:    "stripe",
		DeliveryID:  id,
		Event:       typ,
		ContentType: contentType,
		Headers:     keptHeaders(h, "User-Agent"),
		Body:        body,
		SecretIndex: idx,
	}
	if object != "" {
		d.Entity, d.EventTime = "stripe:"+object, created
	}
	return d, nil
}
