package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	hgroutes "github.com/hookgate/hookgate/internal/routes"
	hgstore "github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/yield"
)

// workerWithOnePush returns a Worker of one route, fwd (github:push to
// target), on a database holding one push, github d-1, received and
// enqueued.
func workerWithOnePush(t *testing.T, target string) *Worker {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	routes, err := fanout.Parse("fwd=github:push>"+target, nil, fanout.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	client, err := NewInserter(pool, logger)
	if err != nil {
		t.Fatal(err)
	}
	rs := &receipts.Store{Retention: 72 * time.Hour}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := providers.Delivery{Provider: "github", DeliveryID: "d-1", Event: "push", ContentType: "application/json", Body: []byte(`{}`)}
	if _, err := rs.InsertTx(ctx, tx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := NewEnqueuer(client, routes, EnqueuerConfig{}).EnqueueTx(ctx, tx, "github", "d-1", "push"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return NewWorker(pool, routes, rs, nil, forward.New(nil, 2*time.Second, 1), hgroutes.AdmitAll{}, yield.Never(), metrics.Discard(), logger)
}

// A target's Retry-After is kept only for a job River will retry, and only
// until River asks for it: no per-job state outlives its job.
func TestRetryAfterIsKeptOnlyForAJobRiverWillRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(target.Close)
	w := workerWithOnePush(t, target.URL)
	kept := func() int {
		n := 0
		w.retryAt.Range(func(any, any) bool { n++; return true })
		return n
	}
	job := &river.Job[Args]{
		JobRow: &rivertype.JobRow{ID: 7, Attempt: 1, MaxAttempts: 3},
		Args:   Args{Provider: "github", DeliveryID: "d-1", Route: "fwd", Generation: 1},
	}
	if err := w.Work(ctx, job); err == nil {
		t.Fatal("a 429 was no error")
	}
	if at := w.NextRetry(job); time.Until(at) < 100*time.Second {
		t.Fatalf("next retry at %v, want the target's Retry-After of 120 s", at)
	}
	if n := kept(); n != 0 {
		t.Fatalf("%d entries after River took the retry time", n)
	}

	job.Attempt = job.MaxAttempts // the last attempt: River discards the job and never asks
	if err := w.Work(ctx, job); err == nil {
		t.Fatal("a 429 was no error")
	}
	if n := kept(); n != 0 {
		t.Fatalf("%d entries kept for a discarded job", n)
	}
}

// Claims that arrive together share one round trip; a batch that fails as
// one is claimed again one by one, so a claim's trouble is its own: here a
// key the database refuses (a NUL byte) beside a good one.
func TestAClaimThatFailsFailsOnlyItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := workerWithOnePush(t, "http://127.0.0.1:1/")

	good := hgstore.DispatchKey{Provider: "github", DeliveryID: "d-1", Route: "fwd", Generation: 1}
	bad := hgstore.DispatchKey{Provider: "github", DeliveryID: "d-\x00", Route: "fwd", Generation: 1}
	cs, err := w.claimBatch(ctx, []hgstore.ClaimRequest{{Key: good}, {Key: bad}})
	if err != nil {
		t.Fatalf("the batch: %v; want each claim's own result", err)
	}
	if cs[0].Err != nil || cs[0].State != Pending || cs[0].Receipt.DeliveryID != "d-1" {
		t.Errorf("the good claim: %+v; want its dispatch and receipt", cs[0])
	}
	if cs[1].Err == nil || errors.Is(cs[1].Err, hgstore.ErrNoReceipt) {
		t.Errorf("the refused claim: %v; want the database's error", cs[1].Err)
	}
}
