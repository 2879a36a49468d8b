// Package batch coalesces concurrent calls into batches, so that work whose
// cost is one commit can share that commit. A call that finds a committer free
// runs at once, alone: batching adds no wait when there is nothing to batch.
// Calls that arrive while batches are in flight wait, and join the next batch.
package batch

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Batcher runs Do on batches of submitted items.
type Batcher[In, Out any] struct {
	// Do handles one batch and returns one result per item, in order, or an
	// error for the whole batch. It gets a fresh context bounded by Timeout:
	// a batch is shared, so no one caller's cancellation may abort it.
	Do func(ctx context.Context, items []In) ([]Out, error)
	// MaxBatch bounds a batch. Defaults to 64.
	MaxBatch int
	// Concurrency bounds how many batches run at once. Defaults to 4.
	Concurrency int
	// Timeout bounds one batch. Defaults to 30 s.
	Timeout time.Duration

	mu      sync.Mutex
	waiting []*call[In, Out]
	active  int
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
// first, Submit returns ctx's error; the item's batch may still run.
func (b *Batcher[In, Out]) Submit(ctx context.Context, item In) (Out, error) {
	concurrency := b.Concurrency
	if concurrency <= 0 {
		concurrency = 4
	}
	c := &call[In, Out]{item: item, done: make(chan result[Out], 1)}
	b.mu.Lock()
	b.waiting = append(b.waiting, c)
	start := b.active < concurrency
	if start {
		b.active++
	}
	b.mu.Unlock()
	if start {
		go b.loop()
	}
	select {
	case r := <-c.done:
		return r.out, r.err
	case <-ctx.Done():
		var zero Out
		return zero, ctx.Err()
	}
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
	for {
		b.mu.Lock()
		if len(b.waiting) == 0 {
			b.active--
			b.mu.Unlock()
			return
		}
		n := min(len(b.waiting), limit)
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
