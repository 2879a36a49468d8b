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
	"slices"
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
	earned      atomic.Int64 // dispatches earned and not yet taken, at most maxEarned
	waiting     atomic.Int64 // dispatches held now: len(queue), read without the lock
	held        atomic.Int64 // dispatches held so far

	onWake atomic.Pointer[func(n int)] // hears how many held dispatches each wake-up sends on

	mu       sync.Mutex
	queue    []*holder   // the dispatches held, oldest first
	settling *time.Timer // armed when ingest's count reaches zero with dispatches held
}

// holder is one dispatch held in Enter.
type holder struct {
	ready chan struct{} // closed when it may go on
	taken bool          // it was handed an earned dispatch (not woken with every one)
}

// NewGate returns a Gate that holds dispatches back while full reports the
// machine full (Machine.Full) and deliveries wait for their acknowledgement.
func NewGate(full func() bool) *Gate {
	return &Gate{full: full}
}

// Never returns a Gate that never holds a dispatch: the machine is never
// full to it. For a dispatch worker with no ingest beside it (tests).
func Never() *Gate { return NewGate(func() bool { return false }) }

// OnWake registers f to hear how many held dispatches each wake-up sends on
// together, before any of them goes on: the worker's batches wait for that
// many, so that they share one round trip. There is one such f (the
// gateway's one worker); a later call replaces it. f must not block.
func (g *Gate) OnWake(f func(n int)) { g.onWake.Store(&f) }

// woke tells OnWake's function that n held dispatches are about to go on.
func (g *Gate) woke(n int) {
	if f := g.onWake.Load(); f != nil && n > 0 {
		(*f)(n)
	}
}

// Arrived says a delivery began to wait for its acknowledgement.
func (g *Gate) Arrived() { g.waitingAcks.Add(1) }

// Acked says a delivery that Arrived was answered: every AcksPerDispatch
// acknowledgements earn a dispatch, and once a group is earned that many
// held dispatches go on; an acknowledgement that finds a core free earns
// one more, which goes on at once with any earned before it; one that
// leaves ingest idle lets every held dispatch go once it stays idle for a
// moment.
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

// earn earns one dispatch, up to maxEarned, and sends held dispatches on
// once group are earned (or as many as are held, when fewer).
func (g *Gate) earn(group int) {
	g.give()
	if g.waiting.Load() > 0 {
		g.wake(group)
	}
}

// give adds an earned dispatch, up to maxEarned.
func (g *Gate) give() {
	for {
		e := g.earned.Load()
		if e >= maxEarned || g.earned.CompareAndSwap(e, e+1) {
			return
		}
	}
}

// busy reports whether a dispatch must hold back now.
func (g *Gate) busy() bool {
	return g.waitingAcks.Load() > 0 && g.full()
}

// wake sends the dispatches held longest on, all at once, when at least
// min(group, held) dispatches are earned: as many as are earned (at most as
// many as are held), each taking one. OnWake hears how many before any of
// them goes, so that they reach the worker's batches together.
func (g *Gate) wake(group int) {
	g.mu.Lock()
	held := len(g.queue)
	if held == 0 || g.earned.Load() < int64(min(group, held)) {
		g.mu.Unlock()
		return
	}
	k := 0
	for k < held && g.take() {
		k++
	}
	going := slices.Clone(g.queue[:k])
	g.queue = slices.Delete(g.queue, 0, k)
	g.waiting.Store(int64(len(g.queue)))
	for _, h := range going {
		h.taken = true
	}
	g.mu.Unlock()
	g.release(going)
}

// release lets held dispatches taken out of the queue go on, once OnWake
// has heard how many.
func (g *Gate) release(going []*holder) {
	g.woke(len(going))
	for _, h := range going {
		close(h.ready)
	}
}

// wakeAll lets every held dispatch go on, earned or not.
func (g *Gate) wakeAll() {
	g.mu.Lock()
	going := g.queue
	g.queue = nil
	g.waiting.Store(0)
	g.mu.Unlock()
	g.release(going)
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
	if !g.busy() {
		return
	}
	g.mu.Lock()
	if len(g.queue) == 0 && g.take() {
		g.mu.Unlock()
		return
	}
	h := &holder{ready: make(chan struct{})}
	g.queue = append(g.queue, h)
	g.waiting.Store(int64(len(g.queue)))
	g.mu.Unlock()
	g.held.Add(1)
	// Looked at once counted held, so that dispatches earned meanwhile, and
	// ingest gone idle, are not missed.
	g.wake(Group)
	if g.waitingAcks.Load() == 0 {
		// Idle now: whether it stays so is settle's to say, and this
		// dispatch's arrival may have come after the last Acked.
		g.settleThenWake()
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-h.ready:
	case <-ctx.Done():
		g.leave(h)
	case <-t.C:
		g.leave(h)
	}
}

// leave takes a held dispatch that goes on unbidden (its bound passed, or
// its context ended) out of the queue; one that was sent on meanwhile gives
// back the dispatch it took. Either way, those still held may now be few
// enough that the dispatches earned make their group.
func (g *Gate) leave(h *holder) {
	g.mu.Lock()
	if i := slices.Index(g.queue, h); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		g.waiting.Store(int64(len(g.queue)))
	} else if h.taken {
		g.give()
	}
	g.mu.Unlock()
	g.wake(Group)
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
