package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimNotification claims the send of a notification's event about a
// subject (a route, a provider) unless one was claimed less than every ago,
// and reports whether it did.
func ClaimNotification(ctx context.Context, db Querier, notification, event, subject string, every time.Duration) (bool, error) {
	var one int
	err := db.QueryRow(ctx, `
		INSERT INTO hookgate_notifications_sent AS s (notification, event, subject, sent_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (notification, event, subject) DO UPDATE SET sent_at = now()
		WHERE s.sent_at <= now() - make_interval(secs => $4)
		RETURNING 1`, notification, event, subject, every.Seconds()).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim a notification: %w", err)
	}
	return true, nil
}
