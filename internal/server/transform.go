package server

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/transform"
)

// maxTransformBody bounds a transformation test's body, which may carry a
// payload.
const maxTransformBody = 4 << 20

// transformRequest is the body of POST /admin/routes/{name}/transform: a
// delivery given whole (provider, event, headers, payload) or a stored one
// (provider, delivery_id); transform, when given, is tried instead of the
// route's own (the console's editor sends what is being written).
type transformRequest struct {
	Provider   string            `json:"provider"`
	Event      string            `json:"event"`
	Headers    map[string]string `json:"headers"`
	Payload    json.RawMessage   `json:"payload"`
	DeliveryID string            `json:"delivery_id"`
	Transform  *string           `json:"transform"`
}

func (req *transformRequest) validate() error {
	switch {
	case req.Provider == "":
		return fmt.Errorf("%w: provider is required", errBadRequest)
	case req.DeliveryID != "" && (req.Event != "" || req.Payload != nil || req.Headers != nil):
		return fmt.Errorf("%w: give a stored delivery (delivery_id) or one whole (event, headers, payload), not both", errBadRequest)
	case req.DeliveryID == "" && (req.Event == "" || req.Payload == nil):
		return fmt.Errorf("%w: give delivery_id, or event and payload", errBadRequest)
	case req.DeliveryID != "":
		return deliveries.CheckKey(req.Provider, req.DeliveryID)
	}
	return nil
}

// transformResponse is what the route would send: body is JSON when what
// is sent is JSON, else a string.
type transformResponse struct {
	Body        any               `json:"body"`
	ContentType string            `json:"content_type"`
	Headers     map[string]string `json:"headers"`
	Path        string            `json:"path"`
	Skip        bool              `json:"skip"`
}

// transformFailed is the 422 of a transformation that does not compile or
// fails on the delivery; position is null for a failure at evaluation.
type transformFailed struct {
	Error    string              `json:"error"`
	Message  string              `json:"message"`
	Position *transform.Position `json:"position"`
}

// handleTryTransform answers what a route's transformation would send for
// a delivery, changing nothing: 200 with it, 422 transform_failed with the
// message (and, for a text that does not compile, its position).
func (s *server) handleTryTransform(w http.ResponseWriter, r *http.Request) {
	route, ok := s.Admin.Routes.Routes().ByName(chi.URLParam(r, "name"))
	if !ok {
		writeError(w, r, s.Logger, fmt.Errorf("%w: no route has that name", errNotFound))
		return
	}
	var req transformRequest
	if _, err := readAdminBodyUpTo(w, r, &req, maxTransformBody); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if _, known := s.providers[req.Provider]; !known {
		writeError(w, r, s.Logger, fmt.Errorf("%w: provider must be one of %s", errBadRequest, strings.Join(s.Providers.Names(), ", ")))
		return
	}
	t := route.Transform
	if req.Transform != nil && strings.TrimSpace(*req.Transform) == "" {
		t = nil // none: the delivery as it came
	} else if req.Transform != nil {
		var err error
		if t, err = transform.Compile(*req.Transform); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, transformFailed{Error: "transform_failed",
				Message: strings.TrimPrefix(err.Error(), transform.ErrInvalid.Error()+": "), Position: transform.PositionOf(err)})
			return
		}
	}
	in := &filter.Input{Provider: req.Provider, Event: req.Event, Headers: req.Headers, ContentType: "application/json", Body: req.Payload}
	if req.DeliveryID != "" {
		var err error
		if in, err = deliveries.Input(r.Context(), s.Admin.Pool, req.Provider, req.DeliveryID); err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
	}
	res, err := t.Apply(in)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, transformFailed{Error: "transform_failed",
			Message: strings.TrimPrefix(err.Error(), transform.ErrFailed.Error()+": ")})
		return
	}
	out := transformResponse{Body: string(res.Body), ContentType: res.ContentType, Headers: res.Headers, Path: res.Path, Skip: res.Skip}
	if mt, _, _ := mime.ParseMediaType(res.ContentType); (mt == "application/json" || strings.HasSuffix(mt, "+json")) && json.Valid(res.Body) {
		out.Body = json.RawMessage(res.Body)
	}
	writeJSON(w, http.StatusOK, out)
}
