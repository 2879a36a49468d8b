// Package yield makes forwarding yield to acknowledgements. A sender waits
// for its acknowledgement (GitHub gives up after 10 s and never retries); a
// forward target waits for nothing. When both compete for the machine, the
// dispatches of this process hold back while deliveries are waiting for their
// commit, except a few (the trickle) so that forwarding never stops, and go
// on at full speed as soon as ingest is idle. A dispatch held back holds no
// database connection and no lease: it waits before its first read.
package yield

import (
	"context"
	"sync/atomic"
	"time"
)

// Gate holds dispatches back while ingest is busy.
type Gate struct {
	// Busy reports whether deliveries are waiting for their
	// acknowledgement's commit in this process.
	Busy func() bool
	// Trickle is how many dispatches may run at once while Busy; at least 1.
	Trickle int
	// Poll is how often a held dispatch looks again. Defaults to 5 ms.
	Poll time.Duration

	slots   atomic.Int64 // dispatches running in the trickle
	waiting atomic.Int64
	held    atomic.Int64
}

// Enter returns when the dispatch may run: at once while ingest is idle or a
// trickle slot is free; else when either becomes so, when until has passed
// (a dispatch is never held longer: nothing starves), or when ctx ends. The
// dispatch calls release when done. A nil Gate never holds.
func (g *Gate) Enter(ctx context.Context, until time.Time) (release func()) {
	if g == nil || g.Busy == nil || !g.Busy() {
		return func() {}
	}
	if r, ok := g.take(); ok {
		return r
	}
	g.held.Add(1)
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	poll := g.Poll
	if poll <= 0 {
		poll = 5 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return func() {}
		case now := <-t.C:
			if !g.Busy() || !now.Before(until) {
				return func() {}
			}
			if r, ok := g.take(); ok {
				return r
			}
		}
	}
}

// take takes a trickle slot when one is free.
func (g *Gate) take() (release func(), ok bool) {
	limit := int64(max(g.Trickle, 1))
	for {
		n := g.slots.Load()
		if n >= limit {
			return nil, false
		}
		if g.slots.CompareAndSwap(n, n+1) {
			var once atomic.Bool
			return func() {
				if once.CompareAndSwap(false, true) {
					g.slots.Add(-1)
				}
			}, true
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
