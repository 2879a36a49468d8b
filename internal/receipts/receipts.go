// Package receipts owns the receipt rows: the durable proof that a verified
// delivery was received, written before any side effect and kept for the whole
// replay horizon.
//
// A receipt is keyed by (provider, scope, delivery id). Whether a delivery is
// new, a duplicate or a conflict is decided by the primary key (INSERT ... ON
// CONFLICT DO NOTHING), never by a read before the insert, so that concurrent
// copies of one delivery resolve to exactly one new receipt.
package receipts

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/providers"
)

// Errors returned by this package.
var (
	// ErrConflict means the receipt key is taken by a different body.
	ErrConflict = errors.New("delivery id reused with a different body")
	// ErrNotFound means no receipt matched.
	ErrNotFound = errors.New("receipt not found")
)

// Outcome is what inserting a receipt found.
type Outcome int

// The outcomes of InsertTx.
const (
	// New means the receipt was inserted: the delivery was not seen before.
	New Outcome = iota + 1
	// Duplicate means the same key with the same body was already stored.
	Duplicate
)

// DBTX is what the package's reads need: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes receipts.
type Store struct {
	// Retention is how long a new receipt is kept (its expires_at).
	Retention time.Duration
}

// InsertTx stores the delivery's receipt in tx unless its key is taken. A
// taken key with the same body hash is Duplicate; with another body it is
// ErrConflict, and the stored receipt is left as it was.
func (s *Store) InsertTx(ctx context.Context, tx pgx.Tx, d providers.Delivery) (Outcome, error) {
	sum := sha256.Sum256(d.Body)
	var entity *string
	if d.Entity != "" {
		entity = &d.Entity
	}
	var eventTime *time.Time
	if !d.EventTime.IsZero() {
		eventTime = &d.EventTime
	}
	headers := d.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO hookgate_receipts
			(provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256, received_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now(), now() + make_interval(secs => $11))
		ON CONFLICT (provider, scope, delivery_id) DO NOTHING`,
		d.Provider, d.Scope, d.DeliveryID, d.Event, entity, eventTime, d.ContentType, headers, d.Body, sum[:], s.Retention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("insert receipt: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return New, nil
	}
	// The key was taken by a committed row: ON CONFLICT waited for any
	// concurrent insert to finish, and this new statement sees its result.
	var stored []byte
	err = tx.QueryRow(ctx, `SELECT body_sha256 FROM hookgate_receipts WHERE provider = $1 AND scope = $2 AND delivery_id = $3`,
		d.Provider, d.Scope, d.DeliveryID).Scan(&stored)
	if err != nil {
		// Deleted in between (retention): the caller's retry will insert it anew.
		return 0, fmt.Errorf("read conflicting receipt: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, sum[:]) != 1 {
		return 0, ErrConflict
	}
	return Duplicate, nil
}

// Receipt is one stored receipt.
type Receipt struct {
	Provider    string
	Scope       string
	DeliveryID  string
	Event       string
	Entity      string
	EventTime   time.Time
	ContentType string
	Headers     map[string]string
	Body        []byte
	BodySHA256  []byte
	ReceivedAt  time.Time
	ExpiresAt   time.Time
}

// First returns the event's first receipt (provider, delivery id), whichever
// hook delivered it: its body is the one dispatched.
func (s *Store) First(ctx context.Context, db DBTX, provider, deliveryID string) (Receipt, error) {
	var r Receipt
	var entity *string
	var eventTime *time.Time
	err := db.QueryRow(ctx, `
		SELECT provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256, received_at, expires_at
		FROM hookgate_receipts WHERE provider = $1 AND delivery_id = $2
		ORDER BY received_at, scope LIMIT 1`, provider, deliveryID).
		Scan(&r.Provider, &r.Scope, &r.DeliveryID, &r.Event, &entity, &eventTime, &r.ContentType, &r.Headers, &r.Body, &r.BodySHA256, &r.ReceivedAt, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Receipt{}, ErrNotFound
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("read receipt: %w", err)
	}
	if entity != nil {
		r.Entity = *entity
	}
	if eventTime != nil {
		r.EventTime = *eventTime
	}
	return r, nil
}
