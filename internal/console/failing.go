package console

import (
	"context"
	"fmt"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
)

// failingStates are the states whose routes the deliveries list names, in
// the summary's order: what an operator has to look at.
var failingStates = []string{dispatch.Discarded, dispatch.Retrying}

// deliveryRow is one delivery of the list, with its failing routes.
type deliveryRow struct {
	deliveries.Item
	// Failing are the routes whose latest dispatch is in a failing state,
	// by state in failingStates' order; a delivery's State is then the
	// first one's.
	Failing []failingRoutes
}

type failingRoutes struct {
	State  string
	Routes []string
}

// failingRoutesSQL reads, for a page of deliveries ($1 providers and $2 ids,
// pairwise), the routes whose latest dispatch is in one of the states $3, by
// delivery and state: one statement for the page, not one per row, reading
// states as the list does (the view hookgate_dispatch_states).
var failingRoutesSQL = `
	SELECT provider, delivery_id, state, array_agg(route ORDER BY route)
	FROM (SELECT DISTINCT ON (d.provider, d.delivery_id, d.route) d.provider, d.delivery_id, d.route, d.live_state AS state
		FROM unnest($1::text[], $2::text[]) k(provider, delivery_id)
		JOIN hookgate_dispatch_states d ON d.provider = k.provider AND d.delivery_id = k.delivery_id
		ORDER BY d.provider, d.delivery_id, d.route, d.generation DESC) l
	WHERE state = ANY($3)
	GROUP BY provider, delivery_id, state`

// withFailingRoutes returns the items with their failing routes. Read it in
// the list's snapshot, so that the routes agree with the items' states.
func withFailingRoutes(ctx context.Context, db deliveries.DB, items []deliveries.Item) ([]deliveryRow, error) {
	rows := make([]deliveryRow, len(items))
	var providers, ids []string
	for i, it := range items {
		rows[i].Item = it
		if it.State == dispatch.Discarded || it.State == dispatch.Retrying {
			providers, ids = append(providers, it.Provider), append(ids, it.DeliveryID)
		}
	}
	if len(ids) == 0 {
		return rows, nil
	}
	type key struct{ provider, id, state string }
	found := map[key][]string{}
	res, err := db.Query(ctx, failingRoutesSQL, providers, ids, failingStates)
	if err != nil {
		return nil, fmt.Errorf("failing routes: %w", err)
	}
	for res.Next() {
		var k key
		var routes []string
		if err := res.Scan(&k.provider, &k.id, &k.state, &routes); err != nil {
			res.Close()
			return nil, fmt.Errorf("failing routes: %w", err)
		}
		found[k] = routes
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("failing routes: %w", err)
	}
	for i := range rows {
		for _, st := range failingStates {
			if routes := found[key{rows[i].Provider, rows[i].DeliveryID, st}]; routes != nil {
				rows[i].Failing = append(rows[i].Failing, failingRoutes{State: st, Routes: routes})
			}
		}
	}
	return rows, nil
}
