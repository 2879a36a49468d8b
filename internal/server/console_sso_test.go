package server_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/oidctest"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/sso"
)

// ssoPeople are the identity provider's: Ana administers, Sam supports
// (viewer), Nick is in no group hookgate maps.
var ssoPeople = []oidctest.User{
	{Username: "ana", Password: "pw-ana", Email: "ana@example.com", Name: "Ana", Groups: []string{"hookgate-admins"}},
	{Username: "sam", Password: "pw-sam", Email: "sam@example.com", Name: "Sam", Groups: []string{"support"}},
	{Username: "nick", Password: "pw-nick", Email: "nick@example.com", Name: "Nick", Groups: []string{"marketing"}},
}

// another is a browser of its own (no cookies) on the same server.
func (b *browser) another() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: b.t, srv: b.srv, client: &http.Client{Jar: jar, CheckRedirect: b.client.CheckRedirect}}
}

// lazy serves whatever handler it is given once the server's URL is known.
type lazy struct{ h http.Handler }

func (l *lazy) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.h.ServeHTTP(w, r) }

// setupSSO is a gateway whose console signs people in at a real OpenID
// provider (started for the test), and a browser of it.
func setupSSO(t *testing.T) (*adminBundle, *oidctest.Provider, *browser) {
	t.Helper()
	l := &lazy{}
	b := newBrowser(t, l)
	p := oidctest.Start(t, b.srv.URL+sso.CallbackPath, ssoPeople...)
	a := setupAdminOn(t, dbtest.NewPool(t), adminToken, func(c *server.Config) {
		c.Admin.PublicURL = b.srv.URL
		c.Admin.SSO = sso.New(sso.Config{Issuer: p.Issuer, ClientID: p.ClientID, ClientSecret: p.ClientSecret,
			RedirectURL: b.srv.URL + sso.CallbackPath, Scopes: []string{"email", "profile"},
			Roles: []sso.Rule{{Claim: oidctest.GroupsClaim, Value: "hookgate-admins", Role: access.Admin},
				{Claim: oidctest.GroupsClaim, Value: "support", Role: access.Viewer}}})
	})
	l.h = a.handler
	return a, p, b
}

// ssoSignIn goes from the console's sign-in link through the provider's
// login page as username, and returns the gateway's answer to the callback.
func (b *browser) ssoSignIn(p *oidctest.Provider, username, password string) (*http.Response, string) {
	b.t.Helper()
	_, login := b.do("GET", "/admin/ui/login?next=%2Fadmin%2Fui%2Froutes", nil)
	if !strings.Contains(login, `<a class="button" id="sso" href="/admin/oidc/login?next=%2fadmin%2fui%2froutes">`) {
		b.t.Fatalf("the sign-in page offers no single sign-on:\n%s", login)
	}
	res, _ := b.do("GET", "/admin/oidc/login?next=%2Fadmin%2Fui%2Froutes", nil)
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), p.Issuer) {
		b.t.Fatalf("start = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	var kept *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "hookgate_sso" {
			kept = c
		}
	}
	if kept == nil || !kept.HttpOnly || kept.SameSite != http.SameSiteLaxMode || kept.Path != "/admin/oidc" || kept.MaxAge != 600 {
		b.t.Fatalf("the sign-in's cookie: %+v", kept)
	}
	back := p.SignIn(b.t, b.client, res.Header.Get("Location"), username, password)
	if !strings.HasPrefix(back.String(), b.srv.URL+sso.CallbackPath+"?") {
		b.t.Fatalf("the provider sent the browser to %s", back)
	}
	return b.do("GET", strings.TrimPrefix(back.String(), b.srv.URL), nil)
}

// People sign in to the console at the identity provider and act with the
// role their groups map to: the header names them, a viewer is offered no
// form that changes anything, and an admin's pause is audited under their
// name.
func TestConsoleSignsPeopleInWithOpenIDConnect(t *testing.T) {
	t.Parallel()
	a, p, b := setupSSO(t)

	res, page := b.ssoSignIn(p, "ana", "pw-ana")
	if res.StatusCode != http.StatusOK || !strings.Contains(page, "Signed in as oidc:ana@example.com, with the admin role.") ||
		!strings.Contains(page, `<meta http-equiv="refresh" content="0; url=/admin/ui/routes">`) {
		t.Fatalf("callback = %d:\n%s", res.StatusCode, page)
	}
	_, page = b.do("GET", "/admin/ui/routes", nil)
	if !strings.Contains(page, `<p class="who">oidc:ana@example.com · <span class="role">admin</span></p>`) {
		t.Fatalf("the routes page does not name Ana:\n%s", page)
	}
	res, _ = b.do("POST", "/admin/ui/routes/fwd/pause", url.Values{"csrf": {csrfOf(t, page)}, "reason": {"maintenance"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("Ana's pause = %d", res.StatusCode)
	}
	var actor string
	if err := a.pool.QueryRow(context.Background(), `SELECT actor FROM hookgate_audit WHERE action = 'pause'`).Scan(&actor); err != nil {
		t.Fatal(err)
	}
	if actor != "oidc:ana@example.com" {
		t.Errorf("the pause is audited as %q", actor)
	}

	sam := b.another()
	if res, page := sam.ssoSignIn(p, "sam", "pw-sam"); res.StatusCode != http.StatusOK || !strings.Contains(page, "with the viewer role") {
		t.Fatalf("Sam's callback = %d:\n%s", res.StatusCode, page)
	}
	_, page = sam.do("GET", "/admin/ui/routes", nil)
	if !strings.Contains(page, `<span class="role">viewer</span>`) || strings.Contains(page, `action="/admin/ui/routes/fwd/resume"`) {
		t.Fatalf("Sam's routes page:\n%s", page)
	}
	res, _ = sam.do("POST", "/admin/ui/routes/fwd/resume", url.Values{"csrf": {csrfOf(t, page)}})
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("Sam's resume = %d", res.StatusCode)
	}
}

// What signs no one in: a person whose groups map to no role, a callback
// whose state is not the one this browser's sign-in keeps, and a callback
// in a browser that started no sign-in (a link someone else sent).
func TestConsoleRefusesASignInThatDoesNotVerify(t *testing.T) {
	t.Parallel()
	_, p, b := setupSSO(t)
	noSession := func(who string, res *http.Response) {
		t.Helper()
		for _, c := range res.Cookies() {
			if c.Name == "hookgate_session" && c.MaxAge >= 0 {
				t.Errorf("%s got a session", who)
			}
		}
		if r, _ := b.do("GET", "/admin/ui/routes", nil); r.StatusCode != http.StatusSeeOther {
			t.Errorf("after %s, the console opens: %d", who, r.StatusCode)
		}
	}

	res, page := b.ssoSignIn(p, "nick", "pw-nick")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(page, "hookgate gives you no role") || !strings.Contains(page, "(groups: marketing)") {
		t.Fatalf("Nick's callback = %d:\n%s", res.StatusCode, page)
	}
	noSession("an unmapped person", res)

	// Sam's sign-in, its callback with another state.
	_, _ = b.do("GET", "/admin/ui/login", nil)
	res, _ = b.do("GET", "/admin/oidc/login", nil)
	back := p.SignIn(t, b.client, res.Header.Get("Location"), "sam", "pw-sam")
	q := back.Query()
	code := q.Get("code")
	q.Set("state", "an-attackers-state")
	res, page = b.do("GET", sso.CallbackPath+"?"+q.Encode(), nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(page, "not started in this browser") {
		t.Fatalf("a wrong state = %d:\n%s", res.StatusCode, page)
	}
	noSession("a wrong state", res)

	// The right callback, sent to another browser.
	other := b.another()
	q.Set("state", back.Query().Get("state"))
	q.Set("code", code)
	res, _ = other.do("GET", sso.CallbackPath+"?"+q.Encode(), nil)
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("a callback in another browser = %d", res.StatusCode)
	}
	if r, _ := other.do("GET", "/admin/ui/routes", nil); r.StatusCode != http.StatusSeeOther {
		t.Errorf("the other browser opens the console: %d", r.StatusCode)
	}
}
