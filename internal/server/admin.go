package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/archive"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/guess"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/rejections"
	"github.com/hookgate/hookgate/internal/replay"
	"github.com/hookgate/hookgate/internal/sso"
)

// AdminConfig configures the operator endpoints under /admin.
type AdminConfig struct {
	// Token is GATEWAY_ADMIN_TOKEN; empty: every /admin path answers 404.
	Token string
	// Pool is the database.
	Pool *pgxpool.Pool
	// Enqueuer creates replays' dispatches.
	Enqueuer *dispatch.Enqueuer
	// RiverUI is served at /admin/river/; nil: not served.
	RiverUI http.Handler
	// Routes is the fan-out table, whose routes operators see, pause and
	// resume (through Enqueuer's River client).
	Routes fanout.Source
	// NoConsole turns the browser console off (GATEWAY_CONSOLE=off): the
	// JSON API and River UI then take the bearer token only.
	NoConsole bool
	// PublicURL is GATEWAY_PUBLIC_URL: the console's origin, and its cookies
	// Secure when https. Empty: the request's own.
	PublicURL string
	// SSO signs people in to the console with OpenID Connect; nil: the
	// console takes tokens only.
	SSO *sso.SSO
	// CheckRoute checks a route given to PUT /admin/routes/{name} as the
	// configuration's are checked, and returns its spec to store; nil: the
	// configuration owns the routes (GATEWAY_ROUTES_FROM=config), and PUT
	// and DELETE answer 409 routes_from_config.
	CheckRoute func(name string, body []byte) ([]byte, error)
	// RoutesChanged, when set, is told of a route put or deleted here, and
	// returns once this gateway follows (the others do within seconds).
	RoutesChanged func()
	// Guesses compares bearer tokens and console sign-ins alike, and charges
	// wrong ones. Nil: a guess.Guard with its defaults.
	Guesses *guess.Guard
	// Recoverer runs recovery on demand (POST /admin/recover/{provider});
	// nil: every provider's recovery answers 409 not_configured.
	Recoverer Recoverer
	// SearchBudget bounds one search of the deliveries by q
	// (GATEWAY_SEARCH_BUDGET). Defaults to 5 s.
	SearchBudget time.Duration
	// Archive is GATEWAY_ARCHIVE_URL's store, for /admin/archive; nil
	// without one (its POSTs answer 409 not_configured).
	Archive archive.Store
	// Retention is how long a restored day is kept again.
	Retention time.Duration
	// Stopping, when closed, ends the listeners' open streams: the gateway
	// is stopping. Nil: they end with their requests.
	Stopping <-chan struct{}
}

// Actor is how the replay log names whoever holds a token: a short digest,
// which tells tokens apart without revealing them.
func Actor(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "token:" + hex.EncodeToString(sum[:4])
}

// maxAdminBody bounds an operator request's body.
const maxAdminBody = 64 << 10

func (s *server) adminRoutes(r chi.Router) {
	r.Use(s.adminOn)
	if s.console != nil {
		s.console.Register(r)
	}
	r.Group(func(r chi.Router) {
		r.Use(s.bearerOnly)
		// What each endpoint needs: viewers read, operators act on
		// deliveries and routes (and tokens, below, are package access's).
		view, operate := r.With(s.need(access.Viewer)), r.With(s.need(access.Operator))
		view.Get("/openapi.json", handleOpenAPI)
		view.Get("/deliveries", s.handleListDeliveries)
		view.Get("/deliveries/{provider}/{id}", s.handleShowDelivery)
		view.Get("/deliveries/{provider}/{id}/body", s.handleDeliveryBody)
		operate.Post("/deliveries/{provider}/{id}/replay", s.handleReplayOne)
		operate.Post("/deliveries/{provider}/{id}/retry", s.handleRetryDelivery)
		operate.Post("/replays", s.handleBulkReplay)
		operate.Post("/retries", s.handleBulkRetry)
		view.Get("/archive", s.handleArchive)
		operate.Post("/archive/{day}", s.handleArchiveDay)
		operate.Post("/archive/{day}/restore", s.handleRestoreDay)
		view.Get("/replays", s.handleListReplays)
		view.Get("/replays/{replay_id}", s.handleShowReplay)
		view.Get("/rejections", s.handleRejections)
		view.Get("/routes", s.handleListRoutes)
		view.Get("/routes/{name}", s.handleShowRoute)
		operate.Post("/routes/{name}/pause", s.handlePauseRoute)
		operate.Post("/routes/{name}/resume", s.handleResumeRoute)
		operate.Post("/routes/{name}/retry", s.handleRetryRoute)
		operate.Post("/routes/{name}/transform", s.handleTryTransform)
		operate.Get("/listen/{route}", s.handleListen)
		operate.Post("/listen/{route}/{dispatch_id}", s.handleListenAnswer)
		administer := r.With(s.need(access.Admin))
		administer.Put("/routes/{name}", s.handlePutRoute)
		administer.Delete("/routes/{name}", s.handleDeleteRoute)
		view.Get("/audit", s.handleAudit)
		view.Get("/providers", s.handleListProviders)
		operate.Post("/recover/{provider}", s.handleRecover)
	})
	// Tokens: an admin manages everyone's; a person signed in to the
	// console, their own (package access decides), from its pages.
	r.Group(func(r chi.Router) {
		r.Use(s.bearerOrConsole)
		r.Get("/tokens", s.handleListTokens)
		r.Post("/tokens", s.handleCreateToken)
		r.Delete("/tokens/{id}", s.handleRevokeToken)
	})
	if s.Admin.RiverUI != nil {
		r.Group(func(r chi.Router) {
			r.Use(s.bearerOrSession)
			ui := s.printableOnly(s.Admin.RiverUI)
			r.Handle("/river", ui)
			r.Handle("/river/*", ui)
		})
	}
}

// printableOnly answers 400 for a request whose decoded path or query holds
// anything but printable UTF-8 text, and 503 while the database is not ready.
// River UI passes queue names and filters from both to its queries as text,
// which PostgreSQL refuses to hold NUL or invalid UTF-8, and River UI then
// answers 500.
func (s *server) printableOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !printableURL(r.URL) {
			writeError(w, r, s.Logger, fmt.Errorf("%w: the path and query must be printable UTF-8 text", errBadRequest))
			return
		}
		// River UI's pages are framed by no one and sniffed by no browser.
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		// River UI answers a database it cannot reach with a 400 of its own;
		// the readiness check (at most once a second) answers as the contract does.
		if _, _, err := s.ready.Get(r.Context()); err != nil {
			writeError(w, r, s.Logger, fmt.Errorf("%w: River UI: %w", ingest.ErrUnavailable, err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// printableURL reports whether u's decoded path and every query name and
// value are printable.
func printableURL(u *url.URL) bool {
	if !providers.Printable(u.Path) {
		return false
	}
	query, _ := url.ParseQuery(u.RawQuery) // pairs that do not parse are read by no one
	for name, values := range query {
		if !providers.Printable(name) || slices.ContainsFunc(values, func(v string) bool { return !providers.Printable(v) }) {
			return false
		}
	}
	return true
}

// adminOn answers 404 for everything under /admin when no token is set, and
// 400 for a request whose query string does not decode.
func (s *server) adminOn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Admin.Token == "" {
			writeError(w, r, s.Logger, fmt.Errorf("%w: operator endpoints are off (GATEWAY_ADMIN_TOKEN is unset)", errNotFound))
			return
		}
		// A query that does not decode (a broken percent-escape, a ; as a
		// separator) is refused whole: Go's Query drops such a pair without a
		// word, and a filter dropped so would select everything.
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			writeError(w, r, s.Logger, fmt.Errorf("%w: the query string cannot be decoded (a broken %%-escape or a ; between values)", errBadRequest))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate returns the identity of the request's bearer token: the
// admin token (the break-glass admin) or a live personal token. ok is false
// when it holds neither; err when the database could not tell.
//
// The admin token is compared as SHA-256 digests in constant time, so
// neither its bytes nor its length leak; a personal token is looked up by
// its SHA-256, outside the guard's lock. Either way the comparison is the
// guard's to make: within the address's failure budgets, a wrong token
// waiting a wrong guess's cost (see guess.Guard.Check). A request without
// a bearer token (no Authorization header, another scheme, an empty token)
// guessed nothing, and does not wait.
func (s *server) authenticate(r *http.Request) (id access.Identity, ok bool, err error) {
	header := r.Header.Get("Authorization")
	if header == "" {
		return access.Identity{}, false, nil
	}
	// The scheme's name is case-insensitive (RFC 7235: bearer, BEARER).
	scheme, token, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		// Basic credentials, or Bearer with nothing: no token was guessed.
		return access.Identity{}, false, nil
	}
	want := sha256.Sum256([]byte(s.Admin.Token))
	got := sha256.Sum256([]byte(token))
	admin := subtle.ConstantTimeCompare(got[:], want[:]) == 1
	var personal access.Identity
	var known bool
	if !admin && access.IsPersonalToken(token) && s.Admin.Pool != nil {
		personal, err = access.Authenticate(r.Context(), s.Admin.Pool, token)
		switch {
		case err == nil:
			known = true
		case !errors.Is(err, access.ErrUnknown):
			return access.Identity{}, false, err
		}
	}
	if !s.Admin.Guesses.Check(r, func() bool { return admin || known }) {
		return access.Identity{}, false, nil
	}
	if admin {
		return access.Identity{Actor: Actor(s.Admin.Token), Role: access.Admin}, true, nil
	}
	return personal, true, nil
}

// actor names who the request acts as in the audit and replay logs.
func actor(r *http.Request) string {
	id, _ := access.IdentityOf(r.Context())
	return id.Actor
}

func (s *server) unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="hookgate"`)
	writeError(w, r, s.Logger, fmt.Errorf("%w: a valid Authorization: Bearer token is required", errUnauthorized))
}

// bearerOnly lets only requests with a valid bearer token through, with its
// identity in their context: the JSON API takes no cookie, so no other site
// can make a browser call it.
func (s *server) bearerOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok, err := s.authenticate(r)
		switch {
		case err != nil:
			writeError(w, r, s.Logger, fmt.Errorf("check the bearer token: %w", err))
		case !ok:
			s.unauthorized(w, r)
		default:
			next.ServeHTTP(w, r.WithContext(access.WithIdentity(r.Context(), id)))
		}
	})
}

// bearerOrConsole is bearerOnly, or, for a request without an
// Authorization header, a console session: one that changes anything must
// carry the session's CSRF token in X-CSRF-Token (the console's pages hold
// it in <meta name="csrf-token">), so that no other site can make a
// signed-in browser act.
func (s *server) bearerOrConsole(next http.Handler) http.Handler {
	bearer := s.bearerOnly(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" || s.console == nil {
			bearer.ServeHTTP(w, r)
			return
		}
		id, csrf, ok, err := s.console.Session(r)
		switch {
		case err != nil:
			writeError(w, r, s.Logger, fmt.Errorf("check the console session: %w", err))
		case !ok:
			s.unauthorized(w, r)
		case r.Method != http.MethodGet && r.Method != http.MethodHead && !access.SameSecret(r.Header.Get("X-CSRF-Token"), csrf):
			writeError(w, r, s.Logger, fmt.Errorf("%w: a console session's request needs its CSRF token in X-CSRF-Token", errForbidden))
		default:
			next.ServeHTTP(w, r.WithContext(access.WithIdentity(r.Context(), id)))
		}
	})
}

// need answers 403 to a request whose identity's role is below role.
func (s *server) need(role access.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ := access.IdentityOf(r.Context())
			if !id.Role.Allows(role) {
				writeError(w, r, s.Logger, fmt.Errorf("%w: %s %s needs the %s role; %s has the %s role", errForbidden,
					r.Method, r.URL.Path, role, id.Actor, id.Role))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// bearerOrSession lets River UI's requests through with an operator's bearer
// token or console session (see console.Console.RiverUI): River UI cancels,
// retries and deletes jobs. A browser that has neither and asks for a page
// is sent to the console's sign-in.
func (s *server) bearerOrSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok, err := s.authenticate(r)
		var signedIn, allowed bool
		if !ok && err == nil && s.console != nil {
			id, signedIn, allowed = s.console.RiverUI(r)
		}
		switch {
		case err != nil:
			writeError(w, r, s.Logger, fmt.Errorf("check the bearer token: %w", err))
		case (ok || signedIn) && !id.Role.Allows(access.Operator):
			writeError(w, r, s.Logger, fmt.Errorf("%w: River UI needs the operator role; %s has the %s role", errForbidden, id.Actor, id.Role))
		case ok, allowed:
			next.ServeHTTP(w, r)
		case s.console != nil && r.Method == http.MethodGet && r.Header.Get("Authorization") == "" &&
			strings.Contains(r.Header.Get("Accept"), "text/html"):
			http.Redirect(w, r, "/admin/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		default:
			s.unauthorized(w, r)
		}
	})
}

// pathParams returns the provider and delivery id of a delivery path (see
// deliveries.UnescapeKey).
func pathParams(r *http.Request) (string, string, error) {
	return deliveries.UnescapeKey(chi.URLParam(r, "provider"), chi.URLParam(r, "id"), r.URL.RawPath != "")
}

type listResponse struct {
	Deliveries []deliveries.Item `json:"deliveries"`
	NextCursor *string           `json:"next_cursor"`
	// Partial is a search's (q) only: whether it stopped at its time budget.
	Partial *bool `json:"partial,omitempty"`
	// Failed is a search's only: the deliveries it looked at that its
	// expression failed on (none of them a match).
	Failed *int `json:"failed,omitempty"`
}

func (s *server) handleListDeliveries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := deliveries.FilterFromQuery(q, s.Now(), s.Providers, s.Keys)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, r, s.Logger, fmt.Errorf("%w: limit must be a positive integer", errBadRequest))
			return
		}
		limit = min(n, deliveries.MaxLimit)
	}
	var after *deliveries.Cursor
	if v := q.Get("cursor"); v != "" {
		c, err := deliveries.DecodeCursor(v)
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		after = &c
	}
	var items []deliveries.Item
	var next *deliveries.Cursor
	var partial *bool
	var failed *int
	if f.Q != "" {
		found, err := s.search(r.Context(), f, limit, after)
		if r.Context().Err() != nil {
			return // the client has gone: no one to answer, and no failure of the server's
		}
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		items, next, partial, failed = found.Items, found.Next, &found.Partial, &found.Failed
	} else {
		items, next, err = deliveries.List(r.Context(), s.Admin.Pool, f, limit, after)
		if r.Context().Err() != nil {
			return // the client has gone
		}
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
	}
	if items == nil {
		items = []deliveries.Item{}
	}
	res := listResponse{Deliveries: items, Partial: partial, Failed: failed}
	if next != nil {
		c := next.Encode()
		res.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, res)
}

// search runs deliveries.Search, within Admin.SearchBudget (5 s by
// default), once one of the searches a gateway runs at once (one per core)
// is free: each holds a core and up to 16 MiB of bodies for its whole
// budget, and the others wait their turn. The API and the console share it.
func (s *server) search(ctx context.Context, f deliveries.Filter, limit int, after *deliveries.Cursor) (deliveries.SearchResult, error) {
	select {
	case s.searches <- struct{}{}:
		defer func() { <-s.searches }()
	case <-ctx.Done():
		return deliveries.SearchResult{}, ctx.Err()
	}
	return deliveries.Search(ctx, s.Admin.Pool, f, limit, after, s.Admin.SearchBudget)
}

func (s *server) handleShowDelivery(w http.ResponseWriter, r *http.Request) {
	provider, id, err := pathParams(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	d, err := deliveries.Show(r.Context(), s.Admin.Pool, provider, id)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *server) handleDeliveryBody(w http.ResponseWriter, r *http.Request) {
	provider, id, err := pathParams(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	body, contentType, err := deliveries.Body(r.Context(), s.Admin.Pool, provider, id)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// replayOneRequest is the body of a replay of one delivery.
type replayOneRequest struct {
	Routes []string `json:"routes"`
	Force  bool     `json:"force"`
	Reason string   `json:"reason"`
}

// validate refuses text the replay log could not store or show.
func (req *replayOneRequest) validate() error {
	for _, route := range req.Routes {
		if !providers.Printable(route) {
			return fmt.Errorf("%w: routes must be route names", errBadRequest)
		}
	}
	return validReason(req.Reason)
}

type replayOneResponse struct {
	ReplayID string `json:"replay_id"`
	replay.Result
}

func (s *server) handleReplayOne(w http.ResponseWriter, r *http.Request) {
	provider, id, err := pathParams(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var req replayOneRequest
	s.idempotent(w, r, "replay", &req, func(ctx context.Context, tx pgx.Tx) (any, error) {
		replayID, res, err := replay.OneTx(ctx, tx, s.Admin.Enqueuer, actor(r), provider, id,
			replay.Request{Routes: req.Routes, Force: req.Force}, req.Reason)
		if err != nil {
			return nil, err
		}
		return replayOneResponse{ReplayID: replayID, Result: res}, nil
	})
}

// bulkFilter is the filter of a bulk replay's or retry's body: the list's
// filters, a search (q) and search keys.
type bulkFilter struct {
	Provider string  `json:"provider"`
	Event    string  `json:"event"`
	State    string  `json:"state"`
	Since    string  `json:"since"`
	Until    string  `json:"until"`
	Q        *string `json:"q"`
	Key      keyList `json:"key"`
}

// filter reads the body's filter as the list reads its query.
func (b bulkFilter) filter(s *server) (deliveries.Filter, error) {
	q := url.Values{"provider": {b.Provider}, "event": {b.Event}, "state": {b.State}, "since": {b.Since}, "until": {b.Until}, "key": b.Key}
	if b.Q != nil {
		q["q"] = []string{*b.Q}
	}
	return deliveries.FilterFromQuery(q, s.Now(), s.Providers, s.Keys)
}

// keyList is a body's key: "name:value", or an array of them.
type keyList []string

// UnmarshalJSON implements json.Unmarshaler.
func (k *keyList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*k = keyList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil || len(many) == 0 {
		// An empty list selects no key: refused, so that a list built from
		// an empty result never acts on every delivery.
		return errors.New(`key is "name:value", or a non-empty array of them`)
	}
	*k = many
	return nil
}

// bulkReplayRequest is the body of a replay by filter.
type bulkReplayRequest struct {
	bulkFilter
	Force  bool   `json:"force"`
	Reason string `json:"reason"`
}

// validate refuses a reason the replay log could not store or show; the
// filter's fields are checked by deliveries.FilterFromQuery.
func (req *bulkReplayRequest) validate() error {
	return validReason(req.Reason)
}

// validReason refuses a reason that is not printable text: PostgreSQL refuses
// NUL in text, and the replay log is read in terminals.
func validReason(reason string) error {
	if !providers.Printable(reason) {
		return fmt.Errorf("%w: reason must be printable UTF-8 text, without control characters", errBadRequest)
	}
	return nil
}

type bulkReplayResponse struct {
	ReplayID   string `json:"replay_id"`
	Deliveries int    `json:"deliveries"`
}

func (s *server) handleBulkReplay(w http.ResponseWriter, r *http.Request) {
	var req bulkReplayRequest
	s.idempotent(w, r, "bulk_replay", &req, func(ctx context.Context, tx pgx.Tx) (any, error) {
		f, err := req.filter(s)
		if err != nil {
			return nil, err
		}
		replayID, matched, err := replay.BulkTx(ctx, tx, s.Admin.Enqueuer, actor(r), f, req.Force, req.Reason)
		if err != nil {
			return nil, err
		}
		return bulkReplayResponse{ReplayID: replayID, Deliveries: matched}, nil
	})
}

// adminRequest is an operator request's body, which checks its own fields.
type adminRequest interface {
	validate() error
}

// idempotent reads the request's body into req and runs work under the
// request's Idempotency-Key, answering 202 with work's result, or the first
// answer again.
func (s *server) idempotent(w http.ResponseWriter, r *http.Request, operation string, req adminRequest,
	work func(ctx context.Context, tx pgx.Tx) (any, error),
) {
	body, err := readAdminBody(w, r, req)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	key := r.Header.Get("Idempotency-Key") // idempotency.Do refuses one it cannot keep
	hash, err := idempotency.RequestHash(r.URL.Path, body)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	k := idempotency.Key{Scope: actor(r), Operation: operation, Key: key}
	resp, replayed, err := idempotency.Do(r.Context(), s.Admin.Pool, k, hash, func(ctx context.Context, tx pgx.Tx) (idempotency.Response, error) {
		out, err := work(ctx, tx)
		if err != nil {
			return idempotency.Response{}, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return idempotency.Response{}, err
		}
		return idempotency.Response{Status: http.StatusAccepted, Body: b}, nil
	})
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(append(resp.Body, '\n'))
}

// readAdminBody reads a JSON body into req (empty is {}; unknown fields are
// refused) and validates it. It returns the body as received, which the
// idempotency hash covers.
func readAdminBody(w http.ResponseWriter, r *http.Request, req adminRequest) ([]byte, error) {
	return readAdminBodyUpTo(w, r, req, maxAdminBody)
}

// readAdminBodyUpTo is readAdminBody for a body of up to limit bytes.
func readAdminBodyUpTo(w http.ResponseWriter, r *http.Request, req adminRequest, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("%w: the body is larger than %d bytes", errBodyTooLarge, limit)
	}
	if !utf8.Valid(body) {
		// encoding/json would quietly turn such bytes into U+FFFD.
		return nil, fmt.Errorf("%w: the body must be UTF-8 text", errBadRequest)
	}
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 {
		if trimmed[0] != '{' {
			// json.Decode takes null into a struct as nothing at all.
			return nil, fmt.Errorf("%w: the body must be a JSON object", errBadRequest)
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(req); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) && typeErr.Field != "" {
				// A field of the embedded filter is named by its JSON name alone.
				field := strings.TrimPrefix(typeErr.Field, "bulkFilter.")
				return nil, fmt.Errorf("%w: the body's field %q must be a JSON %s", errBadRequest, field, jsonKind(typeErr.Type.Kind()))
			}
			return nil, fmt.Errorf("%w: the body must be a JSON object of the documented fields: %v", errBadRequest, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("%w: the body must be one JSON object, with nothing after it", errBadRequest)
		}
	}
	return body, req.validate()
}

// jsonKind names a Go kind as JSON does.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "boolean (true or false)"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Float64:
		return "number"
	}
	return "value of the documented type"
}

// limitParam is a list's limit query parameter: 100 when absent, at most
// deliveries.MaxLimit; anything but a positive integer is a bad request.
func limitParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: limit must be a positive integer", errBadRequest)
	}
	return min(n, deliveries.MaxLimit), nil
}

func (s *server) handleListReplays(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	replays, err := replay.List(r.Context(), s.Admin.Pool, limit)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"replays": replays})
}

func (s *server) handleShowReplay(w http.ResponseWriter, r *http.Request) {
	replay, err := replay.Get(r.Context(), s.Admin.Pool, chi.URLParam(r, "replay_id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, replay)
}

func (s *server) handleRejections(w http.ResponseWriter, r *http.Request) {
	list, err := rejections.List(r.Context(), s.Admin.Pool)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"rejections": list})
}
