// Package deliveries is the operators' read model of stored deliveries: an
// event (provider, delivery id) with its receipts and the dispatches of every
// route and generation. It holds the filters shared by the list, the bulk
// replay and the CLI. A dispatch's states, its live state and the statements
// on its rows are package dispatch's.
package deliveries

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/store"
)

// Errors returned by this package.
var (
	// ErrBadFilter means a filter value could not be used.
	ErrBadFilter = errors.New("bad filter")
	// ErrNotFound means no delivery matched.
	ErrNotFound = store.ErrNoDelivery
)

// DB is what the queries need: a pool, a connection or a transaction.
type DB = store.Querier

// summaryOrder is the order in which a delivery's summary state is chosen
// among the latest dispatches of its routes: the first one present wins.
var summaryOrder = []string{dispatch.Discarded, dispatch.Retrying, dispatch.Running, dispatch.Pending, dispatch.Cancelled, dispatch.Succeeded, dispatch.Superseded}

// States are the values the state filter accepts.
var States = append(slices.Clone(summaryOrder), "stored")

// Summary returns a delivery's state from its routes' latest dispatch states:
// "stored" when it has none.
func Summary(states []string) string {
	for _, s := range summaryOrder {
		if slices.Contains(states, s) {
			return s
		}
	}
	return "stored"
}

// Filter selects deliveries. Zero fields select everything.
type Filter struct {
	// Provider is one of the gateway's providers (providers.Registry.Names).
	Provider string `json:"provider,omitempty"`
	// Event is a route pattern: it matches an event name it equals or is a
	// dot-separated prefix of; "*" matches any run of characters.
	Event string `json:"event,omitempty"`
	// State matches a delivery when the latest dispatch of any of its routes is
	// in that state; "stored" matches deliveries without dispatches.
	State string `json:"state,omitempty"`
	// Since (inclusive) and Until (exclusive) bound the first receipt's time.
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

var eventPatternRE = regexp.MustCompile(`^[A-Za-z0-9_.*-]{1,255}$`)

// Validate checks the filter's values; its provider must be one of known's.
func (f Filter) Validate(known *providers.Registry) error {
	if f.Provider != "" && !known.Known(f.Provider) {
		return fmt.Errorf("%w: provider must be one of %s", ErrBadFilter, strings.Join(known.Names(), ", "))
	}
	if f.Event != "" && !eventPatternRE.MatchString(f.Event) {
		return fmt.Errorf("%w: event must be a route pattern such as pull_request or invoice.*", ErrBadFilter)
	}
	if f.State != "" && !slices.Contains(States, f.State) {
		return fmt.Errorf("%w: state must be one of %s", ErrBadFilter, strings.Join(States, ", "))
	}
	if f.Since != nil && f.Until != nil && !f.Since.Before(*f.Until) {
		return fmt.Errorf("%w: since must be before until", ErrBadFilter)
	}
	return nil
}

// ParseTime reads an RFC 3339 time, or a Go duration meaning that long ago
// ("24h"), relative to now. Times outside the years 1 to 9999 are refused:
// a filter holding one could be neither logged as JSON nor encoded in a cursor.
func ParseTime(s string, now time.Time) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d, derr := time.ParseDuration(s)
		if derr != nil || d < 0 {
			return time.Time{}, fmt.Errorf("%w: %q is neither an RFC 3339 time nor a duration such as 24h", ErrBadFilter, s)
		}
		t = now.Add(-d)
	}
	if !providers.StorableTime(t) {
		return time.Time{}, fmt.Errorf("%w: %q is outside the years 1 to 9999", ErrBadFilter, s)
	}
	return t, nil
}

// CheckKey returns ErrNotFound when provider and deliveryID could not name a
// stored delivery, so that callers answer "not found" without a query that
// PostgreSQL would refuse.
func CheckKey(provider, deliveryID string) error {
	if !providers.Printable(provider) || !providers.Printable(deliveryID) {
		return fmt.Errorf("%w: no delivery has a provider or id that is not printable UTF-8 text", ErrNotFound)
	}
	return nil
}

// UnescapeKey returns the provider and delivery id of a request path's two
// segments, each decoded exactly once, or ErrNotFound when they could name no
// stored delivery. escaped says the segments are still escaped: chi matches on
// the raw path when the URL has one (so that an id may hold %2F), and on the
// decoded path otherwise, where decoding again would turn a%2541 into aA.
func UnescapeKey(provider, deliveryID string, escaped bool) (string, string, error) {
	if escaped {
		var err error
		if provider, err = url.PathUnescape(provider); err != nil {
			return "", "", fmt.Errorf("%w: the path is not validly escaped", ErrNotFound)
		}
		if deliveryID, err = url.PathUnescape(deliveryID); err != nil {
			return "", "", fmt.Errorf("%w: the path is not validly escaped", ErrNotFound)
		}
	}
	if err := CheckKey(provider, deliveryID); err != nil {
		return "", "", err
	}
	return provider, deliveryID, nil
}

// FilterFromQuery reads the list filters from URL query values; a provider
// must be one of known's.
func FilterFromQuery(q url.Values, now time.Time, known *providers.Registry) (Filter, error) {
	f := Filter{Provider: q.Get("provider"), Event: q.Get("event"), State: q.Get("state")}
	for name, dst := range map[string]**time.Time{"since": &f.Since, "until": &f.Until} {
		if v := q.Get(name); v != "" {
			t, err := ParseTime(v, now)
			if err != nil {
				return Filter{}, fmt.Errorf("%s: %w", name, err)
			}
			*dst = &t
		}
	}
	return f, f.Validate(known)
}

// likePattern turns a route pattern into a LIKE pattern.
func likePattern(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`)
	return r.Replace(p)
}

// query is the filter as the store reads it.
func (f Filter) query() store.DeliveryFilter {
	q := store.DeliveryFilter{Provider: f.Provider, State: f.State, Since: f.Since, Until: f.Until}
	if f.Event != "" {
		q.EventLike = likePattern(f.Event)
	}
	return q
}

// Cursor is a position in the newest-first order of deliveries.
type Cursor struct {
	ReceivedAt time.Time `json:"t"`
	Provider   string    `json:"p"`
	DeliveryID string    `json:"d"`
}

// Encode returns the cursor as an opaque string.
func (c Cursor) Encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor reads a cursor made by Encode. A cursor is opaque but not
// trusted: one holding what no stored delivery could (NUL, control
// characters, overlong text, a time out of range) is ErrBadFilter.
func DecodeCursor(s string) (Cursor, error) {
	var c Cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || !c.valid() {
		return Cursor{}, fmt.Errorf("%w: cursor is not one this server returned", ErrBadFilter)
	}
	return c, nil
}

// valid reports whether every field of c could come from a stored delivery.
func (c Cursor) valid() bool {
	return !c.ReceivedAt.IsZero() && providers.StorableTime(c.ReceivedAt) &&
		providers.ValidID(c.Provider) && providers.ValidID(c.DeliveryID)
}

// Item is one delivery in a list.
type Item = store.Item

// cursorOf returns the position just after the item.
func cursorOf(it Item) Cursor {
	return Cursor{ReceivedAt: it.ReceivedAt, Provider: it.Provider, DeliveryID: it.DeliveryID}
}

// MaxLimit caps a page.
const MaxLimit = 500

// List returns up to limit deliveries matching f, newest first, after the
// cursor when one is given, and the cursor of the next page (nil at the end).
// Deliveries received after a listing began never appear on its later pages,
// so paging neither repeats nor skips what was there.
func List(ctx context.Context, db DB, f Filter, limit int, after *Cursor) ([]Item, *Cursor, error) {
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, MaxLimit)
	items, err := store.ListDeliveries(ctx, db, f.query(), limit+1, (*store.DeliveryCursor)(after))
	if err != nil {
		return nil, nil, err
	}
	for i := range items {
		items[i].State = Summary(items[i].States)
	}
	var next *Cursor
	if len(items) > limit {
		items = items[:limit]
		c := cursorOf(items[limit-1])
		next = &c
	}
	return items, next, nil
}

// CountSQL returns the query Count runs, and its arguments.
func CountSQL(f Filter) (string, []any) { return store.CountDeliveriesSQL(f.query()) }

// Count returns how many deliveries match f.
func Count(ctx context.Context, db DB, f Filter) (int, error) {
	return store.CountDeliveries(ctx, db, f.query())
}

// Receipt is one receipt of a delivery as the operators see it: without its
// body, its hash in hex.
type Receipt struct {
	Scope       string            `json:"scope"`
	ReceivedAt  time.Time         `json:"received_at"`
	ContentType string            `json:"content_type"`
	BodySHA256  string            `json:"body_sha256"`
	Headers     map[string]string `json:"headers"`
}

// Detail is one delivery with its receipts and every dispatch.
type Detail struct {
	Provider   string           `json:"provider"`
	DeliveryID string           `json:"delivery_id"`
	Event      string           `json:"event"`
	Entity     *string          `json:"entity"`
	EventTime  *time.Time       `json:"event_time"`
	Receipts   []Receipt        `json:"receipts"`
	Dispatches []store.Dispatch `json:"dispatches"`
	// Expired says retention deleted the delivery's receipts and
	// dispatches; its id is kept (GATEWAY_ID_RETENTION), with the first
	// receipt's body hash, when it was received and when it expired, so the
	// delivery sent again is recognised.
	Expired    bool       `json:"expired"`
	BodySHA256 string     `json:"body_sha256,omitempty"`
	ReceivedAt *time.Time `json:"received_at,omitempty"`
	ExpiredAt  *time.Time `json:"expired_at,omitempty"`
}

// Show returns a delivery with its receipts (oldest first) and every dispatch
// of every route and generation; ErrNotFound when there is none.
func Show(ctx context.Context, db DB, provider, deliveryID string) (Detail, error) {
	if err := CheckKey(provider, deliveryID); err != nil {
		return Detail{}, err
	}
	d := Detail{Provider: provider, DeliveryID: deliveryID, Receipts: []Receipt{}, Dispatches: []store.Dispatch{}}
	stored, err := store.ReceiptsOf(ctx, db, provider, deliveryID)
	if err != nil {
		return Detail{}, err
	}
	for i, r := range stored {
		if i == 0 { // the event is described by its first receipt
			d.Event = r.Event
			if r.Entity != "" {
				d.Entity = &r.Entity
			}
			if !r.EventTime.IsZero() {
				d.EventTime = &r.EventTime
			}
		}
		d.Receipts = append(d.Receipts, Receipt{Scope: r.Scope, ReceivedAt: r.ReceivedAt, ContentType: r.ContentType,
			BodySHA256: hex.EncodeToString(r.BodySHA256), Headers: r.Headers})
	}
	if len(d.Receipts) == 0 {
		return expired(ctx, db, d)
	}
	if d.Dispatches, err = store.DispatchesOf(ctx, db, provider, deliveryID); err != nil {
		return Detail{}, err
	}
	return d, nil
}

// expired returns d, a delivery without receipts, as its kept id describes
// it, or ErrNotFound when none is kept.
func expired(ctx context.Context, db DB, d Detail) (Detail, error) {
	e, err := store.ExpiredIDOf(ctx, db, d.Provider, d.DeliveryID)
	if err != nil {
		return Detail{}, err
	}
	d.Event = e.Event
	d.Expired, d.BodySHA256, d.ReceivedAt, d.ExpiredAt = true, hex.EncodeToString(e.BodySHA256), &e.ReceivedAt, &e.ExpiredAt
	return d, nil
}

// Body returns the first stored body of a delivery, byte for byte, and its
// content type; ErrNotFound when there is none.
func Body(ctx context.Context, db DB, provider, deliveryID string) ([]byte, string, error) {
	if err := CheckKey(provider, deliveryID); err != nil {
		return nil, "", err
	}
	return store.FirstBody(ctx, db, provider, deliveryID)
}
