package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/replay"
)

// filterRoutes is the fan-out table with two routes: api-prs takes the pull
// requests of repo opened or synchronized (a filter), all every GitHub event.
func filterRoutes(t *testing.T, repo string) fanout.Table {
	t.Helper()
	return routesWithFilters(t, "api-prs=github:pull_request>builtin:log all=github:*>builtin:log", map[string]string{
		"api-prs": fmt.Sprintf(`payload.repository.full_name == %q && payload.action in ["opened", "synchronize"]`, repo),
	})
}

// routesWithFilters is the fan-out table spec (GATEWAY_ROUTES), each route
// named in filters taking that filter, as a configuration file gives it.
func routesWithFilters(t *testing.T, spec string, filters map[string]string) fanout.Table {
	t.Helper()
	table, err := fanout.Parse(spec, []string{"log"}, fanout.Defaults{Concurrency: 4, Sources: testSourceNames()})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range table {
		if expr, ok := filters[r.Name]; ok {
			if table[i].Filter, err = filter.Compile(expr); err != nil {
				t.Fatal(err)
			}
		}
	}
	return table
}

// A route with a filter takes only the deliveries its filter is true for; a
// delivery on which the filter fails is stored and dispatched to the other
// routes, and the failure is reported; a replay evaluates the filters as
// they are at replay time.
func TestRouteFiltersDecideAtIngestAndReplay(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var failed []string
	reporter := &filter.Reporter{Count: func(route string) { mu.Lock(); failed = append(failed, route); mu.Unlock() },
		Logger: slog.New(slog.DiscardHandler)}
	b := setup(t, setupOpts{routes: filterRoutes(t, "acme/api"), filters: reporter})

	pr := func(id, repo, action string) *http.Request {
		body := fmt.Sprintf(`{"action":%q,"number":1,"pull_request":{"id":7,"updated_at":"2026-11-30T11:00:00Z"},"repository":{"full_name":%q}}`, action, repo)
		return githubRequest(ghReq{id: id, event: "pull_request", body: []byte(body)})
	}
	for _, c := range []struct {
		req    *http.Request
		routes float64
	}{
		{pr("f-1", "acme/api", "opened"), 2},
		{pr("f-2", "acme/api", "closed"), 1},
		{pr("f-3", "acme/web", "opened"), 1},
		// No repository: the filter fails, the delivery is not harmed.
		{githubRequest(ghReq{id: "f-4", event: "pull_request", body: []byte(`{"action":"opened","pull_request":{"id":8}}`)}), 1},
	} {
		res := b.do(t, c.req)
		if res.status != http.StatusAccepted || res.body["routes"] != c.routes {
			t.Fatalf("%s: %d %v, want 202 with routes %v", c.req.Header.Get("X-GitHub-Delivery"), res.status, res.body, c.routes)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM hookgate_dispatches WHERE route = 'api-prs'`); n != 1 {
		t.Errorf("api-prs dispatches: %d, want 1", n)
	}
	if !slices.Equal(failed, []string{"api-prs"}) {
		t.Errorf("filter failures reported: %v, want one of api-prs", failed)
	}

	// The filter now names acme/web: a replay of f-3 dispatches it to
	// api-prs, and one of f-1 no longer does.
	client, err := dispatch.NewInserter(b.pool, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := dispatch.NewEnqueuer(client, filterRoutes(t, "acme/web"), dispatch.EnqueuerConfig{Filters: reporter})
	redispatch := func(id string, req replay.Request) replay.Result {
		t.Helper()
		tx, err := b.pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		res, err := replay.RedispatchTx(context.Background(), tx, now, "github", id, req)
		if err != nil {
			t.Fatalf("replay %s: %v", id, err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		return res
	}
	// (Route all's dispatch is still pending here: a replay leaves it be.)
	res := redispatch("f-3", replay.Request{Force: true})
	if len(res.Created) != 1 || res.Created[0].Route != "api-prs" {
		t.Errorf("replay of f-3 under the new filter: %+v, want api-prs", res.Created)
	}
	res = redispatch("f-1", replay.Request{Force: true})
	if slices.ContainsFunc(res.Created, func(c dispatch.Created) bool { return c.Route == "api-prs" }) {
		t.Errorf("replay of f-1 under the new filter: %+v, want no api-prs", res.Created)
	}
	// The answer says why api-prs was left out.
	if !slices.ContainsFunc(res.Skipped, func(s replay.Skip) bool {
		return s.Route == "api-prs" && strings.Contains(s.Reason, "filter is now false")
	}) {
		t.Errorf("replay of f-1: skipped %+v, want api-prs and its filter", res.Skipped)
	}
	// Asking for the route by name says why it is refused.
	tx, err := b.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	_, err = replay.RedispatchTx(context.Background(), tx, now, "github", "f-1", replay.Request{Routes: []string{"api-prs"}})
	if !errors.Is(err, replay.ErrUnknownRoute) || !strings.Contains(err.Error(), `route "api-prs"'s filter is false`) {
		t.Errorf("replay of f-1 to api-prs by name: %v", err)
	}
}
