// Package hookgatetest tests a service's hookgate handlers without running a
// gateway, as River's rivertest tests a worker: build the Delivery a handler
// would be given from a real payload (GitHub's or Stripe's; signed or not),
// run the handler in a real transaction on the service's own test database,
// and see what its dispatch would record.
//
//	d, err := hookgatetest.Stripe(body) // the delivery, read as the gateway reads it
//	res := hookgatetest.Work(ctx, tx, ledger, d)
//	if res.State != hookgatetest.Succeeded { t.Fatal(res.Err) }
//
// Work runs the handler in a savepoint of the caller's transaction: an error
// rolls back the handler's writes, as the gateway does, and leaves the
// transaction usable, so a test can roll everything back at its end.
//
// The test database is a fresh one from Database (migrated as the gateway
// migrates it, then by the service's own migrations), or the service's own
// (DATABASE_URL, as its other tests have it), with hookgate's and the
// service's tables. A delivery built here is
// on route "test", generation 1, attempt 1 (Attempt sets others); GitHub's
// carry delivery ids "hookgatetest-<n>" (GitHubWith takes yours) and
// X-GitHub-Hook-ID 1. Order between deliveries (superseded) is the
// gateway's, not a handler's: test it against a running gateway, with
// GitHubRequest and StripeRequest.
package hookgatetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// The states a dispatch records after an attempt of its handler.
const (
	// Succeeded: the handler returned nil; its writes commit with the
	// dispatch.
	Succeeded = "succeeded"
	// Retrying: the handler failed (or panicked) with attempts left; its
	// writes are rolled back and the dispatch is tried again with backoff.
	Retrying = "retrying"
	// Discarded: the handler's error was wrapped by hookgate.Discard, or it
	// failed its route's last attempt; its writes are rolled back.
	Discarded = "discarded"
)

// DefaultMaxAttempts is a route's attempts when neither GATEWAY_MAX_ATTEMPTS
// nor the route's max_attempts says otherwise.
const DefaultMaxAttempts = 25

// Result is what a dispatch would record for one attempt.
type Result struct {
	// State is Succeeded, Retrying or Discarded.
	State string
	// Err is the handler's error (a panic is an error whose message starts
	// "panic:"); nil when it succeeded.
	Err error
}

// Attempt runs a handler as one attempt of a dispatch.
type Attempt struct {
	// MaxAttempts is the route's attempts: an error on the last one
	// discards the dispatch. Defaults to DefaultMaxAttempts.
	MaxAttempts int
}

// Work runs h against d as one attempt of its dispatch would, with the
// route's default attempts; see Attempt.Work.
func Work(ctx context.Context, tx pgx.Tx, h hookgate.Handler, d hookgate.Delivery) Result {
	return Attempt{}.Work(ctx, tx, h, d)
}

// Work runs h against d inside a savepoint of tx, as the gateway runs it
// inside its dispatch's transaction: a nil error releases the savepoint (the
// handler's writes stay in tx), an error or a panic rolls it back. As in the
// gateway, the handler's Commit and Rollback refuse and fail the attempt, a
// handler that ends its goroutine (runtime.Goexit) fails it too, and the
// Result's error text is cleaned and bounded as the gateway stores it. d.Attempt
// says which attempt this is (0 counts as 1). The Result says what the
// dispatch would record.
func (a Attempt) Work(ctx context.Context, tx pgx.Tx, h hookgate.Handler, d hookgate.Delivery) Result {
	maxAttempts := a.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	if d.Attempt <= 0 {
		d.Attempt = 1
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return Result{State: Retrying, Err: fmt.Errorf("savepoint: %w", err)}
	}
	err = handlers.Call(ctx, sp, func(ctx context.Context, tx pgx.Tx, jd handlers.Delivery) error {
		return h(ctx, tx, hookgate.Delivery(jd))
	}, handlers.Delivery(d))
	if err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("roll back the savepoint: %w", rerr))
		}
		return Result{State: dispatch.StateAfter(err, d.Attempt, maxAttempts), Err: err}
	}
	if err := sp.Commit(ctx); err != nil {
		return Result{State: Retrying, Err: fmt.Errorf("release the savepoint: %w", err)}
	}
	return Result{State: Succeeded}
}

// testSecret signs what GitHub and Stripe build for a test: a delivery is
// read exactly as the gateway reads a verified one.
const testSecret = "hookgatetest"

// GitHub returns the Delivery a handler is given for a GitHub delivery of
// event (the X-GitHub-Event header: "push", "pull_request") whose body is
// the JSON payload, sent as GitHub sends it (the headers gateway send sends)
// and read as the gateway reads it: the event with the payload's action, the
// entity and time of Order. Its delivery id is "hookgatetest-<n>", a new one
// each call; GitHubWith takes the request's own headers.
func GitHub(event string, body []byte) (hookgate.Delivery, error) {
	h, err := sign(providers.GitHub{Secrets: verify.Secrets{testSecret}}.Source(), body, nextID(), event)
	if err != nil {
		return hookgate.Delivery{}, err
	}
	return SignedGitHub(testSecret, h, body)
}

// GitHubWith is GitHub with the request's own headers (X-GitHub-Event and
// X-GitHub-Delivery required; a missing Content-Type is JSON); any signature
// they carry is replaced by GitHub's of body.
func GitHubWith(h http.Header, body []byte) (hookgate.Delivery, error) {
	sent, err := sign(providers.GitHub{Secrets: verify.Secrets{testSecret}}.Source(), body, h.Get("X-GitHub-Delivery"), h.Get("X-GitHub-Event"))
	if err != nil {
		return hookgate.Delivery{}, err
	}
	h = h.Clone()
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", sent.Get("Content-Type"))
	}
	h.Set("X-Hub-Signature-256", sent.Get("X-Hub-Signature-256"))
	return SignedGitHub(testSecret, h, body)
}

// Stripe returns the Delivery a handler is given for a Stripe event (the
// JSON body Stripe sends: id, type, created, data.object), sent as Stripe
// sends it and read as the gateway reads it.
func Stripe(body []byte) (hookgate.Delivery, error) {
	h, err := sign(providers.Stripe{Secrets: verify.Secrets{testSecret}}.Source(), body, "", "")
	if err != nil {
		return hookgate.Delivery{}, err
	}
	return SignedStripe(testSecret, h, body)
}

// GitHubRequest is a delivery as GitHub sends it to a running gateway: a POST
// of body to url (the gateway's /webhooks/github) with X-GitHub-Event event,
// X-GitHub-Delivery id, and X-Hub-Signature-256 signed with secret. For a
// service's end-to-end tests; a handler's own tests need no gateway (GitHub).
func GitHubRequest(ctx context.Context, url, secret, event, id string, body []byte) (*http.Request, error) {
	return newRequest(ctx, providers.GitHub{Secrets: verify.Secrets{secret}}.Source(), url, body, id, event)
}

// StripeRequest is an event as Stripe sends it to a running gateway: a POST
// of body (the event's JSON, its id and type inside) to url (the gateway's
// /webhooks/stripe) with Stripe-Signature signed now with secret (whsec_...).
func StripeRequest(ctx context.Context, url, secret string, body []byte) (*http.Request, error) {
	return newRequest(ctx, providers.Stripe{Secrets: verify.Secrets{secret}}.Source(), url, body, "", "")
}

// newRequest is the request c's sender sends, as gateway send builds it.
func newRequest(ctx context.Context, c providers.SourceConfig, url string, body []byte, id, event string) (*http.Request, error) {
	req, err := providers.NewRequest(ctx, c, url, body, id, event, time.Now())
	if err != nil {
		return nil, fmt.Errorf("hookgatetest: %w", err)
	}
	return req, nil
}

// sign returns the headers c's sender sends with body, now: those of the
// request providers.NewRequest builds, as gateway send's and the gateway's
// own tests' are.
func sign(c providers.SourceConfig, body []byte, id, event string) (http.Header, error) {
	req, err := newRequest(context.Background(), c, "http://hookgatetest/webhooks/"+c.Name, body, id, event)
	if err != nil {
		return nil, err
	}
	return req.Header, nil
}

// SignedGitHub verifies a request GitHub signed (its headers and raw body,
// as captured) with secret, and returns the Delivery a handler is given for
// it; a wrong signature is an error, as the gateway's 401.
func SignedGitHub(secret string, h http.Header, body []byte) (hookgate.Delivery, error) {
	return read(providers.SourceConfig{Name: "github", Kind: "github", Secrets: verify.Secrets{secret}}, h, body)
}

// SignedStripe verifies a request Stripe signed with secret (whsec_...),
// its Stripe-Signature's time within 5 minutes of now, and returns the
// Delivery a handler is given for it.
func SignedStripe(secret string, h http.Header, body []byte) (hookgate.Delivery, error) {
	return read(providers.SourceConfig{Name: "stripe", Kind: "stripe", Secrets: verify.Secrets{secret}, Tolerance: 5 * time.Minute}, h, body)
}

// read verifies a request as the gateway's provider of c verifies it, now.
func read(c providers.SourceConfig, h http.Header, body []byte) (hookgate.Delivery, error) {
	p, err := providers.New(c)
	if err != nil {
		return hookgate.Delivery{}, fmt.Errorf("hookgatetest: %w", err)
	}
	d, err := providers.Parse(p, h, body, time.Now())
	if err != nil {
		return hookgate.Delivery{}, fmt.Errorf("hookgatetest: %w", err)
	}
	return hookgate.Delivery{
		Provider: d.Provider, DeliveryID: d.DeliveryID, Event: d.Event, Entity: d.Entity, EventTime: d.EventTime,
		ContentType: d.ContentType, Body: d.Body, Headers: d.Headers,
		Route: "test", Generation: 1, Attempt: 1,
	}, nil
}

var ids atomic.Int64

// nextID is a delivery id no other call of this process returns.
func nextID() string { return fmt.Sprint("hookgatetest-", ids.Add(1)) }
