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
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/rejections"
)

// Config holds what the server needs.
type Config struct {
	// Logger logs server-side failures; never payloads or secrets.
	Logger *slog.Logger
	// Providers are the configured providers; others answer 404.
	Providers []providers.Provider
	// Ingester records verified deliveries.
	Ingester *ingest.Ingester
	// Ready reports whether the database answers and its schema is current.
	Ready func(context.Context) error
	// MaxBodyBytes is the largest accepted body. Defaults to 25 MiB.
	MaxBodyBytes int64
	// Now is the clock for signature timestamps. Defaults to time.Now.
	Now func() time.Time
	// Metrics records ingest outcomes and serves /metrics; nil: no /metrics.
	Metrics *metrics.Metrics
	// Rejections records rejected ingest requests; nil: not recorded.
	Rejections *rejections.Recorder
	// Admin configures the operator endpoints.
	Admin AdminConfig
}

type server struct {
	Config
	providers map[string]providers.Provider
}

// New returns the gateway's HTTP handler with its whole route table.
func New(cfg Config) http.Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 25 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &server{Config: cfg, providers: map[string]providers.Provider{}}
	for _, p := range cfg.Providers {
		s.providers[p.Name()] = p
	}

	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.Logger, fmt.Errorf("%w: no such endpoint", errNotFound))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.Logger, fmt.Errorf("%w: %s is not allowed here", errMethodNotAllowed, r.Method))
	})

	r.Get("/healthz", s.handleHealthz)
	r.Get("/readyz", s.handleReadyz)
	if s.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.Metrics.Handler())
	}
	r.Post("/webhooks/{provider}", s.handleIngest)
	r.Route("/admin", s.adminRoutes)
	return r
}

func (s *server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.Ready(ctx); err != nil {
		w.Header().Set("Retry-After", retryAfterSeconds)
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "unavailable", Message: err.Error()})
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

// handleIngest checks a delivery in the contract's order (provider, size,
// then the adapter's content type, headers, signature and payload), records it,
// and answers only after the commit.
func (s *server) handleIngest(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name := chi.URLParam(r, "provider")
	secretIndex := -1
	fail := func(err error) {
		status, code := writeError(w, r, s.Logger, err)
		s.Metrics.Ingest(metricProvider(name), code, secretIndex, time.Since(start))
		s.Rejections.Record(rejections.FromRequest(r, name, status, code, start))
	}
	p, ok := s.providers[name]
	if !ok {
		fail(fmt.Errorf("%w: %q has no webhook secret set", errNotConfigured, name))
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		fail(err)
		return
	}
	d, err := p.Parse(r.Header, body, s.Now())
	if err != nil {
		fail(err)
		return
	}
	secretIndex = d.SecretIndex
	res, err := s.Ingester.Accept(r.Context(), d)
	if err != nil {
		fail(err)
		return
	}
	status := http.StatusAccepted
	if res.Status == ingest.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, ingestResponse{
		Status: res.Status, Provider: d.Provider, DeliveryID: d.DeliveryID, Event: d.Event, Routes: res.Routes,
	})
	s.Metrics.Ingest(d.Provider, string(res.Status), secretIndex, time.Since(start))
}

// metricProvider keeps the provider label's values few: names from the URL
// that are no provider's are one value.
func metricProvider(name string) string {
	if name == "github" || name == "stripe" {
		return name
	}
	return "unknown"
}

// preallocBody is the largest declared body length read into a buffer
// allocated before the body arrives.
const preallocBody = 64 << 10

// readBody reads the raw body, refusing it before reading when its declared
// length is over the limit, and stopping at the limit when it is not declared.
// A small declared length is read into one buffer of that size; a larger one
// is read as it arrives, so that a client that declares much and sends little
// holds little memory.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	tooLarge := fmt.Errorf("%w: the body is larger than %d bytes", errBodyTooLarge, s.MaxBodyBytes)
	if r.ContentLength > s.MaxBodyBytes {
		return nil, tooLarge
	}
	if r.ContentLength >= 0 && r.ContentLength <= preallocBody {
		// net/http ends the body after the declared length, and reports a
		// connection that ends before it as io.ErrUnexpectedEOF.
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, fmt.Errorf("%w: could not read the body: %v", errBadRequest, err)
		}
		return body, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.MaxBodyBytes))
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		return nil, tooLarge
	}
	if err != nil {
		return nil, fmt.Errorf("%w: could not read the body: %v", errBadRequest, err)
	}
	return body, nil
}
