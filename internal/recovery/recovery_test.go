package recovery_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/recovery"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/verify"
	"github.com/hookgate/hookgate/internal/yield"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const (
	ghSecret     = "gh-recovery-secret"
	stripeSecret = "whsec_recovery"
	stripeKey    = "rk_test_recovery"
)

// gateway is a whole gateway on a test database: ingest over HTTP, two
// routes (fwd forwards everything to a target that counts what it gets;
// audit logs it), River working the dispatches.
type gateway struct {
	pool     *pgxpool.Pool
	srv      *httptest.Server
	ingester *ingest.Ingester
	client   *river.Client[pgx.Tx]

	mu  sync.Mutex
	got map[string]int // forwards received, by delivery id
}

func startGateway(t *testing.T) *gateway {
	t.Helper()
	return startGatewayWith(t, recovery.RecovererConfig{})
}

// startGatewayWith starts a gateway whose River client's recovery worker
// runs a Recoverer configured with job.
func startGatewayWith(t *testing.T, job recovery.RecovererConfig) *gateway {
	t.Helper()
	g := &gateway{pool: dbtest.NewPool(t), got: map[string]int{}}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.got[r.Header.Get("X-Hookgate-Delivery")]++
		g.mu.Unlock()
	}))
	t.Cleanup(target.Close)
	logger := slog.New(slog.DiscardHandler)
	handlers := handlers.Default(logger)
	table, err := fanout.Parse("fwd=*:*>"+target.URL+" audit=*:*>builtin:log", handlers.Names(),
		fanout.Defaults{Concurrency: 8, Timeout: 5 * time.Second, MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := routes.Sync(context.Background(), g.pool, table); err != nil {
		t.Fatal(err)
	}
	store := &receipts.Store{Retention: 72 * time.Hour}
	inserter, err := dispatch.NewInserter(g.pool, logger)
	if err != nil {
		t.Fatal(err)
	}
	enq := dispatch.NewEnqueuer(inserter, table, dispatch.EnqueuerConfig{MaxAttempts: 5})
	guard := routes.NewGuard(g.pool, table, inserter, logger)
	g.ingester = ingest.NewIngester(g.pool, store, enq, ingest.Config{})
	job.MinAge = time.Millisecond
	rec := recovery.NewRecoverer(g.pool, g.ingester, metrics.Discard(), job)
	g.client, err = dispatch.NewClient(g.pool, dispatch.ClientConfig{
		Dispatch: dispatch.NewWorker(g.pool, table, store, handlers, forward.New(nil, 5*time.Second, 8),
			guard, yield.Never(), metrics.Discard(), logger),
		Workers: 8, Logger: logger,
		Extra: func(w *river.Workers) error { return river.AddWorkerSafely(w, &recovery.Worker{Recoverer: rec}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	g.srv = httptest.NewServer(server.New(server.Config{
		Logger: logger,
		Providers: mustRegistry(t,
			providers.GitHub{Secrets: verify.Secrets{ghSecret}},
			providers.Stripe{Secrets: verify.Secrets{stripeSecret}, Tolerance: 5 * time.Minute},
		),
		Ingester: g.ingester,
		Ready:    func(context.Context) error { return nil },
	}))
	t.Cleanup(g.srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { guard.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	dbtest.StartRiver(t, g.client)
	return g
}

// recoverer returns a Recoverer of g's database with the given clients.
func (g *gateway) recoverer(gh *recovery.GitHub, st *recovery.Stripe) *recovery.Recoverer {
	return recovery.NewRecoverer(g.pool, g.ingester, metrics.Discard(),
		recovery.RecovererConfig{GitHub: gh, Stripe: st, MinAge: time.Millisecond})
}

// forwarded waits until every id was forwarded, then returns the counts.
func (g *gateway) forwarded(t *testing.T, ids []string) map[string]int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		g.mu.Lock()
		all := true
		for _, id := range ids {
			all = all && g.got[id] > 0
		}
		counts := map[string]int{}
		for k, v := range g.got {
			counts[k] = v
		}
		g.mu.Unlock()
		if all || time.Now().After(deadline) {
			return counts
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func githubClient(t *testing.T, f *fakeGitHub, hooks string) *recovery.GitHub {
	t.Helper()
	hs, err := recovery.ParseHooks(hooks)
	if err != nil {
		t.Fatal(err)
	}
	gh, err := recovery.NewGitHub(recovery.GitHubConfig{Hooks: hs, Token: f.token, APIURL: f.srv.URL, MutationGap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return gh
}

func pushBody(n int) []byte {
	// Each on a repository of its own: pushes to one branch are ordered, and
	// an older one is superseded rather than forwarded.
	return fmt.Appendf(nil, `{"ref":"refs/heads/main","after":"%040d","repository":{"id":%d,"full_name":"acme/api","pushed_at":%d},"pusher":{"name":"<b>eve</b>"}}`,
		n, 1000+n, 1767000000+n)
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The gateway was down: GitHub's attempts at six deliveries failed (a
// connection refused, 503s) on a repository hook and an organization hook.
// After it starts, recovery lists both hooks (paginated, through a primary
// and a secondary rate limit) and asks for exactly those six; GitHub sends
// each original signed body, which is stored byte for byte and forwarded once
// per route. Deliveries already stored are never asked for, nor is one GitHub
// saw answered 2xx whose receipt is gone; a second run asks for nothing.
func TestRecoveryRedeliversWhatGitHubCouldNotDeliver(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	f := newFakeGitHub(t, ghSecret)
	f.target = g.srv.URL + "/webhooks/github"
	f.pageSize = 3
	base := time.Now().Add(-2 * time.Hour)
	var stored, missed []string
	bodies := map[string][]byte{}
	for i := range 5 {
		// Before the outage: delivered and stored.
		guid := fmt.Sprintf("a1000000-0000-4000-8000-%012d", i)
		bodies[guid] = pushBody(i)
		f.add("acme/api/42", 42, guid, "push", bodies[guid], base.Add(time.Duration(i)*time.Minute), 0)
		d := f.hooks["acme/api/42"][len(f.hooks["acme/api/42"])-1]
		if code := f.send(d); code != http.StatusAccepted {
			t.Fatalf("storing %s before the outage: %d", guid, code)
		}
		d.StatusCode, d.Status = 202, "OK"
		stored = append(stored, guid)
	}
	for i := 5; i < 9; i++ {
		guid := fmt.Sprintf("b2000000-0000-4000-8000-%012d", i)
		bodies[guid] = pushBody(i)
		status := 503
		if i == 5 {
			status = 0 // connection refused: no answer at all
		}
		f.add("acme/api/42", 42, guid, "push", bodies[guid], base.Add(time.Duration(10+i)*time.Minute), status)
		missed = append(missed, guid)
	}
	for i := 9; i < 11; i++ {
		guid := fmt.Sprintf("c3000000-0000-4000-8000-%012d", i)
		bodies[guid] = pushBody(i)
		f.add("orgs/acme/7", 7, guid, "push", bodies[guid], base.Add(time.Duration(10+i)*time.Minute), 502)
		missed = append(missed, guid)
	}
	// GitHub saw this one answered 202, but its receipt is gone (retention):
	// asking again would repeat its effects.
	f.add("acme/api/42", 42, "d4000000-0000-4000-8000-000000000001", "push", pushBody(99), base, 202)
	// Another hook's copy of a stored event: this hook has no receipt of it.
	f.add("orgs/acme/7", 7, stored[0], "push", bodies[stored[0]], base.Add(30*time.Minute), 503)
	missed = append(missed, stored[0]+"@7")
	f.primaryOnce, f.secondaryOnce = true, true

	r := g.recoverer(githubClient(t, f, "repo:acme/api:42 org:acme:7"), nil)
	rep, err := r.Run(context.Background(), "github", recovery.Options{})
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if f.limited != 2 {
		t.Errorf("rate limits met: %d, want 2 (one primary, one secondary)", f.limited)
	}
	if len(rep.Requested) != 7 || len(rep.Found) != 7 {
		t.Fatalf("found %v, requested %v; want the 7 missed", rep.Found, rep.Requested)
	}
	for _, guid := range stored {
		if n := f.askedFor(guid); guid != stored[0] && n != 0 {
			t.Errorf("%s was stored, and asked for %d times", guid, n)
		}
	}
	if n := f.askedFor("d4000000-0000-4000-8000-000000000001"); n != 0 {
		t.Errorf("a delivery GitHub saw answered 2xx was asked for %d times", n)
	}
	for _, guid := range missed {
		guid, _, _ = strings.Cut(guid, "@")
		if n := f.askedFor(guid); n != 1 {
			t.Errorf("%s asked for %d times, want 1", guid, n)
		}
	}
	// Stored byte for byte, under the right hook.
	for _, m := range missed {
		guid, hook, other := strings.Cut(m, "@")
		scope := "42"
		if strings.HasPrefix(guid, "c3") {
			scope = "7"
		}
		if other {
			scope = hook
		}
		var body []byte
		err := g.pool.QueryRow(context.Background(), `SELECT body FROM hookgate_receipts WHERE provider = 'github' AND scope = $1 AND delivery_id = $2`,
			scope, guid).Scan(&body)
		if err != nil {
			t.Fatalf("%s of hook %s: %v", guid, scope, err)
		}
		if !bytes.Equal(body, bodies[guid]) {
			t.Errorf("%s stored as %q, sent %q", guid, body, bodies[guid])
		}
	}
	// Dispatched once per route: the other hook's copy of a stored event
	// added a receipt and no dispatch.
	all := append(append([]string{}, stored...), missed[:6]...)
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_dispatches WHERE delivery_id = ANY($1)`, all); n != 2*len(all) {
		t.Errorf("dispatches: %d, want %d (one per route)", n, 2*len(all))
	}
	got := g.forwarded(t, all)
	for _, id := range all {
		if got[id] != 1 {
			t.Errorf("%s forwarded %d times, want 1", id, got[id])
		}
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_audit WHERE action = 'recover' AND provider = 'github' AND actor = 'recovery'`); n != 7 {
		t.Errorf("audit entries: %d, want 7", n)
	}

	// The next run finds everything stored.
	before := f.totalAsked()
	rep, err = r.Run(context.Background(), "github", recovery.Options{})
	if err != nil || len(rep.Found) != 0 || f.totalAsked() != before {
		t.Fatalf("second run: %+v, %v; asked %d more", rep, err, f.totalAsked()-before)
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_recovery_checkpoints WHERE source LIKE 'github:%' AND checkpoint > now() - interval '1 hour'`); n != 2 {
		t.Errorf("checkpoints moved: %d, want 2", n)
	}
}

// Two processes' recovery jobs running at once ask for each GUID once; a
// GUID that never arrives is asked for at most three times, ever, and then
// the checkpoint passes it.
func TestRecoveryAsksForEachGUIDOnceAndAtMostThrice(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	f := newFakeGitHub(t, ghSecret)
	f.target = g.srv.URL + "/webhooks/github"
	f.deliver = false // GitHub accepts each request; nothing arrives
	f.pageSize = 5
	var guids []string
	for i := range 12 {
		guid := fmt.Sprintf("e5000000-0000-4000-8000-%012d", i)
		f.add("acme/api/42", 42, guid, "push", pushBody(i), time.Now().Add(-time.Hour), 503)
		guids = append(guids, guid)
	}
	// A GUID no delivery could have is reported, never asked for.
	f.add("acme/api/42", 42, "e5000000-bad-\x01", "push", pushBody(99), time.Now().Add(-time.Hour), 503)
	// Two processes: two clients, two recoverers, one database.
	a := g.recoverer(githubClient(t, f, "repo:acme/api:42"), nil)
	b := g.recoverer(githubClient(t, f, "repo:acme/api:42"), nil)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, r := range []*recovery.Recoverer{a, b} {
		wg.Go(func() { _, errs[i] = r.Run(context.Background(), "github", recovery.Options{}) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	for _, guid := range guids {
		if n := f.askedFor(guid); n != 1 {
			t.Errorf("%s asked for %d times by two processes at once, want 1", guid, n)
		}
	}
	// Asked lately: not again yet, and the report says why.
	rep, err := a.Run(context.Background(), "github", recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.totalAsked(); n != 12 {
		t.Fatalf("asked %d times in all right after, want 12", n)
	}
	waiting := 0
	for _, sk := range rep.Skipped {
		if strings.Contains(sk.Reason, "waiting for it to arrive") {
			waiting++
		}
	}
	if waiting != 12 || !slices.ContainsFunc(rep.Skipped, func(sk recovery.Skip) bool {
		return sk.DeliveryID == "e5000000-bad-\x01" && strings.Contains(sk.Reason, "a GUID no delivery could have")
	}) {
		t.Errorf("the report of a run that asked for nothing: %+v", rep.Skipped)
	}
	// Time passes; each run asks again, up to three times in all.
	for round := 2; round <= 5; round++ {
		if _, err := g.pool.Exec(context.Background(), `UPDATE hookgate_recovery_requests SET asked_at = asked_at - interval '10 minutes'`); err != nil {
			t.Fatal(err)
		}
		rep, err := a.Run(context.Background(), "github", recovery.Options{})
		if err != nil {
			t.Fatal(err)
		}
		gaveUp := slices.DeleteFunc(rep.Skipped, func(sk recovery.Skip) bool { return !strings.Contains(sk.Reason, "never arrived") })
		if want := map[bool]int{true: 12}[round == 4]; len(gaveUp) != want {
			t.Errorf("round %d: %d GUIDs reported given up on, want %d", round, len(gaveUp), want)
		}
		want := min(round, recovery.MaxAttempts)
		for _, guid := range guids {
			if n := f.askedFor(guid); n != want {
				t.Fatalf("round %d: %s asked for %d times, want %d", round, guid, n, want)
			}
		}
	}
	// Given up on once (in round 4): recorded the first time only.
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_audit WHERE action = 'recover' AND reason LIKE 'asked GitHub%'`); n != 36 {
		t.Errorf("audit entries of requests: %d, want 36 (one per request)", n)
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_audit WHERE action = 'recover' AND reason LIKE 'gave up%'`); n != 12 {
		t.Errorf("audit entries of GUIDs given up on: %d, want 12 (once each)", n)
	}
	// Given up on: the checkpoint is no longer held back by them.
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_recovery_checkpoints WHERE checkpoint > now() - interval '20 minutes'`); n != 1 {
		t.Errorf("checkpoint held back by deliveries given up on")
	}
}

// A dry run lists and compares, and asks for, stores and records nothing.
func TestRecoveryDryRunAsksForNothing(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	f := newFakeGitHub(t, ghSecret)
	f.target = g.srv.URL + "/webhooks/github"
	f.add("acme/api/42", 42, "f6000000-0000-4000-8000-000000000001", "push", pushBody(1), time.Now().Add(-time.Hour), 503)
	st := newFakeStripe(t, stripeKey)
	st.events = append(st.events, stripeEvent("evt_dry1", "invoice.paid", "in_dry1", time.Now().Add(-time.Hour)))
	stripeClient, err := recovery.NewStripe(recovery.StripeConfig{APIKey: stripeKey, APIURL: st.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := g.recoverer(githubClient(t, f, "repo:acme/api:42"), stripeClient)
	for _, p := range []string{"github", "stripe"} {
		rep, err := r.Run(context.Background(), p, recovery.Options{DryRun: true})
		if err != nil || len(rep.Found) != 1 || len(rep.Requested)+len(rep.Stored) != 0 || !rep.DryRun {
			t.Fatalf("%s dry run: %+v, %v", p, rep, err)
		}
	}
	if f.totalAsked() != 0 {
		t.Errorf("a dry run asked GitHub for %d redeliveries", f.totalAsked())
	}
	for _, table := range []string{"hookgate_receipts", "hookgate_audit", "hookgate_recovery_requests", "hookgate_recovery_checkpoints"} {
		if n := count(t, g.pool, "SELECT count(*) FROM "+table); n != 0 {
			t.Errorf("a dry run wrote %d rows into %s", n, table)
		}
	}
}

// Stripe events the gateway missed are stored once, as the API returned
// them, under scope "recovered", and dispatched once per route; the signed
// delivery of such an event that arrives later is 202 with no new dispatch.
func TestStripeRecoveryStoresMissedEventsOnce(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	st := newFakeStripe(t, stripeKey)
	base := time.Now().Add(-3 * time.Hour)
	for i := range 5 {
		st.events = append(st.events, stripeEvent("evt_r"+strconv.Itoa(i), "invoice.paid", "in_"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Minute)))
	}
	// Older than the lookback: not listed.
	st.events = append([]map[string]any{stripeEvent("evt_old", "invoice.paid", "in_old", time.Now().Add(-100*time.Hour))}, st.events...)
	// Two arrived signed, as Stripe sends them.
	for _, i := range []int{1, 3} {
		if code, _ := postStripe(t, g, st.raw(st.events[i+1])); code != http.StatusAccepted {
			t.Fatalf("signed delivery: %d", code)
		}
	}
	client, err := recovery.NewStripe(recovery.StripeConfig{APIKey: stripeKey, APIURL: st.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := g.recoverer(nil, client)
	st.tooMany = 2 // Stripe's rate limit, waited out
	rep, err := r.Run(context.Background(), "stripe", recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"evt_r0", "evt_r2", "evt_r4"}
	if fmt.Sprint(rep.Stored) != fmt.Sprint(want) || fmt.Sprint(rep.Found) != fmt.Sprint(want) {
		t.Fatalf("found %v, stored %v; want %v", rep.Found, rep.Stored, want)
	}
	if st.calls < 3 {
		t.Errorf("the listing took %d pages; the fake pages by 2", st.calls)
	}
	for _, id := range want {
		var body []byte
		err := g.pool.QueryRow(context.Background(), `SELECT body FROM hookgate_receipts WHERE provider = 'stripe' AND scope = 'recovered' AND delivery_id = $1`, id).Scan(&body)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		i, _ := strconv.Atoi(strings.TrimPrefix(id, "evt_r"))
		if !bytes.Equal(body, st.raw(st.events[i+1])) {
			t.Errorf("%s stored as\n%s\nthe API returned\n%s", id, body, st.raw(st.events[i+1]))
		}
	}
	// Again: nothing new.
	rep, err = r.Run(context.Background(), "stripe", recovery.Options{Since: &base})
	if err != nil || len(rep.Stored) != 0 || len(rep.Found) != 0 {
		t.Fatalf("second run: %+v, %v", rep, err)
	}
	// The signed copy arrives late: accepted, no new dispatch.
	code, answer := postStripe(t, g, st.raw(st.events[1]))
	if code != http.StatusAccepted || answer["routes"] != float64(0) {
		t.Fatalf("the signed copy of a recovered event: %d %v", code, answer)
	}
	ids := []string{"evt_r0", "evt_r1", "evt_r2", "evt_r3", "evt_r4"}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_dispatches WHERE delivery_id = ANY($1)`, ids); n != 10 {
		t.Errorf("dispatches: %d, want 10 (two routes, five events)", n)
	}
	got := g.forwarded(t, ids)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("%s forwarded %d times, want 1", id, got[id])
		}
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_receipts WHERE delivery_id = 'evt_old'`); n != 0 {
		t.Error("an event older than the lookback was stored")
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_audit WHERE action = 'recover' AND provider = 'stripe'`); n != 3 {
		t.Errorf("audit entries: %d, want 3", n)
	}
}

// What Stripe's API lists that the gateway cannot store (an event whose id
// cannot be read, one without a type, one listed twice) is reported as skipped,
// and the rest is stored; an unreadable event that ends a page ends the
// listing with an error, after what was found is stored.
func TestStripeRecoverySkipsWhatItCannotStore(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	st := newFakeStripe(t, stripeKey)
	at := func(m int) time.Time { return time.Now().Add(-time.Hour + time.Duration(m)*time.Minute) }
	unreadable := stripeEvent("", "invoice.paid", "in_x", at(2))
	unreadable["id"] = 777
	untyped := stripeEvent("evt_untyped", "", "in_u", at(4))
	untyped["type"] = nil
	// Oldest first; the fake lists newest first, two to a page:
	// [ok3 dup] [dup ok2] [777 ok1] [untyped ok0].
	st.events = []map[string]any{
		stripeEvent("evt_ok0", "invoice.paid", "in_0", at(0)), untyped,
		stripeEvent("evt_ok1", "invoice.paid", "in_1", at(1)), unreadable,
		stripeEvent("evt_ok2", "invoice.paid", "in_2", at(3)),
		stripeEvent("evt_dup", "invoice.paid", "in_d", at(5)), stripeEvent("evt_dup", "invoice.paid", "in_d", at(5)),
		stripeEvent("evt_ok3", "invoice.paid", "in_3", at(6)),
	}
	client, err := recovery.NewStripe(recovery.StripeConfig{APIKey: stripeKey, APIURL: st.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := g.recoverer(nil, client)
	rep, err := r.Run(context.Background(), "stripe", recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.Stored)
	if want := []string{"evt_dup", "evt_ok0", "evt_ok1", "evt_ok2", "evt_ok3"}; !slices.Equal(rep.Stored, want) {
		t.Errorf("stored %v, want %v", rep.Stored, want)
	}
	skipped := map[string]string{}
	for _, sk := range rep.Skipped {
		skipped[sk.DeliveryID] = sk.Reason
	}
	for id, why := range map[string]string{"777": "cannot be read", "evt_untyped": "type", "evt_dup": "listed twice"} {
		if !strings.Contains(skipped[id], why) {
			t.Errorf("skipped %s: %q, want a reason saying %q (all: %+v)", id, skipped[id], why, rep.Skipped)
		}
	}
	if len(rep.Skipped) != 3 {
		t.Errorf("skipped %+v, want 3", rep.Skipped)
	}

	// An unreadable event last in a page with more after it.
	edge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","has_more":true,"url":"/v1/events","data":[
			{"id":"evt_edge1","object":"event","type":"invoice.paid","created":%d,"data":{"object":{"id":"in_e1"}}},
			{"id":{"x":1},"object":"event","type":"invoice.paid","created":%d,"data":{"object":{"id":"in_e2"}}}]}`,
			at(0).Unix(), at(0).Unix())
	}))
	defer edge.Close()
	client, err = recovery.NewStripe(recovery.StripeConfig{APIKey: stripeKey, APIURL: edge.URL})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = g.recoverer(nil, client).Run(context.Background(), "stripe", recovery.Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot go past") || !slices.Equal(rep.Stored, []string{"evt_edge1"}) {
		t.Errorf("a page ending in an unreadable event: stored %v, %v", rep.Stored, err)
	}
}

func postStripe(t *testing.T, g *gateway, body []byte) (int, map[string]any) {
	t.Helper()
	stripe := providers.Stripe{Secrets: verify.Secrets{stripeSecret}}.Source()
	req, err := providers.NewRequest(t.Context(), stripe, g.srv.URL+"/webhooks/stripe", body, "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var answer map[string]any
	_ = json.Unmarshal(b, &answer)
	return res.StatusCode, answer
}

// With a GitHub App, the App's own hook is read with the App's JWT, and a
// repository hook through the App's installation token.
func TestRecoveryWithAGitHubApp(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	f := newFakeGitHub(t, ghSecret)
	f.target = g.srv.URL + "/webhooks/github"
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	f.appID, f.appKey, f.installation, f.installToken, f.token = 314, &key.PublicKey, 99, "ghs_installation", "-"
	f.add("app", 555, "a7000000-0000-4000-8000-000000000001", "push", pushBody(1), time.Now().Add(-time.Hour), 503)
	f.add("acme/api/42", 42, "a7000000-0000-4000-8000-000000000002", "push", pushBody(2), time.Now().Add(-time.Hour), 503)
	hooks, _ := recovery.ParseHooks("app repo:acme/api:42")
	gh, err := recovery.NewGitHub(recovery.GitHubConfig{Hooks: hooks, AppID: 314, AppKeyFile: keyFile, APIURL: f.srv.URL, MutationGap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := g.recoverer(gh, nil).Run(context.Background(), "github", recovery.Options{})
	if err != nil || len(rep.Requested) != 2 {
		t.Fatalf("recover with an App: %+v, %v", rep, err)
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_receipts WHERE (scope, delivery_id) IN (('555', 'a7000000-0000-4000-8000-000000000001'), ('42', 'a7000000-0000-4000-8000-000000000002'))`); n != 2 {
		t.Errorf("receipts: %d, want 2", n)
	}
}

// Configuration mistakes are refused before any request.
func TestRecoveryRefusesBadConfiguration(t *testing.T) {
	for _, c := range []struct {
		hooks string
		cfg   recovery.GitHubConfig
		want  string
	}{
		{"repo:acme:42", recovery.GitHubConfig{Token: "t"}, "is not repo:OWNER/NAME:HOOK_ID"},
		{"repo:acme/api:x", recovery.GitHubConfig{Token: "t"}, "positive number"},
		{"org:acme:0", recovery.GitHubConfig{Token: "t"}, "positive number"},
		{"org:ac/me:7", recovery.GitHubConfig{Token: "t"}, "is not repo"},
		{"user:bob:1", recovery.GitHubConfig{Token: "t"}, "is not repo"},
		{"org:acme:7 org:acme:7", recovery.GitHubConfig{Token: "t"}, "listed twice"},
		{"org:acme:7", recovery.GitHubConfig{}, "needs GITHUB_TOKEN or a GitHub App"},
		{"app", recovery.GitHubConfig{Token: "t"}, "needs a GitHub App"},
		{"org:acme:7", recovery.GitHubConfig{AppID: 1}, "needs both"},
		{"org:acme:7", recovery.GitHubConfig{AppID: 1, AppKeyFile: "/nonexistent.pem"}, "GITHUB_APP_PRIVATE_KEY_FILE"},
		// The key itself where its file's path belongs: not shown.
		{"org:acme:7", recovery.GitHubConfig{AppID: 1, AppKeyFile: "-----BEGIN RSA PRIVATE KEY-----\nMIIEB7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2\n-----END RSA PRIVATE KEY-----"},
			"GITHUB_APP_PRIVATE_KEY_FILE: the file it names cannot be read"},
		{"org:acme:7", recovery.GitHubConfig{Token: "t", APIURL: "ftp://x"}, "GITHUB_API_URL"},
		{"org:acme:7", recovery.GitHubConfig{Token: "t", APIURL: "https://u:p@ghe.example/api/v3"}, "GITHUB_API_URL"},
		// A secret pasted where a hook or a URL belongs: named by its place, not shown.
		{"org:acme:7 B7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2", recovery.GitHubConfig{Token: "t"}, "entry 2 is not repo"},
		{"org:acme:7", recovery.GitHubConfig{Token: "t", APIURL: "B7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2"}, "GITHUB_API_URL"},
	} {
		hooks, err := recovery.ParseHooks(c.hooks)
		if err == nil {
			c.cfg.Hooks = hooks
			_, err = recovery.NewGitHub(c.cfg)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %+v: %v, want an error saying %q", c.hooks, c.cfg, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "MIIE") || strings.Contains(err.Error(), "B7E1F0A9")) {
			t.Errorf("%q: the error shows the key: %v", c.hooks, err)
		}
	}
}

// The periodic job: one run of a provider waiting or under way at a time,
// however many processes schedule it, and it recovers what a run by hand
// would.
func TestRecoveryRunsAsOneRiverJobAtATime(t *testing.T) {
	t.Parallel()
	st := newFakeStripe(t, stripeKey)
	st.events = append(st.events, stripeEvent("evt_job1", "invoice.paid", "in_job1", time.Now().Add(-time.Hour)))
	client, err := recovery.NewStripe(recovery.StripeConfig{APIKey: stripeKey, APIURL: st.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	g := startGatewayWith(t, recovery.RecovererConfig{Stripe: client})
	ctx := context.Background()
	// Two processes' schedulers insert at once, in one transaction so that
	// neither runs before the other is inserted.
	tx, err := g.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := g.client.InsertTx(ctx, tx, recovery.JobArgs{Provider: "stripe"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := g.client.InsertTx(ctx, tx, recovery.JobArgs{Provider: "stripe"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !second.UniqueSkippedAsDuplicate || second.Job.ID != first.Job.ID {
		t.Fatalf("a second recovery job was inserted beside the first")
	}
	dbtest.Eventually(t, 15*time.Second, "the recovery job stores the event", func() error {
		if count(t, g.pool, `SELECT count(*) FROM hookgate_receipts WHERE delivery_id = 'evt_job1' AND scope = 'recovered'`) == 0 {
			return errors.New("it stored nothing")
		}
		return nil
	})
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_audit WHERE actor = 'recovery' AND delivery_id = 'evt_job1'`); n != 1 {
		t.Errorf("audit entries of the job: %d, want 1", n)
	}
}

// An API whose listing never ends (a next page always named, has_more
// always true) ends the run with an error instead of holding it forever.
func TestRecoveryStopsAListingThatNeverEnds(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	at := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			fmt.Fprintf(w, `{"object":"list","has_more":true,"url":"/v1/events","data":[{"id":"evt_loop","object":"event","type":"invoice.paid","created":%d,"data":{"object":{"id":"in_1"}}}]}`,
				time.Now().Add(-time.Hour).Unix())
			return
		}
		w.Header().Set("Link", `<http://`+r.Host+r.URL.Path+`?cursor=same>; rel="next"`)
		fmt.Fprintf(w, `[{"id":1,"guid":"a0000000-0000-4000-8000-000000000001","delivered_at":%q,"status_code":503,"event":"push"}]`, at)
	}))
	defer endless.Close()
	hooks, _ := recovery.ParseHooks("repo:acme/api:42")
	gh, err := recovery.NewGitHub(recovery.GitHubConfig{Hooks: hooks, Token: "t", APIURL: endless.URL})
	if err != nil {
		t.Fatal(err)
	}
	st, err := recovery.NewStripe(recovery.StripeConfig{APIKey: "rk_test", APIURL: endless.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := g.recoverer(gh, st)
	for _, p := range []string{"github", "stripe"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := r.Run(ctx, p, recovery.Options{})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "did not end") {
			t.Errorf("%s: an endless listing gave %v", p, err)
		}
	}
	// A page of nothing that promises more (stripe-go panicked on it).
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","has_more":true,"url":"/v1/events","data":[]}`)
	}))
	defer empty.Close()
	st, err = recovery.NewStripe(recovery.StripeConfig{APIKey: "rk_test", APIURL: empty.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.recoverer(nil, st).Run(context.Background(), "stripe", recovery.Options{}); err == nil || !strings.Contains(err.Error(), "did not end") {
		t.Errorf("an empty page with more to come: %v", err)
	}
}

// A redelivery GitHub refuses (a token that may only read webhooks) is
// reported with GitHub's answer and is not counted as an ask: once the token
// may write, the GUID is asked for, 3 times at most as ever.
func TestRecoveryDoesNotCountARefusedRedelivery(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	f := newFakeGitHub(t, ghSecret)
	f.target = g.srv.URL + "/webhooks/github"
	f.deliver = false
	f.readOnly = true
	guid := "e7000000-0000-4000-8000-000000000001"
	f.add("acme/api/42", 42, guid, "push", pushBody(1), time.Now().Add(-time.Hour), 503)
	r := g.recoverer(githubClient(t, f, "repo:acme/api:42"), nil)
	for range 4 {
		rep, err := r.Run(context.Background(), "github", recovery.Options{})
		if err == nil || !strings.Contains(err.Error(), "Resource not accessible") {
			t.Fatalf("a refused redelivery: %v", err)
		}
		if len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0].Reason, "not counted as an ask") {
			t.Fatalf("the report of a refused redelivery: %+v", rep.Skipped)
		}
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_recovery_requests`); n != 0 {
		t.Errorf("refusals counted as asks: %d rows", n)
	}
	if n := count(t, g.pool, `SELECT count(*) FROM hookgate_audit WHERE reason LIKE 'GitHub refused%'`); n != 4 {
		t.Errorf("audit entries of refusals: %d, want 4", n)
	}
	f.mu.Lock()
	f.readOnly = false
	f.mu.Unlock()
	if rep, err := r.Run(context.Background(), "github", recovery.Options{}); err != nil || len(rep.Requested) != 1 {
		t.Fatalf("once the token may write: %+v, %v", rep, err)
	}
	if n := count(t, g.pool, `SELECT attempts FROM hookgate_recovery_requests`); n != 1 {
		t.Errorf("attempts after the first real ask: %d", n)
	}
}

// mustRegistry is the registry of provs.
func mustRegistry(t testing.TB, provs ...providers.Provider) *providers.Registry {
	t.Helper()
	r, err := providers.NewRegistry(provs...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
