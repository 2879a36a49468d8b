package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/store"
)

// event stores a receipt of an event of entity sub_1 at time at, and its
// dispatch on route r with a River job in state jobState; it returns the
// dispatch and its job's id.
func event(t *testing.T, pool *pgxpool.Pool, id string, at time.Time, jobState string) (store.DispatchKey, int64) {
	t.Helper()
	ctx := context.Background()
	var jobID int64
	if err := pool.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state)
		VALUES ('{}', 'hookgate_dispatch', 5, 'r', $1) RETURNING id`, jobState).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	entity := "stripe:sub_1"
	sum := sha256.Sum256([]byte(id))
	k := store.DispatchKey{Provider: "stripe", DeliveryID: id, Route: "r", Generation: 1}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		r := store.NewReceipt{ReceiptKey: store.ReceiptKey{Provider: "stripe", DeliveryID: id}, Event: "invoice.paid",
			ContentType: "application/json", Entity: &entity, EventTime: &at, Headers: "{}", Body: []byte(`{}`), BodySHA256: sum[:]}
		if err := store.InsertReceiptsTx(ctx, tx, []store.NewReceipt{r}, time.Hour, map[store.ReceiptKey]bool{}); err != nil {
			return err
		}
		_, _, err := store.InsertDispatchesTx(ctx, tx, []store.DispatchKey{k}, []int64{jobID})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return k, jobID
}

// The ordering protocol, per route and entity: a forward takes the entity's
// lease before it reads the watermark, and gives it back only with its
// outcome and the watermark it raises; an older event that comes after finds
// the newer one's watermark. A lease past its expiry is taken over only when
// its holder's event is no newer or its holder is no longer in progress.
func TestALeaseIsHeldUntilItsOutcomeAndWatermarkAreWritten(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Microsecond)
	older, _ := event(t, pool, "evt_older", now.Add(-20*time.Second), "running")
	newer, _ := event(t, pool, "evt_newer", now.Add(-10*time.Second), "running")

	c, err := store.ClaimDispatch(ctx, pool, newer, latest, time.Minute)
	if err != nil || !c.Leased || c.Entity != "stripe:sub_1" || c.Mark != nil || c.State != "pending" || c.Receipt.DeliveryID != "evt_newer" {
		t.Fatalf("the newer event's claim: %+v, %v; want the lease, no watermark", c, err)
	}
	if again, err := store.ClaimDispatch(ctx, pool, newer, store.ClaimMode{Ordered: true, Exact: true}, time.Minute); err != nil || !again.Leased {
		t.Fatalf("its holder claims again (River ran it again): %+v, %v; want the lease", again, err)
	}
	c, err = store.ClaimDispatch(ctx, pool, older, latest, time.Minute)
	if err != nil || c.Leased || c.Stale {
		t.Fatalf("the older event while the newer holds the lease: leased %v, stale %v, %v; want it refused", c.Leased, c.Stale, err)
	}

	// A lease past its expiry whose holder is newer and still in progress:
	// the target may have accepted it with its outcome lost.
	if _, err := pool.Exec(ctx, `UPDATE hookgate_leases SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	c, err = store.ClaimDispatch(ctx, pool, older, latest, time.Minute)
	if err != nil || c.Leased || !c.Stale {
		t.Fatalf("an expired lease of a newer, live holder: leased %v, stale %v, %v; want it kept, and said stale", c.Leased, c.Stale, err)
	}

	// The newer forward's outcome: its state, its watermark and the lease's
	// return commit together.
	mark := store.Watermark{Route: "r", Entity: "stripe:sub_1", EventTime: now.Add(-10 * time.Second), Provider: "stripe", DeliveryID: "evt_newer"}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return store.WriteOutcomesTx(ctx, tx, []store.Outcome{{DispatchKey: newer, State: "succeeded", Attempt: 1, Leased: "stripe:sub_1"}},
			[]store.Watermark{mark})
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err = store.ClaimDispatch(ctx, pool, older, latest, time.Minute)
	if err != nil || !c.Leased || c.Mark == nil || !c.Mark.Equal(mark.EventTime) {
		t.Fatalf("the older event after the newer's outcome: %+v, %v; want the lease and the newer's watermark", c, err)
	}
	// A watermark is never lowered.
	if err := store.RaiseWatermarks(ctx, pool, []store.Watermark{{Route: "r", Entity: "stripe:sub_1", EventTime: now.Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if at, by, ok, err := store.WatermarkOf(ctx, pool, "r", "stripe:sub_1"); err != nil || !ok || !at.Equal(mark.EventTime) || by != mark.DeliveryID {
		t.Fatalf("watermark after an older raise: %v %v %v; want %v", at, ok, err, mark.EventTime)
	}
	// A final outcome is never overwritten.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return store.WriteOutcomesTx(ctx, tx, []store.Outcome{{DispatchKey: newer, State: "superseded", Attempt: 2}}, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := store.LatestOf(ctx, pool, "stripe", "evt_newer", []string{"r"}); err != nil || l["r"].State != "succeeded" {
		t.Fatalf("after a repeated run's outcome: %+v, %v; want succeeded kept", l, err)
	}

	// An expired lease whose holder's job was cancelled (River UI) is taken
	// over by the next event, newer or not.
	if err := store.GiveBackLease(ctx, pool, older); err != nil {
		t.Fatal(err)
	}
	third, thirdJob := event(t, pool, "evt_third", now, "running")
	if c, err := store.ClaimDispatch(ctx, pool, third, latest, time.Minute); err != nil || !c.Leased {
		t.Fatalf("the third event: %+v, %v", c, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE hookgate_leases SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, thirdJob); err != nil {
		t.Fatal(err)
	}
	if c, err := store.ClaimDispatch(ctx, pool, older, latest, time.Minute); err != nil || !c.Leased {
		t.Fatalf("an expired lease of a cancelled holder: leased %v, %v; want it taken over", c.Leased, err)
	}
}

// An event whose receipt is gone (retention) claims nothing: ErrNoReceipt,
// and no lease is left behind.
func TestAClaimOfAGoneReceiptTakesNoLease(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	k := store.DispatchKey{Provider: "stripe", DeliveryID: "evt_gone", Route: "r", Generation: 1}
	c, err := store.ClaimDispatch(ctx, pool, k, latest, time.Minute)
	if err != store.ErrNoReceipt || c.Leased {
		t.Fatalf("claim: %+v, %v; want ErrNoReceipt and no lease", c, err)
	}
	var leases int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM hookgate_leases`).Scan(&leases); err != nil || leases != 0 {
		t.Fatalf("%d leases, %v", leases, err)
	}
}

// latest is how a route with order latest (the default) claims.
var latest = store.ClaimMode{Ordered: true}

// On a route that hands an entity's events oldest first, a free lease goes
// only to a dispatch with no live dispatch of an older event of its entity
// waiting for its turn; a dispatch whose job has ended no longer counts,
// and one that holds the lease keeps it whatever arrives meanwhile.
func TestTheOldestWaitingTakesTheTurnFirst(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Microsecond)
	all := store.ClaimMode{Ordered: true, OldestFirst: true}
	newer, _ := event(t, pool, "evt_newer", now.Add(-10*time.Second), "available")
	older, _ := event(t, pool, "evt_older", now.Add(-20*time.Second), "scheduled")
	turns := func(keys ...store.DispatchKey) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTurnsTx(ctx, tx, keys) }); err != nil {
			t.Fatal(err)
		}
	}
	turns(newer, older)

	c, err := store.ClaimDispatch(ctx, pool, newer, all, time.Minute)
	if err != nil || c.Leased || c.Entity != "stripe:sub_1" {
		t.Fatalf("the newer event's claim while an older one waits (held back by its window): %+v, %v; want no lease", c, err)
	}
	if c, err := store.ClaimDispatch(ctx, pool, newer, latest, time.Minute); err != nil || !c.Leased {
		t.Fatalf("the same claim on a route that is not oldest first: %+v, %v; want the lease", c, err)
	}
	if err := store.GiveBackLease(ctx, pool, newer); err != nil {
		t.Fatal(err)
	}
	if waiting, err := store.OlderWaiting(ctx, pool, "r", "stripe:sub_1", now.Add(-10*time.Second)); err != nil || !waiting {
		t.Fatalf("OlderWaiting for the newer = %v, %v; want true", waiting, err)
	}

	// The older goes first, and keeps its turn while it retries.
	if c, err := store.ClaimDispatch(ctx, pool, older, all, time.Minute); err != nil || !c.Leased {
		t.Fatalf("the older event's claim: %+v, %v; want the lease", c, err)
	}
	if c, err := store.ClaimDispatch(ctx, pool, older, all, time.Minute); err != nil || !c.Leased {
		t.Fatalf("the older event's claim again (a retry): %+v, %v; want the lease it holds", c, err)
	}
	// Its outcome ends its turn and gives the lease back: the newer's turn.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return store.WriteOutcomesTx(ctx, tx, []store.Outcome{{DispatchKey: older, State: "succeeded", Attempt: 1, Leased: "stripe:sub_1", Turn: true}},
			[]store.Watermark{{Route: "r", Entity: "stripe:sub_1", EventTime: now.Add(-20 * time.Second), Provider: "stripe", DeliveryID: "evt_older"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := store.ClaimDispatch(ctx, pool, newer, all, time.Minute); err != nil || !c.Leased {
		t.Fatalf("the newer event's claim after the older's outcome: %+v, %v; want the lease", c, err)
	}
	if err := store.GiveBackLease(ctx, pool, newer); err != nil {
		t.Fatal(err)
	}

	// A turn whose dispatch's job ended elsewhere (cancelled in River UI)
	// holds nothing back.
	oldest, oldestJob := event(t, pool, "evt_oldest", now.Add(-30*time.Second), "available")
	turns(oldest)
	if c, err := store.ClaimDispatch(ctx, pool, newer, all, time.Minute); err != nil || c.Leased {
		t.Fatalf("the newer event's claim with the oldest waiting: %+v, %v; want no lease", c, err)
	}
	if _, err := pool.Exec(ctx, "UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1", oldestJob); err != nil {
		t.Fatal(err)
	}
	if c, err := store.ClaimDispatch(ctx, pool, newer, all, time.Minute); err != nil || !c.Leased {
		t.Fatalf("the newer event's claim once the oldest's job was cancelled: %+v, %v; want the lease", c, err)
	}

	// A route with order none takes no lease at all.
	if c, err := store.ClaimDispatch(ctx, pool, older, store.ClaimMode{}, time.Minute); err != nil || c.Leased || c.Entity != "" || c.Receipt.DeliveryID != "evt_older" {
		t.Fatalf("a claim on a route with order none: %+v, %v; want no lease, the receipt", c, err)
	}
}

// Many forwards start their attempts in one batch: each request gets its own
// claim, in order, as if claimed alone, and of the requests for one entity
// only one takes its lease: the one holding it already, else the oldest
// event. A request whose dispatch is gone says so and takes nothing.
func TestClaimsOfOneBatchTakeOneLeasePerEntity(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Microsecond)
	older, _ := event(t, pool, "evt_older", now.Add(-20*time.Second), "running")
	newer, _ := event(t, pool, "evt_newer", now.Add(-10*time.Second), "running")
	gone := store.DispatchKey{Provider: "stripe", DeliveryID: "evt_gone", Route: "r", Generation: 1}

	cs, err := store.ClaimDispatches(ctx, pool, []store.ClaimRequest{
		{Key: newer, Mode: latest}, {Key: gone, Mode: latest}, {Key: older, Mode: latest}, {Key: older, Mode: store.ClaimMode{}},
	}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 4 {
		t.Fatalf("%d results for 4 requests", len(cs))
	}
	if c := cs[0]; c.Err != nil || c.Leased || c.Entity != "stripe:sub_1" || c.Receipt.DeliveryID != "evt_newer" {
		t.Errorf("the newer event beside an older one of its entity: %+v; want its receipt, no lease", c)
	}
	if c := cs[1]; !errors.Is(c.Err, store.ErrNoReceipt) || c.Leased {
		t.Errorf("a dispatch that is gone: leased %v, %v; want ErrNoReceipt and no lease", c.Leased, c.Err)
	}
	if c := cs[2]; c.Err != nil || !c.Leased || c.Entity != "stripe:sub_1" || c.Receipt.DeliveryID != "evt_older" {
		t.Errorf("the older event: %+v; want the lease", c)
	}
	if c := cs[3]; c.Err != nil || c.Leased || c.Entity != "" || c.Receipt.DeliveryID != "evt_older" {
		t.Errorf("a claim that takes no lease: %+v; want the receipt alone", c)
	}

	// The newer one holds the lease (the older's outcome gave it back): in a
	// batch with the older, it keeps it.
	if err := store.GiveBackLeaseOf(ctx, pool, older, "stripe:sub_2"); err != nil {
		t.Fatal(err)
	}
	if c, err := store.ClaimDispatch(ctx, pool, newer, latest, time.Minute); err != nil || c.Leased {
		t.Fatalf("the newer after the older gave back another entity's lease: %+v, %v; want it refused", c, err)
	}
	if err := store.GiveBackLeaseOf(ctx, pool, older, "stripe:sub_1"); err != nil {
		t.Fatal(err)
	}
	if c, err := store.ClaimDispatch(ctx, pool, newer, latest, time.Minute); err != nil || !c.Leased {
		t.Fatalf("the newer alone: %+v, %v; want the lease", c, err)
	}
	cs, err = store.ClaimDispatches(ctx, pool, []store.ClaimRequest{{Key: older, Mode: latest}, {Key: newer, Mode: latest}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Leased || !cs[1].Leased {
		t.Errorf("a batch of the older and the lease's holder: older leased %v, holder leased %v; want the holder's kept", cs[0].Leased, cs[1].Leased)
	}
}
