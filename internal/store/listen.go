package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ListenerFresh is how recently a listener's stream must have been seen to
// count as connected: its gateway moves seen_at every few seconds.
const ListenerFresh = 15 * time.Second

// AddListener records an open stream of a listen route.
func AddListener(ctx context.Context, db Querier, stream, route, actor string) error {
	if _, err := db.Exec(ctx, `INSERT INTO hookgate_listeners (stream, route, actor) VALUES ($1, $2, $3)`, stream, route, actor); err != nil {
		return fmt.Errorf("add listener: %w", err)
	}
	return nil
}

// TouchListener says a stream is still open.
func TouchListener(ctx context.Context, db Querier, stream string) error {
	if _, err := db.Exec(ctx, `UPDATE hookgate_listeners SET seen_at = now() WHERE stream = $1`, stream); err != nil {
		return fmt.Errorf("touch listener: %w", err)
	}
	return nil
}

// DropListener records a stream's end: its offers not answered are closed,
// for their workers to withdraw (or a stream resuming it to take back).
func DropListener(ctx context.Context, db Querier, stream string) error {
	_, err := db.Exec(ctx, `
		WITH closed AS (
			UPDATE hookgate_listen_offers SET closed_at = now()
			WHERE stream = $1 AND status IS NULL AND withdrawn_at IS NULL AND closed_at IS NULL)
		DELETE FROM hookgate_listeners WHERE stream = $1`, stream)
	if err != nil {
		return fmt.Errorf("drop listener: %w", err)
	}
	return nil
}

// ListenerConnected reports whether a stream of the route is open (seen
// within ListenerFresh).
func ListenerConnected(ctx context.Context, db Querier, route string) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM hookgate_listeners WHERE route = $1 AND seen_at > now() - $2::interval)`,
		route, ListenerFresh).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("listener connected: %w", err)
	}
	return ok, nil
}

// Offer is one attempt of a listen route's dispatch, offered to its
// listeners.
type Offer struct {
	Seq        int64
	Route      string
	JobID      int64
	Provider   string
	DeliveryID string
	Generation int
	Attempt    int
}

// OpenOffer returns the dispatch's (its job's) open offer, made now unless
// one is open already (River ran the job again); attempt counts the offers
// it had before.
func OpenOffer(ctx context.Context, db Querier, o Offer, firstAttempt int) (Offer, error) {
	err := db.QueryRow(ctx, `
		WITH open AS (
			SELECT seq, attempt FROM hookgate_listen_offers
			WHERE job_id = $2 AND status IS NULL AND withdrawn_at IS NULL ORDER BY seq LIMIT 1),
		made AS (
			INSERT INTO hookgate_listen_offers (route, job_id, provider, delivery_id, generation, attempt)
			SELECT $1, $2, $3, $4, $5, $6 + (SELECT count(*) FROM hookgate_listen_offers WHERE job_id = $2)
			WHERE NOT EXISTS (SELECT 1 FROM open)
			RETURNING seq, attempt)
		SELECT seq, attempt FROM open UNION ALL SELECT seq, attempt FROM made`,
		o.Route, o.JobID, o.Provider, o.DeliveryID, o.Generation, firstAttempt).Scan(&o.Seq, &o.Attempt)
	if err != nil {
		return o, fmt.Errorf("open offer: %w", err)
	}
	return o, nil
}

// OfferState is where an offer stands, as its worker reads it.
type OfferState struct {
	// Status is the listener's answer, 0 while none.
	Status int
	// Sent says a stream took it; Closed that the stream closed before the
	// answer (or its gateway stopped being seen), ClosedFor how long ago.
	Sent, Closed bool
	ClosedFor    time.Duration
}

// ReadOffer returns where an offer stands. A stream not seen within
// ListenerFresh counts as closed.
func ReadOffer(ctx context.Context, db Querier, seq int64) (OfferState, error) {
	var s OfferState
	var status *int32
	var closedFor *float64
	err := db.QueryRow(ctx, `
		SELECT o.status, o.stream IS NOT NULL,
			extract(epoch FROM now() - coalesce(o.closed_at, CASE WHEN o.stream IS NOT NULL AND (l.seen_at IS NULL OR l.seen_at < now() - $2::interval)
				THEN coalesce(l.seen_at, o.sent_at) END))
		FROM hookgate_listen_offers o LEFT JOIN hookgate_listeners l ON l.stream = o.stream
		WHERE o.seq = $1`, seq, ListenerFresh).Scan(&status, &s.Sent, &closedFor)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("read offer %d: gone", seq)
	}
	if err != nil {
		return s, fmt.Errorf("read offer: %w", err)
	}
	if status != nil {
		s.Status = int(*status)
	}
	if closedFor != nil {
		s.Closed, s.ClosedFor = true, time.Duration(*closedFor*float64(time.Second))
	}
	return s, nil
}

// WithdrawOffer withdraws an offer not answered, and reports whether it
// did: false means an answer came first (read it again).
func WithdrawOffer(ctx context.Context, db Querier, seq int64) (bool, error) {
	tag, err := db.Exec(ctx, `UPDATE hookgate_listen_offers SET withdrawn_at = now() WHERE seq = $1 AND status IS NULL AND withdrawn_at IS NULL`, seq)
	if err != nil {
		return false, fmt.Errorf("withdraw offer: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeleteOffers deletes a dispatch's (its job's) offers: its outcome is
// written.
func DeleteOffers(ctx context.Context, db Querier, jobID int64) error {
	if _, err := db.Exec(ctx, `DELETE FROM hookgate_listen_offers WHERE job_id = $1`, jobID); err != nil {
		return fmt.Errorf("delete offers: %w", err)
	}
	return nil
}

// TakeOffers gives a stream of the route up to limit open offers no stream
// has, oldest first; another stream takes each one at most once.
func TakeOffers(ctx context.Context, db Querier, route, stream string, limit int) ([]Offer, error) {
	rows, err := db.Query(ctx, `
		UPDATE hookgate_listen_offers SET stream = $2, sent_at = now(), closed_at = NULL
		WHERE seq IN (SELECT seq FROM hookgate_listen_offers
			WHERE route = $1 AND stream IS NULL AND status IS NULL AND withdrawn_at IS NULL
			ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING seq, route, job_id, provider, delivery_id, generation, attempt`, route, stream, limit)
	if err != nil {
		return nil, fmt.Errorf("take offers: %w", err)
	}
	offers, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Offer])
	if err != nil {
		return nil, fmt.Errorf("take offers: %w", err)
	}
	return offers, nil
}

// ResumeOffers gives stream the offers of an earlier stream of the route
// (from) that closed without their answer: those up to seq upTo, which the
// listener saw, stay sent (their answers are still taken); those after it
// are sent again.
func ResumeOffers(ctx context.Context, db Querier, route, from, stream string, upTo int64) error {
	_, err := db.Exec(ctx, `
		UPDATE hookgate_listen_offers
		SET stream = CASE WHEN seq <= $4 THEN $3 END, closed_at = NULL, sent_at = CASE WHEN seq <= $4 THEN sent_at END
		WHERE route = $1 AND stream = $2 AND status IS NULL AND withdrawn_at IS NULL`, route, from, stream, upTo)
	if err != nil {
		return fmt.Errorf("resume offers: %w", err)
	}
	return nil
}

// AnswerOffer records a listener's answer to the open offer of a route's
// dispatch (its job), and reports whether one was awaited.
func AnswerOffer(ctx context.Context, db Querier, route string, jobID int64, status int) (bool, error) {
	tag, err := db.Exec(ctx, `
		UPDATE hookgate_listen_offers SET status = $3, answered_at = now()
		WHERE route = $1 AND job_id = $2 AND stream IS NOT NULL AND status IS NULL AND withdrawn_at IS NULL`, route, jobID, status)
	if err != nil {
		return false, fmt.Errorf("answer offer: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}
