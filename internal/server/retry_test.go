package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
)

// retryingBundle is a gateway whose dispatches have 5 attempts and whose
// target refuses every forward with 503 and Retry-After: 3600, so that a
// failed dispatch waits an hour before its next attempt.
func retryingBundle(t *testing.T) *adminBundle {
	t.Helper()
	b := setupAdminAttempts(t, dbtest.NewPool(t), adminToken, 5)
	b.answer.Store(503)
	b.retryAfter.Store(3600)
	return b
}

// push is a GitHub push of a branch of its own: each push is another entity,
// so that none waits for another's lease (a retrying dispatch keeps its
// entity's lease, and a later push of the same branch waits behind it).
func push(id string) *http.Request {
	return githubRequest(ghReq{id: id, body: []byte(`{"ref":"refs/heads/` + id + `","repository":{"id":5678,"pushed_at":1767323045}}`)})
}

// job is the River job of the latest generation of a route's dispatch of a
// delivery, as River holds it.
type job struct {
	State      string
	InSeconds  float64 // until scheduled_at, by the database's clock
	Errors     int
	RowState   string
	RowAttempt int
}

func (b *adminBundle) job(t *testing.T, deliveryID, route string) job {
	t.Helper()
	var j job
	err := b.pool.QueryRow(context.Background(), `
		SELECT j.state::text, extract(epoch FROM j.scheduled_at - now())::float8, coalesce(array_length(j.errors, 1), 0),
			d.state, d.attempts
		FROM hookgate_dispatches d JOIN river_job j ON j.id = d.job_id
		WHERE d.delivery_id = $1 AND d.route = $2 ORDER BY d.generation DESC LIMIT 1`, deliveryID, route).
		Scan(&j.State, &j.InSeconds, &j.Errors, &j.RowState, &j.RowAttempt)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitRetryingAnHour waits until the route's dispatch of the delivery has
// failed attempts times and River holds its job back for about an hour, as
// the target's Retry-After asked.
func (b *adminBundle) waitRetryingAnHour(t *testing.T, deliveryID, route string, attempts int) {
	t.Helper()
	dbtest.Eventually(t, 20*time.Second, deliveryID+"'s "+route+" dispatch waits an hour to retry", func() error {
		j := b.job(t, deliveryID, route)
		if j.State != "retryable" || j.Errors != attempts || j.RowState != "retrying" || j.InSeconds < 3500 {
			return fmt.Errorf("%+v", j)
		}
		return nil
	})
}

// auditActions are the audit log's newest entries' actions, newest first, each
// with the route and delivery it names.
func (b *adminBundle) auditActions(t *testing.T) []string {
	t.Helper()
	var a auditJSON
	b.adminJSON(t, adminReq{path: "/admin/audit"}, 200, &a)
	var got []string
	for _, e := range a.Entries {
		s := e.Action
		for _, f := range []*string{e.Route, e.Provider, e.DeliveryID, e.Reason} {
			if f != nil {
				s += " " + *f
			}
		}
		got = append(got, s)
	}
	return got
}

// A dispatch whose target failed once and asked, by Retry-After: 3600, to
// wait an hour is attempted within seconds of a retry of its route, and
// succeeds: its backoff and the target's Retry-After are cut short. The
// retry is in the audit log.
func TestRetryRouteCutsRetryAfterShort(t *testing.T) {
	t.Parallel()
	b := retryingBundle(t)
	b.ingest(t, push("g-1"))
	b.start(t)
	b.waitRetryingAnHour(t, "g-1", "fwd", 1)

	b.answer.Store(0) // the target is back
	start := time.Now()
	var res struct {
		Route   string `json:"route"`
		Retried *int   `json:"retried"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/retry", body: `{"reason":"target is back"}`}, 200, &res)
	if res.Route != "fwd" || res.Retried == nil || *res.Retried != 1 {
		t.Fatalf("retry = %+v", res)
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 1}, "succeeded")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the retried dispatch succeeded %s after the retry, want within seconds", took)
	}
	if n := len(b.requests()); n != 2 {
		t.Fatalf("the target got %d requests, want 2 (the failure and the retry)", n)
	}
	if j := b.job(t, "g-1", "fwd"); j.RowAttempt != 2 {
		t.Fatalf("the retry is not a new generation but the dispatch's second attempt: %+v", j)
	}
	if got := b.auditActions(t); len(got) == 0 || got[0] != "retry fwd target is back" {
		t.Fatalf("audit = %q, want the retry of fwd first", got)
	}
}

// A retry counts exactly the route's dispatches that are retrying: not its
// succeeded or discarded ones, nor another route's. Once they succeed, a
// retry finds none.
func TestRetryRouteCountsTheRetryingOnes(t *testing.T) {
	t.Parallel()
	b := setupAdminAttempts(t, dbtest.NewPool(t), adminToken, 5)
	b.start(t)
	b.ingest(t, push("ok"))
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "ok", Route: "fwd", Generation: 1}, "succeeded")
	b.answer.Store(410) // a refusal: discarded at once
	b.ingest(t, push("gone"))
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "gone", Route: "fwd", Generation: 1}, "discarded")
	b.answer.Store(503)
	b.retryAfter.Store(3600)
	for _, id := range []string{"r-1", "r-2", "r-3"} {
		b.ingest(t, push(id))
	}
	for _, id := range []string{"r-1", "r-2", "r-3"} {
		b.waitRetryingAnHour(t, id, "fwd", 1)
	}
	b.answer.Store(0)
	var res struct {
		Retried int `json:"retried"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/retry"}, 200, &res)
	if res.Retried != 3 {
		t.Fatalf("retried %d, want 3", res.Retried)
	}
	for _, id := range []string{"r-1", "r-2", "r-3"} {
		dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: id, Route: "fwd", Generation: 1}, "succeeded")
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "gone", Route: "fwd", Generation: 1}, "discarded")
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/audit/retry"}, 200, &res)
	if res.Retried != 0 {
		t.Fatalf("audit retried %d, want 0", res.Retried)
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/retry"}, 200, &res)
	if res.Retried != 0 {
		t.Fatalf("a second retry retried %d, want 0", res.Retried)
	}
	if got := b.auditActions(t); len(got) != 3 || strings.Join(got, ", ") != "retry fwd, retry audit, retry fwd" {
		t.Fatalf("audit = %q", got)
	}
}

// A retry of one delivery attempts its retrying dispatches now. The
// target's earlier Retry-After is not kept for the retry's attempt: when it
// fails again without one, River's own backoff (seconds) schedules the
// next, not the hour asked for before.
func TestRetryDeliveryDropsAnEarlierRetryAfter(t *testing.T) {
	t.Parallel()
	b := retryingBundle(t)
	b.ingest(t, push("g-1"))
	b.ingest(t, push("g-2"))
	b.start(t)
	b.waitRetryingAnHour(t, "g-1", "fwd", 1)
	b.waitRetryingAnHour(t, "g-2", "fwd", 1)

	b.retryAfter.Store(0) // still failing, now without Retry-After
	var res struct {
		Retried []struct {
			Route      string `json:"route"`
			Generation int    `json:"generation"`
		} `json:"retried"`
		Skipped []any `json:"skipped"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/retry", body: `{"routes":["fwd"]}`}, 200, &res)
	if len(res.Retried) != 1 || res.Retried[0].Route != "fwd" || res.Retried[0].Generation != 1 || res.Skipped == nil || len(res.Skipped) != 0 {
		t.Fatalf("retry = %+v", res)
	}
	dbtest.Eventually(t, 20*time.Second, "the retried attempt failed and River backs off on its own", func() error {
		j := b.job(t, "g-1", "fwd")
		if j.State != "retryable" || j.Errors != 2 {
			return fmt.Errorf("%+v", j)
		}
		// River's backoff before a third attempt: 2^4 = 16 s, give or take 10%.
		if j.InSeconds > 60 {
			t.Fatalf("the retried attempt's failure is scheduled %.0f s ahead: the earlier Retry-After pushed it back", j.InSeconds)
		}
		return nil
	})
	if j := b.job(t, "g-2", "fwd"); j.Errors != 1 || j.InSeconds < 3500 {
		t.Fatalf("the other delivery's dispatch was retried too: %+v", j)
	}
	if got := b.auditActions(t); len(got) == 0 || got[0] != "retry fwd github g-1" {
		t.Fatalf("audit = %q, want the retry of g-1's fwd first", got)
	}
}

// A paused route is not retried: the route's retry answers 409 route_paused
// and changes nothing; a delivery's retry skips it, saying why. Once
// resumed, the retry goes through.
func TestRetryLeavesAPausedRouteAlone(t *testing.T) {
	t.Parallel()
	b := retryingBundle(t)
	b.ingest(t, push("g-1"))
	b.start(t)
	b.waitRetryingAnHour(t, "g-1", "fwd", 1)
	b.answer.Store(0)
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/pause"}, 200, nil)

	status, _, body := b.admin(t, adminReq{method: "POST", path: "/admin/routes/fwd/retry"})
	if status != 409 || !strings.Contains(string(body), `"error":"route_paused"`) || !strings.Contains(string(body), "resume") {
		t.Fatalf("retry of a paused route = %d %s", status, body)
	}
	var res struct {
		Retried []any `json:"retried"`
		Skipped []struct {
			Route, Reason string
		} `json:"skipped"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/retry"}, 200, &res)
	if len(res.Retried) != 0 || len(res.Skipped) != 1 || res.Skipped[0].Route != "fwd" || !strings.Contains(res.Skipped[0].Reason, "paused") {
		t.Fatalf("retry of a delivery of a paused route = %+v", res)
	}
	if j := b.job(t, "g-1", "fwd"); j.State != "retryable" || j.InSeconds < 3500 {
		t.Fatalf("a refused retry moved the job: %+v", j)
	}

	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/resume"}, 200, nil)
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/retry"}, 200, &res)
	if len(res.Retried) != 1 || len(res.Skipped) != 0 {
		t.Fatalf("retry after resume = %+v", res)
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 1}, "succeeded")
}

// What an operator gets wrong is a clear 4xx with the contract's error
// body, never a 500, and retries nothing; a delivery with no retrying
// dispatch retries nothing and says so with an empty list.
func TestRetryRefusesBadRequests(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.ingest(t, push("g-1"))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 1}, "succeeded")
	for _, tt := range []struct {
		req    adminReq
		status int
		code   string
	}{
		{adminReq{method: "POST", path: "/admin/routes/nope/retry"}, 404, "not_found"},
		{adminReq{method: "POST", path: "/admin/deliveries/github/nope/retry"}, 404, "not_found"},
		{adminReq{method: "POST", path: "/admin/deliveries/gitlab/g-1/retry"}, 404, "not_found"},
		{adminReq{method: "POST", path: "/admin/deliveries/github/g-1/retry", body: `{"routes":["nope"]}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/deliveries/github/g-1/retry", body: `{"routes":"fwd"}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/deliveries/github/g-1/retry", body: `{"force":true}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/deliveries/github/g-1/retry", body: `{"reason":"a\u0000b"}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/retry", body: `{"reason":5}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/retry", body: `[]`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/retry", token: "wrong"}, 401, "unauthorized"},
		{adminReq{method: "GET", path: "/admin/routes/fwd/retry"}, 405, "method_not_allowed"},
	} {
		status, _, body := b.admin(t, tt.req)
		if status != tt.status || !strings.Contains(string(body), `"error":"`+tt.code+`"`) {
			t.Errorf("%s %s %q = %d %s, want %d %s", tt.req.method, tt.req.path, tt.req.body, status, body, tt.status, tt.code)
		}
	}
	status, _, body := b.admin(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/retry"})
	if status != 200 || strings.TrimSpace(string(body)) != `{"retried":[],"skipped":[]}` {
		t.Fatalf("retry of a delivery without a retrying dispatch = %d %s", status, body)
	}
	// The refusals recorded nothing; the retry that found nothing is recorded.
	if got := b.auditActions(t); strings.Join(got, ", ") != "retry github g-1" {
		t.Fatalf("audit = %q", got)
	}
}
