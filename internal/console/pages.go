package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/rejections"
	"github.com/hookgate/hookgate/internal/replay"
	"github.com/hookgate/hookgate/internal/retry"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/version"
)

// page is what every template gets.
type page struct {
	Title string
	// Nav is the menu entry to mark as current.
	Nav string
	// CSRF is the session's token for the page's forms; empty when signed out.
	CSRF string
	// Notice and Problem are a line at the top of the page: what just
	// happened, or what is wrong with the request.
	Notice, Problem string
	// Refresh, when set, reloads the page after that many seconds.
	Refresh int
	// MoveTo, when set, is a console path the page moves on to at once.
	MoveTo string
	// Who is who the session acts as, and Role its role; empty when
	// signed out.
	Who, Role string
	// CanOperate says whether the session's role may change anything
	// (operator or admin): a viewer is shown no form that would.
	CanOperate bool
	// CanManageTokens says whether the session may manage tokens: an
	// admin's, everyone's; a person's, their own.
	CanManageTokens bool
	Data            any
}

// render writes a page with its status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t, ok := c.pages[name]
	if !ok {
		c.serverError(w, r, fmt.Errorf("no console page %q", name))
		return
	}
	if p.CSRF == "" {
		p.CSRF = sessionOf(r).csrf
	}
	if p.CSRF != "-" && p.CSRF != "" {
		id := c.identity(sessionOf(r))
		p.Who, p.Role, p.CanOperate, p.CanManageTokens = id.Actor, id.Role.String(), id.Role.Allows(access.Operator), access.MayManageTokens(id) == nil
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, p); err != nil {
		c.serverError(w, r, fmt.Errorf("render %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows a page that says what went wrong.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, message string) {
	c.render(w, r, status, "error", page{Title: http.StatusText(status), Problem: message})
}

// failWith shows err by the server's table: a client's mistake with its
// text, anything else logged and told in general terms.
func (c *Console) failWith(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := c.Classify(err)
	if status >= 500 {
		c.serverError(w, r, err)
		return
	}
	c.fail(w, r, status, errtext.Clean(err.Error()))
}

func (c *Console) serverError(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := c.Classify(err)
	if status < 500 {
		status = http.StatusInternalServerError
	}
	c.Logger.ErrorContext(r.Context(), "console request failed", "error", err, "method", r.Method, "path", r.URL.Path)
	msg := "The gateway could not complete this; its log says why. Try again in a moment."
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
		msg = "The database is unavailable; nothing was changed. Try again in a moment."
	}
	if t, ok := c.pages["error"]; ok {
		var buf bytes.Buffer
		if t.Execute(&buf, page{Title: http.StatusText(status), Problem: msg}) == nil {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(status)
			_, _ = w.Write(buf.Bytes())
			return
		}
	}
	http.Error(w, msg, status)
}

// --- sign in and out ---

type loginData struct {
	Next  string
	Login string // the form's CSRF token, also in the hookgate_login cookie
	// SSO offers signing in with the identity provider.
	SSO bool
}

// localNext returns where to go after signing in: a console path, never
// another site.
func localNext(next string) string {
	if strings.HasPrefix(next, "/admin/") && !strings.HasPrefix(next, "//") && !strings.Contains(next, `\`) &&
		!strings.HasPrefix(next, "/admin/ui/login") && utf8.ValidString(next) && len(next) < 2048 {
		return next
	}
	return "/admin/"
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request, status int, next, problem string) {
	token := randomToken()
	http.SetCookie(w, c.cookie(r, loginCookie, token, 3600))
	c.render(w, r, status, "login", page{Title: "Sign in", Problem: problem, CSRF: "-",
		Data: loginData{Next: localNext(next), Login: token, SSO: c.SSO != nil}})
}

func (c *Console) handleLoginForm(w http.ResponseWriter, r *http.Request) {
	if _, err := c.sessions.get(r.Context(), r); err == nil {
		http.Redirect(w, r, localNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	c.loginForm(w, r, http.StatusOK, r.URL.Query().Get("next"), "")
}

// handleLogin signs a person in with the admin token (as the admin) or a
// live personal token (with its role; the session ends when the token is
// revoked or expires). The form carries a token that must equal the
// hookgate_login cookie set with the form (a double-submit CSRF token):
// another site cannot sign a browser in to a session of its choosing. A
// wrong token costs what a wrong bearer token does.
func (c *Console) handleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	next := r.PostForm.Get("next")
	lc, err := r.Cookie(loginCookie)
	if err != nil || !access.SameSecret(r.PostForm.Get("csrf"), lc.Value) {
		c.render(w, r, http.StatusForbidden, "error", page{Title: "Forbidden", CSRF: "-",
			Problem: "The sign-in form is missing its CSRF token or it has expired: open the sign-in page again."})
		return
	}
	secret := r.PostForm.Get("token")
	admin := access.SameSecret(secret, c.Token)
	var personal access.Identity
	if !admin && access.IsPersonalToken(secret) {
		var err error
		if personal, err = access.Authenticate(r.Context(), c.Pool, secret); err != nil && !errors.Is(err, access.ErrUnknown) {
			c.serverError(w, r, err)
			return
		}
	}
	if !c.Guesses.Check(r, func() bool { return admin || personal.TokenID != "" }) {
		c.loginForm(w, r, http.StatusUnauthorized, next, "That is neither the admin token nor a live personal token.")
		return
	}
	id, err := c.sessions.create(r.Context(), owner{tokenID: personal.TokenID})
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	http.SetCookie(w, c.cookie(r, loginCookie, "", -1))
	http.SetCookie(w, c.cookie(r, sessionCookie, id, 0))
	http.Redirect(w, r, localNext(next), http.StatusSeeOther)
}

func (c *Console) handleLogout(w http.ResponseWriter, r *http.Request) {
	if err := c.sessions.remove(r.Context(), r); err != nil {
		c.serverError(w, r, err)
		return
	}
	http.SetCookie(w, c.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, "/admin/ui/login", http.StatusSeeOther)
}

// --- overview ---

type overviewData struct {
	Range     string
	Ranges    []string
	Charts    overviewCharts
	Backlog   routes.Backlog
	Waiting   int64         // the backlog's three counts together
	Open      []routes.View // routes whose circuit is open or probing
	Paused    []routes.View
	Routes    int
	Refreshed time.Time
}

func (c *Console) handleOverview(w http.ResponseWriter, r *http.Request) {
	rg := r.URL.Query().Get("range")
	if rg == "" {
		rg = "hour"
	}
	cache, ok := c.charts[rg]
	if !ok {
		c.fail(w, r, http.StatusBadRequest, "range must be hour or day")
		return
	}
	charts, _, err := cache.Get(r.Context())
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	list, err := routes.List(r.Context(), c.Pool, c.Routes.Routes())
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	d := overviewData{Range: rg, Charts: charts, Routes: len(list), Refreshed: charts.At}
	for _, rg := range chartRanges {
		d.Ranges = append(d.Ranges, rg.name)
	}
	for _, v := range list {
		d.Backlog.Pending += v.Backlog.Pending
		d.Backlog.Running += v.Backlog.Running
		d.Backlog.Retrying += v.Backlog.Retrying
		d.Waiting += v.Backlog.Pending + v.Backlog.Running + v.Backlog.Retrying
		if v.Circuit != "closed" {
			d.Open = append(d.Open, v)
		}
		if v.State == "paused" {
			d.Paused = append(d.Paused, v)
		}
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Refresh: 60, Data: d})
}

// --- deliveries ---

type deliveriesData struct {
	Query      url.Values
	Providers  []string
	States     []string
	Items      []deliveryRow
	Next       string // the next page's URL, or ""
	ReplayLink string // the bulk replay of this filter
	RetryLink  string // the bulk retry of this filter; "" when the console has none
	Limit      int
	// KeyNames are the search keys the gateway indexes; Keys the page's
	// key filters (name:value).
	KeyNames, Keys []string
	// Searching says the page is a search (q); Partial that it stopped at
	// its time budget, and Next continues it.
	Searching, Partial bool
	// Failed counts the deliveries the search's expression failed on.
	Failed int
	// CanSearch says the gateway runs searches here.
	CanSearch bool
}

// filterQuery keeps the filter's own parameters of q: the list's filters,
// its search keys, and its search (q) when the search box holds one (it
// sends "" when empty).
func filterQuery(q url.Values) url.Values {
	out := url.Values{}
	for _, k := range []string{"provider", "event", "state", "since", "until"} {
		if v := strings.TrimSpace(q.Get(k)); v != "" {
			out.Set(k, v)
		}
	}
	for _, k := range q["key"] {
		if k = strings.TrimSpace(k); k != "" {
			out.Add("key", k)
		}
	}
	if strings.TrimSpace(q.Get("q")) != "" {
		out.Set("q", q.Get("q"))
	}
	return out
}

func (c *Console) handleDeliveries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := deliveriesData{Query: q, Providers: c.Providers.Names(), States: deliveries.States, Limit: 50, CanSearch: c.Search != nil,
		KeyNames: c.Keys.Names()}
	fq := filterQuery(q)
	if c.Search == nil {
		fq.Del("q")
	}
	d.Searching, d.Keys = fq.Get("q") != "", fq["key"]
	f, err := deliveries.FilterFromQuery(fq, c.Now(), c.Providers, c.Keys)
	if err == nil && q.Get("limit") != "" {
		n, convErr := strconv.Atoi(q.Get("limit"))
		if convErr != nil || n < 1 {
			err = fmt.Errorf("%w: limit must be a positive integer", deliveries.ErrBadFilter)
		}
		d.Limit = min(n, deliveries.MaxLimit)
	}
	var after *deliveries.Cursor
	if err == nil && q.Get("cursor") != "" {
		var cur deliveries.Cursor
		if cur, err = deliveries.DecodeCursor(q.Get("cursor")); err == nil {
			after = &cur
		}
	}
	if err != nil {
		status, _ := c.Classify(err)
		c.render(w, r, status, "deliveries", page{Title: "Deliveries", Nav: "deliveries", Problem: err.Error(), Data: d})
		return
	}
	// The page and its failing routes are read in one snapshot, so that
	// they agree.
	var next *deliveries.Cursor
	var found []deliveries.Item
	if d.Searching {
		// A search reads bodies for seconds: outside the page's snapshot.
		res, err := c.Search(r.Context(), f, d.Limit, after)
		if errors.Is(err, deliveries.ErrBadFilter) {
			status, _ := c.Classify(err)
			c.render(w, r, status, "deliveries", page{Title: "Deliveries", Nav: "deliveries", Problem: err.Error(), Data: d})
			return
		}
		if err != nil {
			c.serverError(w, r, err)
			return
		}
		found, next, d.Partial, d.Failed = res.Items, res.Next, res.Partial, res.Failed
	}
	err = pgx.BeginTxFunc(r.Context(), c.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		items := found
		if !d.Searching {
			var err error
			if items, next, err = deliveries.List(r.Context(), tx, f, d.Limit, after); err != nil {
				return err
			}
		}
		var err error
		d.Items, err = withFailingRoutes(r.Context(), tx, items)
		return err
	})
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	if next != nil {
		nq := maps.Clone(fq)
		nq.Set("limit", strconv.Itoa(d.Limit))
		nq.Set("cursor", next.Encode())
		d.Next = "/admin/ui/deliveries?" + nq.Encode()
	}
	d.ReplayLink = "/admin/ui/replay?" + fq.Encode()
	if c.Retry != nil {
		d.RetryLink = "/admin/ui/retry?" + fq.Encode()
	}
	c.render(w, r, http.StatusOK, "deliveries", page{Title: "Deliveries", Nav: "deliveries", Data: d})
}

// deliveryKey reads a delivery's provider and id from the path, each decoded
// exactly once (see deliveries.UnescapeKey).
func deliveryKey(r *http.Request) (string, string, error) {
	return deliveries.UnescapeKey(chi.URLParam(r, "provider"), chi.URLParam(r, "id"), r.URL.RawPath != "")
}

type deliveryData struct {
	Detail   deliveries.Detail
	Path     string // the delivery's console path
	Body     string // pretty-printed when it is JSON, else as received
	BodyNote string
	Routes   []routeTimeline
	Replay   string // a replay just made, from the query
	Retried  string // what a retry just did, from the query, as a sentence
	// Retrying says a route's latest dispatch is retrying: the page offers
	// to retry it now.
	Retrying bool
}

// maxShownBody bounds the body the page shows; the rest is a link away.
const maxShownBody = 1 << 20

func (c *Console) handleDelivery(w http.ResponseWriter, r *http.Request) {
	provider, id, err := deliveryKey(r)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	detail, err := deliveries.Show(r.Context(), c.Pool, provider, id)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	if detail.Expired { // its body and dispatches are gone; the page says so
		c.render(w, r, http.StatusOK, "delivery", page{Title: provider + " " + id, Nav: "deliveries",
			Data: deliveryData{Detail: detail, Path: deliveryPath(provider, id)}})
		return
	}
	body, contentType, err := deliveries.Body(r.Context(), c.Pool, provider, id)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	timeline, err := c.timeline(r.Context(), provider, id)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	d := deliveryData{Detail: detail, Path: deliveryPath(provider, id), Routes: timeline,
		Retrying: slices.ContainsFunc(timeline, func(t routeTimeline) bool { return t.Retrying })}
	d.Body, d.BodyNote = showBody(body, contentType)
	if rid := r.URL.Query().Get("replayed"); rid != "" && providers.Printable(rid) {
		d.Replay = rid
	}
	d.Retried = retriedNotice(r.URL.Query())
	c.render(w, r, http.StatusOK, "delivery", page{Title: provider + " " + id, Nav: "deliveries", Data: d})
}

// showBody returns a body as text for the page: JSON indented (json.Indent
// keeps every byte of every string as sent, where re-encoding would turn < into
// \u003c), anything else as received. The template escapes it, so markup in
// a payload is shown, never run.
func showBody(body []byte, contentType string) (string, string) {
	note := ""
	if len(body) > maxShownBody {
		body = body[:maxShownBody]
		note = fmt.Sprintf("Only the first %d bytes are shown; the raw body link has all of it.", maxShownBody)
	}
	if strings.HasPrefix(strings.ToLower(contentType), "application/x-www-form-urlencoded") && note == "" {
		// GitHub's form encoding: the JSON is the payload field.
		if payload, err := providers.DecodeGitHubForm(body); err == nil {
			body = payload
			note = "Sent form-encoded; shown is its payload field, decoded. The raw body link has the bytes as received."
		}
	}
	if strings.Contains(contentType, "json") || json.Valid(body) {
		var out bytes.Buffer
		if json.Indent(&out, body, "", "  ") == nil {
			return out.String(), note
		}
	}
	if !utf8.Valid(body) {
		return strings.ToValidUTF8(string(body), "\uFFFD"), "The body is not valid UTF-8; invalid bytes are shown as \uFFFD."
	}
	return string(body), note
}

func deliveryPath(provider, id string) string {
	return "/admin/ui/deliveries/" + url.PathEscape(provider) + "/" + url.PathEscape(id)
}

type replayConfirmData struct {
	Provider, ID, Path string
	Routes             []string
	Force              bool
	Reason             string
}

// replayForm reads and checks a replay's routes, force and reason.
func (c *Console) replayForm(v url.Values) (routes []string, force bool, reason string, err error) {
	routes = v["route"]
	for _, name := range routes {
		if _, ok := c.Routes.Routes().ByName(name); !ok {
			return nil, false, "", fmt.Errorf("%w: no route %q", replay.ErrUnknownRoute, name)
		}
	}
	reason = strings.TrimSpace(v.Get("reason"))
	if !providers.Printable(reason) || len(reason) > 1000 {
		return nil, false, "", fmt.Errorf("%w: the reason must be printable text of at most 1,000 bytes", deliveries.ErrBadFilter)
	}
	return routes, v.Get("force") == "on" || v.Get("force") == "true", reason, nil
}

// handleReplayConfirm shows what the delivery page's replay form asks for,
// and changes nothing. The form posts, so that its reason is in no URL.
func (c *Console) handleReplayConfirm(w http.ResponseWriter, r *http.Request) {
	provider, id, err := deliveryKey(r)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	if _, err := deliveries.Show(r.Context(), c.Pool, provider, id); err != nil {
		c.failWith(w, r, err)
		return
	}
	names, force, reason, err := c.replayForm(r.PostForm)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "replay", page{Title: "Replay " + id, Nav: "deliveries",
		Data: replayConfirmData{Provider: provider, ID: id, Path: deliveryPath(provider, id), Routes: names, Force: force, Reason: reason}})
}

func (c *Console) handleReplay(w http.ResponseWriter, r *http.Request) {
	provider, id, err := deliveryKey(r)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	names, force, reason, err := c.replayForm(r.PostForm)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	var replayID string
	err = pgx.BeginFunc(r.Context(), c.Pool, func(tx pgx.Tx) error {
		replayID, _, err = replay.OneTx(r.Context(), tx, c.Enqueuer, c.actor(r), provider, id, replay.Request{Routes: names, Force: force}, reason)
		return err
	})
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	http.Redirect(w, r, deliveryPath(provider, id)+"?replayed="+url.QueryEscape(replayID), http.StatusSeeOther)
}

// handleRetry attempts the delivery's retrying dispatches now, and goes back
// to the delivery, which says what it did.
func (c *Console) handleRetry(w http.ResponseWriter, r *http.Request) {
	provider, id, err := deliveryKey(r)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	res, err := retry.Delivery(r.Context(), c.Pool, c.Enqueuer.Client(), c.Routes.Routes(), provider, id, nil, retry.Operator{Actor: c.actor(r)})
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	q := url.Values{"retried": {strconv.Itoa(len(res.Retried))}}
	for _, s := range res.Skipped {
		q.Add("skipped", s.Route)
	}
	http.Redirect(w, r, deliveryPath(provider, id)+"?"+q.Encode(), http.StatusSeeOther)
}

// retriedNotice is what a retry of a delivery did, from its redirect's
// query ("" when none was just made).
func retriedNotice(q url.Values) string {
	n, err := strconv.Atoi(q.Get("retried"))
	if err != nil || n < 0 {
		return ""
	}
	var skipped []string
	for _, route := range q["skipped"] {
		if providers.Printable(route) {
			skipped = append(skipped, route)
		}
	}
	var notice string
	switch {
	case n > 0:
		notice = "Retrying " + count(n, "dispatch", "dispatches") + " now, within the routes' limits; their attempts are below."
	case len(skipped) > 0:
		notice = "Nothing retried now."
	default:
		return "Nothing to retry: no dispatch of this delivery is retrying any more."
	}
	if len(skipped) > 0 {
		notice += " Left to " + plural(len(skipped), "its", "their") + " schedule, as " + plural(len(skipped), "its route is", "their routes are") +
			" paused or no longer configured: " + strings.Join(skipped, ", ") + "."
	}
	return notice
}

type bulkData struct {
	Query   url.Values
	Filter  string // the filter, as a person reads it
	Matched int
	Force   bool
	Reason  string
	// Searching says the filter is a search (q): Matched counts the
	// deliveries it is evaluated on.
	Searching bool
	// Back is the deliveries page of the filter.
	Back string
}

// describe says what a filter selects, its times as people read them.
func describe(f deliveries.Filter) string {
	var parts []string
	for _, p := range [][2]string{{"provider", f.Provider}, {"event", f.Event}, {"state", f.State}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+p[1])
		}
	}
	for _, k := range f.Keys {
		parts = append(parts, "key "+k)
	}
	if f.Q != "" {
		parts = append(parts, "search "+f.Q)
	}
	if f.Since != nil {
		parts = append(parts, "since "+f.Since.UTC().Format(timeLayout))
	}
	if f.Until != nil {
		parts = append(parts, "until "+f.Until.UTC().Format(timeLayout))
	}
	if len(parts) == 0 {
		return "every stored delivery"
	}
	return strings.Join(parts, ", ")
}

// replayFilter is a replay log entry's filter: a bulk replay's
// deliveries.Filter, or the delivery and routes of a replay of one.
type replayFilter struct {
	deliveries.Filter
	DeliveryID string   `json:"delivery_id"`
	Routes     []string `json:"routes"`
}

// describeReplay says what a replay log entry's filter selected; "" when it
// cannot be read.
func describeReplay(filter []byte) string {
	var f replayFilter
	if json.Unmarshal(filter, &f) != nil {
		return ""
	}
	if f.DeliveryID == "" {
		return describe(f.Filter)
	}
	if len(f.Routes) == 0 {
		return f.Provider + " " + f.DeliveryID + ", every route"
	}
	return f.Provider + " " + f.DeliveryID + ", " + plural(len(f.Routes), "route", "routes") + " " + strings.Join(f.Routes, ", ")
}

func (c *Console) handleBulkConfirm(w http.ResponseWriter, r *http.Request) {
	fq := filterQuery(r.URL.Query())
	f, err := deliveries.FilterFromQuery(fq, c.Now(), c.Providers, c.Keys)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	// The database's clock, which the replay itself reads too.
	now, err := store.DatabaseNow(r.Context(), c.Pool)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	if f.Until == nil || f.Until.After(now) {
		f.Until = &now
	}
	n, err := deliveries.Count(r.Context(), c.Pool, f)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	// The confirmed form carries the filter as fixed times, so that it
	// replays what was counted, not what arrived since.
	fixed := url.Values{}
	for k, v := range fq {
		fixed[k] = v
	}
	fixed.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	if f.Since != nil {
		fixed.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	c.render(w, r, http.StatusOK, "bulk", page{Title: "Bulk replay", Nav: "deliveries",
		Data: bulkData{Query: fixed, Filter: describe(f), Matched: n, Searching: f.Q != "", Back: deliveriesOf(fq)}})
}

// bulkRetryData is the bulk retry's page: its confirmation (Matched), then
// what it did (Done).
type bulkRetryData struct {
	Query  url.Values
	Filter string // the filter, as a person reads it
	// Matched counts the deliveries with a retrying dispatch that the filter
	// selects (with a search, those it is evaluated on).
	Matched   int
	Searching bool
	// Done says the retry was made: Result is what it did, and Cursor
	// continues a search that stopped at its budget.
	Done   bool
	Result retry.BulkResult
	Cursor string
	Reason string
	// Back is the deliveries page of the filter.
	Back string
}

// deliveriesOf is the deliveries page of a filter.
func deliveriesOf(fq url.Values) string {
	if len(fq) == 0 {
		return "/admin/ui/deliveries"
	}
	return "/admin/ui/deliveries?" + fq.Encode()
}

// retryFilter reads a bulk retry's filter: a retry attempts retrying
// dispatches, so its state is retrying.
func (c *Console) retryFilter(q url.Values) (deliveries.Filter, error) {
	if s := q.Get("state"); s != "" && s != "retrying" {
		return deliveries.Filter{}, fmt.Errorf("%w: a retry attempts retrying dispatches: state is retrying, or left out", deliveries.ErrBadFilter)
	}
	f, err := deliveries.FilterFromQuery(q, c.Now(), c.Providers, c.Keys)
	f.State = "retrying"
	return f, err
}

func (c *Console) handleBulkRetryConfirm(w http.ResponseWriter, r *http.Request) {
	fq := filterQuery(r.URL.Query())
	f, err := c.retryFilter(fq)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	n, err := deliveries.Count(r.Context(), c.Pool, f)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "bulkretry", page{Title: "Retry now", Nav: "deliveries",
		Data: bulkRetryData{Query: fq, Filter: describe(f), Matched: n, Searching: f.Q != "", Back: deliveriesOf(fq)}})
}

func (c *Console) handleBulkRetry(w http.ResponseWriter, r *http.Request) {
	fq := filterQuery(r.PostForm)
	f, err := c.retryFilter(fq)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	reason := r.PostForm.Get("reason")
	if !providers.Printable(reason) {
		c.failWith(w, r, fmt.Errorf("%w: reason must be printable text", deliveries.ErrBadFilter))
		return
	}
	var after *deliveries.Cursor
	if v := r.PostForm.Get("cursor"); v != "" {
		cur, err := deliveries.DecodeCursor(v)
		if err != nil {
			c.failWith(w, r, err)
			return
		}
		after = &cur
	}
	res, err := c.Retry(r.Context(), f, after, retry.Operator{Actor: c.actor(r), Reason: reason})
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	d := bulkRetryData{Query: fq, Filter: describe(f), Searching: f.Q != "", Done: true, Result: res, Reason: reason, Back: deliveriesOf(fq)}
	if res.Partial && res.Next != nil {
		d.Cursor = res.Next.Encode()
	}
	c.render(w, r, http.StatusOK, "bulkretry", page{Title: "Retry now", Nav: "deliveries", Data: d})
}

func (c *Console) handleBulkReplay(w http.ResponseWriter, r *http.Request) {
	f, err := deliveries.FilterFromQuery(filterQuery(r.PostForm), c.Now(), c.Providers, c.Keys)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	_, force, reason, err := c.replayForm(url.Values{"force": r.PostForm["force"], "reason": r.PostForm["reason"]})
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	var replayID string
	err = pgx.BeginFunc(r.Context(), c.Pool, func(tx pgx.Tx) error {
		replayID, _, err = replay.BulkTx(r.Context(), tx, c.Enqueuer, c.actor(r), f, force, reason)
		return err
	})
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/ui/replays/"+url.PathEscape(replayID), http.StatusSeeOther)
}

type progressData struct {
	Replay  replay.Entry
	Percent int
	Filter  string
}

func (c *Console) handleReplayProgress(w http.ResponseWriter, r *http.Request) {
	rep, err := replay.Get(r.Context(), c.Pool, chi.URLParam(r, "replay_id"))
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	d := progressData{Replay: rep, Percent: 100, Filter: describeReplay(rep.Filter)}
	if rep.Deliveries > 0 {
		d.Percent = min(100, rep.Done*100/rep.Deliveries)
	}
	p := page{Title: "Replay " + rep.ReplayID, Nav: "audit", Data: d}
	if rep.State != "done" {
		p.Refresh = 1
	}
	c.render(w, r, http.StatusOK, "progress", p)
}

// --- routes ---

type routesData struct {
	Routes []routeRow
	// Editable says the session may edit the routes: an admin's, the
	// database owning them.
	Editable bool
}

type routeRow struct {
	routes.View
	// SuccessRate is the share of the last five minutes' attempts that
	// succeeded, as text ("-" with none).
	SuccessRate string
}

func (c *Console) handleRoutes(w http.ResponseWriter, r *http.Request) {
	list, err := routes.List(r.Context(), c.Pool, c.Routes.Routes())
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	d := routesData{Editable: c.CheckRoute != nil && c.identity(sessionOf(r)).Role.Allows(access.Admin)}
	for _, v := range list {
		row := routeRow{View: v, SuccessRate: "-"}
		if n := v.Succeeded5m + v.Failed5m; n > 0 {
			row.SuccessRate = strconv.FormatFloat(float64(v.Succeeded5m)*100/float64(n), 'f', 1, 64) + "%"
		}
		d.Routes = append(d.Routes, row)
	}
	p := page{Title: "Routes", Nav: "routes", Data: d}
	q := r.URL.Query()
	switch q.Get("done") {
	case "pause":
		p.Notice = "Paused " + q.Get("route") + "."
	case "resume":
		p.Notice = "Resumed " + q.Get("route") + "."
	case "made", "saved":
		p.Notice = "Saved " + q.Get("route") + ": in force here now, on every gateway within 5 s."
	case "deleted":
		p.Notice = "Deleted " + q.Get("route") + ": it takes no new deliveries; its dispatches already made finish."
	case "retry":
		if n, _ := strconv.Atoi(q.Get("retried")); n > 0 {
			p.Notice = "Retrying " + count(n, "dispatch", "dispatches") + " of " + q.Get("route") + " now, within its limits."
		} else {
			p.Notice = "Nothing to retry: no dispatch of " + q.Get("route") + " is retrying any more."
		}
	}
	c.render(w, r, http.StatusOK, "routes", p)
}

func (c *Console) handleRouteAction(w http.ResponseWriter, r *http.Request) {
	name, action := chi.URLParam(r, "name"), chi.URLParam(r, "action")
	if r.URL.RawPath != "" {
		if u, err := url.PathUnescape(name); err == nil {
			name = u
		}
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if !providers.Printable(reason) || len(reason) > 1000 {
		c.fail(w, r, http.StatusBadRequest, "The reason must be printable text of at most 1,000 bytes.")
		return
	}
	change := routes.Change{Actor: c.actor(r), Reason: reason}
	done := url.Values{"done": {action}, "route": {name}}
	var err error
	switch action {
	case "pause":
		_, err = routes.Pause(r.Context(), c.Pool, c.Enqueuer.Client(), c.Routes.Routes(), name, change)
	case "resume":
		_, err = routes.Resume(r.Context(), c.Pool, c.Enqueuer.Client(), c.Routes.Routes(), name, change)
	case "retry":
		var n int
		n, err = retry.Route(r.Context(), c.Pool, c.Enqueuer.Client(), c.Routes.Routes(), name, retry.Operator{Actor: c.actor(r), Reason: reason})
		done.Set("retried", strconv.Itoa(n))
	default:
		c.fail(w, r, http.StatusNotFound, "No such action: routes are paused, resumed or retried.")
		return
	}
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/ui/routes?"+done.Encode(), http.StatusSeeOther)
}

// --- rejections and the audit log ---

func (c *Console) handleRejections(w http.ResponseWriter, r *http.Request) {
	list, err := rejections.List(r.Context(), c.Pool)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "rejections", page{Title: "Rejections", Nav: "rejections", Data: list})
}

type auditData struct {
	Entries []auditRow
	Next    string
}

// auditRow is an audit entry and, for a bulk replay (which names no route
// or delivery), what it selected and how many deliveries.
type auditRow struct {
	audit.Entry
	Selected string
	// Before and After are a route's change, indented ("" for none).
	Before, After string
}

// auditRows adds to the entries what their bulk replays selected, read in
// one statement for the page (store.ReplaySelectionsOf), not one per replay.
func (c *Console) auditRows(ctx context.Context, entries []audit.Entry) ([]auditRow, error) {
	rows := make([]auditRow, len(entries))
	var bulk []string
	for i, e := range entries {
		rows[i].Entry = e
		rows[i].Before, rows[i].After = indented(e.Before), indented(e.After)
		if e.ReplayID != nil && e.DeliveryID == nil {
			bulk = append(bulk, *e.ReplayID)
		}
	}
	if len(bulk) == 0 {
		return rows, nil
	}
	selected := map[string]string{}
	found, err := store.ReplaySelectionsOf(ctx, c.Pool, bulk)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	for _, sel := range found {
		selected[sel.ReplayID] = describeReplay(sel.Filter) + " (" + count(sel.Deliveries, "delivery", "deliveries") + ")"
	}
	for i := range rows {
		if id := rows[i].ReplayID; id != nil && rows[i].DeliveryID == nil {
			rows[i].Selected = selected[*id]
		}
	}
	return rows, nil
}

// indented is a JSON value of the audit log as a person reads it; "" for
// none.
func indented(v json.RawMessage) string {
	var b bytes.Buffer
	if len(v) == 0 || string(v) == "null" || json.Indent(&b, v, "", "  ") != nil {
		return ""
	}
	return b.String()
}

func (c *Console) handleAudit(w http.ResponseWriter, r *http.Request) {
	entries, next, err := audit.List(r.Context(), c.Pool, 100, r.URL.Query().Get("cursor"))
	if errors.Is(err, audit.ErrBadCursor) {
		c.fail(w, r, http.StatusBadRequest, "That page of the audit log does not exist: start again from its first page.")
		return
	}
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	rows, err := c.auditRows(r.Context(), entries)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	d := auditData{Entries: rows}
	if next != "" {
		d.Next = "/admin/ui/audit?cursor=" + url.QueryEscape(next)
	}
	c.render(w, r, http.StatusOK, "audit", page{Title: "Audit log", Nav: "audit", Data: d})
}

// --- template helpers ---

var funcs = template.FuncMap{
	"when": when,
	"deref": func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	},
	"plural":       plural,
	"count":        count,
	"deliveryPath": deliveryPath,
	"pathEscape":   url.PathEscape,
	"has":          func(list []string, s string) bool { return slices.Contains(list, s) },
	"join":         strings.Join,
	// version is the gateway's release, commit and Go version, in the
	// footer of a signed-in operator's pages (a visitor not signed in is not
	// told what runs).
	"version": func() string { return version.Get().String() },
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// timeLayout is how the console shows a time: to the second, in UTC, named.
const timeLayout = "2006-01-02 15:04:05 UTC"

// when shows a time (a time.Time or *time.Time) as a <time> element that
// reads "2026-12-02 05:32:10 UTC", with the instant in its datetime attribute
// and to the millisecond in its title; "-" for none. The HTML is made of
// digits and the layouts' own text only.
func when(t any) template.HTML {
	var at time.Time
	switch v := t.(type) {
	case time.Time:
		at = v
	case *time.Time:
		if v != nil {
			at = *v
		}
	}
	if at.IsZero() {
		return "-"
	}
	at = at.UTC()
	return template.HTML(`<time datetime="` + at.Format(time.RFC3339Nano) + `" title="` + at.Format("2006-01-02 15:04:05.000 UTC") + `">` +
		at.Format(timeLayout) + `</time>`)
}

// count says n things: count(1, "attempt", "attempts") is "1 attempt".
func count(n any, one, many string) string { return fmt.Sprint(n) + " " + plural(n, one, many) }

// plural returns one when n (an integer) is 1, else many: the noun that
// agrees with a count the template prints itself (the templates' count
// prints both).
func plural(n any, one, many string) string {
	switch v := n.(type) {
	case int:
		if v == 1 {
			return one
		}
	case int64:
		if v == 1 {
			return one
		}
	}
	return many
}
