package providers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

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
	var p struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Created json.RawMessage `json:"created"`
		Data    struct {
			Object struct {
				ID json.RawMessage `json:"id"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := decodeObject(body, &p); err != nil {
		return Delivery{}, err
	}
	if p.ID == "" || len(p.ID) > maxIDLen || !printable(p.ID) {
		return Delivery{}, fmt.Errorf("%w: the payload's id must be a non-empty printable string of at most %d bytes", ErrBadPayload, maxIDLen)
	}
	if p.Type == "" || len(p.Type) > maxIDLen || !printable(p.Type) {
		return Delivery{}, fmt.Errorf("%w: the payload's type must be a non-empty printable string of at most %d bytes", ErrBadPayload, maxIDLen)
	}
	d := Delivery{
		Provider:    "stripe",
		DeliveryID:  p.ID,
		Event:       p.Type,
		ContentType: contentType,
		Headers:     keptHeaders(h, "User-Agent"),
		Body:        body,
		SecretIndex: idx,
	}
	if obj := idText(p.Data.Object.ID); obj != "" {
		d.Entity = "stripe:" + obj
		d.EventTime = timeValue(p.Created)
	}
	return d, nil
}
