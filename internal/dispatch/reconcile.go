package dispatch

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/store"
)

// ReconcileArgs are the periodic job that records on dispatch rows what River
// decided without the worker: a job cancelled by an operator (River UI) or
// discarded by River's rescuer.
type ReconcileArgs struct{}

// Kind implements river.JobArgs.
func (ReconcileArgs) Kind() string { return "hookgate_reconcile" }

// ReconcileWorker works ReconcileArgs.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	// Pool is the database.
	Pool *pgxpool.Pool
	// Routes is the fan-out table: waiting dispatch jobs are moved to their
	// route's queue (see QueueByRoute), a retired route's included. Nil: no
	// routes.
	Routes fanout.Source
}

// Work implements river.Worker. River keeps cancelled jobs for a day, so a
// minutely run records the outcome long before the job is gone.
func (w *ReconcileWorker) Work(ctx context.Context, _ *river.Job[ReconcileArgs]) error {
	if err := store.RecordRiverEndsOf(ctx, w.Pool, Kind); err != nil {
		return err
	}
	var known fanout.Table
	if w.Routes != nil {
		known = w.Routes.Known()
	}
	return QueueByRoute(ctx, w.Pool, known)
}

// QueueByRoute moves waiting dispatch jobs to the queue of their route:
// jobs enqueued before routes had queues of their own, or by a gateway with
// another configuration. The jobs of a route no longer configured go to the
// default queue, whose workers discard them (replayable once the route is
// back). A gateway runs it at start and its reconcile job every minute.
func QueueByRoute(ctx context.Context, db store.Querier, table fanout.Table) error {
	var names, queues []string
	for _, r := range table {
		names, queues = append(names, r.Name), append(queues, r.Queue())
	}
	return store.MoveJobsToQueues(ctx, db, Kind, names, queues, river.QueueDefault)
}
