// Package yield makes forwarding yield to acknowledgements. A sender waits
// for its acknowledgement (GitHub gives up after 10 s and never retries); a
// forward target waits for nothing. When both compete for the machine (ingest
// is busy: enough deliveries wait for their acknowledgement, ingest.Load), the
// dispatches of this process hold back, except a share of them paced by the
// acknowledgements given (one dispatch per five acknowledgements, say), so
// that forwarding never stops and its rate grows with the load's; they go on
// at full speed as soon as ingest is idle, and the backlog left drains then.
// A dispatch held back holds no database connection and no lease: it waits
// before its first read.
package yield

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Gate holds dispatches back while ingest is busy. Held dispatches sleep
// until they are woken: one for each dispatch earned by acknowledgements, all
// of them once ingest is idle, or each by its bound. Only one of them at a
// time looks at busy, every Poll (the others look every 50 ms whether one
// still does); ingest counts as idle when it saw busy false twice in a row
// (under load busy is false for a moment each time a batch's senders get
// their answers).
type Gate struct {
	busy  func() bool
	share float64
	poll  time.Duration

	credits  atomic.Int64 // thousandths of a dispatch earned by Acked
	waiting  atomic.Int64
	held     atomic.Int64
	watching atomic.Bool // a held dispatch is looking at busy every poll

	one  chan struct{} // wakes one held dispatch: a dispatch was earned
	mu   sync.Mutex
	idle chan struct{} // closed (and replaced) to wake all: ingest is idle
}

// Config are a Gate's settings.
type Config struct {
	// Share is how many dispatches each acknowledgement lets go on while
	// ingest is busy: 0.2 lets one forward go per five acknowledgements.
	// Zero holds every dispatch until ingest is idle or its bound.
	Share float64
	// Poll is how often the held dispatch that watches ingest looks at
	// busy. Defaults to 5 ms.
	Poll time.Duration
}

// NewGate returns a Gate that holds dispatches back while busy reports
// ingest under load in this process (the ingester's: enough deliveries wait
// for their acknowledgement).
func NewGate(busy func() bool, cfg Config) *Gate {
	if cfg.Poll <= 0 {
		cfg.Poll = 5 * time.Millisecond
	}
	return &Gate{busy: busy, share: cfg.Share, poll: cfg.Poll, one: make(chan struct{}, 1), idle: make(chan struct{})}
}

// Never returns a Gate that never holds a dispatch: ingest is never busy to
// it, and acknowledgements earn nothing. For a dispatch worker with no ingest
// beside it to yield to (tests).
func Never() *Gate { return NewGate(func() bool { return false }, Config{}) }

// maxCredits bounds the dispatches earned and not yet taken, in thousandths:
// a burst of acknowledgements with no dispatch waiting saves up no flood.
const maxCredits = 64_000

// unwatched is how long a held dispatch sleeps before it looks whether one of
// them watches ingest (the watcher may have gone on).
const unwatched = 50 * time.Millisecond

// Acked says an acknowledgement was given: it earns Share of a dispatch, and
// wakes a held dispatch when one is earned.
func (g *Gate) Acked() {
	if g.share <= 0 {
		return
	}
	earned := int64(g.share * 1000)
	for {
		n := g.credits.Load()
		if g.credits.CompareAndSwap(n, min(n+earned, maxCredits)) {
			break
		}
	}
	if g.waiting.Load() > 0 {
		g.wakeOne()
	}
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

// wakeAll wakes every held dispatch: ingest is idle.
func (g *Gate) wakeAll() {
	g.mu.Lock()
	close(g.idle)
	g.idle = make(chan struct{})
	g.mu.Unlock()
}

// Enter returns when the dispatch may run: at once while ingest is idle or a
// dispatch is earned; else when either becomes so, when until has passed (a
// dispatch is never held longer: nothing starves), or when ctx ends.
func (g *Gate) Enter(ctx context.Context, until time.Time) {
	if !g.busy() || g.take() {
		return
	}
	g.held.Add(1)
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	t := time.NewTimer(g.poll)
	defer t.Stop()
	idleSeen := false // the watcher's last look saw busy false
	for {
		g.mu.Lock()
		idle := g.idle
		g.mu.Unlock()
		// Looked at after counting itself waiting and taking the channel,
		// so that a dispatch earned before is not missed.
		if g.take() {
			g.wakeOne()
			return
		}
		left := time.Until(until)
		if left <= 0 {
			return
		}
		watcher := g.watching.CompareAndSwap(false, true)
		wait := unwatched
		if watcher {
			wait = g.poll
		}
		t.Reset(min(wait, left))
		looked := false // the watcher's Poll has passed: time to look at ingest
		select {
		case <-ctx.Done():
			g.wakeOne() // a wake-up it may have been sent goes to another
		case <-idle:
		case <-g.one:
		case <-t.C:
			looked = watcher
		}
		if watcher {
			g.watching.Store(false)
		}
		if ctx.Err() != nil || isClosed(idle) {
			return
		}
		if !watcher {
			idleSeen = false
		} else if looked {
			busy := g.busy()
			if !busy && idleSeen {
				g.wakeAll()
				return
			}
			idleSeen = !busy
		}
	}
}

// isClosed reports whether c is closed.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
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
	return int(g.waiting.Load())
}

// Held is how many dispatches have been held back so far.
func (g *Gate) Held() int64 {
	return g.held.Load()
}
