package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
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
	u, err := url.Parse(cfg.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("STRIPE_API_URL: %q is not an http(s) URL without credentials", cfg.APIURL)
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
}

// list returns the events created since since, oldest first. stripe-go
// pages through them (has_more, starting_after) and decodes them; the bytes
// stored are each event's own, taken from the pages as they arrived.
func (s *Stripe) list(ctx context.Context, since time.Time) ([]event, error) {
	pages := &pageKeeper{next: capped{next: s.cfg.Transport}, raw: map[string][]byte{}}
	client := stripe.NewClient(s.cfg.APIKey, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(s.cfg.APIURL),
		HTTPClient:        &http.Client{Transport: pages, Timeout: time.Minute},
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: stripe.Int64(2),
	})))
	params := &stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
	params.Limit = stripe.Int64(100)
	var out []event
	seen := map[string]bool{}
	for e, err := range client.V1Events.List(ctx, params) {
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		if len(out) >= maxListed || seen[e.ID] {
			return nil, fmt.Errorf("list events: Stripe's listing did not end (%d events listed, %s among them again); the next run starts again", len(out), e.ID)
		}
		seen[e.ID] = true
		raw := pages.take(e.ID)
		if raw == nil {
			return nil, fmt.Errorf("list events: the bytes of %s were not found in its page", e.ID)
		}
		out = append(out, event{id: e.ID, created: time.Unix(e.Created, 0), raw: raw})
	}
	slices.Reverse(out) // the API lists newest first
	return out, nil
}

// pageKeeper keeps the raw bytes of each event in the pages of events it
// carries.
type pageKeeper struct {
	next http.RoundTripper
	mu   sync.Mutex
	raw  map[string][]byte
}

// RoundTrip implements http.RoundTripper.
func (p *pageKeeper) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := p.next.RoundTrip(req)
	if err != nil || res.StatusCode != http.StatusOK {
		return res, err
	}
	body, err := io.ReadAll(res.Body) // capped: maxAnswerBytes
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	var page struct {
		Data []json.RawMessage `json:"data"`
	}
	if json.Unmarshal(body, &page) == nil {
		p.mu.Lock()
		for _, raw := range page.Data {
			var e struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(raw, &e) == nil && e.ID != "" {
				p.raw[e.ID] = raw
			}
		}
		p.mu.Unlock()
	}
	return res, nil
}

func (p *pageKeeper) take(id string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	raw := p.raw[id]
	delete(p.raw, id)
	return raw
}

// storeBatch is how many recovered events one transaction stores.
const storeBatch = 64

func (r *Recoverer) recoverStripe(ctx context.Context, opts Options) (Report, error) {
	rep := Report{Provider: "stripe", DryRun: opts.DryRun, Found: []string{}, Requested: []string{}, Stored: []string{}}
	start := time.Now()
	since, mayMove, err := r.window(ctx, "stripe", start, opts)
	if err != nil {
		return rep, err
	}
	listed, err := r.Stripe.list(ctx, since)
	if err != nil {
		return rep, err
	}
	young := start.Add(-r.minAge())
	var candidates []event
	for _, e := range listed {
		if e.created.Before(young) && providers.ValidID(e.id) {
			candidates = append(candidates, e)
		}
	}
	missing, err := r.missingStripe(ctx, candidates)
	if err != nil {
		return rep, err
	}
	for _, e := range missing {
		rep.Found = append(rep.Found, e.id)
	}
	r.Metrics.Recovery("stripe", "found", len(missing))
	if opts.DryRun {
		return rep, nil
	}

	var ds []providers.Delivery
	for _, e := range missing {
		d, err := providers.StripeEvent(e.raw)
		if err != nil {
			// Not storable as an event; no later run would do better.
			r.Metrics.Recovery("stripe", "failed", 1)
			r.logger().WarnContext(ctx, "recovery: a Stripe event from the API is not one the gateway can store", "delivery_id", e.id, "error", err)
			continue
		}
		d.Scope, d.ContentType, d.Headers = RecoveredScope, "application/json", map[string]string{}
		ds = append(ds, d)
	}
	for chunk := range slices.Chunk(ds, storeBatch) {
		stored, err := r.storeStripe(ctx, chunk, opts.Actor)
		if err != nil {
			r.Metrics.Recovery("stripe", "failed", len(chunk))
			return rep, err
		}
		rep.Stored = append(rep.Stored, stored...)
		r.Metrics.Recovery("stripe", "stored", len(stored))
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

// storeStripe stores recovered events as receipts with their dispatches, and
// an audit entry for each one stored, in one transaction. An event another
// run (or process) stored meanwhile is a duplicate or, when the API's copy
// changed between the two reads, a conflict: either way it is stored once
// and is not counted here.
func (r *Recoverer) storeStripe(ctx context.Context, ds []providers.Delivery, actor string) ([]string, error) {
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
