package server

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/routes"
)

func (s *server) handleListRoutes(w http.ResponseWriter, r *http.Request) {
	list, err := routes.List(r.Context(), s.Admin.Pool, s.Admin.Routes.Routes())
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"routes": list})
}

func (s *server) handleShowRoute(w http.ResponseWriter, r *http.Request) {
	v, err := routes.Get(r.Context(), s.Admin.Pool, s.Admin.Routes.Routes(), chi.URLParam(r, "name"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// pauseRequest is the body of a pause or a resume; both fields optional.
type pauseRequest struct {
	Reason string `json:"reason"`
}

func (req *pauseRequest) validate() error { return validReason(req.Reason) }

func (s *server) handlePauseRoute(w http.ResponseWriter, r *http.Request) {
	s.changeRoute(w, r, routes.Pause)
}
func (s *server) handleResumeRoute(w http.ResponseWriter, r *http.Request) {
	s.changeRoute(w, r, routes.Resume)
}

// changeRoute pauses or resumes the route named in the path: 200 with the
// route, also when it was already so.
func (s *server) changeRoute(w http.ResponseWriter, r *http.Request, change func(context.Context, *pgxpool.Pool, *river.Client[pgx.Tx], fanout.Table, string, routes.Change) (routes.View, error)) {
	var req pauseRequest
	if _, err := readAdminBody(w, r, &req); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	v, err := change(r.Context(), s.Admin.Pool, s.Admin.Enqueuer.Client(), s.Admin.Routes.Routes(), chi.URLParam(r, "name"),
		routes.Change{Actor: actor(r), Reason: req.Reason})
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *server) handleAudit(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	entries, next, err := audit.List(r.Context(), s.Admin.Pool, limit, r.URL.Query().Get("cursor"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var cursor *string
	if next != "" {
		cursor = &next
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries, "next_cursor": cursor})
}
