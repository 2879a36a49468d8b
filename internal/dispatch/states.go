package dispatch

import (
	"errors"
	"strings"

	"github.com/hookgate/hookgate/internal/handlers"
)

// The states of a dispatch, as stored in hookgate_dispatches.state. This is
// the one list of them; every layer (the worker, replay, retention, the
// operators' read model, the console, hookgatetest) reads it from here.
const (
	// Pending: enqueued, not yet attempted (or waiting for its entity's lease).
	Pending = "pending"
	// Running: an attempt is in flight.
	Running = "running"
	// Retrying: an attempt failed; River will try again.
	Retrying = "retrying"
	// Succeeded: the target accepted it (or the builtin handler committed).
	Succeeded = "succeeded"
	// Superseded: older than what the route already handled for its entity.
	Superseded = "superseded"
	// Discarded: no attempts left, or a permanent failure.
	Discarded = "discarded"
	// Cancelled: an operator cancelled (or deleted) its River job.
	Cancelled = "cancelled"
)

var (
	// FinalStates never change again: the dispatch never runs its target again.
	FinalStates = []string{Succeeded, Superseded, Discarded, Cancelled}
	// InProgressStates are the others: the dispatch will still be attempted.
	InProgressStates = []string{Pending, Running, Retrying}

	// FinalSQL and InProgressSQL are the same lists as SQL, for IN (...).
	FinalSQL      = sqlList(FinalStates)
	InProgressSQL = sqlList(InProgressStates)
)

// IsFinal reports whether a dispatch in state s is done for good.
func IsFinal(s string) bool { return contains(FinalStates, s) }

// IsInProgress reports whether a dispatch in state s will still be attempted.
func IsInProgress(s string) bool { return contains(InProgressStates, s) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sqlList renders states as SQL literals, "'a', 'b'": they are constants of
// plain letters, never input.
func sqlList(states []string) string {
	return "'" + strings.Join(states, "', '") + "'"
}

// StateAfter is the state a builtin dispatch records after an attempt of its
// handler failed with err: discarded when err is a handlers.DiscardError or the
// attempt was its last, else retrying.
func StateAfter(err error, attempt, maxAttempts int) string {
	var discard *handlers.DiscardError
	if errors.As(err, &discard) || attempt >= maxAttempts {
		return Discarded
	}
	return Retrying
}
