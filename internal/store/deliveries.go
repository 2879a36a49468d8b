package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoDelivery means no delivery matched.
var ErrNoDelivery = errors.New("delivery not found")

// DeliveryFilter selects deliveries (events, by their first receipt) in the
// list and the count. Zero fields select everything.
type DeliveryFilter struct {
	Provider string
	// EventLike is a LIKE pattern (backslash escapes) the event equals, or
	// is a dot-separated prefix of.
	EventLike string
	// State matches a delivery when the latest dispatch of any of its routes
	// is in that live state; "stored" matches deliveries without dispatches.
	State string
	// Since (inclusive) and Until (exclusive) bound the first receipt's time.
	Since, Until *time.Time
	// Keys match deliveries whose search keys have all these values
	// (hookgate_search_keys): the list then reads the first one's index.
	Keys []KeyValue
}

// from returns the rows the filter reads, receipts r joined to what drives
// the list: the index of its first search key (k0) when it has keys, the
// receipts themselves otherwise; and that driver's alias, whose
// (received_at, provider, delivery_id) orders the list.
func (f DeliveryFilter) from() (from, at string) {
	if len(f.Keys) == 0 {
		return "hookgate_receipts r", "r"
	}
	// A key row's received_at is its event's first receipt's: it was
	// written in that receipt's transaction.
	return "hookgate_search_keys k0 JOIN hookgate_receipts r ON r.provider = k0.provider AND r.delivery_id = k0.delivery_id", "k0"
}

// where returns the filter's conditions on receipts r (the event's first
// receipt) and their arguments, appended to args.
func (f DeliveryFilter) where(args []any) (string, []any) {
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	_, at := f.from()
	conds := []string{
		// r is the event's first receipt.
		`NOT EXISTS (SELECT 1 FROM hookgate_receipts e WHERE e.provider = r.provider AND e.delivery_id = r.delivery_id
			AND (e.received_at, e.scope) < (r.received_at, r.scope))`,
	}
	for i, k := range f.Keys {
		if i == 0 {
			conds = append(conds, "k0.name = "+arg(k.Name)+" AND k0.value = "+arg(k.Value))
			continue
		}
		conds = append(conds, fmt.Sprintf(`EXISTS (SELECT 1 FROM hookgate_search_keys k WHERE k.provider = k0.provider
			AND k.delivery_id = k0.delivery_id AND k.name = %s AND k.value = %s)`, arg(k.Name), arg(k.Value)))
	}
	if f.Provider != "" {
		conds = append(conds, "r.provider = "+arg(f.Provider))
	}
	if f.EventLike != "" {
		p := arg(f.EventLike)
		conds = append(conds, fmt.Sprintf(`(r.event LIKE %s ESCAPE '\' OR r.event LIKE %s || '.%%' ESCAPE '\')`, p, p))
	}
	if f.Since != nil {
		conds = append(conds, at+".received_at >= "+arg(*f.Since))
	}
	if f.Until != nil {
		conds = append(conds, at+".received_at < "+arg(*f.Until))
	}
	switch f.State {
	case "":
	case "stored":
		conds = append(conds, "NOT EXISTS (SELECT 1 FROM hookgate_dispatches d WHERE d.provider = r.provider AND d.delivery_id = r.delivery_id)",
			"NOT "+invalidSQL)
	case "invalid":
		conds = append(conds, invalidSQL)
	default:
		conds = append(conds, "EXISTS (SELECT 1 FROM hookgate_latest_states(r.provider, r.delivery_id) l(state) WHERE l.state = "+arg(f.State)+")")
	}
	return strings.Join(conds, " AND "), args
}

// invalidSQL is true for a delivery r whose payload failed its schema.
const invalidSQL = "EXISTS (SELECT 1 FROM hookgate_schema_errors s WHERE s.provider = r.provider AND s.delivery_id = r.delivery_id)"

// DeliveryCursor is a position in the newest-first order of deliveries.
type DeliveryCursor struct {
	ReceivedAt time.Time `json:"t"`
	Provider   string    `json:"p"`
	DeliveryID string    `json:"d"`
}

// Item is one delivery in a list: its event as its first receipt tells it.
type Item struct {
	Provider   string    `json:"provider"`
	DeliveryID string    `json:"delivery_id"`
	Event      string    `json:"event"`
	Entity     *string   `json:"entity"`
	ReceivedAt time.Time `json:"received_at"`
	Receipts   int       `json:"receipts"`
	// State is the delivery's summary state, chosen from States by the
	// package that shows it.
	State string `json:"state"`
	// States are the live states of the latest dispatch of each route.
	States []string `json:"-"`
	// Invalid says its payload failed its schema.
	Invalid bool `json:"-"`
}

// planned returns a statement's arguments so that a filter with keys is
// planned for its own values each time: a prepared statement's generic plan,
// which PostgreSQL takes after five executions, knows no key's selectivity
// and may read the commonest key's index whole (0.2 s instead of 2 ms on a
// million deliveries).
func (f DeliveryFilter) planned(args []any) []any {
	if len(f.Keys) == 0 {
		return args
	}
	return append([]any{pgx.QueryExecModeExec}, args...)
}

// keyProbe bounds how many deliveries of each key rarestFirst counts.
const keyProbe = 1000

// rarestFirst returns f with its keys in the order of how many deliveries
// hold each (counted up to keyProbe), the rarest first: the list reads the
// first one's index and looks the others up for each delivery it finds, so
// "customer:cus_123 and invoice:in_9" reads the invoice's one row, not the
// customer's thousands. One statement; nothing when f has one key or none.
func rarestFirst(ctx context.Context, db Querier, f DeliveryFilter) (DeliveryFilter, error) {
	if len(f.Keys) < 2 {
		return f, nil
	}
	rows, err := db.Query(ctx, `
		SELECT k.i::int FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(name, value, i)
		ORDER BY (SELECT count(*) FROM (SELECT 1 FROM hookgate_search_keys s WHERE s.name = k.name AND s.value = k.value LIMIT $3) x), k.i`,
		column(f.Keys, func(k *KeyValue) string { return k.Name }), column(f.Keys, func(k *KeyValue) string { return k.Value }), keyProbe)
	if err != nil {
		return f, fmt.Errorf("order search keys: %w", err)
	}
	order, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return f, fmt.Errorf("order search keys: %w", err)
	}
	keys := make([]KeyValue, 0, len(order))
	for _, i := range order {
		keys = append(keys, f.Keys[i-1])
	}
	f.Keys = keys
	return f, nil
}

// ListDeliveries returns up to limit deliveries matching f, newest first,
// after the cursor when one is given.
func ListDeliveries(ctx context.Context, db Querier, f DeliveryFilter, limit int, after *DeliveryCursor) ([]Item, error) {
	f, err := rarestFirst(ctx, db, f)
	if err != nil {
		return nil, err
	}
	where, args := f.where(nil)
	from, at := f.from()
	if after != nil {
		args = append(args, after.ReceivedAt, after.Provider, after.DeliveryID)
		n := len(args)
		where += fmt.Sprintf(" AND (%[1]s.received_at, %[1]s.provider, %[1]s.delivery_id) < ($%d, $%d, $%d)", at, n-2, n-1, n)
	}
	args = append(args, limit)
	rows, err := db.Query(ctx, `
		SELECT r.provider, r.delivery_id, r.event, r.entity, `+at+`.received_at,
			(SELECT count(*) FROM hookgate_receipts c WHERE c.provider = r.provider AND c.delivery_id = r.delivery_id),
			ARRAY(SELECT l.state FROM hookgate_latest_states(r.provider, r.delivery_id) l(state)),
			`+invalidSQL+`
		FROM `+from+`
		WHERE `+where+`
		ORDER BY `+at+`.received_at DESC, `+at+`.provider DESC, `+at+`.delivery_id DESC
		LIMIT $`+strconv.Itoa(len(args)), f.planned(args)...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	items := []Item{}
	for rows.Next() {
		var it Item
		if err := rows.Scan(&it.Provider, &it.DeliveryID, &it.Event, &it.Entity, &it.ReceivedAt, &it.Receipts, &it.States, &it.Invalid); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return items, nil
}

// CountDeliveriesSQL returns the statement CountDeliveries runs, and its
// arguments (for a benchmark's EXPLAIN).
func CountDeliveriesSQL(f DeliveryFilter) (string, []any) {
	where, args := f.where(nil)
	from, _ := f.from()
	return "SELECT count(*) FROM " + from + " WHERE " + where, args
}

// CountDeliveries returns how many deliveries match f.
func CountDeliveries(ctx context.Context, db Querier, f DeliveryFilter) (int, error) {
	f, err := rarestFirst(ctx, db, f)
	if err != nil {
		return 0, err
	}
	sql, args := CountDeliveriesSQL(f)
	var n int
	if err := db.QueryRow(ctx, sql, f.planned(args)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count deliveries: %w", err)
	}
	return n, nil
}

// ReceiptsOf returns the receipts of the event (provider, deliveryID), oldest
// first, without their bodies (Body is nil).
func ReceiptsOf(ctx context.Context, db Querier, provider, deliveryID string) ([]Receipt, error) {
	rows, err := db.Query(ctx, `
		SELECT provider, scope, delivery_id, event, entity, event_time, content_type, headers,
			NULL::bytea, body_sha256, received_at, expires_at
		FROM hookgate_receipts WHERE provider = $1 AND delivery_id = $2
		ORDER BY received_at, scope`, provider, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("show delivery: %w", err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Receipt, error) { return scanReceipt(row) })
	if err != nil {
		return nil, fmt.Errorf("show delivery: %w", err)
	}
	return rs, nil
}

// ExpiredID is the kept id of a delivery whose receipts retention deleted.
type ExpiredID struct {
	Event      string
	BodySHA256 []byte
	ReceivedAt time.Time
	ExpiredAt  time.Time
}

// ExpiredIDOf returns the kept id of the event's first receipt, or
// ErrNoDelivery when none is kept.
func ExpiredIDOf(ctx context.Context, db Querier, provider, deliveryID string) (ExpiredID, error) {
	var e ExpiredID
	err := db.QueryRow(ctx, `
		SELECT event, body_sha256, received_at, expired_at FROM hookgate_expired_ids
		WHERE provider = $1 AND delivery_id = $2 ORDER BY received_at, scope LIMIT 1`,
		provider, deliveryID).Scan(&e.Event, &e.BodySHA256, &e.ReceivedAt, &e.ExpiredAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return ExpiredID{}, ErrNoDelivery
	}
	if err != nil {
		return ExpiredID{}, fmt.Errorf("show delivery: %w", err)
	}
	return e, nil
}

// Content is what a search of the deliveries reads of one: its first
// receipt's kept headers, content type and body.
type Content struct {
	Headers     map[string]string
	ContentType string
	// Body is nil when retention has deleted it.
	Body []byte
}

// FirstContents returns the Content of the first receipt of each delivery
// of items, in order, in one statement; a delivery with no receipt left
// has a zero Content.
func FirstContents(ctx context.Context, db Querier, items []Item) ([]Content, error) {
	rows, err := firstReceiptsOf(ctx, db, items, "r.headers, r.content_type, r.body")
	if err != nil {
		return nil, fmt.Errorf("read deliveries' contents: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Content, error) {
		var c Content
		var contentType *string
		err := row.Scan(&c.Headers, &contentType, &c.Body)
		if contentType != nil {
			c.ContentType = *contentType
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read deliveries' contents: %w", err)
	}
	return out, nil
}

// FirstBodySizes returns the size in bytes of the first receipt's body of
// each delivery of items, in order (0 when it has none), without reading
// the bodies: so that a search reads them in batches of bounded size.
func FirstBodySizes(ctx context.Context, db Querier, items []Item) ([]int64, error) {
	rows, err := firstReceiptsOf(ctx, db, items, "coalesce(octet_length(r.body), 0)")
	if err != nil {
		return nil, fmt.Errorf("read deliveries' sizes: %w", err)
	}
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read deliveries' sizes: %w", err)
	}
	return sizes, nil
}

// firstReceiptsOf selects columns (of r, the first receipt) for each
// delivery of items, a row each, in items' order; r's columns are NULL for
// a delivery with no receipt left.
func firstReceiptsOf(ctx context.Context, db Querier, items []Item, columns string) (pgx.Rows, error) {
	return db.Query(ctx, `SELECT `+columns+`
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(provider, delivery_id, i)
		LEFT JOIN LATERAL hookgate_first_receipt(k.provider, k.delivery_id) r ON true
		ORDER BY k.i`,
		column(items, func(it *Item) string { return it.Provider }),
		column(items, func(it *Item) string { return it.DeliveryID }))
}

// FirstBody returns the body of the event's first receipt, byte for byte,
// and its content type; ErrNoDelivery when there is none.
func FirstBody(ctx context.Context, db Querier, provider, deliveryID string) ([]byte, string, error) {
	var body []byte
	var contentType string
	err := db.QueryRow(ctx, `SELECT body, content_type FROM hookgate_first_receipt($1, $2)`,
		provider, deliveryID).Scan(&body, &contentType)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", ErrNoDelivery
	}
	if err != nil {
		return nil, "", fmt.Errorf("read body: %w", err)
	}
	return body, contentType, nil
}
