// Package yield makes forwarding yield to acknowledgements when the machine
// has no capacity to spare. A sender waits for its acknowledgement (GitHub
// gives up after 10 s and never retries); a forward target waits for nothing.
//
// The machine's capacity is its cores (Machine): while a core is free,
// ingest and forwarding do not compete, and every dispatch goes on at once,
// however many deliveries wait for their acknowledgement. When every core is
// taken and deliveries wait, ingest never waits: forwarding takes one
// dispatch per AcksPerDispatch acknowledgements given, so that it never stops
// and its rate follows the load's; the others hold back until a core is free
// or ingest is idle, and the backlog left drains then. A dispatch held back
// holds no database connection and no lease: it waits before its first read.
//
// Nothing polls: held dispatches are woken by acknowledgements (dispatches
// earned, and one for each acknowledgement that finds a core free) and by
// ingest going idle (all of them).
//
// Dispatches earned go in groups: they wake no held dispatch until Group are
// earned (or as many as are held, when fewer), and then that many go at
// once, in the order they were held, each with its own permission; a
// dispatch that arrives while others are held queues behind them. OnWake
// hears each group's size, so that the worker's batches of claims and of
// outcomes wait for the whole group: its forwards then share their round
// trips and statements, as they do when a backlog drains. Woken one at a
// time, each forward during a load paid a batch of its own, and cost twice
// what it costs in a drain.
package yield

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// AcksPerDispatch is how many acknowledgements earn one dispatch while the
// machine is full: forwarding gets at least a fifth of the acknowledged rate
// then, so a backlog grows by at most four fifths of it. It is a promise
// about the backlog, not a measure of a machine: a machine with a core free
// forwards at full speed.
const AcksPerDispatch = 5

// maxEarned bounds the dispatches earned and not yet taken: a burst of
// acknowledgements with no dispatch waiting saves up no flood.
const maxEarned = 64

// Group is how many earned dispatches wake held ones at once (fewer when
// fewer are held). At a fifth of 1,000 acknowledgements a second, a group
// is earned every 80 ms.
const Group = 16

// settle is how long ingest must stay without a delivery waiting before the
// held dispatches go on: under a closed loop of senders the count touches
// zero for a moment each time a batch's senders get their answers, and a
// sender sends again within a few hundred microseconds.
const settle = 5 * time.Millisecond

// Gate holds dispatches back while the machine is full and ingest has
// deliveries waiting for their acknowledgement. Ingest tells it of each
// delivery that arrives (Arrived) and of its acknowledgement (Acked).
type Gate struct {
	full func() bool // the machine has no core free: Machine.Full

	waitingAcks atomic.Int64 // deliveries arrived and not yet acknowledged
	acks        atomic.Int64 // acknowledgements, for AcksPerDispatch
	earned      atomic.Int64 // dispatches earned and not yet taken
	waiting     atomic.Int64 // dispatches held now
	held        atomic.Int64 // dispatches held so far

	one chan struct{} // a wake-up for one held dispatch each: dispatches were earned

	onWake atomic.Pointer[func(n int)] // hears how many held dispatches each wake-up sends on

	mu       sync.Mutex
	free     chan struct{} // closed (and replaced) to wake all: ingest idle
	settling *time.Timer   // armed when ingest's count reaches zero with dispatches held
}

// NewGate returns a Gate that holds dispatches back while full reports the
// machine full (Machine.Full) and deliveries wait for their acknowledgement.
func NewGate(full func() bool) *Gate {
	return &Gate{full: full, one: make(chan struct{}, maxEarned), free: make(chan struct{})}
}

// Never returns a Gate that never holds a dispatch: the machine is never
// full to it. For a dispatch worker with no ingest beside it (tests).
func Never() *Gate { return NewGate(func() bool { return false }) }

// OnWake registers f to hear how many held dispatches each wake-up sends on
// together, before they run: the worker's batches wait for that many, so
// that they share one round trip. f must not block.
func (g *Gate) OnWake(f func(n int)) { g.onWake.Store(&f) }

// woke tells OnWake's function that n held dispatches were sent on.
func (g *Gate) woke(n int) {
	if f := g.onWake.Load(); f != nil && n > 0 {
		(*f)(n)
	}
}

// Arrived says a delivery began to wait for its acknowledgement.
func (g *Gate) Arrived() { g.waitingAcks.Add(1) }

// Acked says a delivery that Arrived was answered: every AcksPerDispatch
// acknowledgements earn a dispatch, which wakes one held dispatch; an
// acknowledgement that finds a core free earns one more; one that leaves
// ingest idle wakes them all once it stays idle for a moment.
//
// A core found free lets one held dispatch go, not all of them: a moment's
// free core is room for one more, and with hundreds of workers held
// (GATEWAY_WORKERS follows the cores) waking them all would put them on
// the machine at once, and the senders would wait behind them. While cores
// stay free, each acknowledgement lets one more go, and a dispatch that
// arrives then does not hold back at all.
func (g *Gate) Acked() {
	left := g.waitingAcks.Add(-1)
	if g.acks.Add(1)%AcksPerDispatch == 0 {
		g.earn(Group)
	}
	if g.waiting.Load() == 0 {
		return
	}
	switch {
	case left == 0:
		g.settleThenWake()
	case !g.full():
		g.earn(1)
	}
}

// earn earns one dispatch, up to maxEarned, and sends a group of held
// dispatches on once group are earned (or as many as are held).
func (g *Gate) earn(group int64) {
	for {
		n := g.earned.Load()
		if n >= maxEarned || g.earned.CompareAndSwap(n, n+1) {
			break
		}
	}
	if n := min(group, g.waiting.Load()); n > 0 && g.earned.Load() >= n {
		g.wake()
	}
}

// busy reports whether a dispatch must hold back now.
func (g *Gate) busy() bool {
	return g.waitingAcks.Load() > 0 && g.full()
}

// wake sends as many held dispatches on as were earned (at most as many as
// are held), all at once, so that they reach the worker's claims together:
// it takes the earned dispatches and hands each to one held dispatch as its
// permission to go (a held dispatch that left meanwhile leaves its
// permission to the next one held).
func (g *Gate) wake() {
	var sent int64
	defer func() { g.woke(int(sent)) }()
	for sent < g.waiting.Load() && g.take() {
		select {
		case g.one <- struct{}{}:
			sent++
		default: // as many permissions as can be used are pending already
			g.earned.Add(1)
			return
		}
	}
}

// wakeAll wakes every held dispatch.
func (g *Gate) wakeAll() {
	g.woke(int(g.waiting.Load()))
	g.mu.Lock()
	close(g.free)
	g.free = make(chan struct{})
	g.mu.Unlock()
}

// settleThenWake wakes every held dispatch if ingest is still idle after
// settle.
func (g *Gate) settleThenWake() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.settling != nil {
		return // one is armed
	}
	g.settling = time.AfterFunc(settle, func() {
		g.mu.Lock()
		g.settling = nil
		g.mu.Unlock()
		if g.waitingAcks.Load() == 0 || !g.full() {
			g.wakeAll()
		}
	})
}

// Enter returns when the dispatch may run: at once while a core is free or
// ingest is idle, or when a dispatch is earned and none is held before it;
// else when one of those becomes so (held dispatches go in the order they
// came, a group at a time), when until has passed (a dispatch is never held
// longer: nothing starves), or when ctx ends.
func (g *Gate) Enter(ctx context.Context, until time.Time) {
	if !g.busy() || g.waiting.Load() == 0 && g.take() {
		return
	}
	g.held.Add(1)
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	g.mu.Lock()
	free := g.free
	g.mu.Unlock()
	// Looked at after counting itself held and taking the channel, so that
	// dispatches earned while no one was held, and ingest gone idle, are not
	// missed.
	if n := g.earned.Load(); n > 0 && n >= min(Group, g.waiting.Load()) {
		g.wake()
	}
	if g.waitingAcks.Load() == 0 {
		// Idle now: whether it stays so is settle's to say, and this
		// dispatch's arrival may have come after the last Acked.
		g.settleThenWake()
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-free:
	case <-g.one:
	}
}

// take takes one earned dispatch, if there is one.
func (g *Gate) take() bool {
	for {
		n := g.earned.Load()
		if n < 1 {
			return false
		}
		if g.earned.CompareAndSwap(n, n-1) {
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
