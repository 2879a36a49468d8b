package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The audit log (hookgate_audit) of what operators did, read together with
// the replay log (hookgate_replays) as one log.

// AuditEntry is one thing an operator did. Fields that do not apply are
// empty (null in JSON).
type AuditEntry struct {
	At         time.Time `json:"at"`
	Actor      string    `json:"actor"`
	Action     string    `json:"action"`
	Route      *string   `json:"route"`
	Provider   *string   `json:"provider"`
	DeliveryID *string   `json:"delivery_id"`
	Reason     *string   `json:"reason"`
	// Before and After are what a change changed (a route's spec), when it
	// records them.
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
	// ReplayID names a replay's entry in the replay log.
	ReplayID *string `json:"replay_id,omitempty"`
}

// NewAuditEntry is an entry to record. An empty field is stored as NULL.
type NewAuditEntry struct {
	Actor, Action, Route, Provider, DeliveryID, Reason string
	// Before and After are what changed, as JSON (a route's spec).
	Before, After []byte
	// Ordered takes the entry's time from its statement, not from its
	// transaction's start: entries recorded under a lock (a route's
	// changes) are then in the order the lock was taken.
	Ordered bool
}

// InsertAuditEntryTx appends an entry in tx (the transaction of what it
// records), at the transaction's time.
func InsertAuditEntryTx(ctx context.Context, tx pgx.Tx, e NewAuditEntry) error {
	_, err := tx.Exec(ctx, `INSERT INTO hookgate_audit (at, actor, action, route, provider, delivery_id, reason, before, after)
		VALUES (CASE WHEN $9 THEN statement_timestamp() ELSE now() END, $1, $2, $3, $4, $5, $6, $7, $8)`,
		e.Actor, e.Action, nullIfEmpty(e.Route), nullIfEmpty(e.Provider), nullIfEmpty(e.DeliveryID),
		nullIfEmpty(e.Reason), jsonOrNull(e.Before), jsonOrNull(e.After), e.Ordered)
	if err != nil {
		return fmt.Errorf("record audit entry: %w", err)
	}
	return nil
}

// jsonOrNull is b as a JSON value, or NULL when b is empty.
func jsonOrNull(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// nullIfEmpty is s, or NULL when s is empty.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// AuditKey is an entry's place in the log's order: newest first, then the
// audit log's entries (kind 1) before the replay log's (kind 0) of the same
// time, then by id, descending.
type AuditKey struct {
	At   time.Time
	Kind int
	ID   string
}

// AuditRow is an entry of the log with its key.
type AuditRow struct {
	AuditEntry
	Kind int
	ID   string
}

// AuditLogParams selects a page of the log.
type AuditLogParams struct {
	// After is the key of the last entry of the page before; nil for the
	// first page.
	After *AuditKey
	// Limit is how many entries to read at most.
	Limit int
}

// AuditLog reads the audit log and the replay log as one, newest first (see
// AuditKey), after p.After: up to p.Limit entries. A replay's entry names
// its delivery when it replayed one, and its route when it replayed exactly
// one. The kind and id order entries of equal time.
func AuditLog(ctx context.Context, db Querier, p AuditLogParams) ([]AuditRow, error) {
	var at *time.Time
	var after AuditKey
	if p.After != nil {
		after = *p.After
		at = &after.At
	}
	rows, err := db.Query(ctx, `SELECT at, actor, action, route, provider, delivery_id, reason, before, after, replay_id, kind, id FROM (
			SELECT at, actor, action, route, provider, delivery_id, reason, before, after, NULL::text AS replay_id, 1 AS kind, id::text AS id
			FROM hookgate_audit
		UNION ALL
			SELECT created_at, actor, 'replay', CASE WHEN jsonb_array_length(coalesce(filter->'routes', '[]')) = 1 THEN filter->'routes'->>0 END,
				filter->>'provider', filter->>'delivery_id', reason, NULL, NULL, replay_id, 0, replay_id
			FROM hookgate_replays
		) e
		WHERE $1::timestamptz IS NULL OR (at, kind, id) < ($1, $2, $3)
		ORDER BY at DESC, kind DESC, id DESC LIMIT $4`, at, after.Kind, after.ID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditRow, error) {
		var x AuditRow
		var before, after []byte
		err := row.Scan(&x.At, &x.Actor, &x.Action, &x.Route, &x.Provider, &x.DeliveryID, &x.Reason, &before, &after, &x.ReplayID, &x.Kind, &x.ID)
		x.Before, x.After = before, after
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return list, nil
}
