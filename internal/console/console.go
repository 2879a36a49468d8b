// Package console is the operator console: server-rendered pages under
// /admin/ for people with a browser. It signs in with the admin token or a
// personal token and then keeps a session (a cookie naming a row in
// PostgreSQL) that acts with that token's role and name, shows who is
// signed in and offers only what the role may do, checks a CSRF
// token on every form that changes anything, and draws its charts as SVG on
// the server. Templates, styles, its icon and its one small script are
// embedded: the console needs nothing from outside the gateway, and its
// Content-Security-Policy allows no inline script.
//
// The console reads and acts through the same packages as the JSON API
// (deliveries, dispatch, replay, retry, routes, audit, rejections); it has no queries of its
// own but its charts' and what two pages add to a page they read there: the
// failing routes of the deliveries list and what the audit log's bulk
// replays selected, each one statement for the page.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/guess"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/retry"
	"github.com/hookgate/hookgate/internal/searchkeys"
	"github.com/hookgate/hookgate/internal/sso"
	"github.com/hookgate/hookgate/internal/throttle"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config is what the console needs.
type Config struct {
	// Token is GATEWAY_ADMIN_TOKEN, which signs a person in as the admin
	// (a live personal token signs one in with its own role).
	Token string
	// Actor names whoever holds the admin token in the replay and audit
	// logs (a personal token's session is named as the token is).
	Actor string
	// Pool is the database.
	Pool *pgxpool.Pool
	// Enqueuer creates replays' dispatches; its client pauses and resumes
	// routes' queues and makes retrying dispatches' jobs due now.
	Enqueuer *dispatch.Enqueuer
	// Routes is the fan-out table.
	Routes fanout.Source
	// Providers are the gateway's providers: the filters' and charts'
	// choices. Nil: the built-in ones.
	Providers *providers.Registry
	// Keys are the search keys indexed at ingest, which the deliveries
	// page's key filter takes. Nil: none.
	Keys *searchkeys.Set
	// Logger logs server-side failures.
	Logger *slog.Logger
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// Classify turns an error into the status code and error code of the
	// server's one table of them.
	Classify func(error) (status int, code string)
	// Sessions are the token's sessions; nil: NewSessions(Pool, Token),
	// recorded when first used.
	Sessions *Sessions
	// Guesses compares sign-ins' tokens and charges wrong ones; give it the
	// one that compares bearer tokens, so that both draw on the same
	// budgets. Nil: one of the console's own.
	Guesses *guess.Guard
	// Search runs a search of the deliveries (a filter with Q), within the
	// gateway's budget; nil: the deliveries page offers none.
	Search func(ctx context.Context, f deliveries.Filter, limit int, after *deliveries.Cursor) (deliveries.SearchResult, error)
	// Retry attempts now, in a transaction of its own, the retrying
	// dispatches of every delivery a filter selects (retry.BulkTx, a search
	// within the gateway's budget); nil: the deliveries page offers none.
	Retry func(ctx context.Context, f deliveries.Filter, after *deliveries.Cursor, op retry.Operator) (retry.BulkResult, error)
	// SSO signs people in with OpenID Connect; nil: tokens only.
	SSO *sso.SSO
	// CheckRoute checks a route of the database's as the configuration's
	// are checked, and returns its spec to store; nil: the configuration
	// owns the routes, and the console edits none.
	CheckRoute func(name string, body []byte) ([]byte, error)
	// RoutesChanged, when set, returns once this gateway follows a route
	// saved or deleted here.
	RoutesChanged func()
	// PublicURL is GATEWAY_PUBLIC_URL, an http(s) origin: the origin a
	// request from the console's own pages comes from, and, when https, its
	// cookies are Secure. Empty: the request's own host, and Secure over TLS.
	PublicURL string
}

// Console serves the console's pages.
type Console struct {
	Config
	sessions *Sessions
	origin   string // PublicURL's origin; empty: the request's host
	secure   bool   // cookies are Secure whatever the request came over
	pages    map[string]*template.Template
	charts   map[string]*throttle.Value[overviewCharts]
}

// New returns the console, its templates parsed. The templates are part of
// the binary, so a template that does not parse is a bug (which every test
// of the console finds): New panics on one.
func New(cfg Config) *Console {
	if cfg.Routes == nil {
		cfg.Routes = fanout.Table(nil) // no routes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Sessions == nil {
		cfg.Sessions = NewSessions(cfg.Pool, cfg.Token)
	}
	if cfg.Guesses == nil {
		cfg.Guesses = &guess.Guard{Logger: cfg.Logger}
	}
	c := &Console{Config: cfg, sessions: cfg.Sessions, pages: map[string]*template.Template{}}
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			// config.Validate refuses such a value; here, fail closed: no
			// Origin matches, and cookies go over TLS only.
			cfg.Logger.Error("console: the public URL is not an http(s) origin; forms need a browser that sends Sec-Fetch-Site")
			c.origin, c.secure = "-", true
		} else {
			c.origin, c.secure = originOf(u), u.Scheme == "https"
		}
	}
	names, _ := fs.Glob(templateFS, "templates/*.html")
	for _, name := range names {
		page := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
		if page == "layout" {
			continue
		}
		c.pages[page] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", name))
	}
	c.charts = map[string]*throttle.Value[overviewCharts]{}
	for _, rg := range chartRanges {
		c.charts[rg.name] = &throttle.Value[overviewCharts]{Every: rg.refresh, Timeout: 10 * time.Second, RetryErrors: true,
			Read: func(ctx context.Context) (overviewCharts, error) { return c.readCharts(ctx, rg) }}
	}
	return c
}

// contentSecurityPolicy allows the gateway's own scripts, styles and images
// only, and no inline script or style.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Register adds the console's pages to the /admin router: /admin/ is the
// overview, everything else is under /admin/ui/.
func (c *Console) Register(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(securityHeaders)
		r.Get("/ui/static/*", c.handleStatic)
		r.Get("/ui/login", c.handleLoginForm)
		r.Post("/ui/login", c.handleLogin)
		if c.SSO != nil {
			r.Get(strings.TrimPrefix(sso.LoginPath, "/admin"), c.handleSSOStart)
			r.Get(strings.TrimPrefix(sso.CallbackPath, "/admin"), c.handleSSOCallback)
		}
		r.Group(func(r chi.Router) {
			r.Use(c.signedIn)
			r.Get("/", c.handleOverview)
			r.Post("/ui/logout", c.handleLogout)
			r.Get("/ui/deliveries", c.handleDeliveries)
			r.Get("/ui/deliveries/{provider}/{id}", c.handleDelivery)
			// A replay's reason travels in POST bodies only, never in a
			// URL (which logs, history and proxies keep): the delivery's
			// form posts to the confirmation, which posts the replay.
			// What changes anything needs the operator role (a viewer's
			// session is shown no such form, and answered 403).
			operate := r.With(c.need(access.Operator))
			operate.Post("/ui/deliveries/{provider}/{id}/replay/confirm", c.handleReplayConfirm)
			operate.Post("/ui/deliveries/{provider}/{id}/replay", c.handleReplay)
			operate.Post("/ui/deliveries/{provider}/{id}/retry", c.handleRetry)
			operate.Get("/ui/replay", c.handleBulkConfirm)
			operate.Post("/ui/replay", c.handleBulkReplay)
			operate.Get("/ui/retry", c.handleBulkRetryConfirm)
			operate.Post("/ui/retry", c.handleBulkRetry)
			r.Get("/ui/replays/{replay_id}", c.handleReplayProgress)
			r.Get("/ui/routes", c.handleRoutes)
			r.Get("/ui/transform", c.handleTransform)
			operate.Post("/ui/transform", c.handleTransform)
			operate.Post("/ui/routes/{name}/{action}", c.handleRouteAction)
			// Routes of the database's are an admin's to edit.
			administer := r.With(c.need(access.Admin))
			administer.Get("/ui/route-editor", c.handleRouteEditor)
			administer.Post("/ui/route-editor", c.handleSaveRoute)
			administer.Get("/ui/route-editor/{name}", c.handleRouteEditor)
			administer.Post("/ui/route-editor/{name}", c.handleSaveRoute)
			administer.Post("/ui/route-editor/{name}/delete", c.handleDeleteRoute)
			r.Get("/ui/rejections", c.handleRejections)
			r.Get("/ui/audit", c.handleAudit)
			// Tokens: package access decides whose (an admin's: all).
			r.Get("/ui/tokens", c.handleTokens)
			r.Post("/ui/tokens", c.handleCreateToken)
			r.Post("/ui/tokens/{id}/revoke", c.handleRevokeToken)
		})
	})
}

// RiverUI reports whether a request may reach River UI on the strength of
// a console session: signedIn when it has a live session (id is who it
// acts as), allowed when that session's role is operator or more (River UI
// cancels, retries and deletes jobs) and, for anything but reading, the
// request came from the gateway's own pages (River UI's forms cannot carry
// the console's CSRF token; SameSite=Strict and the browser's
// Sec-Fetch-Site or Origin stand in for it).
func (c *Console) RiverUI(r *http.Request) (id access.Identity, signedIn, allowed bool) {
	id, _, ok, err := c.Session(r)
	if err != nil || !ok {
		return access.Identity{}, false, false
	}
	if !id.Role.Allows(access.Operator) {
		return id, true, false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return id, true, true
	}
	return id, true, c.sameOrigin(r)
}

// Session returns who the request's console session acts as, and its CSRF
// token; ok is false without a live session.
func (c *Console) Session(r *http.Request) (id access.Identity, csrf string, ok bool, err error) {
	sess, err := c.sessions.get(r.Context(), r)
	if errors.Is(err, errNoSession) {
		return access.Identity{}, "", false, nil
	}
	if err != nil {
		return access.Identity{}, "", false, err
	}
	return c.identity(sess), sess.csrf, true, nil
}

// identity is who a session acts as: its person or its personal token,
// with their role, or the admin.
func (c *Console) identity(sess session) access.Identity {
	roleOf := func(name string) access.Role {
		role, err := access.ParseRole(name)
		if err != nil {
			return access.Viewer // the table allows no other; fail to the least
		}
		return role
	}
	switch {
	case sess.person != "":
		return access.Identity{Actor: sess.person, Role: roleOf(sess.personRole), Person: sess.person, Session: true}
	case sess.token.ID != "":
		return access.Identity{Actor: access.ActorOf(sess.token), Role: roleOf(sess.token.Role), TokenID: sess.token.ID, Session: true}
	}
	return access.Identity{Actor: c.Actor, Role: access.Admin, Session: true}
}

// need answers 403 to a session whose role is below role.
func (c *Console) need(role access.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if id := c.identity(sessionOf(r)); !id.Role.Allows(role) {
				c.fail(w, r, http.StatusForbidden, fmt.Sprintf("This needs the %s role; you are signed in as %s, with the %s role.",
					role, id.Actor, id.Role))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// actor names the request's session in the replay and audit logs.
func (c *Console) actor(r *http.Request) string { return c.identity(sessionOf(r)).Actor }

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// ctxKey keys the request's session in its context.
type ctxKey struct{}

// signedIn lets a request with a live session through. Without one, a page
// is sent to the sign-in form (which comes back to it) and a form answers
// 403. A form also needs the session's CSRF token, or it answers 403.
func (c *Console) signedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := c.sessions.get(r.Context(), r)
		switch {
		case errors.Is(err, errNoSession) && r.Method == http.MethodGet:
			http.Redirect(w, r, "/admin/ui/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		case errors.Is(err, errNoSession):
			c.fail(w, r, http.StatusForbidden, "Your session has ended: sign in again, then repeat what you did.")
			return
		case err != nil:
			c.serverError(w, r, err)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if err := r.ParseForm(); err != nil {
				c.fail(w, r, http.StatusBadRequest, "The form could not be read.")
				return
			}
			if !access.SameSecret(r.PostForm.Get("csrf"), sess.csrf) {
				c.fail(w, r, http.StatusForbidden, "This form is missing its CSRF token or carries a stale one: reload the page and try again.")
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, sess)))
	})
}

func sessionOf(r *http.Request) session {
	s, _ := r.Context().Value(ctxKey{}).(session)
	return s
}

func (c *Console) handleStatic(w http.ResponseWriter, r *http.Request) {
	sub, _ := fs.Sub(staticFS, "static")
	h := http.StripPrefix("/admin/ui/static/", http.FileServer(http.FS(sub)))
	w.Header().Set("Cache-Control", "max-age=3600")
	h.ServeHTTP(w, r)
}
