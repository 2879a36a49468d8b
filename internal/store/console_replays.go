package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ReplaySelection is what a replay of the replay log (hookgate_replays)
// selected: its filter as stored, and how many deliveries matched it.
type ReplaySelection struct {
	ReplayID string
	// Filter is the replay's filter, JSON.
	Filter     []byte
	Deliveries int
}

// ReplaySelectionsOf reads what the replays replayIDs selected, for a page of
// the console's audit log: one statement for the page, not one per replay. A
// replay the log does not have is left out.
func ReplaySelectionsOf(ctx context.Context, db Querier, replayIDs []string) ([]ReplaySelection, error) {
	rows, err := db.Query(ctx, `SELECT replay_id, filter, deliveries FROM hookgate_replays WHERE replay_id = ANY($1)`, replayIDs)
	if err != nil {
		return nil, fmt.Errorf("bulk replays: %w", err)
	}
	selections, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReplaySelection, error) {
		var x ReplaySelection
		err := row.Scan(&x.ReplayID, &x.Filter, &x.Deliveries)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("bulk replays: %w", err)
	}
	return selections, nil
}
