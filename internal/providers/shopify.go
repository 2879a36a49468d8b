package providers

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/verify"
)

// shopify verifies Shopify's webhooks: X-Shopify-Hmac-Sha256 is the base64
// HMAC-SHA256 of the body keyed by the app's client secret. The id, topic
// and shop are headers Shopify does not sign, as GitHub's are. The scope is
// empty, not the shop: a scope from an unsigned header would let a captured
// delivery be stored again under any shop name, and its id reused with
// another body pass for another shop's copy instead of a conflict. The shop
// is kept as a header.
type shopify struct{ source }

var shopifyKind = Kind{
	New:   func(c SourceConfig) (Provider, error) { return shopify{source{cfg: c}}, nil },
	Timed: untimed,
	Sign: func(c SourceConfig, h http.Header, body []byte, id, event string, now time.Time) error {
		h.Set("Content-Type", "application/json")
		h.Set("X-Shopify-Webhook-Id", id)
		h.Set("X-Shopify-Topic", strings.ReplaceAll(event, ".", "/"))
		h.Set("X-Shopify-Shop-Domain", "example.myshopify.com")
		h.Set("X-Shopify-Triggered-At", now.UTC().Format(time.RFC3339Nano))
		h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(verify.Sign(sha256.New, []byte(c.Secrets[0]), body)))
		return nil
	},
	Sample: func(_ SourceConfig, _, _ string, now time.Time) []byte {
		return sample(map[string]any{"id": now.UnixNano() / 1000, "name": "#1001", "currency": "EUR", "total_price": "42.00",
			"updated_at": now.UTC().Format(time.RFC3339)})
	},
}

var shopifyKeptHeaders = []string{"X-Shopify-Topic", "X-Shopify-Shop-Domain", "X-Shopify-Webhook-Id", "X-Shopify-Event-Id",
	"X-Shopify-API-Version", "X-Shopify-Triggered-At", "User-Agent"}

// Check implements Provider.
func (p shopify) Check(h http.Header, _ time.Time) (Request, error) {
	contentType, err := p.checkJSON(h)
	if err != nil {
		return Request{}, err
	}
	id, err := requireHeader(h, "X-Shopify-Webhook-Id")
	if err != nil {
		return Request{}, err
	}
	topic, err := requireHeader(h, "X-Shopify-Topic")
	if err != nil {
		return Request{}, err
	}
	if _, err := optionalHeader(h, "X-Shopify-Shop-Domain"); err != nil {
		return Request{}, err
	}
	mac, err := verify.Decode("base64", strings.TrimSpace(h.Get("X-Shopify-Hmac-Sha256")))
	if err == nil && len(mac) != sha256.Size {
		err = verify.ErrSignatureMismatch
	}
	if err != nil {
		return Request{}, fmt.Errorf("X-Shopify-Hmac-Sha256: %w", err)
	}
	return Request{
		ContentType: contentType,
		DeliveryID:  id,
		Event:       strings.ReplaceAll(topic, "/", "."),
		Headers:     keptHeaders(h, shopifyKeptHeaders...),
		signatures:  [][]byte{mac},
	}, nil
}

// Verify implements Provider.
func (p shopify) Verify(req Request, pieces Body) (Delivery, error) {
	idx, err := p.cfg.Secrets.MatchParts(pieces, req.signatures)
	if err != nil {
		return Delivery{}, fmt.Errorf("X-Shopify-Hmac-Sha256: %w", err)
	}
	d := p.delivery(req, pieces.Bytes(), idx)
	return d, p.finish(&d, "", "", nil)
}
