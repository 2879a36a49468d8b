package console

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/store"
)

// routeTimeline is one route's dispatches of a delivery, oldest generation
// first, each with what happened to it in time order.
type routeTimeline struct {
	Route       string
	Generations []generation
	// Replayable says a replay without force would re-dispatch it.
	Replayable bool
	// Retrying says its latest generation is retrying: "retry now" would
	// attempt it now.
	Retrying bool
}

type generation struct {
	Generation int
	State      string
	Attempts   int
	LastError  *string
	// SupersededBy is, for a superseded generation, the delivery id of the
	// newer event its route's target had accepted.
	SupersededBy string
	Events       []timelineEvent
}

// timelineEvent is one moment of a dispatch: created, an attempt that
// failed (from River's record of the job's errors), or where it ended.
type timelineEvent struct {
	At    time.Time
	What  string
	Error string
	Class string
}

// timeline reads a delivery's dispatches with their River jobs' errors. A
// job River has already cleaned away leaves the dispatch's own row: its
// creation, attempts, last error and last change.
func (c *Console) timeline(ctx context.Context, provider, id string) ([]routeTimeline, error) {
	ds, err := store.HistoryOf(ctx, c.Pool, provider, id)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	var out []routeTimeline
	for _, d := range ds {
		route, created, updated := d.Route, d.CreatedAt, d.UpdatedAt
		g := generation{Generation: d.Generation, State: d.State, Attempts: d.Attempts, LastError: d.LastError, SupersededBy: d.SupersededBy}
		g.Events = append(g.Events, timelineEvent{At: created, What: "created", Class: "s-pending"})
		for _, raw := range d.JobErrors {
			var e struct {
				At      time.Time `json:"at"`
				Attempt int       `json:"attempt"`
				Error   string    `json:"error"`
			}
			if json.Unmarshal([]byte(raw), &e) == nil {
				g.Events = append(g.Events, timelineEvent{At: e.At, What: fmt.Sprintf("attempt %d failed", e.Attempt), Error: e.Error, Class: "s-failed"})
			}
		}
		end := timelineEvent{At: updated, What: g.State, Class: "s-" + g.State}
		if g.State == dispatch.Discarded && g.LastError != nil {
			end.Error = *g.LastError
		}
		if g.State != dispatch.Pending || updated.After(created) {
			g.Events = append(g.Events, end)
		}
		sort.SliceStable(g.Events, func(i, j int) bool { return g.Events[i].At.Before(g.Events[j].At) })
		if n := len(out); n == 0 || out[n-1].Route != route {
			out = append(out, routeTimeline{Route: route})
		}
		last := &out[len(out)-1]
		last.Generations = append(last.Generations, g)
		last.Replayable = g.State == dispatch.Discarded || g.State == dispatch.Cancelled
		last.Retrying = g.State == dispatch.Retrying
	}
	return out, nil
}
