package providers

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/hookgate/hookgate/internal/verify"
)

// standardWebhooks verifies Standard Webhooks (https://www.standardwebhooks.com),
// as Svix and the senders built on it sign: webhook-signature holds
// space-separated "v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">",
// keyed by the base64-decoded secret ("whsec_<base64>"); Svix-branded
// senders name the same headers svix-id, svix-timestamp, svix-signature. The
// event is the payload's type.
type standardWebhooks struct {
	source
	keys verify.Secrets // the secrets' decoded keys
}

var standardWebhooksKind = Kind{
	New: func(c SourceConfig) (Provider, error) {
		p := standardWebhooks{source: source{cfg: c}}
		for _, secret := range c.Secrets {
			key, err := verify.StandardKey(secret)
			if err != nil {
				return nil, keyError("secret_env", "each secret the variable it names holds must be whsec_ followed by base64")
			}
			p.keys = append(p.keys, string(key))
		}
		return p, nil
	},
	Timed: timed,
	Sign: func(c SourceConfig, h http.Header, body []byte, id, _ string, now time.Time) error {
		sig, err := verify.SignStandard(c.Secrets[0], id, now, body)
		if err != nil {
			return err
		}
		h.Set("Content-Type", "application/json")
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		h.Set("webhook-signature", sig)
		return nil
	},
	Sample: func(_ SourceConfig, id, event string, now time.Time) []byte {
		return sample(map[string]any{"type": event, "timestamp": now.UTC().Format(time.RFC3339),
			"data": map[string]any{"id": "obj_" + id, "object": "sample"}})
	},
}

// standardHeaders are the header names of Standard Webhooks, and of Svix.
var standardHeaders = [2][3]string{{"webhook-id", "webhook-timestamp", "webhook-signature"}, {"svix-id", "svix-timestamp", "svix-signature"}}

// Check implements Provider.
func (p standardWebhooks) Check(h http.Header, now time.Time) (Request, error) {
	contentType, err := p.checkJSON(h)
	if err != nil {
		return Request{}, err
	}
	// One family is read and kept: its signature is the one checked, and
	// the other family's headers, signed by nothing, must not pass for
	// verified.
	names := standardHeaders[0]
	if h.Get(names[0]) == "" && h.Get(standardHeaders[1][0]) != "" {
		names = standardHeaders[1]
	}
	id, err := requireHeader(h, names[0])
	if err != nil {
		return Request{}, err
	}
	macs, err := verify.ParseStandardSignatures(h.Get(names[2]))
	if err != nil {
		return Request{}, fmt.Errorf("%s: %w", names[2], err)
	}
	ts, err := verify.ParseUnix(h.Get(names[1]))
	if err != nil {
		return Request{}, fmt.Errorf("%s: %w", names[1], err)
	}
	if err := verify.Fresh(ts, now, p.cfg.Tolerance); err != nil {
		return Request{}, fmt.Errorf("%s: %w", names[1], err)
	}
	return Request{
		ContentType:  contentType,
		DeliveryID:   id,
		Headers:      keptHeaders(h, names[0], names[1], "User-Agent"),
		signedPrefix: [][]byte{[]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + ".")},
		signatures:   macs,
	}, nil
}

// Verify implements Provider.
func (p standardWebhooks) Verify(req Request, pieces Body) (Delivery, error) {
	idx, err := p.keys.MatchPartsWith(sha256.New, append(slices.Clip(req.signedPrefix), pieces...), req.signatures)
	if err != nil {
		return Delivery{}, fmt.Errorf("webhook-signature: %w", err)
	}
	d := p.delivery(req, pieces.Bytes(), idx)
	return d, p.finish(&d, "", "type", nil)
}
