// Package providers turns an HTTP request from a webhook sender into a
// verified Delivery. Each adapter checks, in the contract's order, the content
// type, the required headers, the signature over the raw body (using package
// verify), and only then reads the payload for the delivery's id, event name,
// entity and event time. Nothing in a Delivery comes from unverified bytes.
//
// Every sender is a kind in one list, Kinds (GitHub and Stripe among them):
// a kind is one file of this package and one line of Kinds, and no other
// layer names a sender. A gateway's configured senders are a Registry, built
// once from its configuration and handed to whatever names providers (the
// server, route matches, operator filters, the console, the CLI). NewRequest
// builds a delivery signed as a kind's sender signs it, for gateway send, the
// bench and the tests.
package providers

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hookgate/hookgate/internal/payload"
	"github.com/hookgate/hookgate/internal/verify"
)

// Errors returned by adapters, besides package verify's signature errors.
var (
	// ErrUnsupportedMediaType means the Content-Type is not one the provider sends.
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	// ErrMissingHeader means a required header other than the signature is
	// absent or unusable.
	ErrMissingHeader = errors.New("missing or unusable header")
	// ErrBadPayload means the verified body is not the JSON the delivery needs.
	ErrBadPayload = errors.New("bad payload")
)

// MaxIDLen bounds delivery ids, scopes and event names: real ones are far
// shorter, and they end up in keys, URLs and logs.
const MaxIDLen = 255

// Delivery is one verified webhook delivery.
type Delivery struct {
	// Provider is the source's name: "github", "stripe", or a configured
	// source's.
	Provider string
	// Scope separates receipts of one event delivered to several endpoints:
	// GitHub's X-GitHub-Hook-ID, Slack's team_id; empty for the other kinds.
	Scope string
	// DeliveryID is the provider's id of the event: X-GitHub-Delivery,
	// Stripe's evt_... id, or what the source's kind names.
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
	// Routes, when not nil, are the routes that take the delivery, decided
	// before its transaction (where route filters read its payload); nil
	// leaves the decision to the transaction.
	Routes []string
	// Keys, when not nil, are the delivery's search keys, read before its
	// transaction (package searchkeys); nil leaves them to the transaction.
	Keys []SearchKey
	// Checked says the delivery's payload was checked against the JSON
	// Schemas of its event (package eventschema) before its transaction;
	// Invalid, when set, is why it failed one: it is stored, acknowledged and
	// dispatched to no route. Unchecked, the transaction checks it.
	Checked bool
	Invalid *SchemaError
	// Trace, when set, is the W3C traceparent of the request that brought
	// the delivery (package tracing): its dispatches join that trace.
	Trace string
	// Challenge, when set, is a verified request that is no delivery but
	// asks to be answered with this value (Slack's url_verification): the
	// gateway answers it and stores nothing.
	Challenge string
}

// SchemaError is why a delivery's payload fails a JSON Schema of its event
// (package eventschema).
type SchemaError struct {
	// Schema is the schema's provider:pattern, as configured.
	Schema string `json:"schema"`
	// Path is the failing value's JSON Pointer in the payload ("" for the
	// whole payload).
	Path string `json:"path"`
	// Rule is the schema keyword that failed, such as required or type.
	Rule string `json:"rule"`
	// Message says what is wrong, in the validator's words.
	Message string `json:"message"`
}

// SearchKey is one search key's value in a delivery (package searchkeys).
type SearchKey struct {
	Name  string
	Value string
}

// String is the key as a filter spells it: name:value.
func (k SearchKey) String() string { return k.Name + ":" + k.Value }

// Provider is a webhook source's adapter. A request is checked in two steps,
// so that whatever the headers alone can refuse is refused before the body is
// read: Check, then Verify with the raw body.
type Provider interface {
	// Name is the provider's name in URLs, routes and receipts.
	Name() string
	// Check reads the headers, in the contract's order: the content type, the
	// required headers, a signature header that parses, and the signature's
	// timestamp against now. Every value it keeps is one the database stores
	// as it is (printable UTF-8 of bounded length).
	Check(h http.Header, now time.Time) (Request, error)
	// Verify checks the signature over the raw body and reads the payload's
	// fields into the delivery.
	Verify(req Request, body Body) (Delivery, error)
}

// Body is a raw request body as it arrived, in pieces. A signature is checked
// over the pieces; only a body whose signature matched is put together, so a
// large body with a wrong signature is never copied.
type Body [][]byte

// Bytes returns the body in one piece: the piece itself when there is one.
func (b Body) Bytes() []byte {
	switch len(b) {
	case 0:
		return []byte{}
	case 1:
		return b[0]
	}
	return slices.Concat(b...)
}

// Request is what a provider's Check read from a request's headers: all that
// its Verify needs besides the body.
type Request struct {
	// ContentType is the Content-Type header as received (printable, bounded).
	ContentType string
	// Form is set when the body is application/x-www-form-urlencoded.
	Form bool
	// Scope, DeliveryID and Event are what the headers name, when they do.
	Scope, DeliveryID, Event string
	// Headers are the kept headers, never a signature.
	Headers map[string]string
	// signedPrefix is what the sender signed before the body; signatures are
	// the candidate MACs the header carried.
	signedPrefix [][]byte
	signatures   [][]byte
	// matched is 1 + the index of the secret a header alone proved
	// (GitLab's token); 0 when Verify must check the body.
	matched int
}

// errUnchecked means Verify was given a Request its Check did not make.
var errUnchecked = fmt.Errorf("%w: the request was not checked", verify.ErrMissingSignature)

// Parse is Check followed by Verify: the whole verdict on a request whose
// body is already read.
func Parse(p Provider, h http.Header, body []byte, now time.Time) (Delivery, error) {
	req, err := p.Check(h, now)
	if err != nil {
		return Delivery{}, err
	}
	return p.Verify(req, Body{body})
}

// mediaType returns the lower-cased media type of a Content-Type header, without parameters.
func mediaType(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ""
	}
	return mt
}

// maxHeaderLen bounds the header values that are stored (the content type and
// kept headers): real ones are far shorter.
const maxHeaderLen = 1024

// checkContentType returns the Content-Type when its media type is one of
// accepted, else ErrUnsupportedMediaType. A value the database would refuse
// (not UTF-8, a control character, or too long; only parameters can hold
// such bytes once the media type was accepted) is ErrMissingHeader: it must
// fail its own request, never the batch of deliveries committed with it.
func checkContentType(h http.Header, provider string, accepted ...string) (string, string, error) {
	contentType := h.Get("Content-Type")
	mt := mediaType(contentType)
	if !slices.Contains(accepted, mt) {
		return "", "", fmt.Errorf("%w: %s deliveries must be %s, got %q", ErrUnsupportedMediaType, provider,
			strings.Join(accepted, " or "), truncate(strings.ToValidUTF8(contentType, "?")))
	}
	if len(contentType) > maxHeaderLen || !Printable(contentType) {
		return "", "", fmt.Errorf("%w: Content-Type must be printable UTF-8 text of at most %d bytes", ErrMissingHeader, maxHeaderLen)
	}
	return contentType, mt, nil
}

// keptHeaders copies the named headers that are present, printable and of
// bounded length; others are left out, since they only inform operators.
func keptHeaders(h http.Header, names ...string) map[string]string {
	kept := make(map[string]string, len(names))
	for _, name := range names {
		if v := h.Get(name); v != "" && len(v) <= maxHeaderLen && Printable(v) {
			kept[name] = v
		}
	}
	return kept
}

// Printable reports whether s is valid UTF-8 of printable characters only
// (letters, marks, numbers, punctuation, symbols and the ASCII space): what
// ids, names and kept headers must be to be stored as text (PostgreSQL
// refuses invalid UTF-8 and NUL) and shown to operators, whose terminals a
// control, format or bidirectional character would mislead. Whatever names a
// stored delivery passed it, so a value that fails it names none.
func Printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}

// ValidID reports whether s can be stored as an id, scope or event name:
// printable text of at most MaxIDLen bytes (empty too; callers that need a
// value say so).
func ValidID(s string) bool { return len(s) <= MaxIDLen && Printable(s) }

// requireHeader returns a header's value, or ErrMissingHeader when it is
// empty, too long to be real, or not printable text.
func requireHeader(h http.Header, name string) (string, error) {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return "", fmt.Errorf("%w: %s is required", ErrMissingHeader, name)
	}
	if len(v) > MaxIDLen {
		return "", fmt.Errorf("%w: %s is longer than %d bytes", ErrMissingHeader, name, MaxIDLen)
	}
	if !Printable(v) {
		return "", fmt.Errorf("%w: %s must be printable UTF-8 text", ErrMissingHeader, name)
	}
	return v, nil
}

// readObject checks that body is a JSON object the gateway reads (see
// package payload) and returns it, read in place. hookgate reads few fields,
// by their exact names; a field of an unexpected type reads as absent rather
// than failing the delivery: ordering data is best effort, while the JSON
// itself must be well formed and within payload's limits.
func readObject(body []byte) (payload.Object, error) {
	o, err := payload.Parse(body)
	if err != nil {
		return payload.Object{}, fmt.Errorf("%w: %w", ErrBadPayload, err)
	}
	return o, nil
}

// idText returns a JSON id (a number or a string) as text, or "" when it is
// neither or out of reason.
func idText(v payload.Value) string {
	if s := v.ID(); ValidID(s) {
		return s
	}
	return ""
}

// StorableTime reports whether t, in UTC, falls in the years JSON and
// PostgreSQL both take: 1 to 9999.
func StorableTime(t time.Time) bool { return payload.Storable(t) }

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
