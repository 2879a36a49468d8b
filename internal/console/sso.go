package console

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/sso"
	"github.com/hookgate/hookgate/internal/store"
)

// ssoCookie keeps a sign-in with the identity provider between its start
// and its callback: the state, nonce, PKCE verifier and where to go after.
// Its path is the sign-in's, and it is SameSite=Lax: the provider's
// redirect back is a navigation from another site, which a Strict cookie
// would not come with.
const ssoCookie = "hookgate_sso"

func (c *Console) ssoCookieOf(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: ssoCookie, Value: value, Path: "/admin/oidc", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil || c.secure}
}

// handleSSOStart sends the browser to the identity provider, keeping what
// the callback checks in the sso cookie.
func (c *Console) handleSSOStart(w http.ResponseWriter, r *http.Request) {
	next := localNext(r.URL.Query().Get("next"))
	authURL, a, err := c.SSO.Start(r.Context(), next)
	if err != nil {
		c.Logger.ErrorContext(r.Context(), "single sign-on unavailable", "error", err)
		w.Header().Set("Retry-After", "30")
		c.loginForm(w, r, http.StatusServiceUnavailable, next,
			"The identity provider cannot be reached now; try again in a moment, or sign in with a token.")
		return
	}
	b, _ := json.Marshal(a)
	http.SetCookie(w, c.ssoCookieOf(r, base64.RawURLEncoding.EncodeToString(b), int(sso.AttemptLife.Seconds())))
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// handleSSOCallback finishes a sign-in the identity provider sends back:
// the person gets a session with the role their claim maps to. The sso
// cookie is spent whatever the outcome.
func (c *Console) handleSSOCallback(w http.ResponseWriter, r *http.Request) {
	var a sso.Attempt
	if ck, err := r.Cookie(ssoCookie); err == nil && len(ck.Value) < 4096 {
		if b, err := base64.RawURLEncoding.DecodeString(ck.Value); err == nil {
			_ = json.Unmarshal(b, &a) // a cookie that does not decode keeps no attempt: ErrState
		}
	}
	http.SetCookie(w, c.ssoCookieOf(r, "", -1))
	p, err := c.SSO.Finish(r.Context(), r.URL.Query(), a)
	if err != nil {
		c.ssoFailed(w, r, a.Next, err)
		return
	}
	// The role the provider gives now is the person's everywhere: in their
	// other browsers' sessions, and as their tokens' cap.
	if err := store.SetPersonSessionsRole(r.Context(), c.Pool, p.Actor(), p.Role.String()); err != nil {
		c.serverError(w, r, err)
		return
	}
	lowered, err := access.SignedIn(r.Context(), c.Pool, p.Actor(), p.Role)
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	if lowered > 0 {
		c.Logger.InfoContext(r.Context(), "tokens capped at the person's role", "actor", p.Actor(), "role", p.Role.String(), "tokens", lowered)
	}
	id, err := c.sessions.create(r.Context(), owner{person: p.Actor(), role: p.Role.String()})
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	c.Logger.InfoContext(r.Context(), "signed in", "actor", p.Actor(), "role", p.Role.String())
	http.SetCookie(w, c.cookie(r, loginCookie, "", -1))
	http.SetCookie(w, c.cookie(r, sessionCookie, id, 0))
	// The session cookie is SameSite=Strict, and this answer ends a
	// navigation that began at the provider, another site: a redirect would
	// arrive without it. A page of the gateway's own moves on instead.
	next := localNext(a.Next)
	c.render(w, r, http.StatusOK, "signedin", page{Title: "Signed in", CSRF: "-", MoveTo: next,
		Data: signedIn{Who: p.Actor(), Role: p.Role.String(), Next: next}})
}

// signedIn is the page between the provider's callback and the console.
type signedIn struct {
	Who, Role, Next string
}

// ssoFailed answers a sign-in that did not verify, saying why in words a
// person can act on; what the provider said goes to the log.
func (c *Console) ssoFailed(w http.ResponseWriter, r *http.Request, next string, err error) {
	status, problem := http.StatusUnauthorized, "The identity provider's answer could not be verified, and no one was signed in: sign in again."
	switch {
	case errors.Is(err, sso.ErrState):
		status, problem = http.StatusForbidden, "This sign-in was not started in this browser, or took longer than 10 minutes: sign in again."
	case errors.Is(err, sso.ErrDenied):
		problem = "The identity provider did not sign you in (" + err.Error() + ")."
	case errors.Is(err, sso.ErrNoRole):
		status, problem = http.StatusForbidden, "You are known to the identity provider, but hookgate gives you no role: "+
			strings.TrimPrefix(err.Error(), sso.ErrNoRole.Error()+": ")+". Ask an admin to add you to a group that a rule maps to a role."
	case errors.Is(err, sso.ErrUnavailable):
		status, problem = http.StatusServiceUnavailable, "The identity provider cannot be reached now; try again in a moment, or sign in with a token."
		w.Header().Set("Retry-After", "30")
	case !errors.Is(err, sso.ErrToken):
		c.serverError(w, r, err)
		return
	}
	c.Logger.WarnContext(r.Context(), "sign-in refused", "error", err)
	c.loginForm(w, r, status, next, problem)
}
