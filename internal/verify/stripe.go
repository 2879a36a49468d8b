package verify

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// StripeHeader is a parsed Stripe-Signature header:
// "t=<unix>,v1=<hex>[,v1=<hex>...][,v0=<hex>]".
type StripeHeader struct {
	// Timestamp is the header's t, the time Stripe signed the payload.
	Timestamp time.Time
	// V1 holds every v1 signature that was valid hex. Signatures that are not
	// hex are skipped: they can never match, and another v1 still may.
	V1 [][]byte
}

// ParseStripeHeader parses a Stripe-Signature header. v0 and unknown keys are
// ignored. A pair without "=", a missing or non-integer t, or no usable v1 is
// an error wrapping ErrSignatureMismatch: a header that cannot be read cannot
// prove anything. An empty header is ErrMissingSignature.
func ParseStripeHeader(header string) (StripeHeader, error) {
	var h StripeHeader
	if strings.TrimSpace(header) == "" {
		return h, ErrMissingSignature
	}
	haveT := false
	for pair := range strings.SplitSeq(header, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return StripeHeader{}, fmt.Errorf("%w: malformed pair %q in Stripe-Signature", ErrSignatureMismatch, truncate(pair, 32))
		}
		switch key {
		case "t":
			sec, err := strconv.ParseInt(value, 10, 64)
			if err != nil || haveT {
				return StripeHeader{}, fmt.Errorf("%w: bad t in Stripe-Signature", ErrSignatureMismatch)
			}
			h.Timestamp, haveT = time.Unix(sec, 0), true
		case "v1":
			if mac, err := hex.DecodeString(value); err == nil {
				h.V1 = append(h.V1, mac)
			}
		}
	}
	if !haveT {
		return StripeHeader{}, fmt.Errorf("%w: no t in Stripe-Signature", ErrSignatureMismatch)
	}
	if len(h.V1) == 0 {
		return StripeHeader{}, fmt.Errorf("%w: no v1 signature in Stripe-Signature", ErrSignatureMismatch)
	}
	return h, nil
}

// Stripe verifies a Stripe-Signature header over the raw body: HMAC-SHA256 of
// "<t>.<body>" keyed by each secret's own bytes (the whole "whsec_..." string,
// not base64-decoded). Any v1 matching any secret passes; then t must lie within
// tolerance of now, in either direction. It returns the index of the secret
// that matched.
func Stripe(secrets Secrets, header string, body []byte, now time.Time, tolerance time.Duration) (int, error) {
	h, err := ParseStripeHeader(header)
	if err != nil {
		return -1, err
	}
	idx, err := h.Match(secrets, body)
	if err != nil {
		return -1, err
	}
	return idx, h.Fresh(now, tolerance)
}

// Match returns the index of the first secret whose HMAC-SHA256 of
// "<t>.<body>" is one of the header's v1 signatures, or ErrSignatureMismatch.
func (h StripeHeader) Match(secrets Secrets, body []byte) (int, error) {
	t := strconv.AppendInt(nil, h.Timestamp.Unix(), 10)
	return secrets.MatchParts([][]byte{t, []byte("."), body}, h.V1)
}

// Fresh returns ErrTimestampOutOfTolerance when the header's t is further
// than tolerance from now, in either direction. It needs no body, so a stale
// delivery can be refused before its body is read.
func (h StripeHeader) Fresh(now time.Time, tolerance time.Duration) error {
	return Fresh(h.Timestamp, now, tolerance)
}

// SignTimestamped returns "t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">" keyed
// by secret's bytes: Stripe's Stripe-Signature scheme, which hookgate also
// uses for the X-Hookgate-Signature it puts on forwards, so a target can check
// it with Stripe's documented steps.
func SignTimestamped(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmacParts([]byte(secret), []byte(ts), []byte("."), body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac)
}

// SignGitHub returns an X-Hub-Signature-256 header value for body, as GitHub
// would send it.
func SignGitHub(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(HMACSHA256([]byte(secret), body))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
