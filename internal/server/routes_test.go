package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
)

// routeJSON is a route as GET /admin/routes shows it.
type routeJSON struct {
	Name        string   `json:"name"`
	Match       []string `json:"match"`
	Target      string   `json:"target"`
	Concurrency int      `json:"concurrency"`
	Rate        *string  `json:"rate"`
	State       string   `json:"state"`
	Circuit     string   `json:"circuit"`
	Backlog     struct {
		Pending  int `json:"pending"`
		Running  int `json:"running"`
		Retrying int `json:"retrying"`
	} `json:"backlog"`
	LastSuccessAt *time.Time `json:"last_success_at"`
	LastFailureAt *time.Time `json:"last_failure_at"`
	LastError     *string    `json:"last_error"`
	Succeeded5m   *int       `json:"succeeded_5m"`
	Failed5m      *int       `json:"failed_5m"`
	PauseReason   *string    `json:"pause_reason"`
	PausedBy      *string    `json:"paused_by"`
}

type auditJSON struct {
	Entries []struct {
		At         time.Time `json:"at"`
		Actor      string    `json:"actor"`
		Action     string    `json:"action"`
		Route      *string   `json:"route"`
		Provider   *string   `json:"provider"`
		DeliveryID *string   `json:"delivery_id"`
		Reason     *string   `json:"reason"`
	} `json:"entries"`
	NextCursor *string `json:"next_cursor"`
}

func (b *adminBundle) route(t *testing.T, name string) routeJSON {
	t.Helper()
	var l struct {
		Routes []routeJSON `json:"routes"`
	}
	b.adminJSON(t, adminReq{path: "/admin/routes"}, 200, &l)
	for _, r := range l.Routes {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no route %s in %+v", name, l.Routes)
	return routeJSON{}
}

// Operators see every route, its limits, state, circuit, backlog and recent
// outcomes; a target's credentials never show.
func TestAdminListRoutes(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.ingest(t, githubRequest(ghReq{id: "g-1"}))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 1}, "succeeded")

	status, _, body := b.admin(t, adminReq{path: "/admin/routes"})
	if status != 200 || strings.Contains(string(body), "pw") || strings.Contains(string(body), "sekret") {
		t.Fatalf("GET /admin/routes = %d %s", status, body)
	}
	fwd := b.route(t, "fwd")
	if strings.Join(fwd.Match, " ") != "github:push stripe:invoice.*" || fwd.Target != b.target.URL || fwd.Concurrency != 8 ||
		fwd.Rate != nil || fwd.State != "active" || fwd.Circuit != "closed" || fwd.Succeeded5m == nil || fwd.Failed5m == nil {
		t.Fatalf("fwd = %+v", fwd)
	}
	hidden := b.route(t, "hidden")
	if hidden.Target != "http://127.0.0.1:1/x?token=" {
		t.Fatalf("hidden's target shown as %q", hidden.Target)
	}
	// Outcome counts reach the database within a second or two.
	dbtest.Eventually(t, 10*time.Second, "fwd's outcome counts show one success", func() error {
		if fwd = b.route(t, "fwd"); *fwd.Succeeded5m != 1 || fwd.LastSuccessAt == nil {
			return fmt.Errorf("fwd = %+v", fwd)
		}
		return nil
	})
}

// A paused route's deliveries are accepted and their dispatches wait,
// pending, until it is resumed; pause and resume answer with the route, are
// idempotent, and are in the audit log with the replays, newest first.
func TestAdminPauseAndResume(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.start(t)
	var r routeJSON
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `{"reason":"target deploying"}`}, 200, &r)
	if r.Name != "fwd" || r.State != "paused" || r.PauseReason == nil || *r.PauseReason != "target deploying" || r.PausedBy == nil {
		t.Fatalf("pause = %+v", r)
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/pause"}, 200, &r)
	if r.State != "paused" || *r.PauseReason != "target deploying" {
		t.Fatalf("a second pause changed the route: %+v", r)
	}

	b.ingest(t, githubRequest(ghReq{id: "g-1"}))
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "audit", Generation: 1}, "succeeded") // another route goes on
	// A paused route's River queue is paused: nothing fetches its dispatch, so
	// no signal comes; a fixed wait gives a wrongly fetched one time to run.
	time.Sleep(1200 * time.Millisecond)
	if r = b.route(t, "fwd"); r.Backlog.Pending != 1 {
		t.Fatalf("paused fwd = %+v, want one pending", r)
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 1}, "pending")
	if n := len(b.requests()); n != 0 {
		t.Fatalf("a paused route's target got %d requests", n)
	}
	if status, _, body := b.admin(t, adminReq{path: "/metrics"}); status != 200 || !strings.Contains(string(body), `hookgate_route_paused{route="fwd"} 1`) {
		t.Fatalf("metrics while paused: %d\n%s", status, body)
	}
	// Its queue resumed in River UI: the gateway pauses it again, or every
	// waiting dispatch would be fetched and put back, over and over.
	if err := b.client.QueueResume(context.Background(), "route_fwd", nil); err != nil {
		t.Fatal(err)
	}
	dbtest.Eventually(t, 5*time.Second, "a paused route's queue resumed in River UI paused again", func() error {
		var paused bool
		if err := b.pool.QueryRow(context.Background(), `SELECT paused_at IS NOT NULL FROM river_queue WHERE name = 'route_fwd'`).Scan(&paused); err != nil {
			t.Fatal(err)
		}
		if !paused {
			return errors.New("it stayed running")
		}
		return nil
	})

	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/resume"}, 200, &r)
	if r.State != "active" || r.PauseReason != nil {
		t.Fatalf("resume = %+v", r)
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-1", Route: "fwd", Generation: 1}, "succeeded")
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/resume"}, 200, &r)

	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/g-1/replay", body: `{"routes":["fwd"],"force":true,"reason":"check"}`}, 202, nil)
	var a auditJSON
	b.adminJSON(t, adminReq{path: "/admin/audit"}, 200, &a)
	var got []string
	for _, e := range a.Entries {
		got = append(got, e.Action)
	}
	if strings.Join(got, " ") != "replay resume pause" {
		t.Fatalf("audit actions %v, want replay resume pause", got)
	}
	replay, resume, pause := a.Entries[0], a.Entries[1], a.Entries[2]
	if *replay.Provider != "github" || *replay.DeliveryID != "g-1" || *replay.Reason != "check" || *replay.Route != "fwd" ||
		*resume.Route != "fwd" || resume.Reason != nil || resume.Provider != nil ||
		*pause.Route != "fwd" || *pause.Reason != "target deploying" || !strings.HasPrefix(pause.Actor, "token:") {
		t.Fatalf("audit = %+v", a.Entries)
	}

	// Paged.
	b.adminJSON(t, adminReq{path: "/admin/audit?limit=2"}, 200, &a)
	if len(a.Entries) != 2 || a.NextCursor == nil {
		t.Fatalf("first page = %+v", a)
	}
	b.adminJSON(t, adminReq{path: "/admin/audit?limit=2&cursor=" + *a.NextCursor}, 200, &a)
	if len(a.Entries) != 1 || a.Entries[0].Action != "pause" || a.NextCursor != nil {
		t.Fatalf("second page = %+v", a)
	}
}

// What an operator gets wrong is a clear 4xx, never a 500, and changes nothing.
func TestAdminRoutesRefuseBadRequests(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	for _, tt := range []struct {
		req    adminReq
		status int
		code   string
	}{
		{adminReq{method: "POST", path: "/admin/routes/nope/pause"}, 404, "not_found"},
		{adminReq{method: "POST", path: "/admin/routes/nope/resume"}, 404, "not_found"},
		{adminReq{path: "/admin/routes/nope"}, 404, "not_found"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `{"reason":5}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `{"why":"x"}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `{"reason":"a"}{"x":1}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `null`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/resume", body: ` []`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `{"reason":"a\u0000b"}`}, 400, "bad_request"},
		{adminReq{method: "POST", path: "/admin/routes/fwd/pause", token: "wrong"}, 401, "unauthorized"},
		{adminReq{path: "/admin/routes", token: "-"}, 401, "unauthorized"},
		{adminReq{path: "/admin/audit?cursor=nope"}, 400, "bad_request"},
		{adminReq{path: "/admin/audit?cursor=e30"}, 400, "bad_request"},
		{adminReq{path: "/admin/audit?limit=0"}, 400, "bad_request"},
	} {
		status, _, body := b.admin(t, tt.req)
		if status != tt.status || !strings.Contains(string(body), `"error":"`+tt.code+`"`) {
			t.Errorf("%s %s %q = %d %s, want %d %s", tt.req.method, tt.req.path, tt.req.body, status, body, tt.status, tt.code)
		}
	}
	if r := b.route(t, "fwd"); r.State != "active" {
		t.Fatalf("after refused requests fwd is %s", r.State)
	}
}

func (b *adminBundle) requests() []http.Header {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]http.Header(nil), b.got...)
}

// A target's permanent refusal (a 4xx) is shown as the route's last error,
// and does not count towards its circuit.
func TestARefusalIsTheRoutesLastError(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.answer.Store(http.StatusGone)
	b.start(t)
	b.ingest(t, githubRequest(ghReq{id: "g-410"}))
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-410", Route: "fwd", Generation: 1}, "discarded")
	dbtest.Eventually(t, 5*time.Second, "a refusal is the route's last error", func() error {
		r := b.route(t, "fwd")
		if r.LastError == nil {
			return fmt.Errorf("no last error on the route: %+v", r)
		}
		if !strings.Contains(*r.LastError, "410") || r.Circuit != "closed" {
			t.Fatalf("route after a refusal: %+v, last error %q", r, *r.LastError)
		}
		return nil
	})
}
