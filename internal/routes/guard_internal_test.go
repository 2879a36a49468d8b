package routes

import (
	"context"
	"log/slog"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/fanout"
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
