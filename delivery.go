package hookgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/handlers"
)

// Delivery is what a handler is given: one stored event, as its route sees
// it.
type Delivery struct {
	// Provider is the sender's name: "github", "stripe", or a source's name.
	Provider string
	// DeliveryID is the provider's id of the delivery (GitHub's
	// X-GitHub-Delivery, Stripe's evt_...).
	DeliveryID string
	// Event is the event's name as routes match it ("pull_request.opened",
	// "invoice.paid").
	Event string
	// Entity names what the event is about ("stripe:sub_123",
	// "github:pull_request:1234", "github:issue:100"); empty when it names
	// none.
	Entity string
	// EventTime is when the event happened by the payload's own time (a
	// pull request's updated_at, a Stripe event's created); zero when it has
	// none. Order is decided by it, per route and entity, as the route's
	// Order says: on a route with order latest (the default) an event with
	// both Entity and EventTime is never handed over after a newer one of
	// its entity was (it ends superseded); on a route with order all every
	// event is handed over, one at a time per entity, the oldest waiting
	// first (see Late); events of equal time are all handed over, in any
	// order; an event without a time is handed over whenever it comes. Order
	// holds per route, not across routes.
	EventTime time.Time
	// ContentType and Body are byte for byte what the sender sent. A
	// delivery sent again with the same id and body (a retry, a redelivery)
	// is a second receipt of the same delivery; the handler sees the first
	// receipt's. Body may be a form-encoded GitHub delivery: see Payload.
	ContentType string
	Body        []byte
	// Headers are the kept provider headers of the first receipt (the
	// event, id and hook headers; never a signature or token), keyed by the
	// names as the sender spelled them: look them up as sent
	// ("X-GitHub-Event"), not canonicalized.
	Headers map[string]string
	// Route is the route's name, Generation 1 for the first dispatch and one
	// more for each replay, Attempt 1, 2, ... within one generation.
	Route      string
	Generation int
	Attempt    int
	// Late is true on a route with order all when a newer event of the
	// entity was handled before this one: the handler decides what an event
	// that comes late means (a ledger adds it all the same; a projection
	// may skip it).
	Late bool
}

// Payload returns the delivery's JSON payload: the body, or for a
// form-encoded GitHub delivery its payload field.
func (d Delivery) Payload() ([]byte, error) {
	mt, _, _ := mime.ParseMediaType(d.ContentType)
	if mt != "application/x-www-form-urlencoded" {
		return d.Body, nil
	}
	form, err := url.ParseQuery(string(d.Body))
	if err != nil {
		return nil, fmt.Errorf("form-encoded body: %w", err)
	}
	p, ok := form["payload"]
	if !ok {
		return nil, errors.New("form-encoded body without a payload field")
	}
	return []byte(p[0]), nil
}

// Decode decodes the JSON payload (see Payload) into v, as json.Unmarshal
// does.
func (d Delivery) Decode(v any) error {
	p, err := d.Payload()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(p, v); err != nil {
		return fmt.Errorf("decode payload: %w", err)
	}
	return nil
}

// Handler is a Go handler, the target of routes whose target is
// builtin:<name> (see WithHandler). It runs inside its dispatch's
// transaction: its writes through tx, the dispatch's success and the River
// job's completion commit together or not at all, so its database effect
// happens exactly once, whatever process dies when and however often River
// runs the job again. Order holds: a handler is never called with an event
// older than the newest its route handled for that entity (that dispatch ends
// superseded).
//
// Exactly once is per dispatch generation: an operator's forced replay
// (generation 2, 3, ...) hands the delivery over again, on purpose. A
// handler whose effect must happen once per event whatever operators replay
// keys it by (Provider, DeliveryID), e.g. INSERT ... ON CONFLICT DO NOTHING
// on a unique key; one that may repeat on a replay needs nothing more. Jobs
// inserted through Gateway.Client().InsertTx(ctx, tx, ...) inside the
// handler are enqueued exactly once too: they commit with tx.
//
// An error rolls its writes back and the dispatch is retried with River's
// backoff (1 s before the first retry, then attempt⁴ s: 16 s, 81 s, ...),
// up to the route's attempts (GATEWAY_MAX_ATTEMPTS, 25 by default, about
// three weeks); an error wrapped by Discard discards the dispatch at once.
// A panic is an error (its message begins "panic:"), never a crash of the
// process. Every error text is stored and shown cleaned: valid UTF-8, without
// NUL bytes, at most 2 KiB (cut, ending in "...(truncated)").
//
// The transaction is the gateway's, not the handler's: tx's Commit and
// Rollback refuse (a savepoint the handler begins with tx.Begin is its own),
// and a handler that calls either fails its attempt, whatever it returns:
// nothing of the attempt commits, and the dispatch is retried like any error.
// A handler runs on a goroutine of its own: one that ends it
// (runtime.Goexit, as t.FailNow does) fails its attempt likewise, and the
// worker goes on.
//
// ctx ends no sooner than the route's time limit (its timeout, else
// GATEWAY_FORWARD_TIMEOUT, 10 s by default) plus 5 s after the handler is
// called (plus up to 5 s more: the attempt's limit includes the time it may
// be held back while ingest is under load), and when the
// gateway stops. A handler must return when ctx ends: one that does not holds its
// connection, and Run then stops without it and returns an error. A handler
// must not have effects outside tx that cannot be repeated: they happen at
// least once.
type Handler func(ctx context.Context, tx pgx.Tx, d Delivery) error

// Discard marks a handler's error as permanent: the dispatch is discarded at
// once, without spending its other attempts, and stays visible to operators,
// who may replay it. errors.Is and errors.As see through it to err.
func Discard(err error) error { return handlers.Discard(err) }

// builtinHandler adapts h to the dispatch worker's handler type (the same
// fields, so a conversion).
func builtinHandler(h Handler) handlers.Handler {
	return func(ctx context.Context, tx pgx.Tx, d handlers.Delivery) error {
		return h(ctx, tx, Delivery(d))
	}
}
