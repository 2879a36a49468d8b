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

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/searchkeys"
	"github.com/hookgate/hookgate/internal/store"
)

// Errors returned by this package.
var (
	// ErrConflict means the receipt key is taken by a different body.
	ErrConflict = errors.New("delivery id reused with a different body")
	// ErrNotFound means no receipt matched.
	ErrNotFound = store.ErrNoReceipt
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

// Store reads and writes receipts.
type Store struct {
	// Retention is how long a new receipt is kept (its expires_at).
	Retention time.Duration
	// Keys are the search keys indexed with each new receipt; nil: none.
	Keys *searchkeys.Set
}

// KeysOf returns d's search keys: those read before (d.Keys), else read now.
func (s *Store) KeysOf(d providers.Delivery) []providers.SearchKey {
	if d.Keys != nil {
		return d.Keys
	}
	return s.Keys.Of(d.Provider, d.ContentType, d.Body)
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
type key = store.ReceiptKey

// keyOf is d's receipt key.
func keyOf(d providers.Delivery) key {
	return key{Provider: d.Provider, Scope: d.Scope, DeliveryID: d.DeliveryID}
}

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
	rs, err := s.newRows(ds, sums, first)
	if err != nil {
		return nil, err
	}
	inserted := make(map[key]bool, len(rs))
	if err := store.InsertReceiptsTx(ctx, tx, rs, s.Retention, inserted); err != nil {
		return nil, err
	}
	var taken []key
	var takenSums [][]byte
	for _, r := range rs {
		if !inserted[r.ReceiptKey] {
			taken, takenSums = append(taken, r.ReceiptKey), append(takenSums, r.BodySHA256)
		}
	}
	stored := make(map[key][]byte, len(taken))
	if err := store.TakenSumsTx(ctx, tx, taken, takenSums, stored); err != nil {
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

// newRows returns the rows to insert for ds, one for each key's first
// delivery in ds, and puts that delivery's index in first. Rows come in key
// order, so that concurrent batches holding the same keys wait for one
// another in one order and never deadlock.
func (s *Store) newRows(ds []providers.Delivery, sums [][]byte, first map[key]int) ([]store.NewReceipt, error) {
	rs := make([]store.NewReceipt, 0, len(ds))
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
		r := store.NewReceipt{ReceiptKey: k, Event: d.Event, ContentType: d.ContentType, Headers: string(hj), Body: d.Body, BodySHA256: sums[i]}
		if d.Entity != "" {
			r.Entity = &d.Entity
		}
		if !d.EventTime.IsZero() {
			r.EventTime = &d.EventTime
		}
		for _, k := range s.KeysOf(*d) {
			r.Keys = append(r.Keys, store.KeyValue{Name: k.Name, Value: k.Value})
		}
		rs = append(rs, r)
	}
	return rs, nil
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
type Receipt = store.Receipt

// First returns the event's first receipt (provider, delivery id), whichever
// hook delivered it: its body is the one dispatched.
func (s *Store) First(ctx context.Context, db store.Querier, provider, deliveryID string) (Receipt, error) {
	return store.FirstReceipt(ctx, db, provider, deliveryID)
}
