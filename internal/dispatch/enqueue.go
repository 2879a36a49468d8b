package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/eventschema"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/tracing"
)

// Kind is the River job kind of a dispatch. Stable: stored in river_job.
const Kind = "hookgate_dispatch"

// Args are a dispatch job's arguments: the key of its dispatch row.
type Args struct {
	Provider   string `json:"provider"`
	DeliveryID string `json:"delivery_id"`
	Route      string `json:"route"`
	Generation int    `json:"generation"`
}

// Kind implements river.JobArgs.
func (Args) Kind() string { return Kind }

// Enqueuer creates dispatch rows and their River jobs inside the caller's
// transaction.
type Enqueuer struct {
	client      *river.Client[pgx.Tx]
	routes      fanout.Source
	maxAttempts int
	filters     *filter.Reporter
	schemas     *eventschema.Set
}

// EnqueuerConfig are an Enqueuer's settings; the zero EnqueuerConfig is the
// defaults.
type EnqueuerConfig struct {
	// MaxAttempts is a job's attempt limit when its route sets none.
	// Defaults to River's (25).
	MaxAttempts int
	// Filters hears of route filters that failed on a delivery. Defaults to
	// a Reporter that counts and logs nothing.
	Filters *filter.Reporter
	// Schemas are the JSON Schemas events are checked against: an event
	// that fails one is dispatched to no route. Defaults to none.
	Schemas *eventschema.Set
}

// NewEnqueuer returns an Enqueuer of table's routes (as they are at each
// decision) whose jobs client inserts; it may be an insert-only client
// (NewInserter).
func NewEnqueuer(client *river.Client[pgx.Tx], table fanout.Source, cfg EnqueuerConfig) *Enqueuer {
	if cfg.Filters == nil {
		cfg.Filters = &filter.Reporter{}
	}
	return &Enqueuer{client: client, routes: table, maxAttempts: cfg.MaxAttempts, filters: cfg.Filters, schemas: cfg.Schemas}
}

// Client is the River client that inserts the jobs; it pauses and resumes
// routes' queues too, and inserts other jobs in the same transactions
// (bulk replay's).
func (e *Enqueuer) Client() *river.Client[pgx.Tx] { return e.client }

// Routes is the fan-out table the Enqueuer creates dispatches of, as it is
// now.
func (e *Enqueuer) Routes() fanout.Table { return e.routes.Routes() }

// EnqueueTx creates generation 1 of the dispatch of every route matching the
// event, with one River job each, and returns how many it created. Routes that
// already have a generation 1 for this event (another hook delivered it first)
// get none. Without its payload, the event is checked against no schema.
func (e *Enqueuer) EnqueueTx(ctx context.Context, tx pgx.Tx, provider, deliveryID, event string) (int, error) {
	n, err := e.EnqueueManyTx(ctx, tx, []providers.Delivery{{Provider: provider, DeliveryID: deliveryID, Event: event, Checked: true}})
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// Prematch decides, outside any transaction, the routes that take an event
// when a route with a filter could: filters read the payload, which is work
// best done before a transaction is open. It returns nil when no filter is
// involved (the transaction decides by the route table alone, at no cost).
func (e *Enqueuer) Prematch(ev providers.Delivery) []string {
	if ev.Invalid != nil {
		return []string{} // dispatched to no route
	}
	if !e.routes.Routes().FiltersFor(ev.Provider, ev.Event) {
		return nil
	}
	return append([]string{}, e.Matching(ev)...)
}

// Check checks ev's payload against the JSON Schemas of its event and
// returns it marked checked, with why it fails one (Invalid) if it does.
// Like Prematch, it is work best done before a transaction is open.
func (e *Enqueuer) Check(ev providers.Delivery) providers.Delivery {
	if !ev.Checked {
		ev.Checked, ev.Invalid = true, e.schemas.Check(ev)
	}
	return ev
}

// Matching returns the routes that take ev under the route table and its
// filters as they are now.
func (e *Enqueuer) Matching(ev providers.Delivery) []string {
	return e.routes.Routes().Matching(input(ev), e.filters.Failed)
}

// input is an event as route filters see it.
func input(ev providers.Delivery) *filter.Input {
	return &filter.Input{Provider: ev.Provider, Event: ev.Event, Headers: ev.Headers, ContentType: ev.ContentType, Body: ev.Body}
}

// EnqueueManyTx is EnqueueTx for several events in one round of statements.
// It returns how many dispatches each event created; an event listed twice
// gets them on its first listing.
func (e *Enqueuer) EnqueueManyTx(ctx context.Context, tx pgx.Tx, events []providers.Delivery) ([]int, error) {
	var want []Created
	var invalid []store.InvalidDelivery
	for _, ev := range events {
		// An event checked before its transaction keeps that decision.
		if ev = e.Check(ev); ev.Invalid != nil {
			invalid = append(invalid, store.InvalidDelivery{Provider: ev.Provider, DeliveryID: ev.DeliveryID, Error: *ev.Invalid})
			continue
		}
		routes := ev.Routes
		if routes == nil {
			routes = e.Matching(ev)
		}
		for _, r := range routes {
			want = append(want, Created{Provider: ev.Provider, DeliveryID: ev.DeliveryID, Route: r, Generation: 1, Trace: ev.Trace})
		}
	}
	counts := make([]int, len(events))
	if err := store.InsertSchemaErrorsTx(ctx, tx, invalid); err != nil {
		return nil, err
	}
	if len(want) == 0 {
		return counts, nil
	}
	created, err := e.CreateTx(ctx, tx, want)
	if err != nil {
		return nil, err
	}
	perEvent := map[[2]string]int{}
	for _, c := range created {
		perEvent[[2]string{c.Provider, c.DeliveryID}]++
	}
	for i, ev := range events {
		k := [2]string{ev.Provider, ev.DeliveryID}
		counts[i] = perEvent[k]
		delete(perEvent, k)
	}
	return counts, nil
}

// insertOpts places a route's dispatch job in the route's own queue, with the
// route's attempt limit.
func (e *Enqueuer) insertOpts(route string) *river.InsertOpts {
	opts := &river.InsertOpts{MaxAttempts: e.maxAttempts}
	if r, ok := e.routes.Route(route); ok {
		opts.Queue = r.Queue()
		if r.MaxAttempts > 0 {
			opts.MaxAttempts = r.MaxAttempts
		}
	}
	return opts
}

// Created is a dispatch that was just created.
type Created struct {
	Provider   string `json:"-"`
	DeliveryID string `json:"-"`
	Route      string `json:"route"`
	Generation int    `json:"generation"`
	State      string `json:"state"`
	// Trace, when set, is the delivery's traceparent, kept in the job's
	// metadata: the dispatch's attempts join the delivery's trace.
	Trace string `json:"-"`
}

// maxDeleteMany is the most jobs one JobDeleteManyTx may delete.
const maxDeleteMany = 10_000

// CreateTx inserts the wanted dispatch rows that do not exist yet, each with
// its River job. The jobs are inserted first (one InsertManyTx) so that each
// row is written once, with its job id; the jobs of rows that turn out to
// exist already (another hook's copy was first) are deleted again before the
// transaction commits, so River never sees them.
//
// Rows go in in key order, so that concurrent transactions creating the same
// dispatches (two hooks delivering the same events) wait for one another in
// one order and never deadlock.
func (e *Enqueuer) CreateTx(ctx context.Context, tx pgx.Tx, want []Created) ([]Created, error) {
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b Created) int {
		return cmp.Or(strings.Compare(a.Provider, b.Provider), strings.Compare(a.DeliveryID, b.DeliveryID),
			strings.Compare(a.Route, b.Route), cmp.Compare(a.Generation, b.Generation))
	})
	params := make([]river.InsertManyParams, len(want))
	for i, w := range want {
		params[i] = river.InsertManyParams{
			Args:       Args{Provider: w.Provider, DeliveryID: w.DeliveryID, Route: w.Route, Generation: w.Generation},
			InsertOpts: e.insertOpts(w.Route),
		}
		if w.Trace != "" {
			params[i].InsertOpts.Metadata = tracing.Metadata(w.Trace)
		}
	}
	results, err := e.client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("insert dispatch jobs: %w", err)
	}
	keys := make([]store.DispatchKey, len(want))
	jobIDs := make([]int64, len(want))
	for i, w := range want {
		keys[i] = store.DispatchKey{Provider: w.Provider, DeliveryID: w.DeliveryID, Route: w.Route, Generation: w.Generation}
		jobIDs[i] = results[i].Job.ID
	}
	inserted, insertedJobs, err := store.InsertDispatchesTx(ctx, tx, keys, jobIDs)
	if err != nil {
		return nil, err
	}
	created := make([]Created, len(inserted))
	var turns []store.DispatchKey
	for i, k := range inserted {
		created[i] = Created{Provider: k.Provider, DeliveryID: k.DeliveryID, Route: k.Route, Generation: k.Generation, State: Pending}
		if r, ok := e.routes.Route(k.Route); ok && r.OldestFirst() {
			turns = append(turns, k)
		}
	}
	// On a route that hands an entity's events oldest first, each dispatch
	// waits for its turn from now on (store.InsertTurnsTx).
	if err := store.InsertTurnsTx(ctx, tx, turns); err != nil {
		return nil, err
	}
	if len(created) < len(want) {
		// Rows another hook's copy created first: their new jobs go again,
		// through River, before the transaction commits.
		kept := make(map[int64]bool, len(insertedJobs))
		for _, id := range insertedJobs {
			kept[id] = true
		}
		var orphans []int64
		for _, id := range jobIDs {
			if !kept[id] {
				orphans = append(orphans, id)
			}
		}
		for chunk := range slices.Chunk(orphans, maxDeleteMany) {
			params := river.NewJobDeleteManyParams().IDs(chunk...).First(len(chunk))
			if _, err := e.client.JobDeleteManyTx(ctx, tx, params); err != nil {
				return nil, fmt.Errorf("delete unneeded dispatch jobs: %w", err)
			}
		}
	}
	return created, nil
}
