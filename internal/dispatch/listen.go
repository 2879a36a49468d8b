package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/store"
)

// A listen route's dispatches go to people's machines: each attempt is an
// offer (store.OpenOffer) that a stream of the route takes, on whichever
// gateway it is open, and the listener answers with its local target's
// status. The worker waits for the answer here, reading the offer.
const (
	// ListenWait is how long a dispatch waits, pending, when no listener of
	// its route is connected, before it looks again.
	ListenWait = 2 * time.Second
	// ResumeGrace is how long an offer whose stream closed stays the
	// listener's, for a stream that resumes it (Last-Event-ID) to take back;
	// then it is withdrawn and the dispatch is pending for the next one.
	ResumeGrace = 3 * time.Second
	// offerPoll is how often the worker reads its offer.
	offerPoll = 100 * time.Millisecond
)

// listenerConnected reports whether a stream of the route is open; when
// none is, the error snoozes the job, its dispatch pending.
func (w *Worker) listenerConnected(ctx context.Context, route fanout.Route) error {
	ok, err := store.ListenerConnected(ctx, w.pool, route.Name)
	if err != nil {
		return err
	}
	if !ok {
		return river.JobSnooze(ListenWait)
	}
	return nil
}

// offer runs one attempt of a listen route's dispatch: it offers the
// dispatch to the route's listeners and waits, up to the route's timeout,
// for the answer. A 2xx answer is nil, another a *forward.Error like a
// target's; no answer in time is a timeout. An offer no stream took in time,
// or whose stream closed before the answer (and was not resumed within
// ResumeGrace), is withdrawn and the job snoozed: the dispatch is pending
// for the next listener, its next attempt.
func (w *Worker) offer(ctx context.Context, job *river.Job[Args], route fanout.Route) error {
	a := job.Args
	o, err := store.OpenOffer(ctx, w.pool, store.Offer{Route: route.Name, JobID: job.ID, Provider: a.Provider, DeliveryID: a.DeliveryID,
		Generation: a.Generation}, 1)
	if err != nil {
		return err
	}
	timeout := route.Timeout
	if timeout <= 0 {
		timeout = w.forwarder.Timeout
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(offerPoll)
	defer tick.Stop()
	for {
		s, err := store.ReadOffer(ctx, w.pool, o.Seq)
		if err != nil {
			return err
		}
		if s.Status != 0 {
			return answerError(s.Status)
		}
		if (s.Closed && s.ClosedFor >= ResumeGrace) || time.Now().After(deadline) {
			withdrawn, err := store.WithdrawOffer(ctx, w.pool, o.Seq)
			if err != nil {
				return err
			}
			if !withdrawn {
				continue // answered meanwhile
			}
			if s.Sent && !s.Closed {
				return &forward.Error{Detail: fmt.Sprintf("the listener did not answer within %s", timeout), Timeout: true}
			}
			return river.JobSnooze(0)
		}
		select {
		case <-ctx.Done():
			// The attempt's time ran out, or the gateway is stopping: the
			// offer is withdrawn, so that no answer comes for it any more.
			_, _ = store.WithdrawOffer(context.WithoutCancel(ctx), w.pool, o.Seq)
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// answerError is a listener's answer as a forward's outcome: nil for a 2xx,
// else a target's status read as a forward reads it (forward.StatusError).
func answerError(status int) error {
	if status >= 200 && status < 300 {
		return nil
	}
	return forward.StatusError(status, "the listener's target answered")
}
