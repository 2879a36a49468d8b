package yield_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/yield"
)

// While ingest is busy only the trickle runs, and a held dispatch goes on as
// soon as ingest is idle, a trickle slot frees, or its wait is up; while
// ingest is idle nothing is held.
func TestGateHoldsDispatchesWhileIngestIsBusy(t *testing.T) {
	var busy atomic.Bool
	g := &yield.Gate{Busy: busy.Load, Trickle: 1, Poll: time.Millisecond}
	ctx := context.Background()
	forever := time.Now().Add(time.Hour)

	g.Enter(ctx, forever)() // idle: at once
	busy.Store(true)
	first := g.Enter(ctx, forever) // busy: the trickle's one slot
	entered := make(chan func())
	go func() { entered <- g.Enter(ctx, forever) }()
	select {
	case <-entered:
		t.Fatal("a second dispatch ran beside the trickle's one while ingest was busy")
	case <-time.After(50 * time.Millisecond):
	}
	if g.Waiting() != 1 {
		t.Fatalf("Waiting = %d, want 1", g.Waiting())
	}
	first() // the slot frees: the held one takes it
	second := <-entered
	go func() { entered <- g.Enter(ctx, forever) }()
	time.Sleep(20 * time.Millisecond)
	busy.Store(false) // ingest idle: the held one goes on
	select {
	case third := <-entered:
		third()
	case <-time.After(time.Second):
		t.Fatal("a held dispatch stayed held after ingest went idle")
	}
	second()

	// A dispatch is never held past its bound, nor past its context.
	busy.Store(true)
	blocker := g.Enter(ctx, forever)
	t0 := time.Now()
	g.Enter(ctx, time.Now().Add(30*time.Millisecond))()
	if waited := time.Since(t0); waited < 30*time.Millisecond || waited > time.Second {
		t.Errorf("held %s, want about 30 ms", waited)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	g.Enter(cctx, forever)()
	blocker()
	if g.Held() != 4 || g.Waiting() != 0 {
		t.Errorf("Held = %d, Waiting = %d; want 4 and 0", g.Held(), g.Waiting())
	}

	var none *yield.Gate
	none.Enter(ctx, forever)() // a nil gate holds nothing
}
