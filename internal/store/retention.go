package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ExpiredEvent is the event of a receipt that expiry deleted.
type ExpiredEvent struct {
	Provider   string
	DeliveryID string
}

// ExpireReceiptsTx deletes up to limit receipts past their expires_at, the
// oldest first, skipping those locked by another transaction and those
// whose event has a live dispatch (hookgate_live_dispatches): its receipt
// is what it will send, so it is kept however long the target has been
// down. Each deleted receipt's id (provider, scope, delivery id, event, body
// hash) is kept in hookgate_expired_ids until idRetention after its receipt,
// so that the delivery sent again is still recognised. It returns the
// events of the receipts deleted, one per receipt; in tx, with the deletion
// of the dispatches of the events left without a receipt.
//
// With onlyArchived, a receipt is deleted only once its (day, provider) is
// in the archive (hookgate_archive), archived after the last change of its
// event's dispatches (a replay, an outcome, since).
func ExpireReceiptsTx(ctx context.Context, tx pgx.Tx, limit int, idRetention time.Duration, onlyArchived bool) ([]ExpiredEvent, error) {
	// The receipt and the keeping of its id are one statement: at every
	// moment one of the two holds the key.
	rows, err := tx.Query(ctx, `
		WITH gone AS (
			DELETE FROM hookgate_receipts WHERE (provider, scope, delivery_id) IN (
				SELECT provider, scope, delivery_id FROM hookgate_receipts r
				WHERE expires_at < now() AND NOT EXISTS (
					SELECT 1 FROM hookgate_live_dispatches d WHERE d.provider = r.provider AND d.delivery_id = r.delivery_id)
				AND (NOT $3 OR EXISTS (SELECT 1 FROM hookgate_archive a
					WHERE a.day = (r.received_at AT TIME ZONE 'UTC')::date AND a.provider = r.provider
					AND NOT EXISTS (SELECT 1 FROM hookgate_dispatches d WHERE d.provider = r.provider
						AND d.delivery_id = r.delivery_id AND d.updated_at >= a.archived_at)))
				ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
			RETURNING provider, scope, delivery_id, event, body_sha256, received_at),
		kept AS (
			INSERT INTO hookgate_expired_ids AS e (provider, delivery_id, scope, event, body_sha256, received_at, expires_at)
			SELECT provider, delivery_id, scope, event, body_sha256, received_at, received_at + make_interval(secs => $2) FROM gone
			WHERE received_at + make_interval(secs => $2) > now()
			ON CONFLICT (provider, delivery_id, scope) DO UPDATE SET event = excluded.event, body_sha256 = excluded.body_sha256,
				received_at = excluded.received_at, expired_at = now(), expires_at = excluded.expires_at)
		SELECT provider, delivery_id FROM gone`, limit, idRetention.Seconds(), onlyArchived)
	if err != nil {
		return nil, fmt.Errorf("expire receipts: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ExpiredEvent, error) {
		var e ExpiredEvent
		err := row.Scan(&e.Provider, &e.DeliveryID)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("expire receipts: %w", err)
	}
	return events, nil
}

// DeleteOldRouteCounts deletes the routes' counts of minutes more than a
// day old.
func DeleteOldRouteCounts(ctx context.Context, db Querier) error {
	if _, err := db.Exec(ctx, "DELETE FROM hookgate_route_minutes WHERE minute < now() - interval '1 day'"); err != nil {
		return fmt.Errorf("delete old route counts: %w", err)
	}
	return nil
}

// DeleteExpiredIdempotencyKeys deletes the idempotency records past their
// expires_at.
func DeleteExpiredIdempotencyKeys(ctx context.Context, db Querier) error {
	if _, err := db.Exec(ctx, "DELETE FROM hookgate_idempotency WHERE expires_at < now()"); err != nil {
		return fmt.Errorf("delete expired idempotency keys: %w", err)
	}
	return nil
}

// DeleteExpiredIDs deletes up to limit of the ids of deleted receipts that
// are kept past their own expires_at, and returns how many it deleted.
func DeleteExpiredIDs(ctx context.Context, db Querier, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM hookgate_expired_ids WHERE (provider, delivery_id, scope) IN (
		SELECT provider, delivery_id, scope FROM hookgate_expired_ids WHERE expires_at < now() LIMIT $1)`, limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired ids: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DayOf is a UTC day of one provider's deliveries.
type DayOf struct {
	Day      time.Time
	Provider string
}

// DaysToArchive returns the (day, provider)s the archive lacks, or holds
// as they were before a dispatch of theirs changed (a replay, an outcome),
// whose every receipt has expired and none of whose events has a dispatch
// in progress: the days retention may archive, then delete. Oldest first.
func DaysToArchive(ctx context.Context, db Querier) ([]DayOf, error) {
	rows, err := db.Query(ctx, `
		WITH due AS (
			SELECT DISTINCT (received_at AT TIME ZONE 'UTC')::date AS day, provider FROM hookgate_receipts WHERE expires_at < now())
		SELECT due.day::timestamp AT TIME ZONE 'UTC', due.provider FROM due
		WHERE NOT EXISTS (
			-- archived, and nothing of it changed since
			SELECT 1 FROM hookgate_archive a WHERE a.day = due.day AND a.provider = due.provider
			AND NOT EXISTS (
				SELECT 1 FROM hookgate_receipts r JOIN hookgate_dispatches d ON d.provider = r.provider AND d.delivery_id = r.delivery_id
				WHERE r.provider = due.provider AND r.received_at >= due.day::timestamp AT TIME ZONE 'UTC'
					AND r.received_at < (due.day + 1)::timestamp AT TIME ZONE 'UTC' AND d.updated_at >= a.archived_at))
		AND NOT EXISTS (
			SELECT 1 FROM hookgate_receipts r
			WHERE r.provider = due.provider AND r.received_at >= due.day::timestamp AT TIME ZONE 'UTC'
				AND r.received_at < (due.day + 1)::timestamp AT TIME ZONE 'UTC'
				AND (r.expires_at >= now() OR EXISTS (
					SELECT 1 FROM hookgate_live_dispatches d WHERE d.provider = r.provider AND d.delivery_id = r.delivery_id)))
		ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("read the days to archive: %w", err)
	}
	days, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DayOf])
	if err != nil {
		return nil, fmt.Errorf("read the days to archive: %w", err)
	}
	return days, nil
}
