package server

import (
	"context"
	"sync"
	"time"
)

// cached runs a check at most once per interval, however often it is asked,
// and answers everyone else with the last result. Callers that arrive while
// the check runs wait for it rather than starting another.
type cached struct {
	check func(context.Context) error
	every time.Duration

	mu  sync.Mutex
	at  time.Time
	err error
}

// checkTimeout bounds one run of the check.
const checkTimeout = 2 * time.Second

// get returns the check's result, no older than every, and whether this call
// ran the check (so that a failure is logged once, not once per caller).
func (c *cached) get(ctx context.Context) (fresh bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.every {
		return false, c.err
	}
	// The check runs for all waiting callers: not on this caller's context.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkTimeout)
	defer cancel()
	c.err = c.check(cctx)
	c.at = time.Now()
	return true, c.err
}
