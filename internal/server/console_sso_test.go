package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
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
	// Sam again, while he was still an admin.
	{Username: "sam-admin", Password: "pw-sam-admin", Email: "sam@example.com", Name: "Sam", Groups: []string{"hookgate-admins"}},
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

// api calls the JSON API from the browser (its session cookie), with csrf
// in X-CSRF-Token when it is not empty.
func (b *browser) api(method, path, body, csrf string) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	res, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	text, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(text)
}

var metaCSRF = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// A person signed in to the console makes, lists and revokes their own
// tokens through the JSON API, with the session's CSRF token in
// X-CSRF-Token: up to their own role, acting for them; they see and revoke
// no one else's, and their token cannot make tokens. An admin sees all.
func TestAPersonManagesTheirOwnTokensFromTheConsole(t *testing.T) {
	t.Parallel()
	a, p, b := setupSSO(t)
	adminMade := a.makeToken(t, "", "deploy bot", "operator", "1h")
	if res, _ := b.ssoSignIn(p, "sam", "pw-sam"); res.StatusCode != http.StatusOK {
		t.Fatalf("Sam's sign-in = %d", res.StatusCode)
	}
	_, page := b.do("GET", "/admin/ui/routes", nil)
	m := metaCSRF.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf-token meta in:\n%s", page)
	}
	csrf := m[1]

	if status, body := b.api("POST", "/admin/tokens", `{"name":"laptop","role":"viewer"}`, ""); status != http.StatusForbidden ||
		!strings.Contains(body, "X-CSRF-Token") {
		t.Errorf("without X-CSRF-Token = %d %s", status, body)
	}
	if status, body := b.api("POST", "/admin/tokens", `{"name":"laptop","role":"viewer"}`, "not-the-token"); status != http.StatusForbidden {
		t.Errorf("with another X-CSRF-Token = %d %s", status, body)
	}
	if status, body := b.api("POST", "/admin/tokens", `{"name":"laptop","role":"operator"}`, csrf); status != http.StatusForbidden ||
		!strings.Contains(body, `"error":"forbidden"`) || !strings.Contains(body, "above the maker's own role") {
		t.Errorf("above Sam's role = %d %s", status, body)
	}
	status, body := b.api("POST", "/admin/tokens", `{"name":"laptop","role":"viewer","expires_in":"1h"}`, csrf)
	var made tokenJSON
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &made) != nil || !strings.HasPrefix(made.Token, "hgt_") ||
		made.CreatedBy != "oidc:sam@example.com" || !strings.Contains(body, `"person":"oidc:sam@example.com"`) {
		t.Fatalf("Sam's token = %d %s", status, body)
	}

	// Sam sees his own token only, and may revoke it, not another's.
	if status, body := b.api("GET", "/admin/tokens", "", ""); status != http.StatusOK || !strings.Contains(body, made.ID) || strings.Contains(body, adminMade.ID) {
		t.Errorf("Sam's list = %d %s", status, body)
	}
	if status, _ := b.api("DELETE", "/admin/tokens/"+adminMade.ID, "", csrf); status != http.StatusNotFound {
		t.Errorf("Sam revoking another's token = %d", status)
	}
	// His token reads as he does, and cannot make tokens (only a session can).
	if status, _, got := a.admin(t, adminReq{method: "GET", path: "/admin/deliveries", token: made.Token}); status != http.StatusOK {
		t.Errorf("Sam's token reading deliveries = %d %s", status, got)
	}
	if status, _, got := a.admin(t, adminReq{method: "POST", path: "/admin/tokens", body: `{"name":"x","role":"viewer"}`, token: made.Token}); status != http.StatusForbidden {
		t.Errorf("Sam's token making a token = %d %s", status, got)
	}
	if status, body := b.api("DELETE", "/admin/tokens/"+made.ID, "", csrf); status != http.StatusOK || !strings.Contains(body, `"revoked_by":"oidc:sam@example.com"`) {
		t.Errorf("Sam revoking his token = %d %s", status, body)
	}

	// Ana, an admin, sees every token.
	ana := b.another()
	ana.ssoSignIn(p, "ana", "pw-ana")
	if status, body := ana.api("GET", "/admin/tokens", "", ""); status != http.StatusOK || !strings.Contains(body, made.ID) || !strings.Contains(body, adminMade.ID) {
		t.Errorf("Ana's list = %d %s", status, body)
	}
}

// The console's Tokens page: a person makes a token of at most their role,
// sees it once, and revokes it; a session of a personal token, no person's,
// has no Tokens page.
func TestTheTokensPage(t *testing.T) {
	t.Parallel()
	a, p, b := setupSSO(t)
	b.ssoSignIn(p, "sam", "pw-sam")
	res, page := b.do("GET", "/admin/ui/tokens", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(page, `<a href="/admin/ui/tokens" aria-current="page">Tokens</a>`) ||
		!strings.Contains(page, `<select name="role"><option>viewer</option></select>`) || !strings.Contains(page, "No tokens yet.") {
		t.Fatalf("Sam's Tokens page = %d:\n%s", res.StatusCode, page)
	}
	csrf := csrfOf(t, page)
	res, page = b.do("POST", "/admin/ui/tokens", url.Values{"csrf": {csrf}, "name": {"phone"}, "role": {"admin"}, "expires_in": {"1h"}})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(page, "above the maker") {
		t.Errorf("an admin token for Sam = %d:\n%s", res.StatusCode, page)
	}
	res, page = b.do("POST", "/admin/ui/tokens", url.Values{"csrf": {csrf}, "name": {"phone"}, "role": {"viewer"}, "expires_in": {"1h"}})
	secret := regexp.MustCompile(`<code id="token-secret">(hgt_[^<]+)</code>`).FindStringSubmatch(page)
	if res.StatusCode != http.StatusCreated || secret == nil {
		t.Fatalf("making a token = %d:\n%s", res.StatusCode, page)
	}
	if status, _, got := a.admin(t, adminReq{method: "GET", path: "/admin/routes", token: secret[1]}); status != http.StatusOK {
		t.Errorf("the token made in the console = %d %s", status, got)
	}
	_, page = b.do("GET", "/admin/ui/tokens", nil)
	if strings.Contains(page, secret[1]) || !strings.Contains(page, "phone") || !strings.Contains(page, "oidc:sam@example.com") {
		t.Errorf("the Tokens page after:\n%s", page)
	}
	id := regexp.MustCompile(`id="token-(tok_[a-z2-7]+)"`).FindStringSubmatch(page)
	if id == nil {
		t.Fatalf("no token row:\n%s", page)
	}
	res, page = b.do("POST", "/admin/ui/tokens/"+id[1]+"/revoke", url.Values{"csrf": {csrf}})
	if res.StatusCode != http.StatusOK || !strings.Contains(page, "Revoked "+id[1]) {
		t.Errorf("revoke = %d:\n%s", res.StatusCode, page)
	}
	if status, _, _ := a.admin(t, adminReq{method: "GET", path: "/admin/routes", token: secret[1]}); status != http.StatusUnauthorized {
		t.Errorf("the revoked token = %d", status)
	}

	// A session of a personal token is no person's: no Tokens page.
	tok := a.makeToken(t, "", "ops bot", "operator", "1h")
	bot := b.another()
	bot.signIn(tok.Token)
	res, page = bot.do("GET", "/admin/ui/tokens", nil)
	if res.StatusCode != http.StatusForbidden || strings.Contains(page, `href="/admin/ui/tokens"`) {
		t.Errorf("a token's session's Tokens page = %d", res.StatusCode)
	}
}

// A person's token never acts above the person's role as of their latest
// sign-in: Sam, an admin, makes an admin token; once the provider makes him
// a viewer and he signs in again, his token is a viewer's.
func TestAPersonsTokensFollowTheirRoleDown(t *testing.T) {
	t.Parallel()
	a, p, b := setupSSO(t)
	b.ssoSignIn(p, "sam-admin", "pw-sam-admin")
	_, page := b.do("GET", "/admin/ui/routes", nil)
	status, body := b.api("POST", "/admin/tokens", `{"name":"cli","role":"admin","expires_in":"1h"}`, metaCSRF.FindStringSubmatch(page)[1])
	var made tokenJSON
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &made) != nil {
		t.Fatalf("Sam's admin token = %d %s", status, body)
	}
	if status, _, got := a.admin(t, adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `{}`, token: made.Token}); status != http.StatusOK {
		t.Fatalf("the admin token pausing = %d %s", status, got)
	}

	b.another().ssoSignIn(p, "sam", "pw-sam") // the provider now says viewer
	// His first browser's session is a viewer's too.
	if _, page := b.do("GET", "/admin/ui/routes", nil); !strings.Contains(page, `<span class="role">viewer</span>`) {
		t.Errorf("Sam's earlier session after he became a viewer:\n%s", page)
	}
	if status, _, got := a.admin(t, adminReq{method: "POST", path: "/admin/routes/fwd/resume", body: `{}`, token: made.Token}); status != http.StatusForbidden {
		t.Errorf("Sam's token after he became a viewer = %d %s", status, got)
	}
	if _, _, got := a.admin(t, adminReq{path: "/admin/tokens"}); !strings.Contains(string(got), `"role":"viewer","person":"oidc:sam@example.com"`) {
		t.Errorf("the tokens: %s", got)
	}
}
