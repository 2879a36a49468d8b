package server

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/deliveries"
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
	n, err := retry.Route(r.Context(), s.Admin.Pool, s.Admin.Enqueuer.Client(), s.Admin.Routes.Routes(), name,
		retry.Operator{Actor: actor(r), Reason: req.Reason})
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
	res, err := retry.Delivery(r.Context(), s.Admin.Pool, s.Admin.Enqueuer.Client(), s.Admin.Routes.Routes(), provider, id, req.Routes,
		retry.Operator{Actor: actor(r), Reason: req.Reason})
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// bulkRetryRequest is the body of a retry by filter: a bulk replay's filter,
// and the cursor of a search that stopped at its budget.
type bulkRetryRequest struct {
	bulkFilter
	Reason string `json:"reason"`
	Cursor string `json:"cursor"`
}

func (req *bulkRetryRequest) validate() error { return validReason(req.Reason) }

// bulkRetryResponse is the answer to a retry by filter.
type bulkRetryResponse struct {
	retry.BulkResult
	// Partial and NextCursor are a search's: it stopped at its budget, and
	// the cursor continues it.
	Partial    *bool   `json:"partial,omitempty"`
	NextCursor *string `json:"next_cursor,omitempty"`
}

// handleBulkRetry attempts now the retrying dispatches of every delivery
// the body's filter selects: 202 with how many deliveries and dispatches.
func (s *server) handleBulkRetry(w http.ResponseWriter, r *http.Request) {
	var req bulkRetryRequest
	s.idempotent(w, r, "bulk_retry", &req, func(ctx context.Context, tx pgx.Tx) (any, error) {
		f, err := req.filter(s)
		if err != nil {
			return nil, err
		}
		var after *deliveries.Cursor
		if req.Cursor != "" {
			c, err := deliveries.DecodeCursor(req.Cursor)
			if err != nil {
				return nil, err
			}
			after = &c
		}
		res, err := s.retryManyTx(ctx, tx, f, after, retry.Operator{Actor: actor(r), Reason: req.Reason})
		if err != nil {
			return nil, err
		}
		out := bulkRetryResponse{BulkResult: res}
		if f.Q != "" {
			out.Partial = &res.Partial
		}
		if res.Partial && res.Next != nil {
			c := res.Next.Encode()
			out.NextCursor = &c
		}
		return out, nil
	})
}

// retryManyTx is retry.BulkTx with the gateway's search budget, a search
// (f.Q) waiting its turn as the list's do: one at a time per core.
func (s *server) retryManyTx(ctx context.Context, tx pgx.Tx, f deliveries.Filter, after *deliveries.Cursor, op retry.Operator) (retry.BulkResult, error) {
	if f.Q != "" {
		select {
		case s.searches <- struct{}{}:
			defer func() { <-s.searches }()
		case <-ctx.Done():
			return retry.BulkResult{}, ctx.Err()
		}
	}
	return retry.BulkTx(ctx, tx, s.Admin.Enqueuer.Client(), s.Admin.Routes.Routes(), f, after, s.Admin.SearchBudget, op)
}

// retryMany is retryManyTx in a transaction of its own: the console's bulk
// retry.
func (s *server) retryMany(ctx context.Context, f deliveries.Filter, after *deliveries.Cursor, op retry.Operator) (retry.BulkResult, error) {
	var res retry.BulkResult
	err := pgx.BeginFunc(ctx, s.Admin.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = s.retryManyTx(ctx, tx, f, after, op)
		return err
	})
	return res, err
}
