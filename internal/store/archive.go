package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DayProviders returns the providers of the receipts received on the UTC day
// that starts at day, sorted.
func DayProviders(ctx context.Context, db Querier, day time.Time) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT provider FROM hookgate_receipts
		WHERE received_at >= $1 AND received_at < $2 ORDER BY 1`, day, nextDay(day))
	if err != nil {
		return nil, fmt.Errorf("read the day's providers: %w", err)
	}
	providers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the day's providers: %w", err)
	}
	return providers, nil
}

// DayReceiptCursor is a position in a day's receipts, in the order
// DayReceipts reads them.
type DayReceiptCursor struct {
	ReceivedAt        time.Time
	Scope, DeliveryID string
}

// DayReceipts returns up to limit receipts of the provider received on the
// UTC day that starts at day, bodies included, oldest first, after the
// cursor when one is given.
func DayReceipts(ctx context.Context, db Querier, provider string, day time.Time, after *DayReceiptCursor, limit int) ([]Receipt, error) {
	var c DayReceiptCursor
	if after != nil {
		c = *after
	}
	rows, err := db.Query(ctx, `
		SELECT provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256, received_at, expires_at
		FROM hookgate_receipts
		WHERE provider = $1 AND received_at >= $2 AND received_at < $7
			AND ($3::timestamptz IS NULL OR (received_at, scope, delivery_id) > ($3, $4, $5))
		ORDER BY received_at, scope, delivery_id LIMIT $6`,
		provider, day, nullTime(after != nil, c.ReceivedAt), c.Scope, c.DeliveryID, limit, nextDay(day))
	if err != nil {
		return nil, fmt.Errorf("read the day's receipts: %w", err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Receipt, error) { return scanReceipt(row) })
	if err != nil {
		return nil, fmt.Errorf("read the day's receipts: %w", err)
	}
	return rs, nil
}

// nextDay is the UTC midnight after day's: computed here, since the
// database's "+ interval '1 day'" follows its session's time zone, where a
// day may last 23 or 25 hours.
func nextDay(day time.Time) time.Time { return day.UTC().AddDate(0, 0, 1) }

// nullTime is t when set, else NULL.
func nullTime(set bool, t time.Time) *time.Time {
	if !set {
		return nil
	}
	return &t
}

// EventDispatch is a dispatch row of an event, as stored (its own state, not
// its job's).
type EventDispatch struct {
	Provider, DeliveryID string
	Dispatch
}

// DispatchRowsOf returns the dispatch rows of the events (providers[i],
// ids[i]), by event, route and generation.
func DispatchRowsOf(ctx context.Context, db Querier, providers, ids []string) ([]EventDispatch, error) {
	rows, err := db.Query(ctx, `
		SELECT d.provider, d.delivery_id, d.route, d.generation, d.state, d.attempts, d.last_error,
			coalesce(d.superseded_by, ''), d.created_at, d.updated_at
		FROM hookgate_dispatches d JOIN unnest($1::text[], $2::text[]) AS e(provider, delivery_id)
			ON d.provider = e.provider AND d.delivery_id = e.delivery_id
		ORDER BY d.provider, d.delivery_id, d.route, d.generation`, providers, ids)
	if err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventDispatch, error) {
		var d EventDispatch
		err := row.Scan(&d.Provider, &d.DeliveryID, &d.Route, &d.Generation, &d.State, &d.Attempts, &d.LastError,
			&d.SupersededBy, &d.CreatedAt, &d.UpdatedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	return ds, nil
}

// DayPresent reports whether any receipt of the provider received on the
// UTC day that starts at day is stored.
func DayPresent(ctx context.Context, db Querier, provider string, day time.Time) (bool, error) {
	var present bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM hookgate_receipts
		WHERE provider = $1 AND received_at >= $2 AND received_at < $3)`, provider, day, nextDay(day)).Scan(&present)
	if err != nil {
		return false, fmt.Errorf("read the day: %w", err)
	}
	return present, nil
}

// ArchivedDay is a (day, provider) the archive holds.
type ArchivedDay struct {
	// Day is the UTC day, its midnight; Date the same as yyyy-mm-dd.
	Day      time.Time `json:"-"`
	Date     string    `json:"day"`
	Provider string    `json:"provider"`
	Count    int       `json:"count"`
	SHA256   string    `json:"sha256"`
	Object   string    `json:"object"`
	// ArchivedAt is when the archive began reading the day: what changed
	// after it is not in the object.
	ArchivedAt time.Time `json:"archived_at"`
}

// RecordArchivedDay records that the archive holds a (day, provider),
// replacing what an earlier archive of it recorded.
func RecordArchivedDay(ctx context.Context, db Querier, a ArchivedDay) error {
	_, err := db.Exec(ctx, `
		INSERT INTO hookgate_archive (day, provider, count, sha256, object, archived_at) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (day, provider) DO UPDATE SET count = excluded.count, sha256 = excluded.sha256,
			object = excluded.object, archived_at = excluded.archived_at`,
		a.Day, a.Provider, a.Count, a.SHA256, a.Object, a.ArchivedAt)
	if err != nil {
		return fmt.Errorf("record the archived day: %w", err)
	}
	return nil
}

// ArchivedDays returns the days the archive holds, newest first.
func ArchivedDays(ctx context.Context, db Querier) ([]ArchivedDay, error) {
	return archivedDays(ctx, db, `SELECT day::timestamp AT TIME ZONE 'UTC', provider, count, sha256, object, archived_at
		FROM hookgate_archive ORDER BY day DESC, provider`)
}

// ArchivedDaysOn returns what the archive recorded of a day, by provider.
func ArchivedDaysOn(ctx context.Context, db Querier, day time.Time) ([]ArchivedDay, error) {
	return archivedDays(ctx, db, `SELECT day::timestamp AT TIME ZONE 'UTC', provider, count, sha256, object, archived_at
		FROM hookgate_archive WHERE day = $1 ORDER BY provider`, day)
}

// ArchivedDayOf returns what the archive recorded of a provider's day, or
// nil when it holds none.
func ArchivedDayOf(ctx context.Context, db Querier, provider string, day time.Time) (*ArchivedDay, error) {
	days, err := archivedDays(ctx, db, `SELECT day::timestamp AT TIME ZONE 'UTC', provider, count, sha256, object, archived_at
		FROM hookgate_archive WHERE provider = $1 AND day = $2`, provider, day)
	if err != nil || len(days) == 0 {
		return nil, err
	}
	return &days[0], nil
}

// archivedDays reads rows of hookgate_archive.
func archivedDays(ctx context.Context, db Querier, sql string, args ...any) ([]ArchivedDay, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read the archive: %w", err)
	}
	days, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ArchivedDay, error) {
		var a ArchivedDay
		err := row.Scan(&a.Day, &a.Provider, &a.Count, &a.SHA256, &a.Object, &a.ArchivedAt)
		a.Day = a.Day.UTC()
		a.Date = a.Day.Format(time.DateOnly)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the archive: %w", err)
	}
	return days, nil
}

// RestoredReceipt is a receipt as a restore inserts it: as it was stored,
// with a new expiry.
type RestoredReceipt struct {
	Receipt
	// Keys are its search keys, read again from its body.
	Keys []KeyValue
}

// RestoreTx inserts, in tx, the receipts rs (each unless its key is taken)
// with their search keys and the dispatch rows ds (each unless taken; with no
// River job: what they did is history), rs expiring retention after now. It
// returns how many receipts it inserted.
func RestoreTx(ctx context.Context, tx pgx.Tx, rs []RestoredReceipt, ds []EventDispatch, retention time.Duration) (int, error) {
	tag, err := tx.Exec(ctx, `
		INSERT INTO hookgate_receipts
			(provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256, received_at, expires_at)
		SELECT provider, scope, delivery_id, event, nullif(entity, ''), event_time, content_type, headers, body, body_sha256,
			received_at, now() + make_interval(secs => $12)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::jsonb[],
			$9::bytea[], $10::bytea[], $11::timestamptz[])
			AS t(provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256, received_at)
		ORDER BY provider, scope, delivery_id
		ON CONFLICT (provider, scope, delivery_id) DO NOTHING`,
		column(rs, func(r *RestoredReceipt) string { return r.Provider }),
		column(rs, func(r *RestoredReceipt) string { return r.Scope }),
		column(rs, func(r *RestoredReceipt) string { return r.DeliveryID }),
		column(rs, func(r *RestoredReceipt) string { return r.Event }),
		column(rs, func(r *RestoredReceipt) string { return r.Entity }),
		column(rs, func(r *RestoredReceipt) *time.Time { return nullTime(!r.EventTime.IsZero(), r.EventTime) }),
		column(rs, func(r *RestoredReceipt) string { return r.ContentType }),
		column(rs, func(r *RestoredReceipt) map[string]string { return r.Headers }),
		column(rs, func(r *RestoredReceipt) []byte { return r.Body }),
		column(rs, func(r *RestoredReceipt) []byte { return r.BodySHA256 }),
		column(rs, func(r *RestoredReceipt) time.Time { return r.ReceivedAt }),
		retention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("restore receipts: %w", err)
	}
	var keys [4][]string
	var at []time.Time
	for _, r := range rs {
		for _, k := range r.Keys {
			for i, v := range []string{r.Provider, r.DeliveryID, k.Name, k.Value} {
				keys[i] = append(keys[i], v)
			}
			at = append(at, r.ReceivedAt)
		}
	}
	if len(at) > 0 {
		if _, err := tx.Exec(ctx, `
			INSERT INTO hookgate_search_keys (provider, delivery_id, name, value, received_at)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
			ORDER BY 1, 2, 3 ON CONFLICT (provider, delivery_id, name) DO NOTHING`, keys[0], keys[1], keys[2], keys[3], at); err != nil {
			return 0, fmt.Errorf("restore search keys: %w", err)
		}
	}
	if len(ds) > 0 {
		if _, err := tx.Exec(ctx, `
			INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation, state, attempts, last_error, superseded_by, created_at, updated_at)
			SELECT provider, delivery_id, route, generation, state, attempts, last_error, nullif(superseded_by, ''), created_at, updated_at
			FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[], $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[])
				AS t(provider, delivery_id, route, generation, state, attempts, last_error, superseded_by, created_at, updated_at)
			ORDER BY provider, delivery_id, route, generation
			ON CONFLICT (provider, delivery_id, route, generation) DO NOTHING`,
			column(ds, func(d *EventDispatch) string { return d.Provider }),
			column(ds, func(d *EventDispatch) string { return d.DeliveryID }),
			column(ds, func(d *EventDispatch) string { return d.Route }),
			column(ds, func(d *EventDispatch) int { return d.Generation }),
			column(ds, func(d *EventDispatch) string { return d.State }),
			column(ds, func(d *EventDispatch) int { return d.Attempts }),
			column(ds, func(d *EventDispatch) *string { return d.LastError }),
			column(ds, func(d *EventDispatch) string { return d.SupersededBy }),
			column(ds, func(d *EventDispatch) time.Time { return d.CreatedAt }),
			column(ds, func(d *EventDispatch) time.Time { return d.UpdatedAt })); err != nil {
			return 0, fmt.Errorf("restore dispatches: %w", err)
		}
	}
	return int(tag.RowsAffected()), nil
}
