// Package server is hookgate's HTTP layer: the route table, the ingest
// endpoints, health checks, and the one table that turns errors into the
// contract's status codes.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/framing"
	"github.com/hookgate/hookgate/internal/guess"
	"github.com/hookgate/hookgate/internal/inflight"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/proxies"
	"github.com/hookgate/hookgate/internal/ratelog"
	"github.com/hookgate/hookgate/internal/rejections"
	"github.com/hookgate/hookgate/internal/searchkeys"
	"github.com/hookgate/hookgate/internal/throttle"
	"github.com/hookgate/hookgate/internal/tracing"
)

// Config holds what the server needs.
type Config struct {
	// Logger logs server-side failures; never payloads or secrets. Defaults
	// to slog.Default().
	Logger *slog.Logger
	// Providers are the gateway's providers: each configured one serves
	// /webhooks/<name>, others answer 404; their names are the metrics'
	// provider labels and the operator filters' choices.
	Providers *providers.Registry
	// Keys are the search keys indexed at ingest, which the deliveries
	// list's key filter takes. Nil: none.
	Keys *searchkeys.Set
	// Ingester records verified deliveries.
	Ingester *ingest.Ingester
	// Ready reports whether the database answers and its schema is current;
	// /readyz runs it at most once a second. Nil: always ready.
	Ready func(context.Context) error
	// MaxBodyBytes is the largest accepted body. Defaults to 25 MiB.
	MaxBodyBytes int64
	// MaxInflightBytes bounds the request bodies held in memory at once, all
	// ingest requests together; past it a request answers 503 overloaded.
	// Only bytes that have arrived count. Defaults to 256 MiB.
	MaxInflightBytes int64
	// MaxInflightBytesPerAddr bounds what one remote address holds of it.
	// Defaults to an eighth of MaxInflightBytes, and at least MaxBodyBytes.
	MaxInflightBytesPerAddr int64
	// MaxArrivingPerAddr bounds one remote address's ingest requests whose
	// bodies are still arriving; past it its new requests answer 503
	// overloaded. Defaults to 64.
	MaxArrivingPerAddr int
	// MinBodyRate is the slowest a body may arrive, in bytes a second on
	// average, once MinBodyGrace has passed; slower, the request answers 408
	// request_timeout and its connection is closed. 0: no minimum.
	MinBodyRate int64
	// MinBodyGrace is how long a body may take before its rate is
	// measured. Defaults to 10 s.
	MinBodyGrace time.Duration
	// ReadTimeout is the http.Server's, which the body's pace never
	// extends. 0: none.
	ReadTimeout time.Duration
	// Now is the clock for signature timestamps. Defaults to time.Now.
	Now func() time.Time
	// Metrics records ingest outcomes and serves /metrics; nil: no /metrics.
	Metrics *metrics.Metrics
	// MetricsElsewhere keeps /metrics off this handler: it is served on an
	// address of its own (GATEWAY_METRICS_ADDR).
	MetricsElsewhere bool
	// Rejections records rejected ingest requests; nil: not recorded.
	Rejections *rejections.Recorder
	// Tracer, when set, traces each ingest request (package tracing); nil:
	// no tracing work at all.
	Tracer trace.Tracer
	// Events, when set, hears of deliveries refused for their signature,
	// as often as they are logged (package notify). It must not block.
	Events func(notify.Event)
	// Admin configures the operator endpoints.
	Admin AdminConfig
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names a
	// request's remote address (GATEWAY_TRUSTED_PROXIES); none: the
	// connection's.
	TrustedProxies proxies.Trusted
}

type server struct {
	Config
	providers map[string]providers.Provider
	budget    *inflight.Budget
	searches  chan struct{} // a slot per search of the deliveries running (one per core)
	ready     *throttle.Value[struct{}]
	console   *console.Console // nil without a token or a database
	// rejected logs rejected ingest requests, a line per (provider, reason)
	// at most every rejectedLogEvery.
	rejected *ratelog.Limiter[rejectedKind, string]
	// streams counts the listeners' streams open on this process
	// (maxStreams at most).
	streams atomic.Int64
}

// rejectedKind is what a line of "ingest rejected" counts: the provider (as
// the metrics name it: a name that is no provider's is "unknown", so that a
// sender cannot make the kinds many) and the reason, the error code.
type rejectedKind struct{ provider, reason string }

// rejectedLogEvery is how often rejected requests of one kind are logged: the
// first at once, the rest counted and logged together.
const rejectedLogEvery = 10 * time.Second

// New returns the gateway's HTTP handler with its whole route table.
func New(cfg Config) http.Handler {
	if cfg.Admin.Routes == nil {
		cfg.Admin.Routes = fanout.Table(nil) // no routes
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 25 << 20
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) error { return nil }
	}
	if cfg.MaxInflightBytes <= 0 {
		cfg.MaxInflightBytes = 256 << 20
	}
	if cfg.MaxInflightBytesPerAddr <= 0 {
		cfg.MaxInflightBytesPerAddr = min(max(cfg.MaxInflightBytes/8, cfg.MaxBodyBytes), cfg.MaxInflightBytes)
	}
	if cfg.MaxArrivingPerAddr <= 0 {
		cfg.MaxArrivingPerAddr = 64
	}
	if cfg.MinBodyGrace <= 0 {
		cfg.MinBodyGrace = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Admin.Guesses == nil {
		cfg.Admin.Guesses = &guess.Guard{Logger: cfg.Logger}
	}
	if cfg.Admin.SearchBudget <= 0 {
		cfg.Admin.SearchBudget = 5 * time.Second
	}
	serveMetrics := cfg.Metrics != nil && !cfg.MetricsElsewhere
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.Discard()
	}
	s := &server{Config: cfg, providers: map[string]providers.Provider{}, searches: make(chan struct{}, runtime.GOMAXPROCS(0)),
		budget: inflight.New(cfg.MaxInflightBytes, cfg.MaxInflightBytesPerAddr, cfg.MaxArrivingPerAddr),
		ready: &throttle.Value[struct{}]{Every: time.Second, Read: func(ctx context.Context) (struct{}, error) {
			return struct{}{}, cfg.Ready(ctx)
		}}}
	for _, p := range cfg.Providers.Providers() {
		s.providers[p.Name()] = p
	}
	s.rejected = ratelog.New(rejectedLogEvery, ratelog.System, func(k rejectedKind, remoteAddr string, count int) {
		s.Logger.Warn("ingest rejected", "provider", k.provider, "reason", k.reason, "remote_addr", remoteAddr, "count", count)
		if k.reason == "invalid_signature" && cfg.Events != nil {
			cfg.Events(notify.Event{Type: notify.SignatureFailures, Provider: k.provider, Count: count, Page: "/admin/ui/rejections",
				Message: fmt.Sprintf("%d %s deliveries refused 401 invalid_signature (the last from %s): a secret rotated on one side only, or someone probing the endpoint",
					count, k.provider, remoteAddr)})
		}
	})
	if cfg.Admin.Token != "" && cfg.Admin.Pool != nil {
		// Recorded now, console or not: a token in force for a while ends
		// the sessions of the one before, even if no one signs in with it.
		sessions := console.NewSessions(cfg.Admin.Pool, cfg.Admin.Token)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := sessions.Record(ctx); err != nil {
			cfg.Logger.Error("the admin token's generation is not recorded; the console tries again when used", "error", err)
		}
		cancel()
		if cfg.Admin.Enqueuer != nil && !cfg.Admin.NoConsole {
			s.console = console.New(console.Config{
				Token: cfg.Admin.Token, Actor: Actor(cfg.Admin.Token), Pool: cfg.Admin.Pool, Enqueuer: cfg.Admin.Enqueuer,
				Routes: cfg.Admin.Routes, Providers: cfg.Providers, Keys: cfg.Keys, Logger: cfg.Logger, Now: cfg.Now, Classify: classify,
				Sessions: sessions, Guesses: cfg.Admin.Guesses, PublicURL: cfg.Admin.PublicURL, Search: s.search, Retry: s.retryMany,
				SSO: cfg.Admin.SSO, CheckRoute: cfg.Admin.CheckRoute, RoutesChanged: cfg.Admin.RoutesChanged,
			})
		}
	}
	s.Metrics.Gauge("hookgate_ingest_inflight_bytes", "Request bodies held in memory, against GATEWAY_MAX_INFLIGHT_BYTES.",
		func() float64 { return float64(s.budget.Held()) })
	if s.Ingester != nil {
		s.Metrics.Gauge("hookgate_ingest_waiting", "Deliveries waiting for a transaction to take them (bounded: 1,024 by default).",
			func() float64 { return float64(s.Ingester.Waiting()) })
	}

	r := chi.NewRouter()
	r.Use(middleware.Recoverer, cfg.TrustedProxies.Handler)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.Logger, fmt.Errorf("%w: no such endpoint", errNotFound))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.Logger, fmt.Errorf("%w: %s is not allowed here", errMethodNotAllowed, r.Method))
	})

	r.Get("/healthz", s.handleHealthz)
	r.Get("/readyz", s.handleReadyz)
	if serveMetrics {
		r.Method(http.MethodGet, "/metrics", s.Metrics.Handler())
	}
	r.Post("/webhooks/{provider}", s.handleIngest)
	r.Route("/admin", s.adminRoutes)
	return r
}

func (s *server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz answers from the readiness check's cached result: a flood of
// probes costs the database one check a second, and a caller never sees the
// database's own error (it names users, hosts and databases); it is logged.
func (s *server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	if _, fresh, err := s.ready.Get(r.Context()); err != nil {
		if fresh {
			s.Logger.WarnContext(r.Context(), "not ready", "error", err)
		}
		w.Header().Set("Retry-After", retryAfterSeconds)
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "unavailable",
			Message: "the database does not answer or its schema is not current; see the gateway's log"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// ingestResponse is the body of a 202 or 200 answer to a delivery.
type ingestResponse struct {
	Status     ingest.Status `json:"status"`
	Provider   string        `json:"provider"`
	DeliveryID string        `json:"delivery_id"`
	Event      string        `json:"event"`
	Routes     int           `json:"routes"`
}

// handleIngest checks a delivery in the contract's order: the provider, the
// declared size, and the adapter's header checks answer before the body is
// read; then the body is read within the in-flight budget, verified, recorded,
// and answered only after the commit.
func (s *server) handleIngest(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name := chi.URLParam(r, "provider")
	secretIndex := -1
	r, span := s.ingestSpan(r, name)
	fail := func(err error) {
		status, code := writeError(w, r, s.Logger, err)
		endIngestSpan(span, status, code, err)
		s.Metrics.Ingest(s.metricProvider(name), code, secretIndex, time.Since(start))
		s.Rejections.Record(rejections.FromRequest(r, name, status, code, start))
		if !loggedError(status, code) {
			s.rejected.Note(rejectedKind{s.metricProvider(name), code}, r.RemoteAddr)
		}
	}
	p, ok := s.providers[name]
	if !ok {
		fail(fmt.Errorf("%w: %q has no webhook secret set", errNotConfigured, name))
		return
	}
	if r.ContentLength > s.MaxBodyBytes {
		fail(fmt.Errorf("%w: the body is larger than %d bytes", errBodyTooLarge, s.MaxBodyBytes))
		return
	}
	req, err := p.Check(r.Header, s.Now())
	if err != nil {
		fail(err)
		return
	}
	body, release, err := s.readBody(w, r, start)
	defer release()
	if err != nil {
		fail(err)
		return
	}
	end := s.step(r, "hookgate.ingest.verify")
	d, err := p.Verify(req, body)
	end(err)
	if err != nil {
		fail(err)
		return
	}
	secretIndex = d.SecretIndex
	if d.Challenge != "" {
		// A sender checking the endpoint (Slack's url_verification): it is
		// answered, and nothing is stored.
		writeJSON(w, http.StatusOK, map[string]string{"challenge": d.Challenge})
		s.Metrics.Ingest(d.Provider, "challenge", secretIndex, time.Since(start))
		endIngestSpan(span, http.StatusOK, "challenge", nil)
		return
	}
	if span != nil {
		d.Trace = tracing.Parent(r.Context())
		span.SetAttributes(attribute.String("hookgate.delivery_id", d.DeliveryID), attribute.String("hookgate.event", d.Event))
	}
	end = s.step(r, "hookgate.ingest.commit")
	res, err := s.Ingester.Accept(r.Context(), d)
	end(err)
	if err != nil {
		fail(err)
		return
	}
	status := http.StatusAccepted
	if res.Status == ingest.Duplicate {
		status = http.StatusOK
	}
	endIngestSpan(span, status, string(res.Status), nil)
	writeJSON(w, status, ingestResponse{
		Status: res.Status, Provider: d.Provider, DeliveryID: d.DeliveryID, Event: d.Event, Routes: res.Routes,
	})
	s.Metrics.Ingest(d.Provider, string(res.Status), secretIndex, time.Since(start))
	if res.Invalid != nil {
		s.Metrics.Invalid(s.metricProvider(d.Provider))
	}
}

// ingestSpan starts an ingest request's span, continuing the sender's
// traceparent; with tracing off it does nothing and returns a nil span.
func (s *server) ingestSpan(r *http.Request, provider string) (*http.Request, trace.Span) {
	if s.Tracer == nil {
		return r, nil
	}
	ctx, span := s.Tracer.Start(tracing.FromRequest(r.Context(), r.Header), "hookgate.ingest",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
			attribute.String("hookgate.provider", s.metricProvider(provider))))
	return r.WithContext(ctx), span
}

// endIngestSpan ends an ingest request's span with its answer.
func endIngestSpan(span trace.Span, status int, outcome string, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status), attribute.String("hookgate.outcome", outcome))
	if status >= 500 {
		tracing.Fail(span, err)
	}
	span.End()
}

// step starts a span of part of an ingest request, and returns what ends
// it; with tracing off, both do nothing.
func (s *server) step(r *http.Request, name string) func(error) {
	return tracing.Step(s.Tracer, r.Context(), name)
}

// metricProvider keeps the provider label's values few: names from the URL
// that are no provider's are one value.
func (s *server) metricProvider(name string) string {
	if s.Providers.Known(name) {
		return name
	}
	return "unknown"
}

// firstPiece and maxPiece bound the pieces a body is read into: the first
// (all of a small body), and the largest; pieces grow with what has arrived.
// headBytes is how much is read before any of the budget is taken.
const (
	firstPiece = 16 << 10
	maxPiece   = 1 << 20
	headBytes  = 512
)

// readBody reads the raw body within the in-flight budget, and returns a func
// that gives its bytes back to the budget (call it once the answer is sent).
// Only bytes that have arrived are held: a piece of the body is taken from
// the budget, and allocated, once its first bytes are there (read into a
// small buffer of headBytes), and a piece is at most as large as what has
// arrived before it (firstPiece at least), so a client that declares much and
// sends little holds little, and one that sends nothing holds nothing. The
// request's address may hold its own share of the budget, and have at most
// MaxArrivingPerAddr requests reading at once. A body must arrive at
// MinBodyRate on average once MinBodyGrace has passed, or the request is
// answered 408 and its connection closed. Pieces are never copied into one
// another (the signature is checked over them as they are), so a body costs
// its size. When the budget is spent the request is refused as overloaded.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, start time.Time) (providers.Body, func(), error) {
	hold, err := s.budget.Enter(inflight.AddressOf(r.RemoteAddr))
	if err != nil {
		closeAfter(w)
		return nil, func() {}, fmt.Errorf("%w: %w", errOverloaded, err)
	}
	defer hold.Arrived()
	body, err := s.readPieces(w, r, hold, s.pace(w, start))
	if err != nil {
		closeAfter(w) // what is left of the body is not read
		body = nil
	}
	return body, hold.Release, err
}

// readPieces reads r's body into pieces taken from hold; see readBody.
func (s *server) readPieces(w http.ResponseWriter, r *http.Request, hold *inflight.Hold, pace *pacer) (providers.Body, error) {
	defer pace.done()
	left := s.MaxBodyBytes + 1 // one byte more tells a body over the limit
	if r.ContentLength >= 0 {
		left = r.ContentLength // net/http ends the body there
	}
	var body providers.Body
	var piece []byte
	var head [headBytes]byte
	var received int64
	rd := http.MaxBytesReader(w, r.Body, s.MaxBodyBytes)
	for {
		if piece != nil && len(piece) == cap(piece) {
			body, piece = append(body, piece), nil
		}
		if piece == nil && left == 0 { // the declared length, all read
			return body, nil
		}
		buf := head[:min(headBytes, left)]
		if piece != nil {
			buf = piece[len(piece):cap(piece)]
		}
		pace.expect(received)
		n, err := rd.Read(buf)
		if n > 0 && piece == nil {
			// The piece's first bytes are here: now it is taken and made.
			size := min(max(received+int64(n), firstPiece), maxPiece, left)
			if err := hold.Take(size); err != nil {
				return nil, fmt.Errorf("%w: %w", errOverloaded, err)
			}
			left -= size
			piece = append(make([]byte, 0, size), head[:n]...)
		} else if n > 0 {
			piece = piece[:len(piece)+n]
		}
		received += int64(n)
		var maxErr *http.MaxBytesError
		switch {
		case err == io.EOF && r.ContentLength >= 0 && (left > 0 || len(piece) < cap(piece)):
			return nil, fmt.Errorf("%w: the body ended before its declared length", errBadRequest)
		case err == io.EOF:
			if len(piece) > 0 {
				body = append(body, piece)
			}
			return body, nil
		case errors.As(err, &maxErr):
			return nil, fmt.Errorf("%w: the body is larger than %d bytes", errBodyTooLarge, s.MaxBodyBytes)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, fmt.Errorf("%w: the body arrived slower than %d bytes a second (%d bytes in %s)",
				errRequestTimeout, s.MinBodyRate, received, time.Since(pace.start).Round(time.Millisecond))
		case err != nil:
			return nil, fmt.Errorf("%w: could not read the body: %v", errBadRequest, err)
		}
	}
}

// Framing refuses a request whose framing is ambiguous (both
// Transfer-Encoding and Content-Length: package framing) with 400 bad_request
// and has its connection closed; a connection whose framing can no longer be
// followed (after a chunked body) is closed after its answer. It goes around
// every handler of a listener from framing.Listen.
func Framing(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case framing.Ambiguous(r):
			closeAfter(w)
			writeError(w, r, logger, fmt.Errorf("%w: the request carries both Transfer-Encoding and Content-Length (RFC 9112 6.3); send one", errBadRequest))
			return
		case framing.Untracked(r):
			closeAfter(w)
		}
		next.ServeHTTP(w, r)
	})
}

// closeAfter has the connection closed once the answer is sent: the body
// was not read to its end, and waiting to discard the rest would let a slow
// sender hold the connection.
func closeAfter(w http.ResponseWriter) { w.Header().Set("Connection", "close") }

// pacer holds a body to MinBodyRate through the connection's read deadline:
// after MinBodyGrace, the bytes received must be at least the rate times the
// time since the request began.
type pacer struct {
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64     // bytes a second; 0 paces nothing
	limit time.Time // the server's own deadline for the whole request, or zero
	set   time.Time // the deadline last set
}

// pace returns the pacer of a request that began at start.
func (s *server) pace(w http.ResponseWriter, start time.Time) *pacer {
	p := &pacer{rc: http.NewResponseController(w), start: start, grace: s.MinBodyGrace, rate: s.MinBodyRate}
	if s.ReadTimeout > 0 {
		p.limit = start.Add(s.ReadTimeout)
	}
	return p
}

// expect sets the deadline by which the bytes after received must arrive.
func (p *pacer) expect(received int64) {
	if p.rate <= 0 {
		return
	}
	at := p.start.Add(max(p.grace, time.Duration(float64(received)/float64(p.rate)*float64(time.Second))))
	if !p.limit.IsZero() && at.After(p.limit) {
		at = p.limit
	}
	if at.Equal(p.set) {
		return
	}
	if p.rc.SetReadDeadline(at) == nil {
		p.set = at
	}
}

// done gives the connection back the server's deadline: the rest of the
// request (its commit) must not be cut short by the body's.
func (p *pacer) done() {
	if !p.set.IsZero() {
		_ = p.rc.SetReadDeadline(p.limit)
	}
}
