package server

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/retry"
)

// retryRouteRequest is the body of a retry of a route; optional.
type retryRouteRequest struct {
	Reason string `json:"reason"`
}

func (req *retryRouteRequest) validate() error { return validReason(req.Reason) }

// retryRouteResponse is the answer to a retry of a route.
type retryRouteResponse struct {
	Route   string `json:"route"`
	Retried int    `json:"retried"`
}

// handleRetryRoute attempts now every retrying dispatch of the route named
// in the path: 200 with how many, 404 for an unknown route, 409 route_paused
// for a paused one.
func (s *server) handleRetryRoute(w http.ResponseWriter, r *http.Request) {
	var req retryRouteRequest
	if _, err := readAdminBody(w, r, &req); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	name := chi.URLParam(r, "name")
	n, err := retry.Route(r.Context(), s.Admin.Pool, s.Admin.Enqueuer.Client(), s.Admin.Routes, name,
		retry.Operator{Actor: Actor(s.Admin.Token), Reason: req.Reason})
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, retryRouteResponse{Route: name, Retried: n})
}

// retryDeliveryRequest is the body of a retry of one delivery; optional.
type retryDeliveryRequest struct {
	Routes []string `json:"routes"`
	Reason string   `json:"reason"`
}

// validate refuses text the audit log could not store or show; a route the
// gateway has not is retry's to refuse.
func (req *retryDeliveryRequest) validate() error {
	return (&replayOneRequest{Routes: req.Routes, Reason: req.Reason}).validate()
}

// handleRetryDelivery attempts now the delivery's retrying dispatches, of
// the routes its body names or of all: 200 with those retried and the routes
// skipped (paused), an empty list when none is retrying.
func (s *server) handleRetryDelivery(w http.ResponseWriter, r *http.Request) {
	provider, id, err := pathParams(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var req retryDeliveryRequest
	if _, err := readAdminBody(w, r, &req); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	res, err := retry.Delivery(r.Context(), s.Admin.Pool, s.Admin.Enqueuer.Client(), s.Admin.Routes, provider, id, req.Routes,
		retry.Operator{Actor: Actor(s.Admin.Token), Reason: req.Reason})
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
