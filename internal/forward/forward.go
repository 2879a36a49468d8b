// Package forward POSTs a delivery to an http(s) target: the request and its
// headers (Idempotency-Key, X-Hookgate-*), its signatures (X-Hookgate-Signature
// and the Standard Webhooks headers, https://www.standardwebhooks.com/),
// redirects kept to the target's host, and what a failed attempt means for a
// retry (Error). It knows no River and no database: package dispatch decides
// when to forward and records the outcome.
package forward

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/tracing"
	"github.com/hookgate/hookgate/internal/verify"
	"github.com/hookgate/hookgate/internal/version"
)

// userAgent names the release that forwards: during a rolling upgrade a
// target sees which gateways still run the older one.
const userAgent = "hookgate/" + version.Number

// maxRetryAfter caps a target's Retry-After.
const maxRetryAfter = time.Hour

// Error is a failed forward attempt.
type Error struct {
	// Status is the target's HTTP status, 0 when no response came.
	Status int
	// Permanent means a retry cannot help (a 4xx other than 408 and 429, or a
	// redirect that was not followed): the dispatch is discarded at once.
	Permanent bool
	// RetryAfter is the target's Retry-After, 0 when absent.
	RetryAfter time.Duration
	// Detail is the transport error or an excerpt of the response body.
	Detail string
	// Timeout means no answer came within the attempt's time limit.
	Timeout bool
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return "forward: " + e.Detail
	}
	if e.Detail == "" {
		return fmt.Sprintf("forward: target answered %d", e.Status)
	}
	return fmt.Sprintf("forward: target answered %d: %s", e.Status, e.Detail)
}

// Client POSTs deliveries to http(s) targets, reusing connections.
type Client struct {
	// HTTP sends the requests. New's does not use proxies and
	// follows a redirect only when it keeps the method, the body and the host
	// (307, 308 to the same scheme and host).
	HTTP *http.Client
	// Secrets sign each attempt, each one alone (rotation: a target holding
	// any one of them verifies): one v1= in X-Hookgate-Signature and one v1,
	// in webhook-signature per secret. Empty secrets are skipped; none:
	// unsigned, without either header.
	Secrets []string
	// Timeout bounds one attempt. Defaults to 10s.
	Timeout time.Duration
}

// New returns a Client that signs with secrets (none: unsigned) and whose
// transport keeps up to maxIdlePerHost connections to each target.
func New(secrets []string, timeout time.Duration, maxIdlePerHost int) *Client {
	transport := &http.Transport{
		Proxy:                 nil, // targets are internal services
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4 * maxIdlePerHost,
		MaxIdleConnsPerHost:   maxIdlePerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			first := via[0]
			code := req.Response.StatusCode
			if len(via) > 3 || (code != http.StatusTemporaryRedirect && code != http.StatusPermanentRedirect) ||
				req.URL.Scheme != first.URL.Scheme || req.URL.Host != first.URL.Host {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	return &Client{HTTP: client, Secrets: secrets, Timeout: timeout}
}

// Forward sends one attempt of d to target within the Client's Timeout.
// It returns nil on a 2xx, and a *Error otherwise.
func (f *Client) Forward(ctx context.Context, target string, d handlers.Delivery) error {
	return f.ForwardWithin(ctx, target, 0, d)
}

// ForwardWithin is Forward with a time limit of its own (a route's timeout);
// 0 is the Client's.
func (f *Client) ForwardWithin(ctx context.Context, target string, timeout time.Duration, d handlers.Delivery) error {
	return f.ForwardWith(ctx, target, timeout, d, nil)
}

// ForwardWith is ForwardWithin with headers of the route's own added (a
// transformation's, package transform): hookgate's headers and signatures
// are set after them, so none of them can be replaced.
func (f *Client) ForwardWith(ctx context.Context, target string, timeout time.Duration, d handlers.Delivery, headers map[string]string) error {
	timeout = cmp.Or(timeout, f.Timeout, 10*time.Second)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(d.Body))
	if err != nil {
		return &Error{Permanent: true, Detail: "bad target " + fanout.RedactURL(target)}
	}
	h := req.Header
	for k, v := range headers {
		h.Set(k, v)
	}
	h.Set("User-Agent", userAgent)
	key := SetHeaders(h, d)
	tracing.Inject(ctx, h) // the attempt's span, when traced
	if err := f.sign(h, key, time.Now(), d.Body); err != nil {
		// Sent unsigned it would be refused; retried it would fail alike.
		return &Error{Permanent: true, Detail: err.Error()}
	}

	res, err := f.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return &Error{Detail: fmt.Sprintf("no answer within %s", timeout), Timeout: true}
		}
		var urlErr *url.Error
		if errors.As(err, &urlErr) { // its text quotes the whole URL
			return &Error{Detail: urlErr.Op + " " + fanout.RedactURL(urlErr.URL) + ": " + urlErr.Err.Error()}
		}
		return &Error{Detail: err.Error()}
	}
	defer res.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(res.Body, 256))
	// Drain a little more so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))

	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return nil
	}
	fe := StatusError(res.StatusCode, strings.TrimSpace(excerpt(strings.ToValidUTF8(string(head), "?"), 200)))
	switch {
	case !fe.Permanent:
		fe.RetryAfter = parseRetryAfter(res.Header.Get("Retry-After"), time.Now())
	case res.StatusCode >= 300 && res.StatusCode < 400:
		fe.Detail = "redirect to " + fanout.RedactURL(res.Header.Get("Location")) + " not followed"
	}
	return fe
}

// StatusError is a non-2xx status as a failed attempt: 408, 429 and 5xx are
// retried, any other (a 4xx, a redirect not followed) is permanent.
func StatusError(status int, detail string) *Error {
	retried := status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
	return &Error{Status: status, Detail: detail, Permanent: !retried}
}

// SetHeaders sets what an attempt of d carries besides its signatures, its
// User-Agent and its trace: Content-Type, Idempotency-Key and the
// X-Hookgate-* headers (gateway listen posts them too). It returns the
// Idempotency-Key, the signatures' webhook-id.
func SetHeaders(h http.Header, d handlers.Delivery) string {
	h.Set("Content-Type", d.ContentType)
	key := IdempotencyKey(d.Provider, d.DeliveryID, d.Route)
	h.Set("Idempotency-Key", key)
	h.Set("X-Hookgate-Provider", d.Provider)
	h.Set("X-Hookgate-Delivery", HeaderSafe(d.DeliveryID))
	h.Set("X-Hookgate-Event", d.Event)
	h.Set("X-Hookgate-Route", d.Route)
	h.Set("X-Hookgate-Attempt", strconv.Itoa(d.Attempt))
	h.Set("X-Hookgate-Generation", strconv.Itoa(d.Generation))
	if d.Late {
		h.Set("X-Hookgate-Late", "true")
	}
	return key
}

// sign sets an attempt's signature headers, all of one time now, when the
// Client has secrets: X-Hookgate-Signature, "t=<unix>" then one ",v1=<hex>"
// per secret (Stripe's scheme, keyed by the secret's bytes), and the Standard
// Webhooks headers: webhook-id (id, the Idempotency-Key), webhook-timestamp
// and webhook-signature, one "v1,<base64>" per secret, space-separated.
func (f *Client) sign(h http.Header, id string, now time.Time, body []byte) error {
	return Sign(f.Secrets, h, id, now, body)
}

// Sign sets the signature headers of a request signed like a forward (see
// Client.sign) with secrets, id its webhook-id: what else hookgate sends
// (notifications) is verified the same way. No secret: no header.
func Sign(secrets []string, h http.Header, id string, now time.Time, body []byte) error {
	ts := strconv.FormatInt(now.Unix(), 10)
	var hookgate, standard []string
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		// "t=<ts>,v1=<hex>": the t is the same for every secret.
		_, v1, _ := strings.Cut(verify.SignTimestamped(secret, now, body), ",")
		hookgate = append(hookgate, v1)
		sig, err := verify.SignStandard(standardSecret(secret), id, now, body)
		if err != nil {
			return fmt.Errorf("sign webhook-signature: %w", err)
		}
		standard = append(standard, sig)
	}
	if len(hookgate) == 0 {
		return nil
	}
	h.Set("X-Hookgate-Signature", "t="+ts+","+strings.Join(hookgate, ","))
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", strings.Join(standard, " "))
	return nil
}

// standardSecret returns secret in the form verify.SignStandard reads,
// "whsec_<base64 of the key>", so that a Standard Webhooks secret
// (whsec_<base64>) is keyed by its decoded bytes, as the Standard Webhooks
// libraries key it, and any other secret by its own bytes, as their raw
// constructors (Go's NewWebhookRaw) key it.
func standardSecret(secret string) string {
	if strings.HasPrefix(secret, "whsec_") {
		if _, err := verify.StandardKey(secret); err == nil {
			return secret
		}
	}
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte(secret))
}

// Outcome names a forward attempt's outcome for metrics: succeeded,
// status_4xx, status_5xx (any other status class likewise), timeout, or
// connection when no answer came for another reason.
func Outcome(err error) string {
	var fe *Error
	switch {
	case err == nil:
		return "succeeded"
	case !errors.As(err, &fe):
		return "connection"
	case fe.Status > 0:
		return fmt.Sprintf("status_%dxx", fe.Status/100)
	case fe.Timeout:
		return "timeout"
	}
	return "connection"
}

// IdempotencyKey is the key a target sees on every attempt, retry and replay
// of one event on one route.
func IdempotencyKey(provider, deliveryID, route string) string {
	return provider + ":" + HeaderSafe(deliveryID) + ":" + route
}

// HeaderSafe is a delivery id as forward headers carry it: printable ASCII as
// it is, any other byte (and %) percent-encoded. A header's bytes beyond
// ASCII are read as Latin-1 by many HTTP servers (Node's, Python's), so a
// receiver would sign other bytes than hookgate did and its Standard Webhooks
// library would refuse the forward; provider ids are ASCII in practice.
func HeaderSafe(id string) string {
	safe := true
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e || c == '%' {
			safe = false
			break
		}
	}
	if safe {
		return id
	}
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// parseRetryAfter reads delay-seconds or an HTTP date, capped at an hour; 0
// when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-") {
		// Capped before it is multiplied: a huge number would overflow
		// to a negative wait, an immediate retry.
		if err != nil || secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// excerpt cuts s to at most n bytes on a rune boundary.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
