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
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/searchkeys"
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

// Invalid is the state of a delivery whose payload failed its schema: it
// was stored and acknowledged, and dispatched to no route.
const Invalid = "invalid"

// States are the values the state filter accepts.
var States = append(slices.Clone(summaryOrder), "stored", Invalid)

// Summary returns a delivery's state from its routes' latest dispatch states:
// "stored" when it has none, "invalid" when its payload failed its schema.
func Summary(states []string, invalid bool) string {
	if invalid {
		return Invalid
	}
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
	// in that state; "stored" matches deliveries without dispatches, and
	// "invalid" those whose payload failed its schema.
	State string `json:"state,omitempty"`
	// Since (inclusive) and Until (exclusive) bound the first receipt's time.
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	// Q, a CEL expression over provider, event, headers and payload (as a
	// route's filter), selects the deliveries it is true for: Search
	// evaluates it over the window [Since, Until), at most MaxSearchWindow,
	// or over the deliveries Keys select, however long ago.
	Q string `json:"q,omitempty"`
	// Keys select deliveries whose search keys have all these values, each
	// "name:value" (package searchkeys), from the keys' index across the
	// whole retention.
	Keys []string `json:"keys,omitempty"`
}

// DefaultSearchWindow is the window a search (Filter.Q) evaluates when the
// filter gives no since, and MaxSearchWindow the widest it may give.
const (
	DefaultSearchWindow = 24 * time.Hour
	MaxSearchWindow     = 31 * 24 * time.Hour
)

var eventPatternRE = regexp.MustCompile(`^[A-Za-z0-9_.*-]{1,255}$`)

// Validate checks the filter's values; its provider must be one of known's,
// its keys names keys indexes.
func (f Filter) Validate(known *providers.Registry, keys *searchkeys.Set) error {
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
	if len(f.Keys) > searchkeys.MaxPerFilter {
		return fmt.Errorf("%w: key is given %d times: at most %d keys, all of which must match", ErrBadFilter, len(f.Keys), searchkeys.MaxPerFilter)
	}
	for _, k := range f.Keys {
		if _, err := keys.Parse(k); err != nil {
			return fmt.Errorf("%w: key: %w", ErrBadFilter, err)
		}
	}
	if f.Q != "" {
		if _, err := compileQ(f.Q); err != nil {
			return err
		}
		if len(f.Keys) == 0 {
			return f.checkWindow()
		}
	}
	return nil
}

// checkWindow checks a search's window: given, and at most MaxSearchWindow.
func (f Filter) checkWindow() error {
	if f.Since == nil || f.Until == nil {
		return fmt.Errorf("%w: a search (q) needs since and until (FilterFromQuery sets them)", ErrBadFilter)
	}
	if !f.Since.Before(*f.Until) {
		return fmt.Errorf("%w: since must be before until", ErrBadFilter)
	}
	if f.Until.Sub(*f.Since) > MaxSearchWindow {
		return fmt.Errorf("%w: a search (q) evaluates at most 31 days (744h) of deliveries: narrow since and until", ErrBadFilter)
	}
	return nil
}

// compileQ compiles a search's expression, its errors naming the line and
// column where it fails, or the type it has when that is not bool.
func compileQ(q string) (*filter.Filter, error) {
	f, err := filter.Compile(q)
	if err != nil {
		return nil, fmt.Errorf("%w: q: %s", ErrBadFilter, filter.Explain(err))
	}
	return f, nil
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
// must be one of known's, a key (key=name:value, repeatable) one keys
// indexes.
func FilterFromQuery(q url.Values, now time.Time, known *providers.Registry, keys *searchkeys.Set) (Filter, error) {
	f := Filter{Provider: q.Get("provider"), Event: q.Get("event"), State: q.Get("state"), Q: q.Get("q")}
	for _, k := range q["key"] {
		if !slices.Contains(f.Keys, k) {
			f.Keys = append(f.Keys, k)
		}
	}
	switch qs := q["q"]; {
	case len(qs) > 1:
		return Filter{}, fmt.Errorf("%w: q is given %d times: one expression, joined with && or ||, says it", ErrBadFilter, len(qs))
	case len(qs) == 1 && strings.TrimSpace(qs[0]) == "":
		return Filter{}, fmt.Errorf("%w: q is empty: leave it out for the whole list", ErrBadFilter)
	}
	for name, dst := range map[string]**time.Time{"since": &f.Since, "until": &f.Until} {
		if v := q.Get(name); v != "" {
			t, err := ParseTime(v, now)
			if err != nil {
				return Filter{}, fmt.Errorf("%s: %w", name, err)
			}
			*dst = &t
		}
	}
	if f.Q != "" && len(f.Keys) == 0 {
		// A search's window: until now, since a day before until. One
		// narrowed by keys evaluates what they select, however old.
		if f.Until == nil {
			f.Until = &now
		}
		if f.Since == nil {
			since := f.Until.Add(-DefaultSearchWindow)
			f.Since = &since
		}
	}
	return f, f.Validate(known, keys)
}

// likePattern turns a route pattern into a LIKE pattern.
func likePattern(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`)
	return r.Replace(p)
}

// query is the filter as the store reads it.
func (f Filter) query() store.DeliveryFilter {
	q := store.DeliveryFilter{Provider: f.Provider, State: f.State, Since: f.Since, Until: f.Until}
	for _, k := range f.Keys {
		name, value, _ := strings.Cut(k, ":")
		q.Keys = append(q.Keys, store.KeyValue{Name: name, Value: value})
	}
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
	// Since and Until are a search's window, which its cursor keeps: a
	// window given as a duration ago, or by default, would otherwise move
	// between one call and the next, and lose what lay at its old end.
	Since *time.Time `json:"s,omitempty"`
	Until *time.Time `json:"u,omitempty"`
}

// position is the cursor's place in the list, as the store reads it; nil
// for no cursor.
func (c *Cursor) position() *store.DeliveryCursor {
	if c == nil {
		return nil
	}
	return &store.DeliveryCursor{ReceivedAt: c.ReceivedAt, Provider: c.Provider, DeliveryID: c.DeliveryID}
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
	for _, t := range []*time.Time{c.Since, c.Until} {
		if t != nil && !providers.StorableTime(*t) {
			return false
		}
	}
	return !c.ReceivedAt.IsZero() && providers.StorableTime(c.ReceivedAt) &&
		providers.ValidID(c.Provider) && providers.ValidID(c.DeliveryID) && (c.Since == nil) == (c.Until == nil)
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
	if f.Q != "" {
		return nil, nil, fmt.Errorf("%w: q is a search: this list does not take it", ErrBadFilter)
	}
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, MaxLimit)
	items, err := store.ListDeliveries(ctx, db, f.query(), limit+1, after.position())
	if err != nil {
		return nil, nil, err
	}
	for i := range items {
		items[i].State = Summary(items[i].States, items[i].Invalid)
	}
	var next *Cursor
	if len(items) > limit {
		items = items[:limit]
		c := cursorOf(items[limit-1])
		next = &c
	}
	return items, next, nil
}

// searchPage is how many deliveries a search reads at a time.
const searchPage = 200

// SearchResult is a page of a search.
type SearchResult struct {
	// Items are the deliveries found, newest first.
	Items []Item
	// Next continues the search after the last delivery it looked at; nil
	// when it looked at every delivery of the window.
	Next *Cursor
	// Partial is whether the search stopped at its time budget: Next then
	// continues where it stopped.
	Partial bool
	// Failed counts the deliveries looked at that the expression failed on,
	// none of them a match: a field missing (without has() to guard it), a
	// body that is not JSON or that retention deleted, the filters' cost
	// limits. A search that finds nothing because its expression fails on
	// everything says so here.
	Failed int
	// Looked counts the deliveries the expression was evaluated on.
	Looked int
}

// Search returns up to limit deliveries matching f, whose Q it evaluates on
// each delivery of the window in turn (f's other fields narrow them first),
// newest first, after the cursor when one is given. It stops when it has
// found limit, or when budget has passed, with what it found so far and a
// cursor that continues after the last delivery it looked at. A delivery
// whose body retention has deleted, or on which the expression fails (a
// field it lacks, a body that is not JSON, the filters' cost limits), is not
// a match.
func Search(ctx context.Context, db DB, f Filter, limit int, after *Cursor, budget time.Duration) (SearchResult, error) {
	q, err := compileQ(f.Q)
	if err != nil {
		return SearchResult{}, err
	}
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, MaxLimit)
	if after != nil && after.Since != nil {
		// A search's own cursor: its window, checked again (a cursor is
		// not trusted).
		f.Since, f.Until = after.Since, after.Until
		if err := f.checkWindow(); err != nil && len(f.Keys) == 0 {
			return SearchResult{}, err
		}
	}
	s := &search{q: q, limit: limit, deadline: time.Now().Add(budget), after: after, since: f.Since, until: f.Until}
	base := f
	base.Q = ""
	for {
		page, err := store.ListDeliveries(ctx, db, base.query(), searchPage, s.after.position())
		if err != nil {
			return SearchResult{}, err
		}
		sizes, err := store.FirstBodySizes(ctx, db, page)
		if err != nil {
			return SearchResult{}, err
		}
		for start := 0; start < len(page); {
			end := chunkEnd(sizes, start)
			contents, err := store.FirstContents(ctx, db, page[start:end])
			if err != nil {
				return SearchResult{}, err
			}
			for i, it := range page[start:end] {
				if err := ctx.Err(); err != nil {
					return SearchResult{}, fmt.Errorf("search deliveries: %w", err)
				}
				if s.look(it, contents[i]) {
					return s.result(), nil
				}
			}
			start = end
		}
		if len(page) < searchPage {
			return s.result(), nil
		}
	}
}

// search is one call of Search as it goes.
type search struct {
	q        *filter.Filter
	limit    int
	deadline time.Time
	after    *Cursor // the last delivery looked at
	looked   int
	res      SearchResult
	// since and until are the window, which res.Next keeps.
	since, until *time.Time
}

// result is the search's answer, its cursor keeping its window.
func (s *search) result() SearchResult {
	if s.res.Next != nil {
		next := *s.res.Next
		next.Since, next.Until = s.since, s.until
		s.res.Next = &next
	}
	s.res.Looked = s.looked
	return s.res
}

// look evaluates the search on one delivery and reports whether the call
// ends there: its page is full (Next continues after it), or its budget
// has passed (Partial, Next continues at it). At least one delivery is
// looked at each time, so that a search continued from its cursor always
// moves on.
func (s *search) look(it Item, c store.Content) bool {
	if s.looked > 0 && time.Now().After(s.deadline) {
		s.res.Next, s.res.Partial = s.after, true
		return true
	}
	s.looked++
	at := cursorOf(it)
	s.after = &at
	if c.Body == nil {
		s.res.Failed++
		return false
	}
	in := &filter.Input{Provider: it.Provider, Event: it.Event, Headers: c.Headers, ContentType: c.ContentType, Body: c.Body}
	ok, err := s.q.Match(in)
	if err != nil {
		s.res.Failed++
		return false
	}
	if !ok {
		return false
	}
	it.State = Summary(it.States, it.Invalid)
	s.res.Items = append(s.res.Items, it)
	if len(s.res.Items) == s.limit {
		s.res.Next = s.after
		return true
	}
	return false
}

// searchChunkBytes bounds the bodies a search holds at once: a page's are
// read in chunks of at most this many bytes (and at least one body).
const searchChunkBytes = 16 << 20

// chunkEnd returns the end of the chunk of bodies that starts at start:
// as many as fit in searchChunkBytes, and at least one.
func chunkEnd(sizes []int64, start int) int {
	end, total := start+1, sizes[start]
	for end < len(sizes) && total+sizes[end] <= searchChunkBytes {
		total += sizes[end]
		end++
	}
	return end
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
	// SchemaError, when set, is why the payload failed its schema: the
	// delivery was dispatched to no route (its state is invalid).
	SchemaError *providers.SchemaError `json:"schema_error"`
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
	if d.SchemaError, err = store.SchemaErrorOf(ctx, db, provider, deliveryID); err != nil {
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

// Input returns a stored delivery as filters and transformations see it:
// its first receipt's event, kept headers, content type and body;
// ErrNotFound when there is none.
func Input(ctx context.Context, db DB, provider, deliveryID string) (*filter.Input, error) {
	if err := CheckKey(provider, deliveryID); err != nil {
		return nil, err
	}
	first, err := store.FirstReceipt(ctx, db, provider, deliveryID)
	if errors.Is(err, store.ErrNoReceipt) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &filter.Input{Provider: provider, Event: first.Event, Headers: first.Headers, ContentType: first.ContentType, Body: first.Body}, nil
}

// Body returns the first stored body of a delivery, byte for byte, and its
// content type; ErrNotFound when there is none.
func Body(ctx context.Context, db DB, provider, deliveryID string) ([]byte, string, error) {
	if err := CheckKey(provider, deliveryID); err != nil {
		return nil, "", err
	}
	return store.FirstBody(ctx, db, provider, deliveryID)
}
