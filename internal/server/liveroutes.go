package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/routes"
)

// routeSpecResponse is a route as stored: the configuration file's shape.
type routeSpecResponse struct {
	Route json.RawMessage `json:"route"`
	// Created says PUT made it; false: it replaced one.
	Created *bool `json:"created,omitempty"`
}

// routesFromDatabase answers 409 routes_from_config when the configuration
// owns the routes, and reports whether the database does.
func (s *server) routesFromDatabase(w http.ResponseWriter, r *http.Request) bool {
	if s.Admin.CheckRoute == nil {
		writeError(w, r, s.Logger, fmt.Errorf("%w: GATEWAY_ROUTES_FROM=config: change the configuration file (or GATEWAY_ROUTES) and restart, or set GATEWAY_ROUTES_FROM=database", errRoutesFromConfig))
		return false
	}
	return true
}

// handlePutRoute makes or replaces a route the database owns, checked as
// the configuration's routes are at start, with its audit entry (before
// and after) in one transaction: 201 when made, 200 when replaced. Every
// gateway puts it in force within seconds (this one at once).
func (s *server) handlePutRoute(w http.ResponseWriter, r *http.Request) {
	if !s.routesFromDatabase(w, r) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		writeError(w, r, s.Logger, fmt.Errorf("%w: the body is larger than %d bytes", errBodyTooLarge, maxAdminBody))
		return
	}
	name := chi.URLParam(r, "name")
	spec, err := s.Admin.CheckRoute(name, body)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	created, err := routes.Put(r.Context(), s.Admin.Pool, name, spec, actor(r))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if s.Admin.RoutesChanged != nil {
		s.Admin.RoutesChanged()
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, routeSpecResponse{Route: routes.Redacted(spec), Created: &created})
}

// handleDeleteRoute deletes a route the database owns, with its audit entry:
// 200 with the route as it was; 404 for none. Its dispatches already
// created finish as it was; it takes no new ones.
func (s *server) handleDeleteRoute(w http.ResponseWriter, r *http.Request) {
	if !s.routesFromDatabase(w, r) {
		return
	}
	name := chi.URLParam(r, "name")
	before, err := routes.Delete(r.Context(), s.Admin.Pool, name, actor(r))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if s.Admin.RoutesChanged != nil {
		s.Admin.RoutesChanged()
	}
	writeJSON(w, http.StatusOK, routeSpecResponse{Route: routes.Redacted(before)})
}
