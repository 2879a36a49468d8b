package console

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/store"
)

// tokensData is the Tokens page: the tokens the session may see, the roles
// it may give a new one, and a token just made, shown this once.
type tokensData struct {
	Tokens []store.Token
	Roles  []string
	Made   *access.Made
	Now    time.Time
}

// handleTokens shows the Tokens page.
func (c *Console) handleTokens(w http.ResponseWriter, r *http.Request) {
	c.renderTokens(w, r, http.StatusOK, nil, "", "")
}

func (c *Console) renderTokens(w http.ResponseWriter, r *http.Request, status int, made *access.Made, notice, problem string) {
	id := c.identity(sessionOf(r))
	toks, err := access.List(r.Context(), c.Pool, id)
	if errors.Is(err, access.ErrForbidden) {
		c.fail(w, r, http.StatusForbidden, "Tokens are managed by an admin, or by a person signed in with single sign-on for themself.")
		return
	}
	if err != nil {
		c.serverError(w, r, err)
		return
	}
	var roles []string
	for _, role := range access.Roles {
		if id.Role.Allows(role) {
			roles = append(roles, role.String())
		}
	}
	slices.Reverse(roles) // the highest first: what a person most often wants
	c.render(w, r, status, "tokens", page{Title: "Tokens", Nav: "tokens", Notice: notice, Problem: problem,
		Data: tokensData{Tokens: toks, Roles: roles, Made: made, Now: c.Now()}})
}

// handleCreateToken makes a token from the page's form and shows it once.
func (c *Console) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	q := access.Request{Name: r.PostForm.Get("name")}
	role, err := access.ParseRole(r.PostForm.Get("role"))
	if err != nil {
		c.renderTokens(w, r, http.StatusBadRequest, nil, "", "Choose a role.")
		return
	}
	q.Role = role
	if e := r.PostForm.Get("expires_in"); e != "" {
		d, err := time.ParseDuration(e)
		if err != nil {
			c.renderTokens(w, r, http.StatusBadRequest, nil, "", "The life must be a duration such as 720h.")
			return
		}
		q.ExpiresIn = d
	}
	made, err := access.Create(r.Context(), c.Pool, c.identity(sessionOf(r)), q)
	if c.tokenRefused(w, r, err) {
		return
	}
	c.renderTokens(w, r, http.StatusCreated, &made, "", "")
}

// tokenRefused answers the error of a token made or revoked on the page: a
// request the page's person can mend on the page, anything else as the
// server's failure. It reports whether there was one.
func (c *Console) tokenRefused(w http.ResponseWriter, r *http.Request, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, access.ErrBadToken), errors.Is(err, access.ErrForbidden), errors.Is(err, access.ErrNotFound):
		status, _ := c.Classify(err)
		c.renderTokens(w, r, status, nil, "", err.Error())
	default:
		c.serverError(w, r, err)
	}
	return true
}

// handleRevokeToken revokes a token from the page.
func (c *Console) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	id, err := url.PathUnescape(chi.URLParam(r, "id"))
	if err != nil {
		c.fail(w, r, http.StatusNotFound, "No such token.")
		return
	}
	t, err := access.Revoke(r.Context(), c.Pool, c.identity(sessionOf(r)), id)
	if c.tokenRefused(w, r, err) {
		return
	}
	c.renderTokens(w, r, http.StatusOK, nil, "Revoked "+t.ID+" ("+t.Name+"): it is refused from now on, on every gateway.", "")
}
