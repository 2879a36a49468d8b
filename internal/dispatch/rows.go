package dispatch

import (
	"context"
	"fmt"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/receipts"
)

// Latest is the newest generation of one route's dispatch of an event, with
// its live state.
type Latest struct {
	Generation int
	State      string
}

// LatestTx returns, by route, the latest dispatch of the event (provider,
// deliveryID) on each of routes that has one.
func LatestTx(ctx context.Context, db receipts.DBTX, provider, deliveryID string, routes []string) (map[string]Latest, error) {
	rows, err := db.Query(ctx, `
		SELECT DISTINCT ON (d.route) d.route, d.generation, `+deliveries.StateSQL+`
		FROM hookgate_dispatches d LEFT JOIN river_job j ON j.id = d.job_id
		WHERE d.provider = $1 AND d.delivery_id = $2 AND d.route = ANY($3)
		ORDER BY d.route, d.generation DESC`, provider, deliveryID, routes)
	if err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	last := map[string]Latest{}
	for rows.Next() {
		var route string
		var l Latest
		if err := rows.Scan(&route, &l.Generation, &l.State); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read dispatches: %w", err)
		}
		last[route] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	return last, nil
}
