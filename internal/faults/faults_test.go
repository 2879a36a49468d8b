package faults_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/faults"
	"github.com/hookgate/hookgate/internal/pgembed"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

const (
	ghSecret     = "faults-github-secret"
	stripeSecret = "whsec_faults"
	maxBody      = 256 << 10
)

// delivery is one planned delivery and what happened to it.
type delivery struct {
	provider, id, event string
	entity              string // "" when the event names none
	eventTime           time.Time
	body                []byte
	twice               bool // sent again after its 2xx, on purpose

	acked   atomic.Bool
	answers atomic.Int32 // answers received, of any status
}

// plan makes n deliveries: subscription and pull-request sequences (several
// events per entity, for order), pushes, invoices and pings, shuffled so that
// events of one entity arrive out of order.
func plan(n int) []*delivery {
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	next := map[string]int{}
	tick := func(entity string) time.Time {
		next[entity]++
		return base.Add(time.Duration(next[entity]) * time.Second)
	}
	var ds []*delivery
	for i := range n {
		d := &delivery{twice: i%10 == 3}
		pad := strings.Repeat("x", 1500+rand.IntN(3000)) // several KB, as real payloads are
		switch i % 6 {
		case 0, 1: // a subscription's updates
			sub := fmt.Sprintf("sub_%d", rand.IntN(max(n/12, 1)))
			d.provider, d.id, d.event, d.entity = "stripe", fmt.Sprintf("evt_%06d", i), "customer.subscription.updated", "stripe:"+sub
			d.eventTime = tick(d.entity)
			d.body = fmt.Appendf(nil, `{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"id":%q,"object":"subscription","customer":"cus_1","status":"s%d","pad":%q}}}`,
				d.id, d.event, d.eventTime.Unix(), sub, d.eventTime.Unix(), pad)
		case 2: // an invoice
			d.provider, d.id, d.event, d.entity = "stripe", fmt.Sprintf("evt_%06d", i), "invoice.paid", fmt.Sprintf("stripe:in_%d", i)
			d.eventTime = tick(d.entity)
			d.body = fmt.Appendf(nil, `{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"id":"in_%d","object":"invoice","amount_paid":2000,"pad":%q}}}`,
				d.id, d.event, d.eventTime.Unix(), i, pad)
		case 3: // a pull request's updates
			pr := 1000 + rand.IntN(max(n/12, 1))
			d.provider, d.id, d.event, d.entity = "github", fmt.Sprintf("gh-%06d", i), "pull_request.synchronize", fmt.Sprintf("github:pull_request:%d", pr)
			d.eventTime = tick(d.entity)
			d.body = fmt.Appendf(nil, `{"action":"synchronize","number":%d,"pull_request":{"id":%d,"state":"open","updated_at":%q,"body":%q},"repository":{"id":1}}`,
				pr, pr, d.eventTime.UTC().Format(time.RFC3339), pad)
		case 4: // a push to one of three branches
			ref := fmt.Sprintf("refs/heads/b%d", rand.IntN(3))
			d.provider, d.id, d.event, d.entity = "github", fmt.Sprintf("gh-%06d", i), "push", "github:push:77:"+ref
			d.eventTime = tick(d.entity)
			d.body = fmt.Appendf(nil, `{"ref":%q,"repository":{"id":77,"pushed_at":%d},"commits":[{"message":%q}]}`, ref, d.eventTime.Unix(), pad)
		case 5: // a ping: no entity
			d.provider, d.id, d.event = "github", fmt.Sprintf("gh-%06d", i), "ping"
			d.body = fmt.Appendf(nil, `{"zen":"Design for failure.","hook_id":1,"pad":%q}`, pad)
		}
		ds = append(ds, d)
	}
	rand.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds
}

// sources are the gateways' GitHub and Stripe, by provider: the planned
// deliveries are signed as their senders sign.
var sources = map[string]providers.SourceConfig{
	"github": providers.GitHub{Secrets: verify.Secrets{ghSecret}}.Source(),
	"stripe": providers.Stripe{Secrets: verify.Secrets{stripeSecret}}.Source(),
}

// signedRequest is the request providers.NewRequest builds: c's sender's
// delivery of body to url, signed at at. It panics when c cannot sign, which
// is the test's own mistake.
func signedRequest(c providers.SourceConfig, url string, body []byte, id, event string, at time.Time) *http.Request {
	req, err := providers.NewRequest(context.Background(), c, url, body, id, event, at)
	if err != nil {
		panic(err)
	}
	return req
}

// request builds the signed request, as the provider would send it now.
func (d *delivery) request(base string) *http.Request {
	return signedRequest(sources[d.provider], base+"/webhooks/"+d.provider, d.body, d.id, d.event, time.Now())
}

// arrival is one request the forward target received.
type arrival struct {
	key, delivery string
	accepted      bool // answered 2xx
}

type target struct {
	mu       sync.Mutex
	arrivals []arrival
	refused  atomic.Int64
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	accept := rand.IntN(100) >= 3 // now and then the target is briefly unwell
	tg.mu.Lock()
	tg.arrivals = append(tg.arrivals, arrival{key: r.Header.Get("Idempotency-Key"), delivery: r.Header.Get("X-Hookgate-Delivery"), accepted: accept})
	tg.mu.Unlock()
	if !accept {
		tg.refused.Add(1)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// hungTarget accepts connections and never answers: each request waits until
// the gateway gives up on it. It counts those it holds at once.
type hungTarget struct {
	inFlight, most, total atomic.Int64
}

func (h *hungTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server notice the gateway
	// hanging up (its background read ends the request's context).
	_, _ = io.Copy(io.Discard, r.Body)
	n := h.inFlight.Add(1)
	h.total.Add(1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	<-r.Context().Done()
	h.inFlight.Add(-1)
}

// flappingTarget is down (503) for 3 s of every 6 s, and counts what it
// accepted per Idempotency-Key.
type flappingTarget struct {
	start    time.Time
	mu       sync.Mutex
	accepted map[string]int
	refused  atomic.Int64
}

func (f *flappingTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	if (time.Since(f.start)/(3*time.Second))%2 == 1 {
		f.refused.Add(1)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	f.mu.Lock()
	f.accepted[r.Header.Get("Idempotency-Key")]++
	f.mu.Unlock()
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and two gateways")
	}
	duration := envDuration("HOOKGATE_FAULTS_DURATION", 15*time.Second)
	rate := 40 // deliveries per second
	ctx := context.Background()

	tmp := dbtest.SharedDir(t, "hookgate-faults-")
	bin := filepath.Join(tmp, "gateway")
	faults.Build(t, "../..", bin)

	pgPort := faults.FreePort(t)
	pgOpts := pgembed.Options{Dir: filepath.Join(tmp, "pg"), Port: pgPort}
	pg, err := pgembed.Start(ctx, pgOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })
	dbURL := pg.URL()

	tg := &target{}
	targetSrv := httptest.NewServer(tg)
	t.Cleanup(targetSrv.Close)
	hung := &hungTarget{}
	hungSrv := httptest.NewServer(hung)
	t.Cleanup(hungSrv.Close)
	flapping := &flappingTarget{start: time.Now(), accepted: map[string]int{}}
	flappingSrv := httptest.NewServer(flapping)
	t.Cleanup(flappingSrv.Close)

	// The routes, in the configuration file: a healthy target (fwd), a
	// builtin (subs), a builtin that appends every event (ledger, order all:
	// the test binary's own, see TestMain), a target that never answers (hung) and one that is
	// down half the time (flapping). The last two must harm neither of the
	// first two.
	configFile := filepath.Join(tmp, "hookgate.yaml")
	err = os.WriteFile(configFile, []byte(`routes:
  - {name: fwd, match: ["*:*"], target: "`+targetSrv.URL+`/hook"}
  - {name: subs, match: ["stripe:customer.subscription"], target: "builtin:stripe-subscriptions"}
  - {name: ledger, match: ["stripe:customer.subscription"], target: "builtin:ledger", order: all}
  - {name: hung, match: ["github:*"], target: "`+hungSrv.URL+`/hook", concurrency: 4, timeout: 1s}
  - {name: flapping, match: ["stripe:*"], target: "`+flappingSrv.URL+`/hook", concurrency: 8, circuit: {failures: 5, cooldown: 2s}}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}

	logFile, err := os.Create(filepath.Join(tmp, "gateways.log"))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + dbURL,
		"GITHUB_WEBHOOK_SECRET=" + ghSecret,
		"STRIPE_WEBHOOK_SECRET=" + stripeSecret,
		"GATEWAY_CONFIG_FILE=" + configFile,
		"GATEWAY_FORWARD_TIMEOUT=2s",
		"GATEWAY_WORKERS=16",
		fmt.Sprintf("GATEWAY_MAX_BODY_BYTES=%d", maxBody),
	}
	migrate := exec.Command(bin, "migrate")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	// The gateways are this test binary serving as cmd/gateway does, with
	// builtin:ledger besides the shipped handlers (TestMain).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	gwEnv := append(slices.Clone(env), asGatewayEnv+"=1")
	gws := []*faults.Gateway{
		{Bin: self, Addr: fmt.Sprintf("127.0.0.1:%d", faults.FreePort(t)), Env: gwEnv, Log: logFile},
		{Bin: self, Addr: fmt.Sprintf("127.0.0.1:%d", faults.FreePort(t)), Env: gwEnv, Log: logFile},
	}
	for _, g := range gws {
		if err := g.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Kill)
	}

	// The sender: like GitHub and Stripe, it retries until it gets a 2xx.
	deliveries := plan(int(duration.Seconds()) * rate)
	var sent, non2xx, connErrors, dupAnswers atomic.Int64
	client := &http.Client{Timeout: 10 * time.Second}
	queue := make(chan *delivery)
	var senders sync.WaitGroup
	sendUntil2xx := func(d *delivery, want int) {
		backoff := 20 * time.Millisecond
		for attempt := 0; ; attempt++ {
			g := gws[(attempt+int(d.answers.Load()))%len(gws)]
			res, err := client.Do(d.request("http://" + g.Addr))
			if err != nil {
				connErrors.Add(1)
			} else {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				d.answers.Add(1)
				if res.StatusCode/100 == 2 {
					if want != 0 && res.StatusCode == want {
						dupAnswers.Add(1)
					}
					d.acked.Store(true)
					return
				}
				non2xx.Add(1)
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
		}
	}
	for range 8 {
		senders.Go(func() {
			for d := range queue {
				sendUntil2xx(d, 0)
				sent.Add(1)
				if d.twice {
					sendUntil2xx(d, http.StatusOK)
				}
			}
		})
	}

	// Bad input, mixed into the traffic: each must get its error, and nothing
	// of it may be stored.
	stopBad := make(chan struct{})
	badCounts := map[string]*[2]int64{} // kind -> {sent, answered as expected}
	var badMu sync.Mutex
	var badDone sync.WaitGroup
	badDone.Go(func() { sendBadInput(t, gws, stopBad, badCounts, &badMu) })
	slowClosed := make(chan int, 1)
	badDone.Go(func() { slowClosed <- slowloris(gws[0].Addr, 3) })

	// Faults: kill a gateway at random moments, and restart PostgreSQL once.
	stopChaos := make(chan struct{})
	var kills, pgRestarts atomic.Int64
	var chaos sync.WaitGroup
	chaos.Go(func() {
		killEvery := duration / 5
		pgAt := time.Now().Add(duration / 2)
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(killEvery/2 + rand.N(killEvery)):
			}
			if pgRestarts.Load() == 0 && time.Now().After(pgAt) {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := pg.Stop(sctx); err != nil {
					t.Errorf("stop postgres: %v", err)
				}
				cancel()
				time.Sleep(500 * time.Millisecond)
				pg, err = pgembed.Start(ctx, pgOpts)
				if err != nil {
					t.Errorf("restart postgres: %v", err)
					return
				}
				pgRestarts.Add(1)
				continue
			}
			g := gws[rand.IntN(len(gws))]
			g.Kill()
			kills.Add(1)
			time.Sleep(200*time.Millisecond + rand.N(time.Second))
			if err := g.Start(); err != nil {
				t.Error(err)
				return
			}
		}
	})

	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for _, d := range deliveries {
		queue <- d
		time.Sleep(interval)
	}
	close(queue)
	for kills.Load() < 3 || pgRestarts.Load() < 1 {
		time.Sleep(100 * time.Millisecond)
	}
	close(stopChaos)
	chaos.Wait()
	senders.Wait()
	close(stopBad)
	badDone.Wait()
	faultsStopped := time.Now()
	for _, g := range gws {
		if !g.Running() {
			if err := g.Start(); err != nil {
				t.Fatal(err)
			}
		}
	}

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	// No dispatch stuck: all reach a final state within a bound.
	const settleBound = 120 * time.Second
	var unfinished int
	for {
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM hookgate_dispatches
			WHERE state NOT IN ('succeeded', 'superseded', 'discarded', 'cancelled') AND route <> 'hung'`).Scan(&unfinished)
		if unfinished == 0 || time.Since(faultsStopped) > settleBound {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	settled := time.Since(faultsStopped)
	if unfinished > 0 {
		t.Errorf("%d dispatches not final %s after the faults stopped", unfinished, settleBound)
	}

	// Every acknowledged delivery is stored with its exact body.
	acked, stored := 0, 0
	for _, d := range deliveries {
		if !d.acked.Load() {
			continue
		}
		acked++
		var sum []byte
		err := pool.QueryRow(ctx, `SELECT body_sha256 FROM hookgate_receipts WHERE provider = $1 AND delivery_id = $2`, d.provider, d.id).Scan(&sum)
		want := sha256.Sum256(d.body)
		if err == nil && bytes.Equal(sum, want[:]) {
			stored++
		} else {
			t.Errorf("acknowledged delivery %s %s not stored right: %v", d.provider, d.id, err)
		}
	}
	if acked != len(deliveries) {
		t.Errorf("%d of %d deliveries acknowledged", acked, len(deliveries))
	}

	// Every (delivery, route) forward reached the target, or was superseded.
	tg.mu.Lock()
	arrivals := slices.Clone(tg.arrivals)
	tg.mu.Unlock()
	perKey := map[string]int{}
	acceptedPerKey := map[string]int{}
	for _, a := range arrivals {
		perKey[a.key]++
		if a.accepted {
			acceptedPerKey[a.key]++
		}
	}
	duplicates, acceptedTwice := 0, 0
	for _, n := range perKey {
		duplicates += n - 1
	}
	for _, n := range acceptedPerKey {
		acceptedTwice += n - 1
	}
	rows, err := pool.Query(ctx, `SELECT delivery_id, provider, state FROM hookgate_dispatches WHERE route = 'fwd'`)
	if err != nil {
		t.Fatal(err)
	}
	type fwdRow struct{ id, provider, state string }
	fwd, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fwdRow, error) {
		var x fwdRow
		return x, r.Scan(&x.id, &x.provider, &x.state)
	})
	if err != nil {
		t.Fatal(err)
	}
	reached, superseded := 0, 0
	for _, x := range fwd {
		switch {
		case perKey[x.provider+":"+x.id+":fwd"] > 0 && x.state == "succeeded":
			reached++
		case x.state == "superseded":
			superseded++
		default:
			t.Errorf("forward of %s %s: state %s, %d arrivals", x.provider, x.id, x.state, perKey[x.provider+":"+x.id+":fwd"])
		}
	}
	if len(fwd) != len(deliveries) {
		t.Errorf("%d forward dispatches for %d deliveries", len(fwd), len(deliveries))
	}

	// Per entity, the target never received an older event after it accepted
	// a newer one, but in the documented crash window: the newer event's
	// outcome was lost (its process died, or the database restarted, between
	// the target's 2xx and the commit), so it was accepted again later with
	// its same key, and an older one could go out in between.
	byID := map[string]*delivery{}
	for _, d := range deliveries {
		byID[d.id] = d
	}
	newest := map[string]time.Time{}
	newestKey := map[string]string{}
	violations, inWindow := 0, 0
	for _, a := range arrivals {
		d := byID[a.delivery]
		if d == nil || d.entity == "" {
			continue
		}
		switch {
		case !d.eventTime.Before(newest[d.entity]):
		case acceptedPerKey[newestKey[d.entity]] > 1:
			inWindow++
		default:
			violations++
			t.Errorf("target got %s (%s) after it accepted a newer event of %s", d.id, d.eventTime.Format(time.TimeOnly), d.entity)
		}
		if a.accepted && d.eventTime.After(newest[d.entity]) {
			newest[d.entity], newestKey[d.entity] = d.eventTime, a.key
		}
	}

	// A builtin handler's effect happened exactly once per (delivery, route):
	// each subscription's row was applied as many times as its dispatches
	// succeeded, and it ends at its newest event.
	rows, err = pool.Query(ctx, `
		SELECT s.subscription_id, s.updates, s.status,
			(SELECT count(*) FROM hookgate_dispatches d JOIN hookgate_receipts r USING (provider, delivery_id)
			 WHERE d.route = 'subs' AND d.state = 'succeeded' AND r.entity = 'stripe:' || s.subscription_id)
		FROM hookgate_stripe_subscriptions s`)
	if err != nil {
		t.Fatal(err)
	}
	newestStatus := map[string]string{}
	newestSent := map[string]time.Time{}
	for _, d := range deliveries {
		if strings.HasPrefix(d.entity, "stripe:sub_") && d.eventTime.After(newestSent[d.entity]) {
			newestSent[d.entity] = d.eventTime
			newestStatus[strings.TrimPrefix(d.entity, "stripe:")] = fmt.Sprintf("s%d", d.eventTime.Unix())
		}
	}
	subs, exact, atNewest := 0, 0, 0
	for rows.Next() {
		var id, status string
		var updates, succeeded int
		if err := rows.Scan(&id, &updates, &status, &succeeded); err != nil {
			t.Fatal(err)
		}
		subs++
		if updates == succeeded {
			exact++
		} else {
			t.Errorf("subscription %s applied %d times for %d succeeded dispatches", id, updates, succeeded)
		}
		if newestStatus[id] == "" || status == newestStatus[id] {
			atNewest++
		} else {
			t.Errorf("subscription %s ends at %s, newest is %s", id, status, newestStatus[id])
		}
	}
	if len(newestStatus) != subs {
		t.Errorf("%d subscriptions in the projection, %d sent", subs, len(newestStatus))
	}

	// The hung route held at most its concurrency in each process, and its
	// dispatches are all still waiting (none lost, none given up).
	var hungDispatches, hungWaiting int
	_ = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state IN ('pending', 'running', 'retrying'))
		FROM hookgate_dispatches WHERE route = 'hung'`).Scan(&hungDispatches, &hungWaiting)
	githubSent := 0
	for _, d := range deliveries {
		if d.provider == "github" {
			githubSent++
		}
	}
	if hungDispatches != githubSent || hungWaiting != hungDispatches {
		t.Errorf("hung route: %d dispatches for %d GitHub deliveries, %d still waiting", hungDispatches, githubSent, hungWaiting)
	}
	if most := hung.most.Load(); most > 2*4 {
		t.Errorf("the hung target held %d requests at once, more than concurrency 4 in each of 2 gateways", most)
	}
	// Every flapping dispatch was accepted by its target, or superseded.
	var flappingDispatches, flappingSucceeded, flappingSuperseded int
	rows, err = pool.Query(ctx, `SELECT provider || ':' || delivery_id || ':flapping', state FROM hookgate_dispatches WHERE route = 'flapping'`)
	if err != nil {
		t.Fatal(err)
	}
	flapping.mu.Lock()
	for rows.Next() {
		var key, state string
		if err := rows.Scan(&key, &state); err != nil {
			t.Fatal(err)
		}
		flappingDispatches++
		switch {
		case state == "succeeded" && flapping.accepted[key] > 0:
			flappingSucceeded++
		case state == "superseded":
			flappingSuperseded++
		default:
			t.Errorf("flapping dispatch %s: %s, accepted %d times", key, state, flapping.accepted[key])
		}
	}
	flapping.mu.Unlock()

	var badStored int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM hookgate_receipts WHERE delivery_id LIKE 'bad-%'`).Scan(&badStored)
	if badStored != 0 {
		t.Errorf("%d bad requests stored", badStored)
	}
	closedSlow := <-slowClosed

	ledgerLine := ledgerFigures(ctx, t, pool, deliveries)

	var out strings.Builder
	fmt.Fprintf(&out, "faults: %s of traffic at %d deliveries/s; 2 gateways; %d SIGKILLs; %d PostgreSQL restarts\n", duration, rate, kills.Load(), pgRestarts.Load())
	fmt.Fprintf(&out, "sender: %d deliveries, %d acknowledged, %d non-2xx answers and %d connection errors retried, %d sent twice on purpose (answered duplicate: %d)\n",
		len(deliveries), acked, non2xx.Load(), connErrors.Load(), countTwice(deliveries), dupAnswers.Load())
	fmt.Fprintf(&out, "stored: %d of %d acknowledged deliveries have a receipt with the right body hash\n", stored, acked)
	fmt.Fprintf(&out, "forwards: %d (delivery, route) pairs: %d reached the target, %d superseded; %d arrivals with %d repeated Idempotency-Keys: %d after the target refused (503, retried), %d accepted again after a crash (allowed for HTTP)\n",
		len(fwd), reached, superseded, len(arrivals), duplicates, tg.refused.Load(), acceptedTwice)
	fmt.Fprintf(&out, "builtin: %d subscriptions, applied exactly once per succeeded dispatch: %d; at their newest event: %d\n", subs, exact, atNewest)
	fmt.Fprintf(&out, "order: %d entities, arrivals of an older event after a newer one was accepted: %d; in the crash window (the newer one's outcome lost, it was accepted again): %d\n",
		len(newest), violations, inWindow)
	out.WriteString(ledgerLine)
	fmt.Fprintf(&out, "hung route: %d dispatches all still waiting: %t; %d requests, at most %d at once (limit 2 x 4)\n",
		hungDispatches, hungWaiting == hungDispatches, hung.total.Load(), hung.most.Load())
	fmt.Fprintf(&out, "flapping route: %d dispatches: %d accepted, %d superseded; %d refusals while down\n",
		flappingDispatches, flappingSucceeded, flappingSuperseded, flapping.refused.Load())
	fmt.Fprintf(&out, "dispatches: %d not final (the hung route aside); settled %s after the faults stopped (bound %s); traffic phase %s\n", unfinished, settled.Round(time.Millisecond), settleBound, faultsStopped.Sub(start).Round(time.Second))
	badMu.Lock()
	kinds := make([]string, 0, len(badCounts))
	for k := range badCounts {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	fmt.Fprintf(&out, "bad input: stored %d;", badStored)
	for _, k := range kinds {
		c := badCounts[k]
		fmt.Fprintf(&out, " %s %d/%d", k, c[1], c[0])
		if c[1] != c[0] {
			t.Errorf("bad input %s: %d of %d answered as the contract says", k, c[1], c[0])
		}
	}
	badMu.Unlock()
	fmt.Fprintf(&out, "; slowloris connections closed by the server: %d/3\n", closedSlow)
	if closedSlow != 3 {
		t.Errorf("%d of 3 slow connections closed by the server", closedSlow)
	}
	fmt.Print(out.String())
	t.Log("\n" + out.String())

	for _, g := range gws {
		if err := g.Stop(); err != nil {
			t.Errorf("gateway exit after SIGTERM: %v", err)
		}
	}
}

func countTwice(ds []*delivery) int {
	n := 0
	for _, d := range ds {
		if d.twice {
			n++
		}
	}
	return n
}

// sendBadInput sends a bad request of each kind in turn until stop, counting
// those answered with the contract's status and error body.
func sendBadInput(t *testing.T, gws []*faults.Gateway, stop <-chan struct{}, counts map[string]*[2]int64, mu *sync.Mutex) {
	client := &http.Client{Timeout: 10 * time.Second}
	body := []byte(`{"ref":"refs/heads/main","repository":{"id":77,"pushed_at":1}}`)
	type bad struct {
		kind   string
		status int
		code   string
		make   func(id string) *http.Request
	}
	// gh is a push GitHub signs with secret.
	gh := func(secret, id string, b []byte) *http.Request {
		c := sources["github"]
		c.Secrets = verify.Secrets{secret}
		return signedRequest(c, "/webhooks/github", b, id, "push", time.Now())
	}
	kinds := []bad{
		{"wrong_signature", 401, "invalid_signature", func(id string) *http.Request { return gh("guess", id, body) }},
		{"truncated_body", 401, "invalid_signature", func(id string) *http.Request {
			r := gh(ghSecret, id, body[:len(body)/2])
			r.Header.Set("X-Hub-Signature-256", gh(ghSecret, id, body).Header.Get("X-Hub-Signature-256"))
			return r
		}},
		{"not_json", 400, "bad_request", func(id string) *http.Request {
			return gh(ghSecret, id, []byte("this is not json"))
		}},
		{"wrong_content_type", 415, "unsupported_media_type", func(id string) *http.Request {
			r := gh(ghSecret, id, body)
			r.Header.Set("Content-Type", "text/xml")
			return r
		}},
		{"oversized_body", 413, "body_too_large", func(id string) *http.Request {
			return gh(ghSecret, id, bytes.Repeat([]byte("a"), maxBody+1))
		}},
		{"stripe_stale_timestamp", 401, "timestamp_out_of_tolerance", func(id string) *http.Request {
			b := fmt.Appendf(nil, `{"id":%q,"type":"invoice.paid"}`, id)
			return signedRequest(sources["stripe"], "/webhooks/stripe", b, id, "invoice.paid", time.Now().Add(-time.Hour))
		}},
		// net/http refuses headers past the server's limit itself, before any
		// handler: 431 with a plain-text body.
		{"huge_headers", 431, "", func(id string) *http.Request {
			r := gh(ghSecret, id, body)
			r.Header.Set("X-Padding", strings.Repeat("p", 200<<10))
			return r
		}},
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
		k := kinds[i%len(kinds)]
		id := fmt.Sprintf("bad-%d", i)
		for attempt := 0; attempt < 20; attempt++ { // a dead gateway: try the other
			req := k.make(id)
			g := gws[(i+attempt)%len(gws)]
			req.URL.Scheme, req.URL.Host, req.Host = "http", g.Addr, g.Addr
			res, err := client.Do(req)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			ok := res.StatusCode == k.status
			if ok && k.code != "" {
				var e struct{ Error, Message string }
				ok = json.Unmarshal(b, &e) == nil && e.Error == k.code && e.Message != ""
			}
			mu.Lock()
			c := counts[k.kind]
			if c == nil {
				c = &[2]int64{}
				counts[k.kind] = c
			}
			c[0]++
			if ok {
				c[1]++
			} else {
				t.Logf("bad input %s: got %d %s", k.kind, res.StatusCode, truncate(b))
			}
			mu.Unlock()
			break
		}
	}
}

func truncate(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}

// slowloris opens n connections that send their headers a byte at a time, and
// returns how many the server closed (its header timeout) within 20 s.
func slowloris(addr string, n int) int {
	var closed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer conn.Close()
			head := "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 100)
			deadline := time.Now().Add(20 * time.Second)
			for i := 0; time.Now().Before(deadline); i = (i + 1) % len(head) {
				if _, err := conn.Write([]byte{head[i]}); err != nil {
					closed.Add(1)
					return
				}
				_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if _, err := conn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					closed.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	return int(closed.Load())
}
