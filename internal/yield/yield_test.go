package yield_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/yield"
)

// While ingest is idle nothing is held; while it is busy a dispatch waits
// until an acknowledgement earns it, ingest goes idle, its wait is up or its
// context ends.
func TestGateHoldsDispatchesWhileIngestIsBusy(t *testing.T) {
	var busy atomic.Bool
	g := yield.NewGate(busy.Load, yield.Config{Share: 0.5, Poll: time.Millisecond})
	ctx := context.Background()
	forever := time.Now().Add(time.Hour)

	g.Enter(ctx, forever) // idle: at once
	busy.Store(true)
	entered := make(chan struct{})
	go func() { g.Enter(ctx, forever); entered <- struct{}{} }()
	select {
	case <-entered:
		t.Fatal("a dispatch went on while ingest was busy and nothing was acknowledged")
	case <-time.After(50 * time.Millisecond):
	}
	if g.Waiting() != 1 {
		t.Fatalf("Waiting = %d, want 1", g.Waiting())
	}
	busy.Store(false) // ingest idle: the held one goes on
	select {
	case <-entered:
	case <-time.After(time.Second):
		t.Fatal("a held dispatch stayed held after ingest went idle")
	}

	// A dispatch is never held past its bound, nor past its context.
	busy.Store(true)
	t0 := time.Now()
	g.Enter(ctx, time.Now().Add(30*time.Millisecond))
	if waited := time.Since(t0); waited < 30*time.Millisecond || waited > time.Second {
		t.Errorf("held %s, want about 30 ms", waited)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	g.Enter(cctx, forever)
	if g.Held() != 3 || g.Waiting() != 0 {
		t.Errorf("Held = %d, Waiting = %d; want 3 and 0", g.Held(), g.Waiting())
	}

	never := yield.Never()
	never.Enter(ctx, forever) // holds nothing
	never.Acked()
	if never.Held() != 0 {
		t.Errorf("Never held %d dispatches", never.Held())
	}
}

// Forwarding keeps pace with acknowledgements while ingest is busy: each
// acknowledgement earns Share of a dispatch, and a held dispatch goes on once
// one is earned.
func TestGateSharesAcknowledgements(t *testing.T) {
	g := yield.NewGate(func() bool { return true }, yield.Config{Share: 0.5, Poll: time.Hour})
	ctx := context.Background()
	entered := make(chan struct{})
	go func() { g.Enter(ctx, time.Now().Add(time.Hour)); close(entered) }()
	g.Acked()
	select {
	case <-entered:
		t.Fatal("a dispatch went on after half an earned dispatch")
	case <-time.After(30 * time.Millisecond):
	}
	g.Acked()
	select {
	case <-entered:
	case <-time.After(time.Second):
		t.Fatal("two acknowledgements at a share of 0.5 earned no dispatch")
	}
	// Earnings are bounded: a long burst with nothing waiting saves up 64
	// dispatches, no flood.
	for range 1000 {
		g.Acked()
	}
	for i := range 64 {
		t0 := time.Now()
		g.Enter(ctx, time.Now().Add(time.Hour))
		if time.Since(t0) > 500*time.Millisecond {
			t.Fatalf("dispatch %d waited with dispatches earned", i+1)
		}
	}
	if g.Held() != 1 {
		t.Fatalf("Held = %d, want 1 (only the first, before anything was earned)", g.Held())
	}
	held := make(chan struct{})
	go func() { g.Enter(ctx, time.Now().Add(100*time.Millisecond)); close(held) }()
	select {
	case <-held:
		t.Fatal("the 65th dispatch went on: more than 64 were saved up")
	case <-time.After(50 * time.Millisecond):
	}
	<-held // its bound
}

// Each dispatch earned wakes one held dispatch, not all of them, and ingest
// found idle wakes every one.
func TestGateWakesOnePerDispatchEarnedAndAllWhenIdle(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	g := yield.NewGate(busy.Load, yield.Config{Share: 1, Poll: time.Millisecond})
	ctx := context.Background()
	entered := make(chan int, 3)
	for i := range 3 {
		go func() { g.Enter(ctx, time.Now().Add(time.Hour)); entered <- i }()
	}
	dbtest.Eventually(t, time.Second, "three dispatches held", func() error {
		if n := g.Waiting(); n != 3 {
			return fmt.Errorf("%d held", n)
		}
		return nil
	})
	g.Acked() // one dispatch earned
	select {
	case <-entered:
	case <-time.After(time.Second):
		t.Fatal("an earned dispatch woke no held one")
	}
	select {
	case <-entered:
		t.Fatal("one dispatch earned let two go on")
	case <-time.After(50 * time.Millisecond):
	}
	busy.Store(false)
	for range 2 {
		select {
		case <-entered:
		case <-time.After(time.Second):
			t.Fatal("a held dispatch stayed held after ingest went idle")
		}
	}
}

// Under load Busy is false for a moment between batches (a batch's senders
// have their answers and have not sent again): one such look is not idle.
func TestGateHoldsThroughAMomentWithoutSenders(t *testing.T) {
	var looks, idleFrom atomic.Int64
	idleFrom.Store(1 << 62)
	busy := func() bool {
		n := looks.Add(1)
		return n != 3 && n < idleFrom.Load() // the third look alone sees no sender
	}
	g := yield.NewGate(busy, yield.Config{Poll: time.Millisecond})
	entered := make(chan struct{})
	go func() { g.Enter(context.Background(), time.Now().Add(time.Hour)); close(entered) }()
	dbtest.Eventually(t, time.Second, "ten looks at ingest", func() error {
		if n := looks.Load(); n <= 10 {
			return fmt.Errorf("%d looks", n)
		}
		return nil
	})
	select {
	case <-entered:
		t.Fatal("one look without a sender let a held dispatch go on")
	default:
	}
	idleFrom.Store(looks.Load())
	select {
	case <-entered:
	case <-time.After(time.Second):
		t.Fatal("a held dispatch stayed held once ingest stayed idle")
	}
}
