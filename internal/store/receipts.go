package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoReceipt means no receipt matched.
var ErrNoReceipt = errors.New("receipt not found")

// ReceiptKey is a receipt's primary key: the sender's delivery id, received
// through one hook (scope) of one provider.
type ReceiptKey struct{ Provider, Scope, DeliveryID string }

// Receipt is one stored receipt: the durable proof that a verified delivery
// was received, with the body its dispatches send.
type Receipt struct {
	Provider    string
	Scope       string
	DeliveryID  string
	Event       string
	Entity      string    // "" when the delivery names none
	EventTime   time.Time // zero when the delivery tells none
	ContentType string
	Headers     map[string]string
	Body        []byte
	BodySHA256  []byte
	ReceivedAt  time.Time
	ExpiresAt   time.Time
}

// NewReceipt is a receipt as ingest inserts it.
type NewReceipt struct {
	ReceiptKey
	Event, ContentType string
	Entity             *string    // NULL when the delivery names none
	EventTime          *time.Time // NULL when the delivery tells none
	Headers            string     // a JSON object
	Body, BodySHA256   []byte
	// Keys are the receipt's search keys, inserted with it.
	Keys []KeyValue
}

// KeyValue is one search key's value (package searchkeys).
type KeyValue struct{ Name, Value string }

// InsertReceiptsTx inserts rs in one statement, each unless its key is
// taken, and marks in inserted the keys it inserted. A key is also taken
// while an expired receipt of its event has its id kept
// (hookgate_expired_ids), whatever the scope. Each receipt expires retention
// after now. The search keys of a receipt inserted are inserted in the same
// statement, unless its event has them already (a receipt of another
// scope). rs should come in key order, so that concurrent batches holding
// the same keys wait for one another in one order and never deadlock.
func InsertReceiptsTx(ctx context.Context, tx pgx.Tx, rs []NewReceipt, retention time.Duration, inserted map[ReceiptKey]bool) error {
	args := []any{
		column(rs, func(r *NewReceipt) string { return r.Provider }),
		column(rs, func(r *NewReceipt) string { return r.Scope }),
		column(rs, func(r *NewReceipt) string { return r.DeliveryID }),
		column(rs, func(r *NewReceipt) string { return r.Event }),
		column(rs, func(r *NewReceipt) *string { return r.Entity }),
		column(rs, func(r *NewReceipt) *time.Time { return r.EventTime }),
		column(rs, func(r *NewReceipt) string { return r.ContentType }),
		column(rs, func(r *NewReceipt) string { return r.Headers }),
		column(rs, func(r *NewReceipt) []byte { return r.Body }),
		column(rs, func(r *NewReceipt) []byte { return r.BodySHA256 }),
		retention.Seconds(),
	}
	sql := insertReceiptsSQL
	if keys := searchKeysOf(rs); len(keys[0]) > 0 {
		sql = insertReceiptsWithKeysSQL
		args = append(args, keys[0], keys[1], keys[2], keys[3], keys[4])
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("insert receipts: %w", err)
	}
	for rows.Next() {
		var k ReceiptKey
		if err := rows.Scan(&k.Provider, &k.Scope, &k.DeliveryID); err != nil {
			rows.Close()
			return fmt.Errorf("insert receipts: %w", err)
		}
		inserted[k] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("insert receipts: %w", err)
	}
	return nil
}

// insertReceipts is the receipts' insert, RETURNING the keys inserted.
const insertReceipts = `
		INSERT INTO hookgate_receipts
			(provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256, received_at, expires_at)
		SELECT provider, scope, delivery_id, event, entity, event_time, content_type, headers::jsonb, body, body_sha256,
			now(), now() + make_interval(secs => $11)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::text[], $9::bytea[], $10::bytea[])
			AS t(provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256)
		WHERE NOT EXISTS (SELECT 1 FROM hookgate_expired_ids e WHERE e.provider = t.provider AND e.delivery_id = t.delivery_id)
		ON CONFLICT (provider, scope, delivery_id) DO NOTHING
		RETURNING provider, scope, delivery_id`

// insertReceiptsSQL inserts receipts without search keys.
const insertReceiptsSQL = insertReceipts

// insertReceiptsWithKeysSQL inserts receipts and the search keys of those
// inserted ($12-$16: each key's provider, scope, delivery id, name and
// value), in (provider, delivery id, name) order.
const insertReceiptsWithKeysSQL = `
		WITH ins AS (` + insertReceipts + `, received_at),
		keys AS (
			INSERT INTO hookgate_search_keys (provider, delivery_id, name, value, received_at)
			SELECT k.provider, k.delivery_id, k.name, k.value, ins.received_at
			FROM unnest($12::text[], $13::text[], $14::text[], $15::text[], $16::text[]) AS k(provider, scope, delivery_id, name, value)
			JOIN ins ON ins.provider = k.provider AND ins.scope = k.scope AND ins.delivery_id = k.delivery_id
			ORDER BY k.provider, k.delivery_id, k.name
			ON CONFLICT (provider, delivery_id, name) DO NOTHING)
		SELECT provider, scope, delivery_id FROM ins`

// searchKeysOf returns the search keys of rs as five columns: provider,
// scope, delivery id, name, value.
func searchKeysOf(rs []NewReceipt) [5][]string {
	var cols [5][]string
	for _, r := range rs {
		for _, k := range r.Keys {
			for i, v := range []string{r.Provider, r.Scope, r.DeliveryID, k.Name, k.Value} {
				cols[i] = append(cols[i], v)
			}
		}
	}
	return cols
}

// TakenSumsTx puts in stored the body hash of each receipt of keys, all of
// which are taken: by a receipt, or by the kept id of an expired receipt of
// the same event (provider and delivery id, whichever hook delivered it: the
// sender's id names the delivery, and a hook id is not signed), preferring
// one whose hash is sums' (the delivery's own). An insert's ON CONFLICT
// waited for any concurrent insert of the same key to finish, and this new
// statement sees its result.
func TakenSumsTx(ctx context.Context, tx pgx.Tx, keys []ReceiptKey, sums [][]byte, stored map[ReceiptKey][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
		SELECT t.provider, t.scope, t.delivery_id, coalesce(r.body_sha256, e.body_sha256)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) AS t(provider, scope, delivery_id, body_sha256)
		LEFT JOIN hookgate_receipts r ON (r.provider, r.delivery_id, r.scope) = (t.provider, t.delivery_id, t.scope)
		LEFT JOIN LATERAL (SELECT e.body_sha256 FROM hookgate_expired_ids e
			WHERE e.provider = t.provider AND e.delivery_id = t.delivery_id
			ORDER BY e.body_sha256 = t.body_sha256 DESC, e.scope = t.scope DESC LIMIT 1) e ON r.body_sha256 IS NULL
		WHERE r.body_sha256 IS NOT NULL OR e.body_sha256 IS NOT NULL`,
		column(keys, func(k *ReceiptKey) string { return k.Provider }),
		column(keys, func(k *ReceiptKey) string { return k.Scope }),
		column(keys, func(k *ReceiptKey) string { return k.DeliveryID }), sums)
	if err != nil {
		return fmt.Errorf("read conflicting receipts: %w", err)
	}
	for rows.Next() {
		var k ReceiptKey
		var sum []byte
		if err := rows.Scan(&k.Provider, &k.Scope, &k.DeliveryID, &sum); err != nil {
			rows.Close()
			return fmt.Errorf("read conflicting receipts: %w", err)
		}
		stored[k] = sum
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read conflicting receipts: %w", err)
	}
	if len(stored) != len(keys) {
		// Deleted in between (retention): the sender's retry inserts it anew.
		return fmt.Errorf("read conflicting receipts: %d of %d gone", len(keys)-len(stored), len(keys))
	}
	return nil
}

// FirstReceipt returns the event's first receipt (provider, delivery id),
// whichever hook delivered it: its body is the one dispatched.
func FirstReceipt(ctx context.Context, db Querier, provider, deliveryID string) (Receipt, error) {
	return scanReceipt(db.QueryRow(ctx, `
		SELECT r.provider, r.scope, r.delivery_id, r.event, r.entity, r.event_time, r.content_type, r.headers,
			r.body, r.body_sha256, r.received_at, r.expires_at
		FROM hookgate_first_receipt($1, $2) r`, provider, deliveryID))
}

// EventStored reports whether the event (provider, delivery id) has a
// receipt, whichever hook delivered it.
func EventStored(ctx context.Context, db Querier, provider, deliveryID string) (bool, error) {
	var stored bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM hookgate_receipts WHERE provider = $1 AND delivery_id = $2)`,
		provider, deliveryID).Scan(&stored)
	if err != nil {
		return false, fmt.Errorf("read receipt: %w", err)
	}
	return stored, nil
}

// scanReceipt reads a row of a receipt's columns (provider, scope,
// delivery_id, event, entity, event_time, content_type, headers, body,
// body_sha256, received_at, expires_at), after the given leading columns.
func scanReceipt(row pgx.Row, leading ...any) (Receipt, error) {
	var r Receipt
	var entity *string
	var eventTime *time.Time
	dest := append(leading, &r.Provider, &r.Scope, &r.DeliveryID, &r.Event, &entity, &eventTime, &r.ContentType, &r.Headers,
		&r.Body, &r.BodySHA256, &r.ReceivedAt, &r.ExpiresAt)
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Receipt{}, ErrNoReceipt
		}
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

// column is one field of each of rs, as an array for unnest: a multi-row
// statement takes its rows as one array per column.
func column[R, T any](rs []R, field func(*R) T) []T {
	out := make([]T, len(rs))
	for i := range rs {
		out[i] = field(&rs[i])
	}
	return out
}
