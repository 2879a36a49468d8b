package recovery

import (
	"context"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// JobArgs are the periodic recovery of one provider.
type JobArgs struct {
	Provider string `json:"provider"`
}

// Kind implements river.JobArgs.
func (JobArgs) Kind() string { return "hookgate_recovery" }

// InsertOpts implements river.JobArgsWithInsertOpts: one attempt (the next
// period is the retry), and at most one run of a provider waiting or under
// way, cluster-wide, however many processes schedule it.
func (JobArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: 1,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}},
	}
}

// jobTimeout bounds one run: long enough for rate-limit waits and a
// second between redelivery requests.
const jobTimeout = 15 * time.Minute

// Worker runs recovery as a River job.
type Worker struct {
	river.WorkerDefaults[JobArgs]
	Recoverer *Recoverer
}

// Timeout implements river.Worker.
func (w *Worker) Timeout(*river.Job[JobArgs]) time.Duration { return jobTimeout }

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, job *river.Job[JobArgs]) error {
	rep, err := w.Recoverer.Run(ctx, job.Args.Provider, Options{})
	if len(rep.Found) > 0 && err == nil { // a failed run is logged by Run
		w.Recoverer.logger.InfoContext(ctx, "recovery ran", "provider", rep.Provider, "found", len(rep.Found),
			"requested", len(rep.Requested), "stored", len(rep.Stored), "skipped", len(rep.Skipped))
	}
	if perr := w.Recoverer.Prune(ctx); err == nil {
		err = perr
	}
	return err
}

// PeriodicJobs are the recovery runs of each configured provider, every
// interval and at start.
func (r *Recoverer) PeriodicJobs(interval time.Duration) []*river.PeriodicJob {
	var out []*river.PeriodicJob
	for _, p := range r.Providers() {
		args := JobArgs{Provider: p}
		out = append(out, river.NewPeriodicJob(river.PeriodicInterval(interval),
			func() (river.JobArgs, *river.InsertOpts) { return args, nil }, &river.PeriodicJobOpts{RunOnStart: true}))
	}
	return out
}
