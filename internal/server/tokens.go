package server

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/store"
)

// createTokenRequest is the body of POST /admin/tokens.
type createTokenRequest struct {
	Name      string `json:"name"`
	Role      string `json:"role"`
	ExpiresIn string `json:"expires_in"`

	parsed access.Request
}

// validate reads the role and the life; the rest is access.Request.Check's,
// against the maker's role.
func (req *createTokenRequest) validate() error {
	req.parsed.Name = req.Name
	if req.Role == "" {
		return fmt.Errorf("%w: role: viewer, operator or admin is required", errBadRequest)
	}
	role, err := access.ParseRole(req.Role)
	if err != nil {
		return fmt.Errorf("%w: role: %w", errBadRequest, err)
	}
	req.parsed.Role = role
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			return fmt.Errorf("%w: expires_in: a positive Go duration such as 720h, not %q", errBadRequest, req.ExpiresIn)
		}
		req.parsed.ExpiresIn = d
	}
	return nil
}

// handleCreateToken makes a personal token: 201 with it, the only time the
// token itself is told. It takes no Idempotency-Key: an answer kept to be
// sent again would keep the token in the database.
func (s *server) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	maker, _ := access.IdentityOf(r.Context())
	if err := access.MayManageTokens(maker); err != nil {
		writeError(w, r, s.Logger, err) // before the body: 403 whatever it holds
		return
	}
	var req createTokenRequest
	if _, err := readAdminBody(w, r, &req); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	made, err := access.Create(r.Context(), s.Admin.Pool, maker, req.parsed)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, made)
}

// tokensResponse is the list of tokens.
type tokensResponse struct {
	Tokens []store.Token `json:"tokens"`
}

// handleListTokens lists the tokens the request may see (an admin's, every
// one; a person's, their own), revoked and expired ones too, never the
// tokens themselves.
func (s *server) handleListTokens(w http.ResponseWriter, r *http.Request) {
	by, _ := access.IdentityOf(r.Context())
	toks, err := access.List(r.Context(), s.Admin.Pool, by)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if toks == nil {
		toks = []store.Token{}
	}
	writeJSON(w, http.StatusOK, tokensResponse{Tokens: toks})
}

// handleRevokeToken revokes a token at once: 200 with it; 404 for an id no
// token has. Revoking a revoked token answers it unchanged.
func (s *server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	by, _ := access.IdentityOf(r.Context())
	id, err := url.PathUnescape(chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, s.Logger, fmt.Errorf("%w: the token's id does not decode", access.ErrNotFound))
		return
	}
	t, err := access.Revoke(r.Context(), s.Admin.Pool, by, id)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}
