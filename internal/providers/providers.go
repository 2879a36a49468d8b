// Package providers turns an HTTP request from a webhook provider into a
// verified Delivery. Each adapter checks, in the contract's order, the content
// type, the required headers, the signature over the raw body (using package
// verify), and only then parses the payload for the delivery's id, event name,
// entity and event time. Nothing in a Delivery comes from unverified bytes.
package providers

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// Errors returned by adapters, besides package verify's signature errors.
var (
	// ErrUnsupportedMediaType means the Content-Type is not one the provider sends.
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	// ErrMissingHeader means a required header other than the signature is
	// absent or unusable.
	ErrMissingHeader = errors.New("missing header")
	// ErrBadPayload means the verified body is not the JSON the delivery needs.
	ErrBadPayload = errors.New("bad payload")
)

// maxIDLen bounds delivery ids, scopes and event names: real ones are far
// shorter, and they end up in keys, URLs and logs.
const maxIDLen = 255

// Delivery is one verified webhook delivery.
type Delivery struct {
	// Provider is the adapter's name: "github" or "stripe".
	Provider string
	// Scope separates receipts of one event delivered to several endpoints:
	// GitHub's X-GitHub-Hook-ID, empty for Stripe.
	Scope string
	// DeliveryID is the provider's id of the event: X-GitHub-Delivery, or
	// Stripe's evt_... id.
	DeliveryID string
	// Event is the event name routes match on, such as "pull_request.opened"
	// or "invoice.paid".
	Event string
	// Entity names what the event is about, for ordering ("stripe:sub_123");
	// empty when the event names none.
	Entity string
	// EventTime is the payload's own time for the entity; zero when unknown.
	EventTime time.Time
	// ContentType is the request's Content-Type as received.
	ContentType string
	// Headers are the provider headers worth keeping, never a signature.
	Headers map[string]string
	// Body is the raw request body, byte for byte.
	Body []byte
	// SecretIndex is which configured secret matched; 0 is the primary.
	SecretIndex int
}

// Provider is a webhook source's adapter.
type Provider interface {
	// Name is the provider's name in URLs, routes and receipts.
	Name() string
	// Parse verifies a request's headers and raw body and returns the
	// delivery. now is the clock to check timestamps against.
	Parse(h http.Header, body []byte, now time.Time) (Delivery, error)
}

// mediaType returns the lower-cased media type of a Content-Type header, without parameters.
func mediaType(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ""
	}
	return mt
}

// keptHeaders copies the named headers that are present and printable.
func keptHeaders(h http.Header, names ...string) map[string]string {
	kept := make(map[string]string, len(names))
	for _, name := range names {
		if v := h.Get(name); v != "" && printable(v) {
			kept[name] = v
		}
	}
	return kept
}

// printable reports whether s is valid UTF-8 without control characters: what
// ids, names and kept headers must be to be stored as text (PostgreSQL refuses
// invalid UTF-8 and NUL) and shown to operators.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// requireHeader returns a header's value, or ErrMissingHeader when it is
// empty, too long to be real, or not printable text.
func requireHeader(h http.Header, name string) (string, error) {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return "", fmt.Errorf("%w: %s is required", ErrMissingHeader, name)
	}
	if len(v) > maxIDLen {
		return "", fmt.Errorf("%w: %s is longer than %d bytes", ErrMissingHeader, name, maxIDLen)
	}
	if !printable(v) {
		return "", fmt.Errorf("%w: %s must be printable UTF-8 text", ErrMissingHeader, name)
	}
	return v, nil
}

// parsers are reused between deliveries, so that parsing allocates little.
var parsers fastjson.ParserPool

// parseObject checks that body is a well-formed JSON object and calls read with
// it; what read gets is valid only during the call. hookgate reads few fields,
// by their exact names; a field of an unexpected type reads as absent rather
// than failing the delivery: ordering data is best effort, while the JSON
// itself must be well formed. One validating pass and one parse replace
// encoding/json's two scans, at about a third of its time on a 6 KB payload.
func parseObject(body []byte, read func(v *fastjson.Value)) error {
	trimmed := strings.TrimLeft(string(body[:min(len(body), 64)]), " \t\r\n")
	if !strings.HasPrefix(trimmed, "{") {
		return fmt.Errorf("%w: the payload must be a JSON object", ErrBadPayload)
	}
	if fastjson.ValidateBytes(body) != nil {
		return fmt.Errorf("%w: the payload is not valid JSON", ErrBadPayload)
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		// Well formed, but nested deeper than the parser goes (300 levels).
		return fmt.Errorf("%w: the payload is nested too deeply", ErrBadPayload)
	}
	read(v)
	return nil
}

// text returns a JSON string's value, or "" when v is absent or no string.
func text(v *fastjson.Value) string {
	if v == nil || v.Type() != fastjson.TypeString {
		return ""
	}
	b, _ := v.StringBytes()
	return string(b)
}

// number returns a JSON number's text, or "" when v is absent or no number.
func number(v *fastjson.Value) string {
	if v == nil || v.Type() != fastjson.TypeNumber {
		return ""
	}
	return string(v.MarshalTo(nil))
}

// idText returns a JSON id (a number or a string) as text, or "" when it is
// neither or out of reason.
func idText(v *fastjson.Value) string {
	s := text(v)
	if n := number(v); n != "" {
		if _, err := strconv.ParseInt(n, 10, 64); err != nil {
			return ""
		}
		s = n
	}
	if s == "" || len(s) > maxIDLen || !printable(s) {
		return ""
	}
	return s
}

// timeValue reads a JSON time that is either RFC 3339 text or unix seconds.
func timeValue(v *fastjson.Value) time.Time {
	if s := text(v); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}
		}
		return t.UTC()
	}
	sec, err := strconv.ParseInt(number(v), 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}
