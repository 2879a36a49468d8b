// Package throttle reads a value at most once per interval, however often it
// is asked for: what anyone may call (/readyz, /metrics) costs the database a
// bounded number of queries.
package throttle

import (
	"context"
	"sync"
	"time"
)

// Value is what Read returns, read again at most once per Every. Callers that
// arrive while a read runs wait for it rather than starting another.
type Value[T any] struct {
	// Read produces the value. It runs for every caller waiting, so it gets
	// a context of its own (the caller's values, not its cancellation),
	// bounded by Timeout.
	Read func(context.Context) (T, error)
	// Every is how old a value may be.
	Every time.Duration
	// RetryErrors, when set, keeps no failed read: the next Get reads again.
	RetryErrors bool
	// Timeout bounds one Read. Defaults to 2 s.
	Timeout time.Duration

	mu  sync.Mutex
	at  time.Time
	v   T
	err error
}

// Get returns the value, no older than Every, and whether this call read it
// (so that a failure is logged once, not once per caller).
func (c *Value[T]) Get(ctx context.Context) (v T, fresh bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.Every && (c.err == nil || !c.RetryErrors) {
		return c.v, false, c.err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	c.v, c.err = c.Read(rctx)
	c.at = time.Now()
	return c.v, true, c.err
}
