package routes

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/notify"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// A paused route's River queue resumed outside the gateway (River UI) is
// paused again; one whose route an operator resumed after the guard read
// the routes' states is left running.
func TestRepauseFollowsTheRoutesPauseAsItIsNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	table := fanout.Table{{Name: "r", Matches: []fanout.Match{{Provider: "github", Pattern: "push"}}, Target: "http://127.0.0.1:1/"}}
	if err := Sync(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(pool, table, client, slog.New(slog.DiscardHandler))
	queuePaused := func() bool {
		t.Helper()
		q, err := client.QueueGet(ctx, table[0].Queue())
		if err != nil {
			t.Fatal(err)
		}
		return q.PausedAt != nil
	}
	if _, err := Pause(ctx, pool, client, table, "r", Change{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	stale := map[string]state{"r": {paused: true}}

	if err := client.QueueResume(ctx, table[0].Queue(), nil); err != nil { // River UI
		t.Fatal(err)
	}
	if err := g.repause(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if !queuePaused() {
		t.Fatal("a paused route's queue resumed in River UI was not paused again")
	}

	if _, err := Resume(ctx, pool, client, table, "r", Change{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := g.repause(ctx, stale); err != nil { // the states it read before the resume
		t.Fatal(err)
	}
	if queuePaused() {
		t.Fatal("a route resumed after the guard read its state had its queue paused again")
	}
}

// A route's circuit that opens is told once, when it opens; a route
// without a circuit whose last notify.FailingAfter attempts failed is told
// failing, from then on each failure (the notifier keeps it to once in 10
// minutes); a success starts the count again.
func TestGuardTellsOfCircuitsAndFailingRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	m := []fanout.Match{{Provider: "github", Pattern: "push"}}
	table := fanout.Table{
		{Name: "guarded", Matches: m, Target: "http://127.0.0.1:1/", Circuit: fanout.Circuit{Failures: 3, Cooldown: time.Minute}},
		{Name: "bare", Matches: m, Target: "http://127.0.0.1:1/"},
	}
	if err := Sync(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	g := NewGuard(pool, table, nil, slog.New(slog.DiscardHandler))
	var heard []string
	g.Events = func(e notify.Event) { heard = append(heard, fmt.Sprintf("%s %s %d", e.Type, e.Route, e.Count)) }
	for range 3 {
		g.Done(ctx, table[0], Ticket{}, Failed, "503 from the target")
	}
	for range notify.FailingAfter + 1 {
		g.Done(ctx, table[1], Ticket{}, Failed, "connection refused")
	}
	g.Done(ctx, table[1], Ticket{}, Succeeded, "")
	g.Done(ctx, table[1], Ticket{}, Failed, "connection refused")
	want := []string{"route.circuit_opened guarded 3", "route.failing bare 5", "route.failing bare 6"}
	if !slices.Equal(heard, want) {
		t.Errorf("heard %q, want %q", heard, want)
	}
}
