package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/archive"
	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/recovery"
	"github.com/hookgate/hookgate/internal/replay"
	"github.com/hookgate/hookgate/internal/retry"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/verify"
)

// Errors of the HTTP layer itself.
var (
	errNotConfigured    = errors.New("provider not configured")
	errBodyTooLarge     = errors.New("body too large")
	errBadRequest       = errors.New("bad request")
	errNotFound         = errors.New("not found")
	errMethodNotAllowed = errors.New("method not allowed")
	errUnauthorized     = errors.New("unauthorized")
	errForbidden        = errors.New("forbidden")
	errOverloaded       = errors.New("overloaded")
	errRequestTimeout   = errors.New("request timeout")
	errRoutesFromConfig = errors.New("the configuration owns the routes")
	errNotAwaited       = errors.New("no answer is awaited")
	errTooManyStreams   = errors.New("too many streams")
)

// errorCodes is the one table that turns errors into the contract's status
// codes and error codes. The first entry that matches wins, so the more
// specific errors come first.
var errorCodes = []struct {
	err    error
	status int
	code   string
}{
	{errNotConfigured, http.StatusNotFound, "provider_not_configured"},
	{errNotFound, http.StatusNotFound, "not_found"},
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed"},
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, "body_too_large"},
	{providers.ErrUnsupportedMediaType, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	{providers.ErrMissingHeader, http.StatusBadRequest, "bad_request"},
	{verify.ErrTimestampOutOfTolerance, http.StatusUnauthorized, "timestamp_out_of_tolerance"},
	{verify.ErrMissingSignature, http.StatusUnauthorized, "invalid_signature"},
	{verify.ErrSignatureMismatch, http.StatusUnauthorized, "invalid_signature"},
	{providers.ErrBadPayload, http.StatusBadRequest, "bad_request"},
	{errBadRequest, http.StatusBadRequest, "bad_request"},
	{receipts.ErrConflict, http.StatusConflict, "delivery_conflict"},
	{ingest.ErrRefused, http.StatusBadRequest, "bad_request"},
	{errOverloaded, http.StatusServiceUnavailable, "overloaded"},
	{errRequestTimeout, http.StatusRequestTimeout, "request_timeout"},
	{ingest.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{errUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{errForbidden, http.StatusForbidden, "forbidden"},
	{access.ErrForbidden, http.StatusForbidden, "forbidden"},
	{access.ErrBadToken, http.StatusBadRequest, "bad_request"},
	{access.ErrBadRole, http.StatusBadRequest, "bad_request"},
	{access.ErrNotFound, http.StatusNotFound, "not_found"},
	{deliveries.ErrNotFound, http.StatusNotFound, "not_found"},
	{deliveries.ErrBadFilter, http.StatusBadRequest, "bad_request"},
	{replay.ErrUnknownRoute, http.StatusBadRequest, "bad_request"},
	{replay.ErrNotFound, http.StatusNotFound, "not_found"},
	{routes.ErrNotFound, http.StatusNotFound, "not_found"},
	{retry.ErrPaused, http.StatusConflict, "route_paused"},
	{errRoutesFromConfig, http.StatusConflict, "routes_from_config"},
	{errNotAwaited, http.StatusConflict, "not_awaited"},
	{errTooManyStreams, http.StatusTooManyRequests, "too_many_streams"},
	{config.ErrBadLiveRoute, http.StatusBadRequest, "bad_request"},
	{retry.ErrUnknownRoute, http.StatusBadRequest, "bad_request"},
	{audit.ErrBadCursor, http.StatusBadRequest, "bad_request"},
	{idempotency.ErrBadBody, http.StatusBadRequest, "bad_request"},
	{idempotency.ErrBadKey, http.StatusBadRequest, "bad_request"},
	{idempotency.ErrKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused"},
	{idempotency.ErrInFlight, http.StatusConflict, "idempotency_key_in_flight"},
	{recovery.ErrNotConfigured, http.StatusConflict, "not_configured"},
	{errArchiveNotConfigured, http.StatusConflict, "not_configured"},
	{archive.ErrAlreadyPresent, http.StatusConflict, "already_present"},
	{archive.ErrNoObject, http.StatusNotFound, "not_found"},
	{archive.ErrCorrupt, http.StatusBadGateway, "archive_corrupt"},
	{archive.ErrStore, http.StatusBadGateway, "archive_unavailable"},
}

// retryAfterSeconds is sent with every 503.
const retryAfterSeconds = "5"

// errorBody is the contract's error body.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// classify returns err's status and error code from the table; an error
// that says the database cannot be reached is 503 unavailable; anything else
// is an internal error.
func classify(err error) (int, string) {
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.status, e.code
		}
	}
	if databaseUnavailable(err) {
		return http.StatusServiceUnavailable, "unavailable"
	}
	return http.StatusInternalServerError, "internal"
}

// databaseUnavailable reports whether err means the database could not be
// reached or is shutting down, rather than that a query was wrong: a failed
// connection, a network error, a timeout, or the SQLSTATE classes of
// connection failures (08), exhausted resources (53) and operator
// intervention (57, such as a shutdown).
func databaseUnavailable(err error) bool {
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded),
		pgconn.SafeToRetry(err):
		return true
	case errors.As(err, &pgErr):
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53") || strings.HasPrefix(pgErr.Code, "57")
	}
	return false
}

// writeError answers with err's status and code, and returns them. Client
// errors carry err's text, which names what was wrong and never holds a secret
// or a payload. Server-side errors are logged, and their text is not sent.
func writeError(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) (int, string) {
	status, code := classify(err)
	msg := errtext.Clean(err.Error()) // it may quote what the request held
	if status >= 500 {
		if loggedError(status, code) {
			logger.ErrorContext(r.Context(), "request failed", "error", err, "method", r.Method, "path", r.URL.Path, "status", status)
		}
		msg = "the server could not complete the request; retry later"
		switch {
		case status == http.StatusBadGateway:
			// The archive store's failure, or an object that does not match
			// its manifest: what it was is the operator's to know, and holds
			// keys and hashes, never a credential (the store's URL has none).
			msg = errtext.Clean(err.Error())
		case code == "overloaded":
			msg = "the gateway holds as many request bodies as it may, in all or from this address; nothing was stored, retry later"
		case status == http.StatusServiceUnavailable:
			// Not "nothing was stored": a commit may have succeeded after the
			// request's time ran out.
			msg = "the database did not confirm the delivery in time; retry later (a retry of a delivery that was stored after all answers duplicate)"
		}
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", retryAfterSeconds)
		}
	}
	writeJSON(w, status, errorBody{Error: code, Message: msg})
	return status, code
}

// loggedError reports whether writeError logs an answer of status and code
// as the server's own failure, one line each: a 5xx other than overloaded.
// Every other refusal of a delivery is the sender's (or, overloaded, a
// flood's) and is logged as "ingest rejected", a line per kind at most
// every 10 s.
func loggedError(status int, code string) bool {
	return status >= 500 && code != "overloaded"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
