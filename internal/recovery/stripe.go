package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v84"

	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/providers"
)

// RecoveredScope is the receipt scope of a Stripe event stored from the API.
// A signed delivery of the same event later is another scope's receipt of an
// event already dispatched: 202 with no new dispatch, never a conflict.
const RecoveredScope = "recovered"

// StripeConfig configures the Stripe API client.
type StripeConfig struct {
	// APIKey is a secret or restricted key that can read events.
	APIKey string
	// APIURL is Stripe's API, https://api.stripe.com when empty.
	APIURL string
	// Transport carries the requests; http.DefaultTransport when nil.
	Transport http.RoundTripper
}

// Stripe lists Stripe's events through stripe-go, keeping each event's bytes
// as the API sent them.
type Stripe struct {
	cfg StripeConfig
}

// NewStripe checks cfg; it makes no request.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("STRIPE_API_KEY is empty")
	}
	if cfg.APIURL == "" {
		cfg.APIURL = "https://api.stripe.com"
	}
	if err := checkAPIURL(cfg.APIURL); err != nil {
		return nil, fmt.Errorf("STRIPE_API_URL: %w", err)
	}
	cfg.APIURL = strings.TrimRight(cfg.APIURL, "/")
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	return &Stripe{cfg: cfg}, nil
}

// event is one listed event: its id, time and bytes.
type event struct {
	id      string
	created time.Time
	raw     []byte
	// d is the event read as a delivery of scope recovered, once it was
	// found storable.
	d providers.Delivery
}

// errListingLoops ends a listing whose pages start naming events already
// listed: an API that never ends.
var errListingLoops = errors.New("Stripe's listing did not end (a page named only events already listed)")

// list calls fn with each event created since since, newest first, as
// stripe-go pages through them (has_more, starting_after); each event's
// bytes are its own, taken from its page as it arrived. An event that cannot
// be stored (one stripe-go cannot read, or without a usable id or type) or
// that is listed twice is passed to skip, and the listing goes on.
func (s *Stripe) list(ctx context.Context, since time.Time, fn func(event) error, skip func(id, reason string)) error {
	pages := &pageKeeper{next: capped{next: s.cfg.Transport}, raw: map[string][]byte{}, seen: map[string]bool{}, skip: skip}
	client := stripe.NewClient(s.cfg.APIKey, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(s.cfg.APIURL),
		HTTPClient:        &http.Client{Transport: pages, Timeout: time.Minute},
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: stripe.Int64(2),
	})))
	params := &stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
	params.Limit = stripe.Int64(100)
	listed := 0
	seen := map[string]bool{}
	for e, err := range client.V1Events.List(ctx, params) {
		if err != nil {
			return fmt.Errorf("list events: %w", err)
		}
		if listed++; listed > maxListed {
			return fmt.Errorf("list events: Stripe's listing did not end (%d events listed); the next run starts again", maxListed)
		}
		if seen[e.ID] {
			skip(e.ID, "listed twice by Stripe's API; the first copy listed is the one stored")
			continue
		}
		seen[e.ID] = true
		raw := pages.take(e.ID)
		if raw == nil {
			skip(e.ID, "its bytes were not found in its page")
			continue
		}
		if err := fn(event{id: e.ID, created: time.Unix(e.Created, 0), raw: raw}); err != nil {
			return err
		}
	}
	if err := pages.error(); err != nil {
		return fmt.Errorf("list events: %w; the next run starts again", err)
	}
	return nil
}

// pageKeeper keeps the raw bytes of each event in the pages of events it
// carries. It takes out of a page what would make stripe-go fail the whole
// page (an event it cannot read), reporting it to skip, and ends a listing
// that loops.
type pageKeeper struct {
	next http.RoundTripper
	skip func(id, reason string)

	mu   sync.Mutex
	raw  map[string][]byte
	seen map[string]bool // every id listed so far
	err  error
}

// RoundTrip implements http.RoundTripper. A 429 is waited out (its
// Retry-After, a second without one) up to 3 times and 2 minutes: stripe-go
// retries only a few kinds of 429.
func (p *pageKeeper) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := p.next.RoundTrip(req)
	for try := 1; err == nil && res.StatusCode == http.StatusTooManyRequests && try <= 3 && req.Method == http.MethodGet; try++ {
		wait := time.Second
		if sec, perr := strconv.Atoi(res.Header.Get("Retry-After")); perr == nil && sec >= 0 {
			wait = time.Duration(sec) * time.Second
		}
		if wait > 2*time.Minute {
			break
		}
		res.Body.Close()
		if err := sleep(req.Context(), wait); err != nil {
			return nil, err
		}
		res, err = p.next.RoundTrip(req)
	}
	if err != nil || res.StatusCode != http.StatusOK {
		return res, err
	}
	body, err := io.ReadAll(res.Body) // capped: maxAnswerBytes
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	if fixed, ok := p.keep(body); ok {
		body = fixed
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	res.ContentLength = int64(len(body))
	return res, nil
}

// keep reads one page: it keeps each event's bytes, and returns the page
// rewritten when an event had to be taken out or the listing must end.
func (p *pageKeeper) keep(body []byte) ([]byte, bool) {
	var page map[string]json.RawMessage
	var data []json.RawMessage
	if json.Unmarshal(body, &page) != nil || json.Unmarshal(page["data"], &data) != nil {
		return nil, false // not a page of events: stripe-go says what it is
	}
	var hasMore bool
	_ = json.Unmarshal(page["has_more"], &hasMore)
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := data[:0:0]
	fresh := 0
	lastUsable := true
	for _, raw := range data {
		var e stripe.Event
		if err := json.Unmarshal(raw, &e); err != nil || e.ID == "" {
			p.skip(looseID(raw), "Stripe's API listed an event that cannot be read: "+readError(err))
			lastUsable = false
			continue
		}
		lastUsable = true
		if !p.seen[e.ID] {
			fresh++
			p.seen[e.ID] = true
		}
		if _, listed := p.raw[e.ID]; !listed {
			p.raw[e.ID] = raw // the first copy listed (the newest) is the one stored
		}
		kept = append(kept, raw)
	}
	switch {
	case hasMore && fresh == 0:
		// A page of nothing new (or of nothing at all) that promises more.
		p.err, hasMore = errListingLoops, false
	case hasMore && !lastUsable:
		// stripe-go would ask for the page after the last event it read,
		// and be given the unreadable one again.
		p.err, hasMore = errors.New("the last event of a page cannot be read, so the listing cannot go past it"), false
	case len(kept) == len(data):
		return nil, false
	}
	page["data"], _ = json.Marshal(kept)
	page["has_more"], _ = json.Marshal(hasMore)
	fixed, err := json.Marshal(page)
	return fixed, err == nil
}

func (p *pageKeeper) take(id string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	raw := p.raw[id]
	delete(p.raw, id)
	return raw
}

func (p *pageKeeper) error() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// looseID returns an unreadable event's id as well as it can be told, for
// the report: its JSON text, cut short.
func looseID(raw []byte) string {
	var e struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(raw, &e) != nil || len(e.ID) == 0 {
		return "(no id)"
	}
	id := strings.Trim(string(e.ID), `"`)
	if len(id) > 80 || !providers.Printable(id) {
		return "(an unprintable id)"
	}
	return id
}

func readError(err error) string {
	if err == nil {
		return "it has no id"
	}
	return err.Error()
}

// storeBatch is how many recovered events one transaction stores; compared
// is how many listed events one query compares with the receipts; maxHeld is
// how many bytes of missing events a run holds before storing them.
const (
	storeBatch = 64
	compared   = 100
	maxHeld    = 16 << 20
)

// recoverStripe lists the events since the checkpoint and stores those with
// no receipt. Missing events are held and stored oldest first when the
// listing ends (or, past maxHeld bytes, as they come, newest first: an
// order-aware route then supersedes the older ones, as it would for any
// deliveries arriving out of order).
func (r *Recoverer) recoverStripe(ctx context.Context, opts Options) (Report, error) {
	rep := newReport("stripe", opts)
	start := time.Now()
	since, mayMove, err := r.window(ctx, "stripe", start, opts)
	if err != nil {
		return rep, err
	}
	young := start.Add(-r.minAge())
	var batch, held []event
	heldBytes := 0
	store := func() error {
		slices.Reverse(held) // oldest first
		err := r.storeStripe(ctx, held, opts.Actor, &rep)
		held, heldBytes = nil, 0
		return err
	}
	compare := func() error {
		missing, err := r.missingStripe(ctx, batch)
		batch = nil
		if err != nil {
			return err
		}
		for _, e := range missing {
			rep.Found = append(rep.Found, e.id)
			r.Metrics.Recovery("stripe", "found", 1)
			if !opts.DryRun {
				held = append(held, e)
				heldBytes += len(e.raw)
			}
		}
		if heldBytes > maxHeld {
			return store()
		}
		return nil
	}
	skip := func(id, reason string) { r.skip(ctx, &rep, "stripe", id, reason) }
	err = r.Stripe.list(ctx, since, func(e event) error {
		if !e.created.Before(young) {
			return nil // the next run sees it
		}
		d, err := providers.StripeEvent(e.raw)
		if err != nil {
			// Not storable as an event; no later run would do better.
			skip(e.id, err.Error())
			return nil
		}
		d.Scope, d.ContentType, d.Headers = RecoveredScope, "application/json", map[string]string{}
		e.d = d
		if batch = append(batch, e); len(batch) >= compared {
			return compare()
		}
		return nil
	}, skip)
	// What was found missing is stored even when the listing failed part way.
	if ctx.Err() == nil {
		if cerr := compare(); cerr != nil {
			err = errors.Join(err, cerr)
		} else if serr := store(); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	slices.Reverse(rep.Found) // oldest first, as stored
	if err != nil {
		return rep, err
	}
	if mayMove {
		if err := r.saveCheckpoint(ctx, "stripe", start.Add(-overlap)); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// missingStripe returns the events with no receipt of any scope.
func (r *Recoverer) missingStripe(ctx context.Context, events []event) ([]event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.id
	}
	rows, err := r.Pool.Query(ctx, `SELECT DISTINCT delivery_id FROM hookgate_receipts WHERE provider = 'stripe' AND delivery_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	var missing []event
	for _, e := range events {
		if !slices.Contains(stored, e.id) {
			missing = append(missing, e)
		}
	}
	return missing, nil
}

// storeStripe stores events, in transactions of storeBatch, and reports and
// counts what it stored.
func (r *Recoverer) storeStripe(ctx context.Context, events []event, actor string, rep *Report) error {
	ds := make([]providers.Delivery, len(events))
	for i, e := range events {
		ds[i] = e.d
	}
	for chunk := range slices.Chunk(ds, storeBatch) {
		stored, err := r.storeStripeTx(ctx, chunk, actor)
		if err != nil {
			r.Metrics.Recovery("stripe", "failed", len(chunk))
			return err
		}
		rep.Stored = append(rep.Stored, stored...)
		r.Metrics.Recovery("stripe", "stored", len(stored))
	}
	return nil
}

// storeStripeTx stores recovered events as receipts with their dispatches,
// and an audit entry for each one stored, in one transaction. An event
// another run (or process) stored meanwhile is a duplicate or, when the
// API's copy changed between the two reads, a conflict: either way it is
// stored once and is not counted here.
func (r *Recoverer) storeStripeTx(ctx context.Context, ds []providers.Delivery, actor string) ([]string, error) {
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store events: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	outcomes, err := r.Ingester.AcceptManyTx(ctx, tx, ds)
	if err != nil {
		return nil, fmt.Errorf("store events: %w", err)
	}
	var stored []string
	for i, o := range outcomes {
		if o.Err == nil && o.Result.Status == ingest.Accepted {
			stored = append(stored, ds[i].DeliveryID)
		}
	}
	if err := recordAudit(ctx, tx, actor, "stripe", "stored from Stripe's events API", stored...); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("store events: %w", err)
	}
	return stored, nil
}
