package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/providers"
)

// InvalidDelivery is a delivery whose payload failed its event's schema.
type InvalidDelivery struct {
	Provider, DeliveryID string
	Error                providers.SchemaError
}

// InsertSchemaErrorsTx records why each delivery of ds failed its schema,
// unless its event has a row already. One statement.
func InsertSchemaErrorsTx(ctx context.Context, tx pgx.Tx, ds []InvalidDelivery) error {
	if len(ds) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO hookgate_schema_errors (provider, delivery_id, schema, path, rule, message)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
		ON CONFLICT DO NOTHING`,
		column(ds, func(d *InvalidDelivery) string { return d.Provider }),
		column(ds, func(d *InvalidDelivery) string { return d.DeliveryID }),
		column(ds, func(d *InvalidDelivery) string { return d.Error.Schema }),
		column(ds, func(d *InvalidDelivery) string { return d.Error.Path }),
		column(ds, func(d *InvalidDelivery) string { return d.Error.Rule }),
		column(ds, func(d *InvalidDelivery) string { return d.Error.Message }))
	if err != nil {
		return fmt.Errorf("insert schema errors: %w", err)
	}
	return nil
}

// DeleteSchemaErrorTx deletes an event's schema error: its payload passed
// its schemas again, and it is being dispatched.
func DeleteSchemaErrorTx(ctx context.Context, tx pgx.Tx, provider, deliveryID string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM hookgate_schema_errors WHERE provider = $1 AND delivery_id = $2`, provider, deliveryID); err != nil {
		return fmt.Errorf("delete schema error: %w", err)
	}
	return nil
}

// SchemaErrorOf returns why an event failed its schema, or nil when it did
// not (or passed it again since).
func SchemaErrorOf(ctx context.Context, db Querier, provider, deliveryID string) (*providers.SchemaError, error) {
	var e providers.SchemaError
	err := db.QueryRow(ctx, `SELECT schema, path, rule, message FROM hookgate_schema_errors WHERE provider = $1 AND delivery_id = $2`,
		provider, deliveryID).Scan(&e.Schema, &e.Path, &e.Rule, &e.Message)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read schema error: %w", err)
	}
	return &e, nil
}
