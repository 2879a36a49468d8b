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
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// Conflict means the key was taken by another body.
	Conflict
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
	out, err := s.InsertManyTx(ctx, tx, []providers.Delivery{d})
	if err != nil {
		return 0, err
	}
	if out[0] == Conflict {
		return 0, ErrConflict
	}
	return out[0], nil
}

// key is a receipt's primary key.
type key struct{ provider, scope, deliveryID string }

// keyOf is d's receipt key.
func keyOf(d providers.Delivery) key { return key{d.Provider, d.Scope, d.DeliveryID} }

// InsertManyTx stores the receipts of ds in one statement, each unless its key
// is taken, and returns each delivery's outcome: New, Duplicate (its key is
// taken by the same body, stored before or earlier in ds) or Conflict (by
// another body; nothing is changed). A key is also taken while an expired
// receipt of its event has its id kept (hookgate_expired_ids), whatever the
// scope: a captured delivery sent again with another (unsigned) hook id is
// no new delivery. The primary key decides, so concurrent
// copies in other transactions resolve the same way.
func (s *Store) InsertManyTx(ctx context.Context, tx pgx.Tx, ds []providers.Delivery) ([]Outcome, error) {
	sums := make([][]byte, len(ds))
	for i, d := range ds {
		sum := sha256.Sum256(d.Body)
		sums[i] = sum[:]
	}
	// The maps are made here, and filled by the steps, so that a small
	// batch's stay on the stack.
	first := make(map[key]int, len(ds)) // each key's first delivery in ds
	rs, err := newRows(ds, sums, first)
	if err != nil {
		return nil, err
	}
	inserted := make(map[key]bool, len(rs))
	if err := s.insertRows(ctx, tx, rs, inserted); err != nil {
		return nil, err
	}
	var taken []key
	var takenSums [][]byte
	for _, r := range rs {
		if !inserted[r.key] {
			taken, takenSums = append(taken, r.key), append(takenSums, r.bodySHA256)
		}
	}
	stored := make(map[key][]byte, len(taken))
	if err := readSums(ctx, tx, taken, takenSums, stored); err != nil {
		return nil, err
	}

	// A key inserted now is New for its first delivery in ds, and the others
	// compare with that one; a key taken before compares with its receipt.
	out := make([]Outcome, len(ds))
	for i, d := range ds {
		k := keyOf(d)
		want := stored[k]
		if inserted[k] {
			if first[k] == i {
				out[i] = New
				continue
			}
			want = sums[first[k]]
		}
		if subtle.ConstantTimeCompare(want, sums[i]) == 1 {
			out[i] = Duplicate
		} else {
			out[i] = Conflict
		}
	}
	return out, nil
}

// row is one receipt as InsertManyTx sends it.
type row struct {
	key
	event, contentType string
	entity             *string    // NULL when the delivery names none
	eventTime          *time.Time // NULL when the delivery tells none
	headers            string     // a JSON object
	body, bodySHA256   []byte
}

// newRows returns the rows to insert for ds, one for each key's first
// delivery in ds, and puts that delivery's index in first. Rows come in key
// order, so that concurrent batches holding the same keys wait for one
// another in one order and never deadlock.
func newRows(ds []providers.Delivery, sums [][]byte, first map[key]int) ([]row, error) {
	rs := make([]row, 0, len(ds))
	for _, i := range keyOrder(ds) {
		d := &ds[i]
		k := keyOf(*d)
		if _, seen := first[k]; seen {
			continue
		}
		first[k] = i
		h := d.Headers
		if h == nil {
			h = map[string]string{}
		}
		hj, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("encode headers: %w", err)
		}
		r := row{key: k, event: d.Event, contentType: d.ContentType, headers: string(hj), body: d.Body, bodySHA256: sums[i]}
		if d.Entity != "" {
			r.entity = &d.Entity
		}
		if !d.EventTime.IsZero() {
			r.eventTime = &d.EventTime
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// insertRows inserts rs in one statement, each unless its key is taken, and
// marks in inserted the keys it inserted.
func (s *Store) insertRows(ctx context.Context, tx pgx.Tx, rs []row, inserted map[key]bool) error {
	rows, err := tx.Query(ctx, `
		INSERT INTO hookgate_receipts
			(provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256, received_at, expires_at)
		SELECT provider, scope, delivery_id, event, entity, event_time, content_type, headers::jsonb, body, body_sha256,
			now(), now() + make_interval(secs => $11)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::text[], $9::bytea[], $10::bytea[])
			AS t(provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256)
		WHERE NOT EXISTS (SELECT 1 FROM hookgate_expired_ids e WHERE e.provider = t.provider AND e.delivery_id = t.delivery_id)
		ON CONFLICT (provider, scope, delivery_id) DO NOTHING
		RETURNING provider, scope, delivery_id`,
		column(rs, func(r *row) string { return r.provider }),
		column(rs, func(r *row) string { return r.scope }),
		column(rs, func(r *row) string { return r.deliveryID }),
		column(rs, func(r *row) string { return r.event }),
		column(rs, func(r *row) *string { return r.entity }),
		column(rs, func(r *row) *time.Time { return r.eventTime }),
		column(rs, func(r *row) string { return r.contentType }),
		column(rs, func(r *row) string { return r.headers }),
		column(rs, func(r *row) []byte { return r.body }),
		column(rs, func(r *row) []byte { return r.bodySHA256 }),
		s.Retention.Seconds())
	if err != nil {
		return fmt.Errorf("insert receipts: %w", err)
	}
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.provider, &k.scope, &k.deliveryID); err != nil {
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

// column is one field of each of rs, as an array for unnest: a multi-row
// statement takes its rows as one array per column.
func column[R, T any](rs []R, field func(*R) T) []T {
	out := make([]T, len(rs))
	for i := range rs {
		out[i] = field(&rs[i])
	}
	return out
}

// readSums puts in stored the body hash of each receipt of keys, all of
// which are taken: by a receipt, or by the kept id of an expired receipt of
// the same event (provider and delivery id, whichever hook delivered it: the
// sender's id names the delivery, and a hook id is not signed), preferring
// one whose hash is sums' (the delivery's own). An insert's ON CONFLICT
// waited for any concurrent insert of the same key to finish, and this new
// statement sees its result.
func readSums(ctx context.Context, tx pgx.Tx, keys []key, sums [][]byte, stored map[key][]byte) error {
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
		column(keys, func(k *key) string { return k.provider }),
		column(keys, func(k *key) string { return k.scope }),
		column(keys, func(k *key) string { return k.deliveryID }), sums)
	if err != nil {
		return fmt.Errorf("read conflicting receipts: %w", err)
	}
	for rows.Next() {
		var k key
		var sum []byte
		if err := rows.Scan(&k.provider, &k.scope, &k.deliveryID, &sum); err != nil {
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

// keyOrder returns the indexes of ds sorted by receipt key, and by index
// among equal keys (so each key's first delivery in ds comes first).
func keyOrder(ds []providers.Delivery) []int {
	order := make([]int, len(ds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(strings.Compare(ds[a].Provider, ds[b].Provider), strings.Compare(ds[a].Scope, ds[b].Scope),
			strings.Compare(ds[a].DeliveryID, ds[b].DeliveryID))
	})
	return order
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

// Columns are the columns Scan reads, for queries that select receipts as r,
// alone or joined with other tables.
const Columns = `r.provider, r.scope, r.delivery_id, r.event, r.entity, r.event_time, r.content_type, r.headers,
	r.body, r.body_sha256, r.received_at, r.expires_at`

// FirstSQL selects the first receipt of the event ($provider, $delivery_id)
// as r, for a LATERAL join or a query of its own.
func FirstSQL(provider, deliveryID string) string {
	return `SELECT * FROM hookgate_receipts r WHERE r.provider = ` + provider + ` AND r.delivery_id = ` + deliveryID + `
		ORDER BY r.received_at, r.scope LIMIT 1`
}

// Scan reads a row of Columns, after the given leading columns, into a Receipt.
func Scan(row pgx.Row, leading ...any) (Receipt, error) {
	var r Receipt
	var entity *string
	var eventTime *time.Time
	dest := append(leading, &r.Provider, &r.Scope, &r.DeliveryID, &r.Event, &entity, &eventTime, &r.ContentType, &r.Headers,
		&r.Body, &r.BodySHA256, &r.ReceivedAt, &r.ExpiresAt)
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Receipt{}, ErrNotFound
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

// First returns the event's first receipt (provider, delivery id), whichever
// hook delivered it: its body is the one dispatched.
func (s *Store) First(ctx context.Context, db DBTX, provider, deliveryID string) (Receipt, error) {
	return Scan(db.QueryRow(ctx, `SELECT `+Columns+` FROM (`+FirstSQL("$1", "$2")+`) r`, provider, deliveryID))
}
