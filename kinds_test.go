package hookgate

import (
	"testing"

	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/recovery"
	"github.com/hookgate/hookgate/internal/replay"
	"github.com/hookgate/hookgate/internal/retention"
)

// River finds a job's worker by its kind: jobs already in a database, queued
// by an earlier release, must still be worked, so the kinds never change.
func TestRiverJobKindsNeverChange(t *testing.T) {
	for want, args := range map[string]river.JobArgs{
		"hookgate_dispatch":     dispatch.Args{},
		"hookgate_reconcile":    dispatch.ReconcileArgs{},
		"hookgate_replay_batch": replay.BatchArgs{},
		"hookgate_retention":    retention.Args{},
		"hookgate_recovery":     recovery.JobArgs{},
		"hookgate_notify":       notify.Args{},
	} {
		if got := args.Kind(); got != want {
			t.Errorf("%T.Kind() = %q, want %q", args, got, want)
		}
	}
}
