package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A person signs in to the console with a personal token and acts with its
// role: the header says who and which role; a viewer reads every page but
// is offered no form that changes anything, is answered 403 when posting
// one anyway, and is kept out of River UI; an operator's changes are
// audited under the token's name.
func TestConsoleSessionsOfPersonalTokensActWithinTheirRole(t *testing.T) {
	t.Parallel()
	a := setupAdmin(t, adminToken)
	a.ingest(t, githubRequest(ghReq{id: "gh-1"}))
	viewer := a.makeToken(t, "", "Vera Viewer", "viewer", "1h")
	operator := a.makeToken(t, "", "Otto Operator", "operator", "1h")

	v := newBrowser(t, a.handler)
	csrf := v.signIn(viewer.Token)
	for _, path := range []string{"/admin/", "/admin/ui/routes", "/admin/ui/deliveries", "/admin/ui/deliveries/github/gh-1", "/admin/ui/audit"} {
		res, page := v.do("GET", path, nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("a viewer's GET %s = %d", path, res.StatusCode)
		}
		if !strings.Contains(page, `<p class="who">token:`+viewer.ID+` (Vera Viewer) · <span class="role">viewer</span></p>`) {
			t.Errorf("GET %s does not say who is signed in:\n%s", path, page)
		}
		for _, offered := range []string{`action="/admin/ui/routes/fwd/pause"`, `class="replay"`, `href="/admin/river/"`, `id="bulk-replay"`} {
			if strings.Contains(page, offered) {
				t.Errorf("GET %s offers a viewer %s", path, offered)
			}
		}
	}
	for _, post := range []struct{ method, path string }{
		{"POST", "/admin/ui/routes/fwd/pause"},
		{"POST", "/admin/ui/deliveries/github/gh-1/replay"},
		{"POST", "/admin/ui/deliveries/github/gh-1/replay/confirm"},
		{"POST", "/admin/ui/deliveries/github/gh-1/retry"},
		{"GET", "/admin/ui/replay?provider=github"},
		{"POST", "/admin/ui/retry"},
	} {
		var form url.Values
		if post.method == "POST" {
			form = url.Values{"csrf": {csrf}, "route": {"fwd"}, "force": {"on"}, "reason": {"viewer"}}
		}
		res, page := v.do(post.method, post.path, form)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(page, "This needs the operator role; you are signed in as token:"+viewer.ID+" (Vera Viewer), with the viewer role.") {
			t.Errorf("a viewer's %s %s = %d:\n%s", post.method, post.path, res.StatusCode, page)
		}
	}
	if res, _ := v.do("GET", "/admin/river/", nil, "Accept", "text/html"); res.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's River UI = %d, want 403", res.StatusCode)
	}
	if _, _, body := a.admin(t, adminReq{method: "GET", path: "/admin/routes/fwd"}); !strings.Contains(string(body), `"state":"active"`) {
		t.Fatalf("after a viewer's tries the route is %s", body)
	}

	o := newBrowser(t, a.handler)
	csrf = o.signIn(operator.Token)
	_, page := o.do("GET", "/admin/ui/routes", nil)
	if !strings.Contains(page, `action="/admin/ui/routes/fwd/pause"`) || !strings.Contains(page, `href="/admin/river/"`) ||
		!strings.Contains(page, `<span class="role">operator</span>`) {
		t.Fatalf("an operator's routes page:\n%s", page)
	}
	res, _ := o.do("POST", "/admin/ui/routes/fwd/pause", url.Values{"csrf": {csrf}, "reason": {"deploy"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("an operator's pause = %d", res.StatusCode)
	}
	if res, _ := o.do("GET", "/admin/river/", nil); res.StatusCode != http.StatusOK {
		t.Errorf("an operator's River UI = %d", res.StatusCode)
	}
	var actor string
	if err := a.pool.QueryRow(context.Background(), `SELECT actor FROM hookgate_audit WHERE action = 'pause'`).Scan(&actor); err != nil {
		t.Fatal(err)
	}
	if actor != "token:"+operator.ID+" (Otto Operator)" {
		t.Errorf("the pause is audited as %q", actor)
	}
}

// A personal token's console session lives as long as the token: revoked,
// its session opens nothing more, at once; a new admin token, which ends
// the admin token's sessions, leaves it. A wrong personal token signs no
// one in.
func TestConsoleSessionsOfPersonalTokensEndWithTheToken(t *testing.T) {
	t.Parallel()
	a := setupAdmin(t, adminToken)
	tok := a.makeToken(t, "", "Pat", "viewer", "1h")
	b := newBrowser(t, a.handler)
	b.signIn(tok.Token)
	var session string
	for _, c := range b.client.Jar.Cookies(mustURL(t, b.srv.URL+"/admin/")) {
		if c.Name == "hookgate_session" {
			session = c.Value
		}
	}
	admin := sessionOf(t, a.handler)

	// Another gateway starts with another admin token: the admin's session
	// ends, the person's stays.
	other := setupAdminOn(t, a.pool, "another-token-456")
	if got := pageWith(t, other.handler, admin); got != http.StatusSeeOther {
		t.Errorf("the old admin token's session = %d", got)
	}
	if got := pageWith(t, other.handler, session); got != http.StatusOK {
		t.Errorf("a personal token's session after a new admin token = %d", got)
	}

	if status, _, body := a.admin(t, adminReq{method: "DELETE", path: "/admin/tokens/" + tok.ID}); status != http.StatusOK {
		t.Fatalf("revoke = %d %s", status, body)
	}
	if got := pageWith(t, a.handler, session); got != http.StatusSeeOther {
		t.Errorf("a revoked token's session = %d, want the sign-in", got)
	}
	_, form := b.do("GET", "/admin/ui/login", nil)
	res, page := b.do("POST", "/admin/ui/login", url.Values{"csrf": {csrfOf(t, form)}, "token": {tok.Token}})
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "neither the admin token nor a live personal token") {
		t.Errorf("signing in with a revoked token = %d", res.StatusCode)
	}

	// The session row goes with its token.
	ctx := context.Background()
	sessions := func() (n int) {
		if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM hookgate_console_sessions WHERE token_id = $1`, tok.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := sessions(); n != 1 {
		t.Fatalf("%d sessions of the token", n)
	}
	if _, err := a.pool.Exec(ctx, `DELETE FROM hookgate_tokens WHERE id = $1`, tok.ID); err != nil {
		t.Fatal(err)
	}
	if n := sessions(); n != 0 {
		t.Errorf("%d sessions of a deleted token", n)
	}
}
