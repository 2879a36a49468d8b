package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/listen"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/transform"
)

// A listen route's stream: the dispatches its workers offer (on any gateway)
// are taken by the open streams of the route, each by one, and sent as
// Server-Sent Events; the listener answers each with POST
// /admin/listen/{route}/{dispatch_id}.
const (
	// listenPoll is how often a stream looks for offers to take.
	listenPoll = 250 * time.Millisecond
	// listenTouch is how often a stream says it is open (store.ListenerFresh).
	listenTouch = 5 * time.Second
	// listenPing is how often an idle stream sends a comment, so that
	// proxies and the listener see it alive.
	listenPing = 15 * time.Second
	// listenWrite bounds one write to the stream: a listener that stops
	// reading ends it.
	listenWrite = 30 * time.Second
	// maxStreams bounds the streams open on one gateway process: each
	// looks for offers four times a second.
	maxStreams = 64
)

// listenRoute returns the route named in the path, which must listen.
func (s *server) listenRoute(r *http.Request) (fanout.Route, error) {
	name := chi.URLParam(r, "route")
	route, ok := s.Admin.Routes.Routes().ByName(name)
	if !ok {
		return route, fmt.Errorf("%w: no route has that name", errNotFound)
	}
	if !route.Listens() {
		return route, fmt.Errorf("%w: route %s does not listen (its target is not listen)", errBadRequest, route.Name)
	}
	return route, nil
}

// handleListen streams a listen route's dispatches as Server-Sent Events
// until the listener goes or the gateway stops. Each event's id is
// <stream>-<seq>: a listener that comes back with it as Last-Event-ID takes
// back the offers of its earlier stream still awaiting their answers
// (within dispatch.ResumeGrace), those it had seen without sending them
// again.
func (s *server) handleListen(w http.ResponseWriter, r *http.Request) {
	route, err := s.listenRoute(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if s.streams.Add(1) > maxStreams {
		s.streams.Add(-1)
		writeError(w, r, s.Logger, fmt.Errorf("%w: this gateway has %d listeners' streams open, as many as it keeps; retry later, or on another gateway", errTooManyStreams, maxStreams))
		return
	}
	defer s.streams.Add(-1)
	ctx := r.Context()
	pool := s.Admin.Pool
	stream := listen.NewStreamID()
	if err := store.AddListener(ctx, pool, stream, route.Name, actor(r)); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	defer func() {
		if err := store.DropListener(context.WithoutCancel(r.Context()), pool, stream); err != nil {
			s.Logger.Warn("listen: a stream's end was not recorded; its offers go back when its gateway is not seen", "route", route.Name, "error", err)
		}
	}()
	if from, seq, ok := listen.ParseEventID(r.Header.Get("Last-Event-ID")); ok {
		if err := store.ResumeOffers(ctx, pool, route.Name, from, stream, seq); err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
	}
	rc := http.NewResponseController(w)
	// The server's read deadline bounds a request's reading; a stream reads
	// nothing more, and would be ended when it passed (net/http cancels a
	// request whose connection's read fails).
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(text string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(listenWrite))
		if _, err := w.Write([]byte(text)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: 2000\n: listening to " + route.Name + "\n\n") {
		return
	}
	poll := time.NewTicker(listenPoll)
	defer poll.Stop()
	touched, pinged := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Admin.Stopping:
			return
		case <-poll.C:
		}
		if time.Since(touched) >= listenTouch {
			if store.TouchListener(ctx, pool, stream) == nil {
				touched = time.Now()
			}
		}
		offers, err := store.TakeOffers(ctx, pool, route.Name, stream, 16)
		if err != nil {
			continue // the database is away: the offers wait, or go back
		}
		for _, o := range offers {
			ev, err := s.listenEventOf(r, route, o)
			if err != nil {
				continue // its receipt is gone: no answer comes, and the worker takes it back
			}
			b, _ := json.Marshal(ev)
			if !write(fmt.Sprintf("id: %s\ndata: %s\n\n", listen.EventID(stream, o.Seq), b)) {
				return
			}
			pinged = time.Now()
		}
		if time.Since(pinged) >= listenPing {
			if !write(": ping\n\n") {
				return
			}
			pinged = time.Now()
		}
	}
}

// listenEventOf is an offer as its listener receives it: the dispatch's
// first receipt, shaped by the route's transformation as a forward would be.
func (s *server) listenEventOf(r *http.Request, route fanout.Route, o store.Offer) (listen.Event, error) {
	in, err := deliveries.Input(r.Context(), s.Admin.Pool, o.Provider, o.DeliveryID)
	if err != nil {
		return listen.Event{}, err
	}
	res, err := route.Transform.Apply(in) // none: the delivery as it came
	if err != nil {
		// The route changed since its worker applied it: what came.
		res, _ = (*transform.Transform)(nil).Apply(in)
	}
	headers := map[string]string{}
	maps.Copy(headers, in.Headers)
	maps.Copy(headers, res.Headers)
	return listen.Event{DispatchID: strconv.FormatInt(o.JobID, 10), Route: route.Name, Provider: o.Provider, DeliveryID: o.DeliveryID,
		Event: in.Event, Generation: o.Generation, Attempt: o.Attempt, Headers: headers, ContentType: res.ContentType,
		BodyBase64: base64.StdEncoding.EncodeToString(res.Body), Path: res.Path}, nil
}

// listenAnswer is a listener's answer: its local target's HTTP status.
type listenAnswer struct {
	Status *int `json:"status"`
}

func (a *listenAnswer) validate() error {
	if a.Status == nil {
		return fmt.Errorf("%w: status is required: the local target's HTTP status, 100 to 599", errBadRequest)
	}
	if *a.Status < 100 || *a.Status > 599 {
		return fmt.Errorf("%w: status must be an HTTP status, 100 to 599, got %d", errBadRequest, *a.Status)
	}
	return nil
}

// handleListenAnswer takes a listener's answer to a dispatch it was sent:
// 200 when the dispatch awaited it (2xx succeeds it, another status fails
// the attempt as a target's would), 409 not_awaited otherwise, changing
// nothing.
func (s *server) handleListenAnswer(w http.ResponseWriter, r *http.Request) {
	route, err := s.listenRoute(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var a listenAnswer
	if _, err := readAdminBody(w, r, &a); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	id := chi.URLParam(r, "dispatch_id")
	jobID, err := strconv.ParseInt(id, 10, 64)
	if err != nil || jobID <= 0 {
		writeError(w, r, s.Logger, fmt.Errorf("%w: dispatch %q of route %s awaits no answer", errNotAwaited, errtext.Excerpt(id, 64), route.Name))
		return
	}
	ok, err := store.AnswerOffer(r.Context(), s.Admin.Pool, route.Name, jobID, *a.Status)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if !ok {
		writeError(w, r, s.Logger, fmt.Errorf("%w: dispatch %d of route %s awaits no answer: it was answered already, "+
			"or its stream closed and it went back to wait for a listener", errNotAwaited, jobID, route.Name))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dispatch_id": id, "status": *a.Status})
}
