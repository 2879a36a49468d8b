package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/version"
)

// browser is a cookie-keeping HTTP client that does not follow redirects, so
// that a test sees each answer.
type browser struct {
	t      *testing.T
	srv    *httptest.Server
	client *http.Client
}

func newBrowser(t *testing.T, h http.Handler) *browser {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, srv: srv, client: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values, header ...string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	text, _ := io.ReadAll(res.Body)
	return res, string(text)
}

var hiddenCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf returns the CSRF token of the first form on a page.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := hiddenCSRF.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in %s", page)
	}
	return m[1]
}

// signIn signs the browser in and returns a page's CSRF token.
func (b *browser) signIn(token string) string {
	b.t.Helper()
	_, form := b.do("GET", "/admin/ui/login", nil)
	res, _ := b.do("POST", "/admin/ui/login", url.Values{"csrf": {csrfOf(b.t, form)}, "token": {token}, "next": {"/admin/"}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin/" {
		b.t.Fatalf("sign in = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	_, page := b.do("GET", "/admin/ui/routes", nil)
	return csrfOf(b.t, page)
}

// A person signs in with the admin token through a form, gets a session
// cookie that scripts cannot read and other sites cannot send, and signs out.
func TestConsoleSignInAndOut(t *testing.T) {
	t.Parallel()
	a := setupAdmin(t, adminToken)
	b := newBrowser(t, a.handler)

	res, _ := b.do("GET", "/admin/", nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin/ui/login?next=%2Fadmin%2F" {
		t.Fatalf("signed out, GET /admin/ = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	res, form := b.do("GET", "/admin/ui/login", nil)
	if res.StatusCode != 200 || !strings.Contains(form, `type="password"`) {
		t.Fatalf("login form = %d %s", res.StatusCode, form)
	}
	csrf := csrfOf(t, form)

	// Without the form's token (another site posting a sign-in): 403.
	res, _ = b.do("POST", "/admin/ui/login", url.Values{"token": {adminToken}})
	if res.StatusCode != http.StatusForbidden || res.Header.Get("Set-Cookie") != "" && strings.Contains(res.Header.Get("Set-Cookie"), "hookgate_session=") {
		t.Fatalf("sign in without csrf = %d %v", res.StatusCode, res.Header["Set-Cookie"])
	}
	// A wrong token: 401, no session.
	res, page := b.do("POST", "/admin/ui/login", url.Values{"csrf": {csrf}, "token": {"wrong"}})
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "neither the admin token nor a live personal token") {
		t.Fatalf("wrong token = %d %s", res.StatusCode, page)
	}
	for _, c := range res.Cookies() {
		if c.Name == "hookgate_session" {
			t.Fatalf("a wrong token got a session: %v", c)
		}
	}

	// The right one: a session cookie, HttpOnly, SameSite=Strict, for /admin.
	csrf = csrfOf(t, page)
	res, _ = b.do("POST", "/admin/ui/login", url.Values{"csrf": {csrf}, "token": {adminToken}, "next": {"https://evil.example/"}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin/" {
		t.Fatalf("sign in = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "hookgate_session" {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/admin" || session.Secure {
		t.Fatalf("session cookie = %+v", session)
	}
	if !strings.Contains(res.Header.Get("Set-Cookie"), "SameSite=Strict") {
		t.Fatalf("Set-Cookie = %v", res.Header["Set-Cookie"])
	}

	res, page = b.do("GET", "/admin/", nil)
	csp := res.Header.Get("Content-Security-Policy")
	if res.StatusCode != 200 || !strings.Contains(page, "Deliveries from github") || !strings.Contains(csp, "script-src 'self'") ||
		strings.Contains(csp, "unsafe-inline") || strings.Contains(page, "<script>") {
		t.Fatalf("overview = %d, CSP %q", res.StatusCode, csp)
	}
	// The session opens River UI, not the JSON API (which takes the bearer token only).
	if res, _ := b.do("GET", "/admin/river/api/queues", nil); res.StatusCode != 200 {
		t.Fatalf("River UI with a session = %d", res.StatusCode)
	}
	if res, _ := b.do("GET", "/admin/deliveries", nil); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("JSON API with a session only = %d", res.StatusCode)
	}
	// River UI's own changes from another site (no Origin of ours) are refused.
	if res, _ := b.do("POST", "/admin/river/api/queues/default/pause", url.Values{}, "Origin", "https://evil.example"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("River UI POST from another origin = %d", res.StatusCode)
	}

	// Sign out needs the CSRF token too; then the session is gone for good.
	csrf = csrfOf(t, page)
	if res, _ := b.do("POST", "/admin/ui/logout", url.Values{}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign out without csrf = %d", res.StatusCode)
	}
	if res, _ := b.do("POST", "/admin/ui/logout", url.Values{"csrf": {csrf}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out = %d", res.StatusCode)
	}
	var left int
	if err := a.pool.QueryRow(context.Background(), "SELECT count(*) FROM hookgate_console_sessions").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d sessions left after sign out (%v)", left, err)
	}
	// The old cookie, replayed, opens nothing.
	req, _ := http.NewRequest("GET", b.srv.URL+"/admin/", nil)
	req.AddCookie(&http.Cookie{Name: "hookgate_session", Value: session.Value})
	old, err := (&http.Client{CheckRedirect: b.client.CheckRedirect}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	old.Body.Close()
	if old.StatusCode != http.StatusSeeOther {
		t.Fatalf("a signed-out cookie = %d", old.StatusCode)
	}
}

// Every form that changes something needs the session's CSRF token: without
// it the answer is 403 and nothing changes.
func TestConsoleFormsNeedTheCSRFToken(t *testing.T) {
	t.Parallel()
	a := setupAdmin(t, adminToken)
	b := newBrowser(t, a.handler)
	csrf := b.signIn(adminToken)

	for _, bad := range []url.Values{{}, {"csrf": {"forged"}}} {
		res, page := b.do("POST", "/admin/ui/routes/fwd/pause", bad)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(page, "CSRF") {
			t.Fatalf("pause with csrf %q = %d", bad.Get("csrf"), res.StatusCode)
		}
	}
	if got := a.route(t, "fwd").State; got != "active" {
		t.Fatalf("after refused forms fwd is %s", got)
	}
	res, _ := b.do("POST", "/admin/ui/routes/fwd/pause", url.Values{"csrf": {csrf}, "reason": {"deploy"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause = %d", res.StatusCode)
	}
	if r := a.route(t, "fwd"); r.State != "paused" || r.PauseReason == nil || *r.PauseReason != "deploy" {
		t.Fatalf("fwd = %+v", r)
	}
	// A form from a browser with no session at all is refused the same way.
	other := newBrowser(t, a.handler)
	if res, _ := other.do("POST", "/admin/ui/routes/fwd/resume", url.Values{"csrf": {csrf}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("resume without a session = %d", res.StatusCode)
	}
	// A session idle for longer than 12 hours has ended.
	if _, err := a.pool.Exec(context.Background(), "UPDATE hookgate_console_sessions SET seen_at = now() - interval '13 hours'"); err != nil {
		t.Fatal(err)
	}
	if res, _ := b.do("GET", "/admin/ui/routes", nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("an idle session = %d", res.StatusCode)
	}
}

// A payload holding markup and script is shown as the text it is, byte for
// byte as sent (pretty-printing keeps <, > and & as they were), and nothing in
// it runs: the page escapes it and allows no inline script.
func TestConsoleShowsAPayloadAsInertText(t *testing.T) {
	t.Parallel()
	a := setupAdmin(t, adminToken)
	body := []byte(`{"action":"opened","issue":{"number":7,"title":"<script>alert(1)</script><img src=x onerror=alert(2)> & \"quotes\""},` +
		`"repository":{"id":5678}}`)
	req := githubRequest(ghReq{id: "xss-1", event: "issues", body: body})
	req.Header.Set("User-Agent", `GitHub-Hookshot/<b>bold</b>`)
	a.ingest(t, req)
	b := newBrowser(t, a.handler)
	b.signIn(adminToken)

	res, page := b.do("GET", "/admin/ui/deliveries/github/xss-1", nil)
	if res.StatusCode != 200 {
		t.Fatalf("delivery page = %d %s", res.StatusCode, page)
	}
	for _, bad := range []string{"<script>alert", "<img src=x", `\u003c`, "<b>bold"} {
		if strings.Contains(page, bad) {
			t.Fatalf("the page holds %q", bad)
		}
	}
	for _, want := range []string{
		`&#34;title&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt; &amp; \&#34;quotes\&#34;&#34;`,
		`  &#34;issue&#34;: {`, // indented
	} {
		if !strings.Contains(page, want) {
			t.Fatalf("the page lacks %q:\n%s", want, page)
		}
	}
}

// Over TLS the session cookie is Secure: a browser never sends it in clear.
func TestConsoleSessionCookieIsSecureOverTLS(t *testing.T) {
	t.Parallel()
	a := setupAdmin(t, adminToken)
	srv := httptest.NewTLSServer(a.handler)
	defer srv.Close()
	client := srv.Client()
	jar, _ := cookiejar.New(nil)
	client.Jar = jar
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := client.Get(srv.URL + "/admin/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res, err = client.PostForm(srv.URL+"/admin/ui/login", url.Values{"csrf": {csrfOf(t, string(form))}, "token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var session *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "hookgate_session" {
			session = c
		}
	}
	if res.StatusCode != http.StatusSeeOther || session == nil || !session.Secure || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("over TLS: %d, session cookie %+v", res.StatusCode, session)
	}
}

// A session belongs to the token that opened it: a gateway started with
// another token ends it, and turning the token back does not revive it, nor a
// session that a gateway still running with the old token opened after the
// new one started. Gateways with the same token share their sessions.
func TestConsoleSessionsEndWithTheirToken(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	a1 := setupAdminOn(t, pool, adminToken)
	first := sessionOf(t, a1.handler)
	a1b := setupAdminOn(t, pool, adminToken)
	if got := pageWith(t, a1b.handler, first); got != http.StatusOK {
		t.Fatalf("another gateway with the same token = %d", got)
	}

	b := setupAdminOn(t, pool, "another-token-456")
	if got := pageWith(t, b.handler, first); got != http.StatusSeeOther {
		t.Fatalf("a session of the old token = %d", got)
	}
	late := sessionOf(t, a1.handler) // a1 still runs with the old token

	a2 := setupAdminOn(t, pool, adminToken)
	for name, id := range map[string]string{"first": first, "late": late} {
		if got := pageWith(t, a2.handler, id); got != http.StatusSeeOther {
			t.Fatalf("the token turned back: the %s session = %d", name, got)
		}
	}
	if got := pageWith(t, a2.handler, sessionOf(t, a2.handler)); got != http.StatusOK {
		t.Fatalf("a new session of the token turned back = %d", got)
	}
}

// sessionOf signs in to a gateway and returns its session cookie.
func sessionOf(t *testing.T, h http.Handler) string {
	t.Helper()
	b := newBrowser(t, h)
	b.signIn(adminToken)
	for _, c := range b.client.Jar.Cookies(mustURL(t, b.srv.URL+"/admin/")) {
		if c.Name == "hookgate_session" {
			return c.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

// pageWith returns the status of the console's overview with a session cookie.
func pageWith(t *testing.T, h http.Handler, session string) int {
	t.Helper()
	req := httptest.NewRequest("GET", "/admin/", nil)
	req.AddCookie(&http.Cookie{Name: "hookgate_session", Value: session})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// GATEWAY_CONSOLE=off: no console pages and no sign-in; the JSON API and
// River UI still take the bearer token.
func TestConsoleCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	a := setupAdminOn(t, dbtest.NewPool(t), adminToken, func(c *server.Config) { c.Admin.NoConsole = true })
	for _, path := range []string{"/admin/", "/admin/ui/login", "/admin/ui/deliveries"} {
		if status, _, _ := a.admin(t, adminReq{path: path, token: "-"}); status != http.StatusNotFound {
			t.Errorf("GET %s with the console off = %d, want 404", path, status)
		}
	}
	if status, _, _ := a.admin(t, adminReq{path: "/admin/deliveries"}); status != http.StatusOK {
		t.Errorf("the JSON API with the console off = %d", status)
	}
	status, h, _ := a.admin(t, adminReq{path: "/admin/river/"})
	if status != http.StatusOK || h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("River UI = %d with headers %v", status, h)
	}
}

// A replay's confirmation is asked for with a POST carrying the session's
// CSRF token: the GET that once carried the reason in its URL shows nothing,
// and the replay's redirect names the replay, not the reason.
func TestConsoleReplayFormsPostTheirReason(t *testing.T) {
	t.Parallel()
	a := setupAdmin(t, adminToken)
	a.ingest(t, githubRequest(ghReq{id: "gh-1"}))
	b := newBrowser(t, a.handler)
	csrf := b.signIn(adminToken)

	res, page := b.do("GET", "/admin/ui/deliveries/github/gh-1/replay?route=fwd&reason=in+the+url", nil)
	if res.StatusCode != http.StatusMethodNotAllowed || strings.Contains(page, "in the url") {
		t.Fatalf("GET replay with a reason = %d %s", res.StatusCode, page)
	}
	_, page = b.do("GET", "/admin/ui/deliveries/github/gh-1", nil)
	if !strings.Contains(page, `<form class="replay" method="post" action="/admin/ui/deliveries/github/gh-1/replay/confirm">`) {
		t.Fatalf("the delivery's replay form:\n%s", page)
	}
	form := url.Values{"route": {"fwd"}, "reason": {"in the body"}}
	if res, _ := b.do("POST", "/admin/ui/deliveries/github/gh-1/replay/confirm", form); res.StatusCode != http.StatusForbidden {
		t.Fatalf("confirmation without csrf = %d", res.StatusCode)
	}
	form.Set("csrf", csrf)
	res, page = b.do("POST", "/admin/ui/deliveries/github/gh-1/replay/confirm", form)
	if res.StatusCode != http.StatusOK || !strings.Contains(page, "Reason: in the body") ||
		!strings.Contains(page, `<input type="hidden" name="reason" value="in the body">`) {
		t.Fatalf("confirmation = %d %s", res.StatusCode, page)
	}
	res, _ = b.do("POST", "/admin/ui/deliveries/github/gh-1/replay", form)
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/ui/deliveries/github/gh-1?replayed=rpl_") || strings.Contains(loc, "body") {
		t.Fatalf("replay = %d to %q", res.StatusCode, loc)
	}
}

// "Retry now" on a delivery and on a route: offered while something is
// retrying, a form that needs the session's CSRF token, and back to the page
// that says what it did; a paused route's retry is refused, saying why.
func TestConsoleRetryNow(t *testing.T) {
	t.Parallel()
	a := retryingBundle(t)
	a.ingest(t, push("gh-1"))
	a.ingest(t, push("gh-2"))
	a.start(t)
	a.waitRetryingAnHour(t, "gh-1", "fwd", 1)
	a.waitRetryingAnHour(t, "gh-2", "fwd", 1)
	a.answer.Store(0)
	b := newBrowser(t, a.handler)
	csrf := b.signIn(adminToken)

	// A delivery.
	_, page := b.do("GET", "/admin/ui/deliveries/github/gh-1", nil)
	if !strings.Contains(page, `<form class="retry-now" method="post" action="/admin/ui/deliveries/github/gh-1/retry">`) {
		t.Fatalf("the delivery offers no retry:\n%s", page)
	}
	if res, _ := b.do("POST", "/admin/ui/deliveries/github/gh-1/retry", url.Values{}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("retry without csrf = %d", res.StatusCode)
	}
	if j := a.job(t, "gh-1", "fwd"); j.InSeconds < 3500 {
		t.Fatalf("a refused form retried: %+v", j)
	}
	res, _ := b.do("POST", "/admin/ui/deliveries/github/gh-1/retry", url.Values{"csrf": {csrf}})
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/admin/ui/deliveries/github/gh-1?retried=1" {
		t.Fatalf("retry = %d to %q", res.StatusCode, loc)
	}
	_, page = b.do("GET", "/admin/ui/deliveries/github/gh-1?retried=1", nil)
	if !strings.Contains(page, "Retrying 1 dispatch now") {
		t.Fatalf("the delivery does not say what the retry did:\n%s", page)
	}
	dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: "gh-1", Route: "fwd", Generation: 1}, "succeeded")
	if _, page = b.do("GET", "/admin/ui/deliveries/github/gh-1", nil); strings.Contains(page, `class="retry-now"`) {
		t.Fatalf("a delivery with nothing retrying offers a retry:\n%s", page)
	}

	// A route: refused while paused, then retried.
	dbtest.Eventually(t, 10*time.Second, "the routes page offers to retry fwd", func() error {
		if _, page = b.do("GET", "/admin/ui/routes", nil); !strings.Contains(page, `action="/admin/ui/routes/fwd/retry"`) {
			return errors.New("no retry form for fwd")
		}
		return nil
	})
	a.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/pause"}, 200, nil)
	if res, page := b.do("POST", "/admin/ui/routes/fwd/retry", url.Values{"csrf": {csrf}}); res.StatusCode != http.StatusConflict ||
		!strings.Contains(page, "is paused") {
		t.Fatalf("retry of a paused route = %d %s", res.StatusCode, page)
	}
	a.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/resume"}, 200, nil)
	res, _ = b.do("POST", "/admin/ui/routes/fwd/retry", url.Values{"csrf": {csrf}})
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/admin/ui/routes?done=retry&retried=1&route=fwd" {
		t.Fatalf("route retry = %d to %q", res.StatusCode, loc)
	}
	if _, page = b.do("GET", "/admin/ui/routes?done=retry&retried=1&route=fwd", nil); !strings.Contains(page, "Retrying 1 dispatch of fwd now") {
		t.Fatalf("the routes page does not say what the retry did:\n%s", page)
	}
	dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: "gh-2", Route: "fwd", Generation: 1}, "succeeded")
	if got := a.auditActions(t); strings.Join(got, ", ") != "retry fwd, resume fwd, pause fwd, retry github gh-1" {
		t.Fatalf("audit = %q", got)
	}
}

// A signed-in operator sees which gateway answered: its release, commit and
// Go version at the foot of every page. The sign-in page tells a visitor
// nothing of it.
func TestConsoleShowsTheVersion(t *testing.T) {
	t.Parallel()
	a := setupAdmin(t, adminToken)
	b := newBrowser(t, a.handler)
	want := "<footer>" + version.Get().String() + "</footer>"

	if _, page := b.do("GET", "/admin/ui/login", nil); strings.Contains(page, version.Number) || strings.Contains(page, "<footer>") {
		t.Errorf("the sign-in page names the version:\n%s", page)
	}
	b.signIn(adminToken)
	for _, path := range []string{"/admin/", "/admin/ui/deliveries", "/admin/ui/routes", "/admin/ui/rejections", "/admin/ui/audit", "/admin/ui/deliveries/github/nope"} {
		if _, page := b.do("GET", path, nil); !strings.Contains(page, want) {
			t.Errorf("%s lacks %s", path, want)
		}
	}
}
