package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The ordering protocol: the statements a dispatch runs so that, per route
// and entity, a target never gets an event older than one it accepted.
//
// The invariant: a route's watermark of an entity (hookgate_watermarks) is
// the event time of the newest event of that entity the route's target
// accepted, and it is read only by a dispatch that holds the entity's turn
// for the route, and raised only in the transaction that records that
// dispatch's outcome, before the turn is given back. So a dispatch that finds
// the watermark newer than its own event knows the target has seen newer
// (superseded), and one that finds it older knows no newer one is in flight.
//
// The turn is taken two ways:
//
//   - A builtin handler runs in one transaction with its outcome: the turn
//     is a transaction-scoped advisory lock on (route, entity)
//     (TryEntityLockTx), and the dispatch row is locked first
//     (LockDispatchTx), so the handler's writes, the outcome, the watermark
//     and the job's completion commit or vanish together.
//   - A forward cannot hold a transaction across the target's answer: the
//     turn is a lease, a row of hookgate_leases (ClaimDispatch), taken before
//     the watermark is read and kept until its outcome and watermark are
//     committed (WriteOutcomesTx), even past its expiry while its holder
//     is still in progress with a newer event: that event may have been
//     accepted with its outcome lost, so an older one waits.
//
// Events with no entity or no time are not ordered: they take no turn; nor
// are the events of a route whose order is none.
//
// On a route that hands an entity's events oldest first (order all, or an
// order window), each dispatch of an ordered event also has a row in
// hookgate_turns from its creation (InsertTurnsTx) to its outcome, and a free
// turn goes only to a dispatch with no live dispatch of an older event of its
// entity waiting (hookgate_older_waiting): the oldest waiting goes first. A
// holder keeps its turn across its retries whatever arrives meanwhile.

// ErrNoDispatch means the dispatch's row no longer exists (retention).
var ErrNoDispatch = errors.New("dispatch not found")

// DispatchKey names one generation of one route's dispatch of an event.
type DispatchKey struct {
	Provider, DeliveryID, Route string
	Generation                  int
}

// LockDispatchTx locks the dispatch's row in tx and returns its recorded
// state and whether its route is paused (read in the same statement, so an
// attempt that starts after a pause has committed sees it).
func LockDispatchTx(ctx context.Context, tx pgx.Tx, k DispatchKey) (state string, paused bool, err error) {
	err = tx.QueryRow(ctx, `
		SELECT d.state, coalesce((SELECT paused_at IS NOT NULL FROM hookgate_routes WHERE name = d.route), false)
		FROM hookgate_dispatches d
		WHERE d.provider = $1 AND d.delivery_id = $2 AND d.route = $3 AND d.generation = $4
		FOR UPDATE`, k.Provider, k.DeliveryID, k.Route, k.Generation).Scan(&state, &paused)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, ErrNoDispatch
	}
	if err != nil {
		return "", false, fmt.Errorf("lock dispatch: %w", err)
	}
	return state, paused, nil
}

// TryEntityLockTx takes the builtin turn of (route, entity) for the rest of
// tx, and reports whether it was free.
func TryEntityLockTx(ctx context.Context, tx pgx.Tx, route, entity string) (bool, error) {
	var locked bool
	err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1 || '|' || $2, 0))", route, entity).Scan(&locked)
	if err != nil {
		return false, fmt.Errorf("entity lock: %w", err)
	}
	return locked, nil
}

// WatermarkOf returns the route's watermark of the entity and the delivery
// whose event set it, and false when the route has handled no event of it.
// Read it only with the entity's turn held.
func WatermarkOf(ctx context.Context, db Querier, route, entity string) (time.Time, string, bool, error) {
	var mark time.Time
	var by string
	err := db.QueryRow(ctx, "SELECT event_time, delivery_id FROM hookgate_watermarks WHERE route = $1 AND entity = $2",
		route, entity).Scan(&mark, &by)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, "", false, nil
	}
	if err != nil {
		return time.Time{}, "", false, fmt.Errorf("read watermark: %w", err)
	}
	return mark, by, true, nil
}

// OlderWaiting reports whether a live dispatch of an event of the entity
// older than eventTime waits for its turn on the route (a route that hands
// an entity's events oldest first). Ask it with the entity's turn held.
func OlderWaiting(ctx context.Context, db Querier, route, entity string, eventTime time.Time) (bool, error) {
	var older bool
	if err := db.QueryRow(ctx, "SELECT hookgate_older_waiting($1, $2, $3)", route, entity, eventTime).Scan(&older); err != nil {
		return false, fmt.Errorf("read older waiting: %w", err)
	}
	return older, nil
}

// InsertTurnsTx registers the dispatches keys, just created in tx, as
// waiting for their turn: those whose event names an entity and a time. Call
// it only for routes that hand an entity's events oldest first.
func InsertTurnsTx(ctx context.Context, tx pgx.Tx, keys []DispatchKey) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO hookgate_turns (route, entity, event_time, provider, delivery_id, generation)
		SELECT k.route, r.entity, r.event_time, k.provider, k.delivery_id, k.generation
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) AS k(provider, delivery_id, route, generation)
		CROSS JOIN LATERAL hookgate_first_receipt(k.provider, k.delivery_id) r
		WHERE r.entity IS NOT NULL AND r.event_time IS NOT NULL
		ON CONFLICT DO NOTHING`,
		column(keys, func(k *DispatchKey) string { return k.Provider }),
		column(keys, func(k *DispatchKey) string { return k.DeliveryID }),
		column(keys, func(k *DispatchKey) string { return k.Route }),
		column(keys, func(k *DispatchKey) int32 { return int32(k.Generation) }))
	if err != nil {
		return fmt.Errorf("register turns: %w", err)
	}
	return nil
}

// endTurnsSQL deletes the turns of EndTurns' dispatches ($1-$4 their keys).
const endTurnsSQL = `
	DELETE FROM hookgate_turns t
	USING unnest($1::text[], $2::text[], $3::text[], $4::int[]) AS k(provider, delivery_id, route, generation)
	WHERE t.route = k.route AND t.provider = k.provider AND t.delivery_id = k.delivery_id AND t.generation = k.generation`

// EndTurns deletes the turns of the dispatches keys: they have ended.
func EndTurns(ctx context.Context, db Querier, keys []DispatchKey) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, endTurnsSQL,
		column(keys, func(k *DispatchKey) string { return k.Provider }),
		column(keys, func(k *DispatchKey) string { return k.DeliveryID }),
		column(keys, func(k *DispatchKey) string { return k.Route }),
		column(keys, func(k *DispatchKey) int32 { return int32(k.Generation) }))
	if err != nil {
		return fmt.Errorf("end turns: %w", err)
	}
	return nil
}

// SetSupersededBy records which delivery's event superseded the dispatch k.
func SetSupersededBy(ctx context.Context, db Querier, k DispatchKey, by string) error {
	_, err := db.Exec(ctx, `UPDATE hookgate_dispatches SET superseded_by = $5
		WHERE provider = $1 AND delivery_id = $2 AND route = $3 AND generation = $4`,
		k.Provider, k.DeliveryID, k.Route, k.Generation, by)
	if err != nil {
		return fmt.Errorf("record superseded by: %w", err)
	}
	return nil
}

// Watermark is a route's newest handled event of one entity.
type Watermark struct {
	Route, Entity        string
	EventTime            time.Time
	Provider, DeliveryID string
}

// RaiseWatermarks raises watermarks, never lowering one. Raise one only
// with the entity's turn held, in the transaction that records the outcome.
func RaiseWatermarks(ctx context.Context, db Querier, marks []Watermark) error {
	newest := map[[2]string]Watermark{}
	for _, m := range marks {
		k := [2]string{m.Route, m.Entity}
		if cur, ok := newest[k]; !ok || m.EventTime.After(cur.EventTime) {
			newest[k] = m
		}
	}
	var routes, entities, providers, ids []string
	var times []time.Time
	for _, m := range newest {
		routes, entities, times, providers, ids = append(routes, m.Route), append(entities, m.Entity), append(times, m.EventTime),
			append(providers, m.Provider), append(ids, m.DeliveryID)
	}
	_, err := db.Exec(ctx, `
		INSERT INTO hookgate_watermarks AS w (route, entity, event_time, provider, delivery_id)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[])
		ON CONFLICT (route, entity) DO UPDATE SET
			event_time = excluded.event_time, provider = excluded.provider,
			delivery_id = excluded.delivery_id, updated_at = now()
		WHERE w.event_time < excluded.event_time`, routes, entities, times, providers, ids)
	if err != nil {
		return fmt.Errorf("move watermark: %w", err)
	}
	return nil
}

// ClaimMode says how ClaimDispatch takes the lease.
type ClaimMode struct {
	// Ordered: the route hands an entity's events one at a time, so the
	// claim takes the lease of the event's entity; else it takes none.
	Ordered bool
	// OldestFirst: a lease not held already is taken only while no older
	// event of the entity waits for its turn.
	OldestFirst bool
	// Exact: the entity is the first receipt's, not any receipt's.
	Exact bool
}

// Claim is what ClaimDispatch found: the start of one attempt of a forward.
type Claim struct {
	// Entity is the entity whose lease the claim asked for, "" when the
	// event names no entity and time.
	Entity string
	// Leased is whether the claim holds the lease of (route, Entity).
	Leased bool
	// Stale is whether the lease it waits for has expired: its holder
	// retries, or was rescued (a longer wait).
	Stale bool
	// State is the dispatch row's recorded state.
	State string
	// Paused is whether an operator paused the route.
	Paused bool
	// Mark is the route's watermark of the receipt's entity, nil when none.
	Mark *time.Time
	// MarkBy is the delivery whose event set Mark.
	MarkBy *string
	// Receipt is the event's first receipt.
	Receipt Receipt
}

// ClaimDispatch starts an attempt of the forward k in one round trip, in one
// implicit transaction whose commit need not wait for the disk (a lease lost
// in a crash of the database only lets a later event go first, as before
// leases): when the route is ordered and the event's receipt names an entity and a time, it takes the
// lease of (route, entity) for leaseTTL; then it reads the dispatch's state,
// the receipt and the entity's watermark. The two statements run in that
// order, each on a fresh snapshot, so the watermark is read after the lease
// is held. No connection is held afterwards: the lease, a row, outlives this
// call and is given back with the outcome (WriteOutcomesTx) or by
// GiveBackLease.
//
// The lease is taken when this dispatch holds it (River runs it again); and,
// with oldestFirst, only while no older event of the entity waits for its
// turn (OlderWaiting), when no one holds it, or when it expired and its holder either has an event no
// newer or is no longer in progress (its dispatch ended, or its River job is
// gone). The lease needs only the event's entity, so it takes any receipt's
// (the receipts of one event name them alike, and that needs no sort); with
// exact, the first receipt's (hooks that sent different bodies under one id):
// the caller claims again exactly when the two differ.
//
// A claim whose receipt is gone returns ErrNoReceipt, with Leased telling
// whether a lease was taken that the caller gives back.
func ClaimDispatch(ctx context.Context, pool *pgxpool.Pool, k DispatchKey, mode ClaimMode, leaseTTL time.Duration) (Claim, error) {
	cs, err := ClaimDispatches(ctx, pool, []ClaimRequest{{Key: k, Mode: mode}}, leaseTTL)
	if err != nil {
		return Claim{}, err
	}
	return cs[0].Claim, cs[0].Err
}

// ClaimRequest is one dispatch whose attempt ClaimDispatches starts.
type ClaimRequest struct {
	Key  DispatchKey
	Mode ClaimMode
}

// ClaimResult is one request's claim, or its error: ErrNoReceipt when its
// receipt or dispatch is gone (with Leased telling whether a lease was taken
// that the caller gives back).
type ClaimResult struct {
	Claim
	Err error
}

// keyedPlans, selected at the start of a transaction, makes the plans of the
// batched statements that follow in it (a claim's, an outcome's) generic
// lookups by key. Generic, because each batch holds a different number of
// keys, and PostgreSQL, finding a plan made for the few of each small batch
// cheaper than the generic one's guess of ten, would plan every call again
// (measured: two of three calls planned, each plan costing more than the
// statement). Lookups by key, because a connection keeps the generic plan
// it made first, when the tables may have been nearly empty: left to choose,
// PostgreSQL joined a batch to hookgate_dispatches by a hash over a scan of
// the whole table, cheap for the 300 rows it saw then and read for every
// batch as the table grew to tens of thousands (measured with auto_explain:
// a claim's read and an outcome 2-3 ms a batch during a load). Without hash
// and merge joins, scans of whole tables and materialised inners, what is
// left is a nested loop that looks each key up in its index.
const keyedPlans = `set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_material', 'off', true)`

// ClaimDispatches starts the attempts of many forwards in one round trip and
// two statements, each claim as ClaimDispatch makes it, and returns one result
// per request, in order. The leases are taken in one statement, in the order
// of (route, entity), so that two batches that want the same entities never
// wait for each other crosswise; of the requests of one batch that want the
// same (route, entity), one takes part (the one that holds it already, else
// the oldest event), and the others find it taken, as they would have found
// it a moment later. An error fails the whole batch and takes no lease.
func ClaimDispatches(ctx context.Context, pool *pgxpool.Pool, reqs []ClaimRequest, leaseTTL time.Duration) ([]ClaimResult, error) {
	keys := func(field func(*ClaimRequest) string) []string { return column(reqs, field) }
	providers := keys(func(r *ClaimRequest) string { return r.Key.Provider })
	ids := keys(func(r *ClaimRequest) string { return r.Key.DeliveryID })
	routes := keys(func(r *ClaimRequest) string { return r.Key.Route })
	generations := column(reqs, func(r *ClaimRequest) int32 { return int32(r.Key.Generation) })
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true), ` + keyedPlans)
	b.Queue(leaseSQL, providers, ids, routes, generations,
		column(reqs, func(r *ClaimRequest) bool { return r.Mode.Ordered }),
		column(reqs, func(r *ClaimRequest) bool { return r.Mode.OldestFirst }),
		column(reqs, func(r *ClaimRequest) bool { return r.Mode.Exact }),
		leaseTTL.Seconds())
	// The watermark (its time and the delivery that set it) is that of the
	// receipt's entity, checked by the caller to be the leased one, read by
	// one correlated lateral lookup per claim so that its plan stays a
	// lookup of one key, whatever the statistics were when the connection
	// prepared it: its LIMIT keeps the planner from pulling it up into a
	// join that reads every watermark of the route (measured: 6,500 buffers
	// a batch, where the lookup reads 3 a claim).
	b.Queue(claimReadSQL, providers, ids, routes, generations)
	results := pool.SendBatch(ctx, b)
	out, err := readClaims(results, len(reqs))
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The implicit transaction rolled back: no lease was taken.
		return nil, fmt.Errorf("read dispatches: %w", err)
	}
	return out, nil
}

// readClaims reads ClaimDispatches' results: the leases, then the
// dispatches with their receipts. A request with no row in the second is
// gone (ErrNoReceipt).
func readClaims(results pgx.BatchResults, n int) ([]ClaimResult, error) {
	out := make([]ClaimResult, n)
	for i := range out {
		out[i].Err = ErrNoReceipt
	}
	if _, err := results.Exec(); err != nil {
		return nil, err
	}
	var i int
	var c Claim
	rows, _ := results.Query()
	if _, err := pgx.ForEachRow(rows, []any{&i, &c.Entity, &c.Leased, &c.Stale}, func() error {
		out[i-1].Entity, out[i-1].Leased, out[i-1].Stale = c.Entity, c.Leased, c.Stale
		return nil
	}); err != nil {
		return nil, err
	}
	rows, _ = results.Query()
	defer rows.Close()
	for rows.Next() {
		var state string
		var paused bool
		var mark *time.Time
		var markBy *string
		r, err := scanReceipt(rows, &i, &state, &paused, &mark, &markBy)
		if err != nil {
			return nil, err
		}
		o := &out[i-1]
		o.State, o.Paused, o.Mark, o.MarkBy, o.Receipt, o.Err = state, paused, mark, markBy, r, nil
	}
	return out, rows.Err()
}

// leaseSQL takes the leases of ClaimDispatches' requests ($1-$4 their keys,
// $5 whether each route is ordered, $6 oldest first, $7 exact; $8 the lease's
// time to live). A request's entity comes from any receipt of its event, or
// when exact from the first receipt: the branch not asked for is cut by its
// condition on the request before it reads anything, and for a route not
// ordered neither runs; oldest first, a lease not held already is taken only
// while no older event of the entity waits. It returns, per request with an
// entity, the entity, whether the lease was taken, and whether the lease it
// waits for has expired.
const leaseSQL = `
	WITH k AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bool[], $6::bool[], $7::bool[])
			WITH ORDINALITY AS k(provider, delivery_id, route, generation, ordered, oldest_first, exact, i)),
	e AS (
		SELECT k.*, r.entity, r.event_time, EXISTS (SELECT 1 FROM hookgate_leases h
			WHERE h.route = k.route AND h.entity = r.entity
			AND (h.provider, h.delivery_id, h.generation) = (k.provider, k.delivery_id, k.generation)) AS held
		FROM k CROSS JOIN LATERAL (
			(SELECT entity, event_time FROM hookgate_receipts
			WHERE k.ordered AND NOT k.exact AND provider = k.provider AND delivery_id = k.delivery_id
			AND entity IS NOT NULL AND event_time IS NOT NULL LIMIT 1)
			UNION ALL
			SELECT f.entity, f.event_time FROM hookgate_first_receipt(k.provider, k.delivery_id) f
			WHERE k.ordered AND k.exact AND f.entity IS NOT NULL AND f.event_time IS NOT NULL) r),
	candidates AS (
		SELECT DISTINCT ON (route, entity) * FROM e
		WHERE held OR NOT oldest_first OR NOT hookgate_older_waiting(route, entity, event_time)
		ORDER BY route, entity, held DESC, event_time, i),
	taken AS (
		INSERT INTO hookgate_leases AS l (route, entity, provider, delivery_id, generation, event_time, expires_at)
		SELECT route, entity, provider, delivery_id, generation, event_time, now() + make_interval(secs => $8)
		FROM candidates ORDER BY route, entity
		ON CONFLICT (route, entity) DO UPDATE SET provider = excluded.provider, delivery_id = excluded.delivery_id,
			generation = excluded.generation, event_time = excluded.event_time, expires_at = excluded.expires_at
		WHERE (l.provider, l.delivery_id, l.generation) = (excluded.provider, excluded.delivery_id, excluded.generation)
			OR l.expires_at < now() AND (l.event_time <= excluded.event_time OR NOT EXISTS (
				SELECT 1 FROM hookgate_live_dispatches d WHERE d.provider = l.provider AND d.delivery_id = l.delivery_id
				AND d.route = l.route AND d.generation = l.generation))
		RETURNING l.route, l.entity, l.provider, l.delivery_id, l.generation)
	SELECT e.i, e.entity, EXISTS (SELECT 1 FROM taken t WHERE t.route = e.route AND t.entity = e.entity
			AND (t.provider, t.delivery_id, t.generation) = (e.provider, e.delivery_id, e.generation)),
		coalesce((SELECT expires_at < now() FROM hookgate_leases WHERE route = e.route AND entity = e.entity), false)
	FROM e`

// claimReadSQL reads the dispatches of ClaimDispatches' requests ($1-$4
// their keys), each with its first receipt and the watermark of the
// receipt's entity.
const claimReadSQL = `
		SELECT k.i, d.state, coalesce((SELECT paused_at IS NOT NULL FROM hookgate_routes WHERE name = d.route), false),
			w.event_time, w.delivery_id,
			r.provider, r.scope, r.delivery_id, r.event, r.entity, r.event_time, r.content_type, r.headers,
			r.body, r.body_sha256, r.received_at, r.expires_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) WITH ORDINALITY AS k(provider, delivery_id, route, generation, i)
		JOIN hookgate_dispatches d ON d.provider = k.provider AND d.delivery_id = k.delivery_id
			AND d.route = k.route AND d.generation = k.generation
		CROSS JOIN LATERAL hookgate_first_receipt(d.provider, d.delivery_id) r
		LEFT JOIN LATERAL (SELECT w.event_time, w.delivery_id FROM hookgate_watermarks w
			WHERE w.route = d.route AND w.entity = r.entity LIMIT 1) w ON true`

// outcomesSQL writes WriteOutcomesTx's outcomes ($1-$4 the dispatches' keys,
// $5 their states, $6 attempts, $7 the deliveries that superseded them).
const outcomesSQL = `
		UPDATE hookgate_dispatches d SET state = t.state, attempts = t.attempts, last_error = NULL, updated_at = now(),
			superseded_by = nullif(t.superseded_by, '')
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[], $7::text[])
			AS t(provider, delivery_id, route, generation, state, attempts, superseded_by)
		WHERE d.provider = t.provider AND d.delivery_id = t.delivery_id AND d.route = t.route AND d.generation = t.generation
		AND d.state NOT IN ('succeeded', 'superseded', 'discarded', 'cancelled')`

// leasesBackSQL deletes the leases WriteOutcomesTx's outcomes give back ($1-$4
// the dispatches' keys, $5 the entities).
const leasesBackSQL = `
		DELETE FROM hookgate_leases l
		USING unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[]) AS t(provider, delivery_id, route, generation, entity)
		WHERE l.route = t.route AND l.entity = t.entity
		AND (l.provider, l.delivery_id, l.generation) = (t.provider, t.delivery_id, t.generation)`

// GiveBackLease deletes whatever lease the dispatch k holds.
func GiveBackLease(ctx context.Context, db Querier, k DispatchKey) error {
	_, err := db.Exec(ctx, `DELETE FROM hookgate_leases
		WHERE route = $1 AND provider = $2 AND delivery_id = $3 AND generation = $4`,
		k.Route, k.Provider, k.DeliveryID, k.Generation)
	if err != nil {
		return fmt.Errorf("give back lease: %w", err)
	}
	return nil
}

// GiveBackLeaseOf deletes the lease of (k's route, entity) if k holds it:
// GiveBackLease when the entity is known, found by the lease's key instead of
// among every lease of the route.
func GiveBackLeaseOf(ctx context.Context, db Querier, k DispatchKey, entity string) error {
	_, err := db.Exec(ctx, `DELETE FROM hookgate_leases
		WHERE route = $1 AND entity = $5 AND provider = $2 AND delivery_id = $3 AND generation = $4`,
		k.Route, k.Provider, k.DeliveryID, k.Generation, entity)
	if err != nil {
		return fmt.Errorf("give back lease: %w", err)
	}
	return nil
}

// Outcome is a forward's decided state, written with others in one commit.
type Outcome struct {
	DispatchKey
	State   string
	Attempt int
	// Leased is the entity whose lease the dispatch gives back, or "".
	Leased string
	// SupersededBy is, for a superseded dispatch, the delivery whose event
	// superseded it.
	SupersededBy string
	// Turn is whether the dispatch has a turn row to delete (its route
	// hands an entity's events oldest first).
	Turn bool
}

// WriteOutcomesTx writes outcomes, raises marks and gives back the outcomes'
// leases, all in tx: the lease goes only with the outcome and watermark. A
// row already final (succeeded, superseded, discarded or cancelled) is left
// as it is: a run that River repeated cannot undo an outcome.
//
// Its statements' plans are generic lookups by key for the rest of tx, as a
// claim's are (keyedPlans).
func WriteOutcomesTx(ctx context.Context, tx pgx.Tx, os []Outcome, marks []Watermark) error {
	if _, err := tx.Exec(ctx, `SELECT `+keyedPlans); err != nil {
		return fmt.Errorf("record outcomes: %w", err)
	}
	_, err := tx.Exec(ctx, outcomesSQL,
		column(os, func(o *Outcome) string { return o.Provider }),
		column(os, func(o *Outcome) string { return o.DeliveryID }),
		column(os, func(o *Outcome) string { return o.Route }),
		column(os, func(o *Outcome) int32 { return int32(o.Generation) }),
		column(os, func(o *Outcome) string { return o.State }),
		column(os, func(o *Outcome) int32 { return int32(o.Attempt) }),
		column(os, func(o *Outcome) string { return o.SupersededBy }))
	if err != nil {
		return fmt.Errorf("record outcomes: %w", err)
	}
	var turns []DispatchKey
	for _, o := range os {
		if o.Turn {
			turns = append(turns, o.DispatchKey)
		}
	}
	if err := EndTurns(ctx, tx, turns); err != nil {
		return err
	}
	if len(marks) > 0 {
		if err := RaiseWatermarks(ctx, tx, marks); err != nil {
			return err
		}
	}
	var leased []Outcome
	for _, o := range os {
		if o.Leased != "" {
			leased = append(leased, o)
		}
	}
	if len(leased) == 0 {
		return nil
	}
	_, err = tx.Exec(ctx, leasesBackSQL,
		column(leased, func(o *Outcome) string { return o.Provider }),
		column(leased, func(o *Outcome) string { return o.DeliveryID }),
		column(leased, func(o *Outcome) string { return o.Route }),
		column(leased, func(o *Outcome) int32 { return int32(o.Generation) }),
		column(leased, func(o *Outcome) string { return o.Leased }))
	if err != nil {
		return fmt.Errorf("give back leases: %w", err)
	}
	return nil
}

// SetDispatchState records a dispatch's state, attempts and last error, final
// or not (a builtin's outcome in its transaction, or a failed attempt).
func SetDispatchState(ctx context.Context, db Querier, k DispatchKey, state string, attempt int, lastError *string) error {
	_, err := db.Exec(ctx, `
		UPDATE hookgate_dispatches SET state = $5, attempts = $6, last_error = $7, updated_at = now()
		WHERE provider = $1 AND delivery_id = $2 AND route = $3 AND generation = $4`,
		k.Provider, k.DeliveryID, k.Route, k.Generation, state, attempt, lastError)
	if err != nil {
		return fmt.Errorf("update dispatch: %w", err)
	}
	return nil
}

// DeleteAbandonedLeases deletes the leases expired over an hour ago whose
// holder is no longer in progress, and the turns of dispatches no longer in
// progress created over an hour ago. A lease whose holder ended without
// giving it back (its job cancelled) is taken over by the next event of its
// entity; one of an entity never seen again would stay. A turn whose
// dispatch ended without deleting it (retention, a job cancelled outside the
// worker) already counts for nothing (hookgate_older_waiting reads only live
// dispatches); this takes the row away.
func DeleteAbandonedLeases(ctx context.Context, db Querier) error {
	if _, err := db.Exec(ctx, `DELETE FROM hookgate_leases l WHERE l.expires_at < now() - interval '1 hour'
		AND NOT EXISTS (SELECT 1 FROM hookgate_live_dispatches d WHERE d.provider = l.provider AND d.delivery_id = l.delivery_id
			AND d.route = l.route AND d.generation = l.generation)`); err != nil {
		return fmt.Errorf("delete abandoned leases: %w", err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM hookgate_turns t
		WHERE NOT EXISTS (SELECT 1 FROM hookgate_dispatches d WHERE d.provider = t.provider AND d.delivery_id = t.delivery_id
			AND d.route = t.route AND d.generation = t.generation AND d.created_at > now() - interval '1 hour')
		AND NOT EXISTS (SELECT 1 FROM hookgate_live_dispatches d WHERE d.provider = t.provider AND d.delivery_id = t.delivery_id
			AND d.route = t.route AND d.generation = t.generation)`); err != nil {
		return fmt.Errorf("delete ended turns: %w", err)
	}
	return nil
}

// DeleteIdleWatermarks deletes the watermarks not moved for longer than retention.
func DeleteIdleWatermarks(ctx context.Context, db Querier, retention time.Duration) error {
	if _, err := db.Exec(ctx, "DELETE FROM hookgate_watermarks WHERE updated_at < now() - make_interval(secs => $1)", retention.Seconds()); err != nil {
		return fmt.Errorf("delete idle watermarks: %w", err)
	}
	return nil
}
