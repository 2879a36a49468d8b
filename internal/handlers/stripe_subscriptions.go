package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StripeSubscriptions is builtin:stripe-subscriptions, the reference for
// writing handlers. It keeps hookgate_stripe_subscriptions: the latest status of
// each Stripe subscription, from customer.subscription.* events.
//
// It shows the three habits a handler needs:
//   - it writes only through tx, so its effect commits with the dispatch's
//     success and the job's completion, exactly once;
//   - it is safe against order: the route's watermark already keeps an older
//     event from running after a newer one, and the upsert's WHERE keeps the
//     newest event even if two routes feed the same table;
//   - it returns an error for what a retry may fix and ignores, with nil, the
//     events it does not handle.
func StripeSubscriptions() Handler {
	return func(ctx context.Context, tx pgx.Tx, d Delivery) error {
		if d.Provider != "stripe" || !strings.HasPrefix(d.Event, "customer.subscription.") {
			return nil
		}
		var ev struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Created int64  `json:"created"`
			Data    struct {
				Object struct {
					ID       string `json:"id"`
					Customer string `json:"customer"`
					Status   string `json:"status"`
				} `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(d.Body, &ev); err != nil {
			return fmt.Errorf("decode subscription event: %w", err)
		}
		sub := ev.Data.Object
		if sub.ID == "" || sub.Status == "" {
			return fmt.Errorf("subscription event %s has no data.object id or status", ev.ID)
		}
		var customer *string
		if sub.Customer != "" {
			customer = &sub.Customer
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO hookgate_stripe_subscriptions AS s
				(subscription_id, customer_id, status, event_id, event_type, event_created)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (subscription_id) DO UPDATE SET
				customer_id = excluded.customer_id, status = excluded.status, event_id = excluded.event_id,
				event_type = excluded.event_type, event_created = excluded.event_created,
				updates = s.updates + 1, updated_at = now()
			WHERE s.event_created <= excluded.event_created`,
			sub.ID, customer, sub.Status, ev.ID, ev.Type, time.Unix(ev.Created, 0).UTC())
		if err != nil {
			return fmt.Errorf("upsert subscription: %w", err)
		}
		return nil
	}
}
