package hookgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// A database an earlier release made, its tables in public, is moved to the
// gateway's own schema at start with nothing lost: deliveries in every state
// (succeeded, discarded, retrying, pending behind a paused route) are there
// afterwards, row for row; a delivery sent again is a
// duplicate; the dispatch that was retrying goes on to succeed; the service's
// own table stays in public, and its handler finds it by its plain name.
func TestAnEarlierReleasesDatabaseMovesToItsSchema(t *testing.T) {
	url := hookgate.Secret(dbtest.EmptyURL(t))
	var failing atomic.Bool
	failing.Store(true)
	migrate := hookgate.WithMigration(func(ctx context.Context, pool *pgxpool.Pool) error {
		// river_stats is the service's own, whatever its name.
		_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS app_effects (id text); CREATE TABLE IF NOT EXISTS river_stats (n int)`)
		return err
	})
	handlers := []hookgate.Option{migrate,
		hookgate.WithHandler("ok", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			_, err := tx.Exec(ctx, `INSERT INTO app_effects VALUES ($1)`, d.DeliveryID)
			return err
		}),
		hookgate.WithHandler("refuse", func(context.Context, pgx.Tx, hookgate.Delivery) error { return hookgate.Discard(errors.New("no")) }),
		hookgate.WithHandler("flaky", func(context.Context, pgx.Tx, hookgate.Delivery) error {
			if failing.Load() {
				return errors.New("not yet")
			}
			return nil
		}),
	}
	routes := []hookgate.Route{
		{Name: "ok", Match: []string{"stripe:invoice.*"}, Target: "builtin:ok"},
		{Name: "refuse", Match: []string{"stripe:invoice.refused"}, Target: "builtin:refuse"},
		{Name: "flaky", Match: []string{"stripe:invoice.flaky"}, Target: "builtin:flaky", MaxAttempts: 5},
		{Name: "held", Match: []string{"stripe:invoice.held"}, Target: "builtin:ok"},
	}
	// The earlier layout: everything in public.
	old := runGateway(t, hookgate.Config{DatabaseURL: url, Schema: "public", Routes: routes}, handlers...)
	post := func(g *running, path string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.gw.Addr()+path, strings.NewReader(`{"reason":"test"}`))
		req.Header.Set("Authorization", "Bearer admin-token")
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %v %v", path, res, err)
		}
		res.Body.Close()
	}
	post(old, "/admin/routes/held/pause")
	sub := func(id, typ string, created int) string {
		return fmt.Sprintf(`{"id":"evt_%s","type":"%s","created":%d,"data":{"object":{"id":"in_%s","subscription":"sub_1"}}}`, id, typ, created, id)
	}
	for _, e := range []string{sub("paid", "invoice.paid", 1767225600), sub("refused", "invoice.refused", 1767225600),
		sub("flaky", "invoice.flaky", 1767225600), sub("held", "invoice.held", 1767225600)} {
		if got := stripeSends(old.gw.Addr(), e); got != "202 accepted" {
			t.Fatalf("%s: %s", e, got)
		}
	}
	counts := func(pool *pgxpool.Pool, schema string) string {
		var out []string
		// River's jobs of dispatches: a gateway's periodic jobs (retention,
		// recovery) come and go with its runs, before and after the move.
		for _, table := range []string{"hookgate_receipts", "hookgate_dispatches", "river_job WHERE kind = 'hookgate_dispatch'", "hookgate_routes", "hookgate_audit"} {
			var n int
			if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+"."+table).Scan(&n); err != nil {
				t.Fatalf("%s.%s: %v", schema, table, err)
			}
			out = append(out, fmt.Sprintf("%s=%d", table, n))
		}
		var states string
		_ = pool.QueryRow(context.Background(), "SELECT string_agg(route || ':' || state, ' ' ORDER BY route) FROM "+schema+".hookgate_dispatches").Scan(&states)
		return strings.Join(out, " ") + " " + states
	}
	dbtest.Eventually(t, 20*time.Second, "every dispatch in its state", func() error {
		var states string
		_ = old.gw.Pool().QueryRow(context.Background(), `SELECT string_agg(route || ':' || state, ' ' ORDER BY route, delivery_id) FROM public.hookgate_dispatches`).Scan(&states)
		if !strings.Contains(states, "flaky:retrying") || !strings.Contains(states, "refuse:discarded") || !strings.Contains(states, "held:pending") ||
			strings.Count(states, "ok:succeeded") != 4 {
			return fmt.Errorf("%s", states)
		}
		return nil
	})
	before := counts(old.gw.Pool(), "public")
	if _, err := old.stop(); err != nil {
		t.Fatal(err)
	}

	// The new release, on the same database.
	failing.Store(false)
	g := runGateway(t, hookgate.Config{DatabaseURL: url, Routes: routes}, handlers...)
	if after := counts(g.gw.Pool(), "hookgate"); after != before {
		t.Errorf("after the move: %s\nbefore it:     %s", after, before)
	}
	var left int
	if err := g.gw.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND (c.relname LIKE 'hookgate%' OR c.relname LIKE 'river%') AND c.relname <> 'river_stats'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d of hookgate's or River's relations left in public (%v)", left, err)
	}
	var stats string
	if err := g.gw.Pool().QueryRow(context.Background(), `SELECT to_regclass('public.river_stats')::text`).Scan(&stats); err != nil || stats == "" {
		t.Errorf("the service's river_stats was moved out of public: %q, %v", stats, err)
	}
	var appTable string
	if err := g.gw.Pool().QueryRow(context.Background(), `SELECT to_regclass('app_effects')::text`).Scan(&appTable); err != nil || appTable != "app_effects" {
		t.Errorf("the service's table: %q, %v; want it in public, found by its plain name", appTable, err)
	}
	if got := stripeSends(g.gw.Addr(), sub("paid", "invoice.paid", 1767225600)); got != "200 duplicate" {
		t.Errorf("a delivery the earlier release stored, sent again: %s", got)
	}
	post(g, "/admin/routes/held/resume")
	dbtest.Eventually(t, 60*time.Second, "the retrying and the held dispatch succeeded", func() error {
		var states string
		_ = g.gw.Pool().QueryRow(context.Background(), `SELECT string_agg(route || ':' || state, ' ' ORDER BY route) FROM hookgate_dispatches
			WHERE route IN ('flaky', 'held')`).Scan(&states)
		if states != "flaky:succeeded held:succeeded" {
			return fmt.Errorf("%s", states)
		}
		return nil
	})
}

// A service whose tables live in a schema of its own (its DATABASE_URL's
// search_path, or its role's) has its handler find them by their plain
// names: the gateway's connections put hookgate's schema first and the
// service's own search_path after it.
func TestAHandlerFindsTheServicesTablesInTheServicesOwnSchema(t *testing.T) {
	u, err := url.Parse(dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", "svc")
	u.RawQuery = q.Encode()
	migrate := hookgate.WithMigration(func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS svc; CREATE TABLE IF NOT EXISTS effects (id text)`)
		return err
	})
	handler := hookgate.WithHandler("ok", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, d.DeliveryID)
		return err
	})
	g := runGateway(t, hookgate.Config{DatabaseURL: hookgate.Secret(u.String()),
		Routes: []hookgate.Route{{Name: "ok", Match: []string{"stripe:invoice.*"}, Target: "builtin:ok"}}}, migrate, handler)
	if got := stripeSends(g.gw.Addr(), invoice("svc", "invoice.paid")); got != "202 accepted" {
		t.Fatal(got)
	}
	dbtest.Eventually(t, 20*time.Second, "the handler's row in svc.effects", func() error {
		var n int
		if err := g.gw.Pool().QueryRow(context.Background(), `SELECT count(*) FROM svc.effects WHERE id = 'evt_svc'`).Scan(&n); err != nil || n != 1 {
			var state string
			_ = g.gw.Pool().QueryRow(context.Background(), `SELECT state || ' ' || coalesce(last_error, '') FROM hookgate_dispatches`).Scan(&state)
			return fmt.Errorf("%d rows (%v); dispatch %s", n, err, state)
		}
		return nil
	})
}
