package hookgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/store"
)

// followEvery is how often a gateway whose routes the database owns reads
// their version: a change is in force on every gateway within it, and the
// time one takes to sync.
const followEvery = 2 * time.Second

// storedTable is the table the database holds (GATEWAY_ROUTES_FROM=database),
// seeded once, when it was never seeded, with the configured routes; and its
// version. A stored route that does not check here (a target_env this
// gateway lacks, a builtin it has not) stops the start, as a configured one
// would.
func storedTable(ctx context.Context, pool *pgxpool.Pool, env config.Resolved, builtins []string) (fanout.Table, fanout.Table, int64, error) {
	names, specs := env.SeedSpecs()
	seed := make([]store.LiveRoute, len(names))
	for i := range names {
		seed[i] = store.LiveRoute{Name: names[i], Spec: specs[i]}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.SeedLiveRoutesTx(ctx, tx, seed, "configuration")
		return err
	}); err != nil {
		return nil, nil, 0, err
	}
	return readStored(ctx, pool, env, builtins, nil)
}

// readStored reads the stored routes, checks each as at start, and returns
// those in force and those deleted (retired: their dispatches already made
// finish with them; one that no longer checks here is left out). A route in
// force that does not check here is an error, unless unchecked is given
// (a running gateway's): it is told of the route, and says what to keep in
// its place, if anything.
func readStored(ctx context.Context, pool *pgxpool.Pool, env config.Resolved, builtins []string,
	unchecked func(name string, err error) (fanout.Route, bool)) (table, retired fanout.Table, version int64, err error) {
	stored, version, err := store.LiveRoutes(ctx, pool)
	if err != nil {
		return nil, nil, 0, err
	}
	for _, s := range stored {
		r, _, err := env.LiveRoute(s.Name, s.Spec, builtins)
		switch {
		case s.Deleted && err == nil:
			retired = append(retired, r)
		case s.Deleted:
		case err != nil && unchecked == nil:
			return nil, nil, 0, fmt.Errorf("configuration: route %s stored in the database (GATEWAY_ROUTES_FROM=database): %w", s.Name, err)
		case err != nil:
			if kept, ok := unchecked(s.Name, err); ok {
				table = append(table, kept)
			}
		default:
			table = append(table, r)
		}
	}
	return table, retired, version, nil
}

// follower keeps a gateway's routes those the database holds: it reads
// their version every followEvery (and at once, with Now, after this
// gateway's own change) and, when it moved, syncs the new table's routes
// (their state rows, rate rings and River queues), gives new routes their
// River queue and metrics, and puts the table in force.
type follower struct {
	pool     *pgxpool.Pool
	env      config.Resolved
	builtins []string
	live     *fanout.Live
	client   *river.Client[pgx.Tx] // the working client, for new routes' queues
	guard    *routes.Guard
	m        *metrics.Metrics
	workers  int
	logger   *slog.Logger

	mu      sync.Mutex // one follow at a time
	version int64
	queues  map[string]bool // the route queues the working client has
}

func newFollower(pt parts, client *river.Client[pgx.Tx], env config.Resolved, builtins []string, logger *slog.Logger) *follower {
	f := &follower{pool: pt.pool, env: env, builtins: builtins, live: pt.live, client: client, guard: pt.guard, m: pt.m, workers: env.Workers,
		logger: logger, version: pt.version, queues: map[string]bool{}}
	for _, r := range pt.live.Known() {
		f.queues[r.Queue()] = true
	}
	return f
}

// Now follows the routes at once: after a change made through this
// gateway, which is then in force here when its answer is sent.
func (f *follower) Now() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.followOrSay(ctx)
}

// followOrSay follows the routes, logging why it could not, unless ctx
// was cancelled (the gateway stopping).
func (f *follower) followOrSay(ctx context.Context) {
	if err := f.follow(ctx); err != nil && !errors.Is(ctx.Err(), context.Canceled) {
		f.logger.ErrorContext(ctx, "routes not followed; the ones in force stay", "error", err)
	}
}

// run follows the routes until ctx ends.
func (f *follower) run(ctx context.Context) {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.followOrSay(ctx)
	}
}

// follow puts the stored routes in force when their version moved.
func (f *follower) follow(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := store.LiveRoutesVersion(ctx, f.pool)
	if err != nil || v == f.version {
		return err
	}
	current := f.live.Routes()
	table, retired, version, err := readStored(ctx, f.pool, f.env, f.builtins, func(name string, err error) (fanout.Route, bool) {
		// One route this gateway cannot take (a target_env it lacks) holds
		// back no other change: it keeps the route as it has it, if at all.
		f.logger.ErrorContext(ctx, "route not followed: it does not check on this gateway", "route", name, "error", err)
		return current.ByName(name)
	})
	if err != nil {
		return err
	}
	if err := routes.Sync(ctx, f.pool, table); err != nil {
		return err
	}
	var known metrics.Known
	for _, r := range slices.Concat(table, retired) {
		if f.queues[r.Queue()] {
			continue
		}
		if err := f.client.Queues().Add(r.Queue(), dispatch.RouteQueue(r, f.workers)); err != nil {
			return fmt.Errorf("route %s: its queue: %w", r.Name, err)
		}
		f.queues[r.Queue()] = true
		known.Routes = append(known.Routes, r.Name)
	}
	f.m.Declare(known)
	f.live.Set(table, retired)
	f.version = version
	if err := f.guard.Refresh(ctx); err != nil {
		return err
	}
	f.logger.InfoContext(ctx, "routes changed", "routes", len(table), "version", version)
	return nil
}
