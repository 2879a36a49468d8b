package console

import (
	"context"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/store"
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

// withFailingRoutes returns the items with their failing routes
// (store.FailingRoutesOf: one statement for the page). Read it in the list's
// snapshot, so that the routes agree with the items' states.
func withFailingRoutes(ctx context.Context, db store.Querier, items []deliveries.Item) ([]deliveryRow, error) {
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
	res, err := store.FailingRoutesOf(ctx, db, store.FailingRoutesParams{Providers: providers, DeliveryIDs: ids, States: failingStates})
	if err != nil {
		return nil, err
	}
	for _, f := range res {
		found[key{f.Provider, f.DeliveryID, f.State}] = f.Routes
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
