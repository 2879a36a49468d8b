// Package listen is the wire shape of a listen route's stream (GET
// /admin/listen/{route}, Server-Sent Events): the event each dispatch is
// sent as, and the event ids a stream resumes after (Last-Event-ID). The
// server writes them and gateway listen reads them.
package listen

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// Event is one dispatch as a listener receives it, the JSON of an event's
// data line.
type Event struct {
	// DispatchID names the dispatch in the answer's path.
	DispatchID string `json:"dispatch_id"`
	Route      string `json:"route"`
	Provider   string `json:"provider"`
	DeliveryID string `json:"delivery_id"`
	Event      string `json:"event"`
	Generation int    `json:"generation"`
	// Attempt counts the listeners it was sent to, this one included.
	Attempt int `json:"attempt"`
	// Headers are the delivery's kept headers, with the route
	// transformation's added.
	Headers     map[string]string `json:"headers"`
	ContentType string            `json:"content_type"`
	// BodyBase64 is what a forward would send, base64.
	BodyBase64 string `json:"body_base64"`
	// Path is the route transformation's path, which a forward appends to
	// its target's URL (and gateway listen to --forward-to's); empty for
	// none.
	Path string `json:"path,omitempty"`
}

// StreamIDLen is the length of a stream's name: "s" and 16 hex digits.
const StreamIDLen = 17

// NewStreamID names a new stream.
func NewStreamID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "s" + hex.EncodeToString(b)
}

// EventID is the id of the event of a stream's offer seq: <stream>-<seq>.
func EventID(stream string, seq int64) string {
	return stream + "-" + strconv.FormatInt(seq, 10)
}

// ParseEventID reads an event id, and reports whether it is one.
func ParseEventID(id string) (stream string, seq int64, ok bool) {
	stream, s, ok := strings.Cut(strings.TrimSpace(id), "-")
	if !ok || len(stream) != StreamIDLen || stream[0] != 's' {
		return "", 0, false
	}
	if _, err := hex.DecodeString(stream[1:]); err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return "", 0, false
	}
	return stream, n, true
}
