package recovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v84"
	"github.com/tidwall/gjson"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/providers"
)

// StripeConfig configures the Stripe API client.
type StripeConfig struct {
	// APIKey is a secret or restricted key that can read events.
	APIKey string
	// APIURL is Stripe's API, https://api.stripe.com when empty.
	APIURL string
	// MaxBodyBytes is the largest event stored (GATEWAY_MAX_BODY_BYTES,
	// DefaultMaxBodyBytes when 0): a larger one is reported skipped, as its
	// signed delivery would have been refused.
	MaxBodyBytes int64
	// Transport carries the requests; http.DefaultTransport when nil.
	Transport http.RoundTripper
}

// DefaultMaxBodyBytes is GATEWAY_MAX_BODY_BYTES's default.
const DefaultMaxBodyBytes = 25 << 20

// Stripe lists Stripe's events through stripe-go's raw requests, keeping
// each event's bytes as the API sent them.
type Stripe struct {
	cfg    StripeConfig
	origin origin
}

var _ stripeAPI = (*Stripe)(nil)

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
	u, err := url.Parse(cfg.APIURL)
	if err != nil {
		return nil, fmt.Errorf("STRIPE_API_URL: %w", err)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	return &Stripe{cfg: cfg, origin: originOf(u)}, nil
}

// event is one listed event: its id, type, time and bytes.
type event struct {
	id      string
	typ     string
	created time.Time
	raw     []byte
	// size is the event's length; raw is nil when it is past MaxBodyBytes.
	size int
}

// tooLarge tells whether the event was listed past MaxBodyBytes, its bytes
// not kept.
func (e event) tooLarge() bool { return e.raw == nil }

// errListingLoops ends a listing whose pages start naming events already
// listed: an API that never ends.
var errListingLoops = errors.New("Stripe's listing did not end (a page named only events already listed)")

// list calls fn with each event created since since, newest first, paging
// through Stripe's listing (limit, created[gte], starting_after, has_more)
// with stripe-go's raw requests. Each event's id, type and time are read from
// its page's bytes, and its bytes are its own, as they arrived; no event is
// decoded into a tree. An event that cannot be stored (without a usable id or
// time) or that is listed twice is passed to skip, and the listing goes on;
// an event past MaxBodyBytes is passed to fn without its bytes. An answer
// that is not Stripe's list of events ends the listing with an error.
func (s *Stripe) list(ctx context.Context, since time.Time, fn func(event) error, skip func(id, reason string)) error {
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(s.cfg.APIURL),
		// A redirect away from the API URL is handed back rather than made
		// an error, which stripe-go would retry: page says what it was.
		HTTPClient: &http.Client{Transport: waitsOutTooMany{next: capped{next: pinned{origin: s.origin, next: s.cfg.Transport}}},
			Timeout: time.Minute, CheckRedirect: s.checkRedirect},
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: stripe.Int64(2),
	})
	backend, ok := backends.API.(stripe.RawRequestBackend)
	if !ok {
		return errors.New("list events: stripe-go's backend makes no raw request")
	}
	listed := 0
	seen := map[string]bool{}
	after := ""
	for {
		q := url.Values{"limit": {"100"}, "created[gte]": {strconv.FormatInt(since.Unix(), 10)}}
		if after != "" {
			q.Set("starting_after", after)
		}
		res, err := backend.RawRequest(http.MethodGet, "/v1/events?"+q.Encode(), s.cfg.APIKey, "", &stripe.RawParams{Params: stripe.Params{Context: ctx}})
		if err != nil {
			return fmt.Errorf("list events: %w", err)
		}
		data, hasMore, err := page(res)
		if err != nil {
			return fmt.Errorf("list events: %w; the next run starts again", err)
		}
		fresh := 0
		last := "" // the page's last event's id; "" when it has none
		var ferr error
		data.ForEach(func(_, v gjson.Result) bool {
			if listed++; listed > maxListed {
				ferr = fmt.Errorf("list events: Stripe's listing did not end (%d events listed); the next run starts again", maxListed)
				return false
			}
			e, why := s.read(v)
			if why != "" {
				skip(looseID(e.id), "Stripe's API listed an event that cannot be read: "+why)
				last = ""
				return true
			}
			last = e.id
			if seen[e.id] {
				skip(e.id, "listed twice by Stripe's API; the first copy listed is the one stored")
				return true
			}
			seen[e.id] = true
			fresh++
			ferr = fn(e)
			return ferr == nil
		})
		switch {
		case ferr != nil:
			return ferr
		case !hasMore:
			return nil
		case fresh == 0:
			// A page of nothing new (or of nothing at all) that promises more.
			return fmt.Errorf("list events: %w; the next run starts again", errListingLoops)
		case last == "":
			return errors.New("list events: the last event of a page cannot be read, so the listing cannot go past it; the next run starts again")
		}
		after = last
	}
}

// maxBodyBytes implements stripeAPI.
func (s *Stripe) maxBodyBytes() int64 { return s.cfg.MaxBodyBytes }

// checkRedirect follows a redirect within the API URL's scheme, host and
// port, and hands back one anywhere else unfollowed, for page to refuse:
// made an error here, stripe-go would retry it.
func (s *Stripe) checkRedirect(req *http.Request, via []*http.Request) error {
	err := s.origin.followWithin(req, via)
	if errors.Is(err, ErrRedirectRefused) {
		return http.ErrUseLastResponse
	}
	return err
}

// page checks that an answer is Stripe's list of events, a JSON object
// with "object": "list", a "data" array and "has_more", and returns its
// events and has_more. Anything else (a redirect not followed, another
// status, an HTML page, another object) is an error: never "no events".
func page(res *stripe.APIResponse) (gjson.Result, bool, error) {
	if res.StatusCode/100 == 3 {
		if loc := res.Header.Get("Location"); loc != "" {
			return gjson.Result{}, false, fmt.Errorf("%w: Stripe's API answered %s, to %s", ErrRedirectRefused, res.Status, fanout.RedactURL(loc))
		}
	}
	if res.StatusCode != http.StatusOK {
		return gjson.Result{}, false, fmt.Errorf("Stripe's API answered %s, not a list of events", res.Status)
	}
	body := res.RawJSON
	if !gjson.ValidBytes(body) {
		return gjson.Result{}, false, fmt.Errorf("Stripe's API answered with what is not JSON (Content-Type %q), not a list of events", res.Header.Get("Content-Type"))
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return gjson.Result{}, false, errors.New("Stripe's API answered with what is not a JSON object, not a list of events")
	}
	object, data, more := gjson.GetBytes(body, "object"), gjson.GetBytes(body, "data"), gjson.GetBytes(body, "has_more")
	if object.Type != gjson.String || object.Str != "list" || !data.IsArray() || (more.Type != gjson.True && more.Type != gjson.False) {
		return gjson.Result{}, false, errors.New(`Stripe's API answered with an object that is not a list of events ("object": "list", a "data" array and "has_more")`)
	}
	return data, more.Type == gjson.True, nil
}

// read reads one listed event's id, type and created from its bytes, the
// first of each at its top (as providers.StripeEvent reads them), and keeps
// its bytes unless they are past MaxBodyBytes. why says what makes it
// unreadable; e.id is then the id's JSON text, if any.
func (s *Stripe) read(v gjson.Result) (e event, why string) {
	if !v.IsObject() {
		return event{}, "it is not a JSON object"
	}
	var id, typ, created gjson.Result
	v.ForEach(func(k, f gjson.Result) bool {
		switch {
		case k.Str == "id" && !id.Exists():
			id = f
		case k.Str == "type" && !typ.Exists():
			typ = f
		case k.Str == "created" && !created.Exists():
			created = f
		}
		return true
	})
	switch {
	case !id.Exists():
		return event{}, "it has no id"
	case id.Type != gjson.String || id.Str == "":
		return event{id: id.Raw}, "its id is not a non-empty string"
	}
	at, err := strconv.ParseInt(created.Raw, 10, 64)
	if created.Type != gjson.Number || err != nil {
		return event{id: id.Str}, "its created is not a whole number of seconds"
	}
	e = event{id: id.Str, typ: typ.Str, created: time.Unix(at, 0), size: len(v.Raw)}
	if int64(len(v.Raw)) <= s.cfg.MaxBodyBytes {
		e.raw = []byte(v.Raw) // a copy: the event's own bytes, byte for byte
	}
	return e, ""
}

// waitsOutTooMany is a transport that waits out a 429 (its Retry-After, a
// second without one) up to 3 times and 2 minutes: stripe-go retries only a
// few kinds of 429.
type waitsOutTooMany struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (w waitsOutTooMany) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := w.next.RoundTrip(req)
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
		res, err = w.next.RoundTrip(req)
	}
	return res, err
}

// looseID returns an unreadable event's id as well as it can be told, for
// the report: its JSON text, cut short.
func looseID(raw string) string {
	if raw == "" {
		return "(no id)"
	}
	id := strings.Trim(raw, `"`)
	if len(id) > 80 || !providers.Printable(id) {
		return "(an unprintable id)"
	}
	return id
}
