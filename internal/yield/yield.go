// Package yield makes forwarding yield to acknowledgements. A sender waits
// for its acknowledgement (GitHub gives up after 10 s and never retries); a
// forward target waits for nothing. When both compete for the machine, the
// dispatches of this process hold back while deliveries are waiting for their
// commit, except a share of them paced by the acknowledgements given (one
// dispatch per five acknowledgements, say), so that forwarding never stops
// and keeps pace with the load whatever its size; they go on at full speed as
// soon as ingest is idle. A dispatch held back holds no database connection
// and no lease: it waits before its first read.
package yield

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Gate holds dispatches back while ingest is busy. A held dispatch sleeps
// until it is woken: by an acknowledgement that earns it (one held dispatch
// is woken per dispatch earned), by the acknowledgement after which ingest is
// idle (all are woken), or by its bound; it does not poll in between.
type Gate struct {
	// Busy reports whether deliveries are waiting for their
	// acknowledgement's commit in this process. Acked must be called after
	// each change of Busy to false for held dispatches to go on at once.
	Busy func() bool
	// Share is how many dispatches each acknowledgement lets go on while
	// Busy: 0.2 lets one forward go per five acknowledgements. Zero holds
	// every dispatch until ingest is idle or its bound.
	Share float64
	// Poll is how often a held dispatch looks again without being woken, in
	// case Busy turned false without Acked. Defaults to 50 ms.
	Poll time.Duration

	credits atomic.Int64 // thousandths of a dispatch earned by Acked
	waiting atomic.Int64
	held    atomic.Int64

	once sync.Once
	one  chan struct{} // wakes one held dispatch: a dispatch was earned
	mu   sync.Mutex
	idle chan struct{} // closed (and replaced) to wake all: ingest is idle
}

// maxCredits bounds the dispatches earned and not yet taken, in thousandths:
// a burst of acknowledgements with no dispatch waiting saves up no flood.
const maxCredits = 64_000

func (g *Gate) init() {
	g.once.Do(func() {
		g.one = make(chan struct{}, 1)
		g.idle = make(chan struct{})
	})
}

// Acked says an acknowledgement was given: it earns Share of a dispatch, and
// wakes a held dispatch when one is earned, or all of them when ingest is now
// idle. Safe on a nil Gate.
func (g *Gate) Acked() {
	if g == nil {
		return
	}
	if g.Share > 0 {
		earned := int64(g.Share * 1000)
		for {
			n := g.credits.Load()
			if g.credits.CompareAndSwap(n, min(n+earned, maxCredits)) {
				break
			}
		}
	}
	if g.waiting.Load() == 0 {
		return
	}
	g.init()
	if g.Busy == nil || !g.Busy() {
		g.mu.Lock()
		close(g.idle)
		g.idle = make(chan struct{})
		g.mu.Unlock()
		return
	}
	g.wakeOne()
}

// wakeOne wakes one held dispatch when a dispatch is earned.
func (g *Gate) wakeOne() {
	if g.credits.Load() >= 1000 && g.waiting.Load() > 0 {
		select {
		case g.one <- struct{}{}:
		default: // one is being woken already
		}
	}
}

// Enter returns when the dispatch may run: at once while ingest is idle or a
// dispatch is earned; else when either becomes so, when until has passed (a
// dispatch is never held longer: nothing starves), or when ctx ends. A nil
// Gate never holds.
func (g *Gate) Enter(ctx context.Context, until time.Time) {
	if g == nil || g.Busy == nil || !g.Busy() || g.take() {
		return
	}
	g.init()
	g.held.Add(1)
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	poll := g.Poll
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	for {
		g.mu.Lock()
		idle := g.idle
		g.mu.Unlock()
		// Looked at again after counting itself waiting and taking the
		// channel, so that a wake-up sent before is not missed.
		if !g.Busy() || g.take() {
			g.wakeOne()
			return
		}
		left := time.Until(until)
		if left <= 0 {
			return
		}
		t.Reset(min(poll, left))
		select {
		case <-ctx.Done():
			return
		case <-idle:
			return
		case <-g.one:
		case <-t.C:
		}
	}
}

// take takes one earned dispatch, if there is one.
func (g *Gate) take() bool {
	for {
		n := g.credits.Load()
		if n < 1000 {
			return false
		}
		if g.credits.CompareAndSwap(n, n-1000) {
			return true
		}
	}
}

// Waiting is how many dispatches are held back now.
func (g *Gate) Waiting() int {
	if g == nil {
		return 0
	}
	return int(g.waiting.Load())
}

// Held is how many dispatches have been held back so far.
func (g *Gate) Held() int64 {
	if g == nil {
		return 0
	}
	return g.held.Load()
}
