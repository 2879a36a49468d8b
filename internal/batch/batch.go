// Package batch coalesces concurrent calls into batches, so that work whose
// cost is one commit can share that commit. A call that finds a committer free
// runs at once, alone: batching adds no wait when there is nothing to batch.
// Calls that arrive while batches are in flight wait, and join the next batch.
//
// A caller that knows more calls are on their way (a group of workers woken
// together) says so with Expect: the next batch then waits for them, at most
// Linger, instead of running the first of them alone.
package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Errors of Submit when an item never joined a batch.
var (
	// ErrQueueFull means MaxQueue items were already waiting.
	ErrQueueFull = errors.New("batch queue full")
	// ErrQueueTimeout means the item waited MaxWait and no batch took it.
	ErrQueueTimeout = errors.New("waited too long for a batch")
)

// Batcher runs Do on batches of submitted items.
type Batcher[In, Out any] struct {
	// Do handles one batch and returns one result per item, in order, or an
	// error for the whole batch. It gets a fresh context bounded by Timeout:
	// a batch is shared, so no one caller's cancellation may abort it.
	Do func(ctx context.Context, items []In) ([]Out, error)
	// MaxBatch bounds a batch. Defaults to 64.
	MaxBatch int
	// Weight, when set, is an item's weight, and MaxWeight bounds a batch's
	// total weight: a batch takes items while they fit, and always at least
	// one. Large items so commit in small batches, and a slow large item
	// delays few others.
	Weight    func(In) int64
	MaxWeight int64
	// Concurrency bounds how many batches run at once. Defaults to 4.
	Concurrency int
	// Timeout bounds one batch. Defaults to 30 s.
	Timeout time.Duration
	// MaxQueue bounds the items waiting for a batch; an item submitted past
	// it fails at once with ErrQueueFull. Zero: no bound.
	MaxQueue int
	// MaxWait bounds how long an item waits for a batch to take it; then it
	// is withdrawn and fails with ErrQueueTimeout. An item a batch has taken
	// waits for that batch's result, bounded by Timeout. Zero: no bound.
	MaxWait time.Duration
	// Linger bounds how long a batch waits for the items Expect announced.
	// Zero: Expect has no effect.
	Linger time.Duration

	mu      sync.Mutex
	waiting []*call[In, Out]
	active  int

	expected    int           // items announced by Expect and not yet submitted
	expectUntil time.Time     // when a batch stops waiting for them
	arrived     chan struct{} // closed when an item is submitted, to wake lingering batches
}

// Expect says that n more items are about to be submitted: a batch about to
// start waits until they are (or the batch is full), at most Linger from now,
// so that they share it. Items submitted by anyone count against n; those
// that never come are forgotten once Linger has passed.
func (b *Batcher[In, Out]) Expect(n int) {
	if n <= 0 || b.Linger <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.After(b.expectUntil) {
		b.expected = 0 // those announced before that never came
	}
	b.expected += n
	b.expectUntil = now.Add(b.Linger)
}

type call[In, Out any] struct {
	item In
	done chan result[Out]
}

type result[Out any] struct {
	out Out
	err error
}

// Submit adds item to the next batch and waits for its result. When ctx ends
// first, Submit returns ctx's error: an item no batch has taken yet is
// withdrawn and never runs; one a batch has taken may still run.
func (b *Batcher[In, Out]) Submit(ctx context.Context, item In) (Out, error) {
	var zero Out
	concurrency := b.Concurrency
	if concurrency <= 0 {
		concurrency = 4
	}
	c := &call[In, Out]{item: item, done: make(chan result[Out], 1)}
	b.mu.Lock()
	if b.MaxQueue > 0 && len(b.waiting) >= b.MaxQueue {
		b.mu.Unlock()
		return zero, fmt.Errorf("%w: %d items waiting", ErrQueueFull, b.MaxQueue)
	}
	b.waiting = append(b.waiting, c)
	if b.expected > 0 {
		b.expected--
	}
	if b.arrived != nil { // wake the batches lingering for it
		close(b.arrived)
		b.arrived = nil
	}
	start := b.active < concurrency
	if start {
		b.active++
	}
	b.mu.Unlock()
	if start {
		go b.loop()
	}
	var timeout <-chan time.Time
	if b.MaxWait > 0 {
		t := time.NewTimer(b.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case r := <-c.done:
		return r.out, r.err
	case <-ctx.Done():
		if b.withdraw(c) {
			return zero, ctx.Err()
		}
		// A batch has it and may still run it; its caller is gone.
		return zero, ctx.Err()
	case <-timeout:
		if b.withdraw(c) {
			return zero, fmt.Errorf("%w (%s)", ErrQueueTimeout, b.MaxWait)
		}
		// A batch has it: its result comes within the batch's Timeout.
		select {
		case r := <-c.done:
			return r.out, r.err
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

// fits returns how many of the waiting items the next batch takes: at most
// limit, within MaxWeight, and at least one. b.mu is held.
func (b *Batcher[In, Out]) fits(limit int) int {
	n := min(len(b.waiting), limit)
	if b.Weight == nil || b.MaxWeight <= 0 {
		return n
	}
	var total int64
	for i, c := range b.waiting[:n] {
		total += b.Weight(c.item)
		if total > b.MaxWeight && i > 0 {
			return i
		}
	}
	return n
}

// linger returns how long the next batch still waits for announced items:
// zero when none is announced, the batch is full (by count or weight), or it
// has waited Linger since it began to (*since, set on its first wait) or
// since the last announcement (whose items that did not come are then
// forgotten). b.mu is held.
func (b *Batcher[In, Out]) linger(limit int, since *time.Time) time.Duration {
	if b.expected <= 0 {
		return 0
	}
	now := time.Now()
	if !now.Before(b.expectUntil) {
		b.expected = 0
		return 0
	}
	if len(b.waiting) >= limit || b.fits(limit) < len(b.waiting) {
		return 0
	}
	if since.IsZero() {
		*since = now
	}
	return min(b.expectUntil.Sub(now), since.Add(b.Linger).Sub(now))
}

// Waiting returns how many items wait for a batch.
func (b *Batcher[In, Out]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}

// withdraw removes c from the waiting items, unless a batch took it already.
func (b *Batcher[In, Out]) withdraw(c *call[In, Out]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.waiting, c)
	if i < 0 {
		return false
	}
	b.waiting = slices.Delete(b.waiting, i, i+1)
	return true
}

// loop runs batches of waiting calls until none wait.
func (b *Batcher[In, Out]) loop() {
	limit := b.MaxBatch
	if limit <= 0 {
		limit = 64
	}
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	var lingered time.Time // when the next batch began to wait for announced items
	for {
		b.mu.Lock()
		if len(b.waiting) == 0 {
			b.active--
			b.mu.Unlock()
			return
		}
		if wait := b.linger(limit, &lingered); wait > 0 {
			if b.arrived == nil {
				b.arrived = make(chan struct{})
			}
			arrived := b.arrived
			b.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-arrived:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		lingered = time.Time{}
		n := b.fits(limit)
		calls := b.waiting[:n:n]
		b.waiting = b.waiting[n:]
		b.mu.Unlock()

		items := make([]In, n)
		for i, c := range calls {
			items[i] = c.item
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		outs, err := b.Do(ctx, items)
		cancel()
		if err == nil && len(outs) != n {
			err = fmt.Errorf("batch: %d results for %d items", len(outs), n)
		}
		for i, c := range calls {
			if err != nil {
				c.done <- result[Out]{err: err}
			} else {
				c.done <- result[Out]{out: outs[i]}
			}
		}
	}
}
