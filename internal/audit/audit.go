// Package audit is the log of what operators did: pauses and resumes of
// routes, recoveries, and (from the replay log) replays, newest first.
package audit

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/store"
)

// Actions.
const (
	Pause   = "pause"
	Resume  = "resume"
	Replay  = "replay"
	Recover = "recover"
)

// ErrBadCursor means a cursor that List did not make.
var ErrBadCursor = errors.New("bad cursor")

// Entry is one thing an operator did. Fields that do not apply are empty
// (null in JSON).
type Entry struct {
	At         time.Time `json:"at"`
	Actor      string    `json:"actor"`
	Action     string    `json:"action"`
	Route      *string   `json:"route"`
	Provider   *string   `json:"provider"`
	DeliveryID *string   `json:"delivery_id"`
	Reason     *string   `json:"reason"`
	// ReplayID names a replay's entry in the replay log.
	ReplayID *string `json:"replay_id,omitempty"`
}

// Record appends an entry in tx (the transaction of what it records), at
// the transaction's time.
func Record(ctx context.Context, tx pgx.Tx, e NewEntry) error {
	_, err := tx.Exec(ctx, `INSERT INTO hookgate_audit (actor, action, route, provider, delivery_id, reason)
		VALUES ($1, $2, $3, $4, $5, $6)`, e.Actor, e.Action, null(e.Route), null(e.Provider), null(e.DeliveryID), null(e.Reason))
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// NewEntry is an entry to record.
type NewEntry struct {
	Actor, Action, Route, Provider, DeliveryID, Reason string
}

func null(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// listSQL is the audit log and the replay log as one, newest first; a replay
// of one delivery names it. The kind and id order entries of equal time.
const listSQL = `SELECT at, actor, action, route, provider, delivery_id, reason, replay_id, kind, id FROM (
		SELECT at, actor, action, route, provider, delivery_id, reason, NULL::text AS replay_id, 1 AS kind, id::text AS id
		FROM hookgate_audit
	UNION ALL
		SELECT created_at, actor, 'replay', CASE WHEN jsonb_array_length(coalesce(filter->'routes', '[]')) = 1 THEN filter->'routes'->>0 END,
			filter->>'provider', filter->>'delivery_id', reason, replay_id, 0, replay_id
		FROM hookgate_replays
	) e
	WHERE $1::timestamptz IS NULL OR (at, kind, id) < ($1, $2, $3)
	ORDER BY at DESC, kind DESC, id DESC LIMIT $4`

// cursor is where the next page starts: the last entry of this one.
type cursor struct {
	At   time.Time `json:"t"`
	Kind int       `json:"k"`
	ID   string    `json:"i"`
}

// List returns up to limit entries, newest first, after the cursor (from a
// previous page; "" for the first), and the next page's cursor ("" at the end).
func List(ctx context.Context, db store.Querier, limit int, after string) ([]Entry, string, error) {
	var c cursor
	var at *time.Time
	if after != "" {
		b, err := base64.RawURLEncoding.DecodeString(after)
		if err != nil || json.Unmarshal(b, &c) != nil || c.At.IsZero() {
			return nil, "", ErrBadCursor
		}
		at = &c.At
	}
	rows, err := db.Query(ctx, listSQL, at, c.Kind, c.ID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("audit: %w", err)
	}
	entries := []Entry{}
	var last cursor
	for rows.Next() {
		var e Entry
		var k cursor
		if err := rows.Scan(&e.At, &e.Actor, &e.Action, &e.Route, &e.Provider, &e.DeliveryID, &e.Reason, &e.ReplayID, &k.Kind, &k.ID); err != nil {
			rows.Close()
			return nil, "", fmt.Errorf("audit: %w", err)
		}
		if len(entries) == limit {
			rows.Close()
			b, _ := json.Marshal(last)
			return entries, base64.RawURLEncoding.EncodeToString(b), nil
		}
		k.At = e.At
		last = k
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("audit: %w", err)
	}
	return entries, "", nil
}
