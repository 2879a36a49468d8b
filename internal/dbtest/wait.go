package dbtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pollEvery is how often Eventually tries its condition again.
const pollEvery = 20 * time.Millisecond

// Eventually calls done until it returns nil, and fails the test if it has
// not within the given time, saying what was awaited and done's last answer.
// Tests wait on a condition of the code under test this way, never on a bare
// sleep.
func Eventually(t testing.TB, within time.Duration, what string, done func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := done()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(pollEvery)
	}
}

// Dispatch names one route's dispatch of one delivery for WaitDispatch. An
// empty Provider matches any provider; Generation 0 means the latest
// generation.
type Dispatch struct {
	Provider   string
	DeliveryID string
	Route      string
	Generation int
}

// WaitDispatch waits up to 20 s until the dispatch d is recorded in state
// (its hookgate_dispatches row, as the worker last wrote it), and fails the
// test with the state it last had otherwise.
//
// It reads the table itself rather than through package dispatch, whose
// own tests use this package.
func WaitDispatch(t testing.TB, pool *pgxpool.Pool, d Dispatch, state string) {
	t.Helper()
	what := fmt.Sprintf("dispatch %s/%s of route %s", d.Provider, d.DeliveryID, d.Route)
	if d.Generation != 0 {
		what += fmt.Sprintf(" generation %d", d.Generation)
	}
	what += " in state " + state
	Eventually(t, 20*time.Second, what, func() error {
		var got string
		err := pool.QueryRow(context.Background(), `SELECT state FROM hookgate_dispatches
			WHERE ($1 = '' OR provider = $1) AND delivery_id = $2 AND route = $3 AND ($4 = 0 OR generation = $4)
			ORDER BY generation DESC LIMIT 1`, d.Provider, d.DeliveryID, d.Route, d.Generation).Scan(&got)
		if err != nil {
			return err
		}
		if got != state {
			return fmt.Errorf("state %q", got)
		}
		return nil
	})
}
