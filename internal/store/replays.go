package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoReplay means no replay has the id.
var ErrNoReplay = errors.New("replay not found")

// Replay is one entry of the replay log, with its progress.
type Replay struct {
	ReplayID   string          `json:"replay_id"`
	Actor      string          `json:"actor"`
	CreatedAt  time.Time       `json:"created_at"`
	Filter     json.RawMessage `json:"filter"`
	Force      bool            `json:"force"`
	Reason     *string         `json:"reason"`
	Deliveries int             `json:"deliveries"`
	Dispatches int             `json:"dispatches"`
	State      string          `json:"state"`
	// Done is how many of the deliveries have been handled so far.
	Done int `json:"done"`
}

// NewReplay is a replay as it is logged when asked for.
type NewReplay struct {
	ReplayID, Actor string
	Filter          []byte // JSON
	Force           bool
	Reason          *string
	// Deliveries is how many deliveries it covers.
	Deliveries int
	// Dispatches is how many dispatches it already made (a replay of one
	// delivery is done when logged).
	Dispatches int
	// State is "running" or "done"; a done replay has handled all of its
	// deliveries.
	State string
}

// LogReplayTx logs a replay in tx, with what it asked for and did.
func LogReplayTx(ctx context.Context, tx pgx.Tx, r NewReplay) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO hookgate_replays (replay_id, actor, filter, force, reason, deliveries, dispatches, state, done)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $8 = 'done' THEN $6 ELSE 0 END)`,
		r.ReplayID, r.Actor, r.Filter, r.Force, r.Reason, r.Deliveries, r.Dispatches, r.State)
	if err != nil {
		return fmt.Errorf("log replay: %w", err)
	}
	return nil
}

// ReplayToContinue is what a bulk replay's next batch starts from.
type ReplayToContinue struct {
	Filter, Cursor []byte // JSON; Cursor is empty or null at the start
	Force          bool
	State          string
}

// LockReplayTx locks the replay's log row in tx and returns where it is;
// ErrNoReplay when there is none.
func LockReplayTx(ctx context.Context, tx pgx.Tx, replayID string) (ReplayToContinue, error) {
	var r ReplayToContinue
	err := tx.QueryRow(ctx, `SELECT filter, cursor, force, state FROM hookgate_replays WHERE replay_id = $1 FOR UPDATE`,
		replayID).Scan(&r.Filter, &r.Cursor, &r.Force, &r.State)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNoReplay
	}
	if err != nil {
		return r, fmt.Errorf("read replay: %w", err)
	}
	return r, nil
}

// AdvanceReplayTx records a bulk replay's batch in tx: where the next starts
// (cursor, any JSON value), how many dispatches it made and deliveries it
// handled, and its state. Deliveries that arrived with a receipt time inside
// the filter after the count was taken are replayed too, but progress never
// passes the count; a finished replay has handled all of it.
func AdvanceReplayTx(ctx context.Context, tx pgx.Tx, replayID string, cursor any, dispatched, handled int, state string) error {
	_, err := tx.Exec(ctx, `UPDATE hookgate_replays SET cursor = $2, dispatches = dispatches + $3, state = $4,
		done = CASE WHEN $4 = 'done' THEN deliveries ELSE least(done + $5, deliveries) END
		WHERE replay_id = $1`, replayID, cursor, dispatched, state, handled)
	if err != nil {
		return fmt.Errorf("update replay: %w", err)
	}
	return nil
}

// ListReplays returns up to limit replays, the newest first.
func ListReplays(ctx context.Context, db Querier, limit int) ([]Replay, error) {
	rows, err := db.Query(ctx, `
		SELECT replay_id, actor, created_at, filter, force, reason, deliveries, dispatches, state, done
		FROM hookgate_replays ORDER BY created_at DESC, replay_id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list replays: %w", err)
	}
	replays, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Replay, error) { return scanReplay(row) })
	if err != nil {
		return nil, fmt.Errorf("list replays: %w", err)
	}
	return replays, nil
}

// ReplayByID returns one replay with its progress, or ErrNoReplay.
func ReplayByID(ctx context.Context, db Querier, replayID string) (Replay, error) {
	r, err := scanReplay(db.QueryRow(ctx, `
		SELECT replay_id, actor, created_at, filter, force, reason, deliveries, dispatches, state, done
		FROM hookgate_replays WHERE replay_id = $1`, replayID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Replay{}, ErrNoReplay
	}
	if err != nil {
		return Replay{}, fmt.Errorf("read replay: %w", err)
	}
	return r, nil
}

func scanReplay(row pgx.Row) (Replay, error) {
	var r Replay
	err := row.Scan(&r.ReplayID, &r.Actor, &r.CreatedAt, &r.Filter, &r.Force, &r.Reason, &r.Deliveries, &r.Dispatches, &r.State, &r.Done)
	return r, err
}

// ReplaySelection is what a replay of the replay log (hookgate_replays)
// selected: its filter as stored, and how many deliveries matched it.
type ReplaySelection struct {
	ReplayID string
	// Filter is the replay's filter, JSON.
	Filter     []byte
	Deliveries int
}

// ReplaySelectionsOf reads what the replays replayIDs selected, for a page of
// the console's audit log: one statement for the page, not one per replay. A
// replay the log does not have is left out.
func ReplaySelectionsOf(ctx context.Context, db Querier, replayIDs []string) ([]ReplaySelection, error) {
	rows, err := db.Query(ctx, `SELECT replay_id, filter, deliveries FROM hookgate_replays WHERE replay_id = ANY($1)`, replayIDs)
	if err != nil {
		return nil, fmt.Errorf("bulk replays: %w", err)
	}
	selections, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReplaySelection, error) {
		var x ReplaySelection
		err := row.Scan(&x.ReplayID, &x.Filter, &x.Deliveries)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("bulk replays: %w", err)
	}
	return selections, nil
}
