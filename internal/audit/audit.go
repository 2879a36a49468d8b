// Package audit is the log of what operators did: pauses and resumes of
// routes, retries now, recoveries, personal tokens made and revoked, and (from the replay log) replays, newest
// first.
package audit

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/store"
)

// Actions.
const (
	Pause   = "pause"
	Resume  = "resume"
	Retry   = "retry"
	Replay  = "replay"
	Recover = "recover"
	// TokenCreate and TokenRevoke are a personal token made and revoked.
	TokenCreate = "token_create"
	TokenRevoke = "token_revoke"
	// RoutePut and RouteDelete are a route the database owns made or
	// changed, and deleted, with the route before and after.
	RoutePut    = "route_put"
	RouteDelete = "route_delete"
)

// ErrBadCursor means a cursor that List did not make.
var ErrBadCursor = errors.New("bad cursor")

// Entry is one thing an operator did (store.AuditEntry).
type Entry = store.AuditEntry

// Record appends an entry in tx (the transaction of what it records), at
// the transaction's time.
func Record(ctx context.Context, tx pgx.Tx, e NewEntry) error {
	return store.InsertAuditEntryTx(ctx, tx, e)
}

// NewEntry is an entry to record; an empty field is recorded as none.
type NewEntry = store.NewAuditEntry

// cursor is where the next page starts: the last entry of this one.
type cursor struct {
	At   time.Time `json:"t"`
	Kind int       `json:"k"`
	ID   string    `json:"i"`
}

// List returns up to limit entries, newest first, after the cursor (from a
// previous page; "" for the first), and the next page's cursor ("" at the end).
func List(ctx context.Context, db store.Querier, limit int, after string) ([]Entry, string, error) {
	p := store.AuditLogParams{Limit: limit + 1}
	if after != "" {
		var c cursor
		b, err := base64.RawURLEncoding.DecodeString(after)
		if err != nil || json.Unmarshal(b, &c) != nil || c.At.IsZero() {
			return nil, "", ErrBadCursor
		}
		p.After = &store.AuditKey{At: c.At, Kind: c.Kind, ID: c.ID}
	}
	rows, err := store.AuditLog(ctx, db, p)
	if err != nil {
		return nil, "", err
	}
	entries := []Entry{}
	var last cursor
	for _, row := range rows {
		if len(entries) == limit {
			b, _ := json.Marshal(last)
			return entries, base64.RawURLEncoding.EncodeToString(b), nil
		}
		last = cursor{At: row.At, Kind: row.Kind, ID: row.ID}
		entries = append(entries, row.AuditEntry)
	}
	return entries, "", nil
}
