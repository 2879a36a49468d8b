package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The console's own reads: the database's clock, and the failing routes of a
// page of the deliveries list.

// FailingRoutesParams selects the deliveries and states FailingRoutesOf reads.
type FailingRoutesParams struct {
	// Providers and DeliveryIDs are the deliveries, pairwise.
	Providers   []string
	DeliveryIDs []string
	// States are the failing states.
	States []string
}

// FailingRoutes are the routes of one delivery whose latest dispatch is in
// one state.
type FailingRoutes struct {
	Provider   string
	DeliveryID string
	State      string
	// Routes are by name.
	Routes []string
}

// FailingRoutesOf reads, for a page of deliveries, the routes whose latest
// dispatch is in one of p.States, by delivery and state: one statement for
// the page, not one per row, reading states as the list does (the view
// hookgate_dispatch_states). A delivery and state without such a route is
// left out.
func FailingRoutesOf(ctx context.Context, db Querier, p FailingRoutesParams) ([]FailingRoutes, error) {
	rows, err := db.Query(ctx, `
		SELECT provider, delivery_id, state, array_agg(route ORDER BY route)
		FROM (SELECT DISTINCT ON (d.provider, d.delivery_id, d.route) d.provider, d.delivery_id, d.route, d.live_state AS state
			FROM unnest($1::text[], $2::text[]) k(provider, delivery_id)
			JOIN hookgate_dispatch_states d ON d.provider = k.provider AND d.delivery_id = k.delivery_id
			ORDER BY d.provider, d.delivery_id, d.route, d.generation DESC) l
		WHERE state = ANY($3)
		GROUP BY provider, delivery_id, state`, p.Providers, p.DeliveryIDs, p.States)
	if err != nil {
		return nil, fmt.Errorf("failing routes: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailingRoutes, error) {
		var x FailingRoutes
		err := row.Scan(&x.Provider, &x.DeliveryID, &x.State, &x.Routes)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("failing routes: %w", err)
	}
	return found, nil
}
