// Package bench is hookgate's load tool (gateway bench). It signs realistic
// GitHub and Stripe deliveries of several KB, posts them to a running gateway
// at a given concurrency over keep-alive connections, and prints accepted/s,
// latency percentiles of the 2xx answers, errors and the gateway's peak RSS.
//
// --ceiling first runs the same database work without HTTP (one transaction per
// delivery: receipt, dispatch rows and River jobs, through the ingest code) at
// the same concurrency against the same database, so both figures come from
// one run on one machine, and prints their ratio.
//
// --e2e offers a fixed rate to a gateway whose route forwards to the tool's own
// target, and measures receipt-to-target latency and the job backlog.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"

	"github.com/hookgate/hookgate/internal/store"
)

// Env is what the tool needs from the program.
type Env struct {
	Config config.Resolved
	// Providers are the gateway's providers (Config.Providers): the bench
	// signs its deliveries with theirs, as their senders sign.
	Providers *providers.Registry
	// Open connects to the gateway's database (for --ceiling, --e2e and the
	// drain) with a pool of at least conns connections.
	Open   func(ctx context.Context, conns int) (*pgxpool.Pool, func(), error)
	Stdout io.Writer
}

// Usage describes the command.
const Usage = `  bench [--url URL] [--concurrency N] [--duration D] [--pid PID] [--ceiling] [--compare-paused] [--wait D] [--drain D]
  bench --e2e [--url URL] [--rate N] [--duration D] [--target-addr ADDR]

  bench measures a gateway already running (it waits up to --wait for its /readyz), keeps its
  forward target up until the gateway has forwarded what it accepted (up to --drain), prints
  the CPU per delivery of the gateway and its PostgreSQL (from /proc) and how long the
  backlog took to drain, and exits 1 when fewer than half the requests were accepted.
  --compare-paused sends again with every route paused and compares the acknowledgement rates;
  it prints the CPU per delivery of ingest alone (while paused) and of forwarding alone (the
  drain of those deliveries once resumed).
`

type options struct {
	url         string
	concurrency int
	duration    time.Duration
	pid         int
	postmaster  int // the gateway's PostgreSQL server, for its CPU; 0: not on this machine
	ceiling     bool
	e2e         bool
	rate        int
	targetAddr  string
	bodyBytes   int
	drain       time.Duration
	wait        time.Duration
	// comparePaused runs the load a second time with every route paused.
	comparePaused bool
}

// Run runs the load tool.
func Run(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	fs.StringVar(&o.url, "url", "http://localhost:8080", "the gateway")
	fs.IntVar(&o.concurrency, "concurrency", 64, "requests in flight")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "how long to send")
	fs.IntVar(&o.pid, "pid", 0, "the gateway's process id, for its peak RSS (default: the process listening on --url's port)")
	fs.BoolVar(&o.ceiling, "ceiling", false, "also measure the database work alone, and print the ratio")
	fs.BoolVar(&o.e2e, "e2e", false, "measure end to end: offered rate to a forward target")
	fs.IntVar(&o.rate, "rate", 1000, "deliveries per second offered (--e2e)")
	fs.StringVar(&o.targetAddr, "target-addr", "127.0.0.1:9900", "where the tool's forward target listens (it answers 200)")
	fs.IntVar(&o.bodyBytes, "body-bytes", 6000, "approximate payload size")
	fs.DurationVar(&o.wait, "wait", 2*time.Minute, "wait this long at most for the gateway's /readyz before sending")
	fs.DurationVar(&o.drain, "drain", 2*time.Minute, "after sending, wait this long at most for the gateway to forward what it accepted")
	fs.BoolVar(&o.comparePaused, "compare-paused", false, "then send again with every route paused (forwarding off), compare the acknowledgement rates and print the CPU of ingest alone and forward alone (needs GATEWAY_ADMIN_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	gen, err := newGenerator(env.Providers, o.bodyBytes)
	if err != nil {
		return err
	}
	if o.comparePaused && (env.Config.AdminToken == "" || len(env.Config.Table) == 0) {
		return fmt.Errorf("bench: --compare-paused pauses the gateway's routes through its operator API: set GATEWAY_ADMIN_TOKEN and GATEWAY_ROUTES as the gateway has them")
	}
	if o.ceiling && len(env.Config.Table) == 0 {
		// Without routes the ceiling would store receipts alone, no dispatch
		// rows or River jobs, and come out several times too high.
		return fmt.Errorf("bench: --ceiling does the gateway's database work: set GATEWAY_ROUTES as the gateway has it")
	}
	// The gateway first: a gateway just started may still be starting its
	// database, and the tool must never start one of its own beside it.
	if err := waitReady(ctx, o.url, o.wait); err != nil {
		return err
	}
	if o.pid == 0 {
		o.pid = listeningPID(o.url)
	}
	o.postmaster = findPostmaster(ctx, env)
	target, err := startSink(o.targetAddr)
	if err != nil {
		return err
	}
	defer target.close()
	if o.e2e {
		return endToEnd(ctx, env, o, target, gen)
	}

	var ceiling float64
	if o.ceiling {
		c, err := runCeiling(ctx, env, o, gen)
		if err != nil {
			return err
		}
		ceiling = c
	}
	before, arrived := readCPU(o.pid, o.postmaster), target.count()
	r := runHTTP(ctx, o, gen)
	forwarded := target.count() - arrived
	fmt.Fprintf(env.Stdout, "http:    %s\n", r)
	if rss := peakRSS(o.pid); rss != "" {
		fmt.Fprintf(env.Stdout, "gateway: pid %d, peak RSS %s\n", o.pid, rss)
	}
	if o.ceiling && ceiling > 0 {
		fmt.Fprintf(env.Stdout, "ratio:   %.2fx the one-transaction-per-delivery ceiling\n", r.perSecond()/ceiling)
	}
	if r.ok > 0 {
		fmt.Fprintf(env.Stdout, "forward: %d reached the target while sending (%.0f%% of those accepted)\n", forwarded, 100*float64(forwarded)/float64(r.ok))
	}
	// The forward target stays up until the gateway has forwarded what it
	// accepted: stopped earlier, every job left would retry for hours.
	drainErr := drain(ctx, env, o)
	if drainErr == nil && o.drain > 0 {
		fmt.Fprintf(env.Stdout, "cpu:     %s, sending and draining\n", cpuPerDelivery(before, readCPU(o.pid, o.postmaster), r.ok))
	}
	if err := mostlyFailed(r); err != nil {
		return err
	}
	if drainErr != nil || !o.comparePaused {
		return drainErr
	}
	return comparePaused(ctx, env, o, gen, r)
}

// comparePaused runs the load again with every route paused (forwarding
// off), then resumes them and drains, and prints the acknowledgement rates
// side by side: with forwarding on, ingest should keep its rate.
func comparePaused(ctx context.Context, env Env, o options, gen *generator, on result) error {
	api := &operatorAPI{base: strings.TrimSuffix(o.url, "/"), token: env.Config.AdminToken.Value()}
	var names []string
	for _, r := range env.Config.Table {
		names = append(names, r.Name)
	}
	if err := api.setRoutes(ctx, names, "pause"); err != nil {
		return err
	}
	before := readCPU(o.pid, o.postmaster)
	paused := runHTTP(ctx, o, gen)
	sent := readCPU(o.pid, o.postmaster)
	resumeErr := api.setRoutes(context.WithoutCancel(ctx), names, "resume")
	fmt.Fprintf(env.Stdout, "paused:  %s\n", paused)
	if paused.perSecond() > 0 {
		fmt.Fprintf(env.Stdout, "acks:    %.0f/s forwarding, %.0f/s paused: %.2fx\n", on.perSecond(), paused.perSecond(), on.perSecond()/paused.perSecond())
	}
	if resumeErr != nil {
		return resumeErr
	}
	// The two halves of a delivery's cost, apart: ingest while nothing is
	// forwarded, then the forwards of those deliveries with nothing sent.
	fmt.Fprintf(env.Stdout, "cpu:     %s, ingest alone (every route paused)\n", cpuPerDelivery(before, sent, paused.ok))
	if err := drain(ctx, env, o); err != nil || o.drain <= 0 {
		return err
	}
	fmt.Fprintf(env.Stdout, "cpu:     %s, forward alone (those deliveries, once resumed)\n", cpuPerDelivery(sent, readCPU(o.pid, o.postmaster), paused.ok))
	return nil
}

// mostlyFailed is an error when fewer than half the requests were accepted:
// the figures then measure a failing gateway, not a working one.
func mostlyFailed(r result) error {
	total := r.ok + r.errors
	for code, n := range r.statuses {
		if code/100 != 2 {
			total += n
		}
	}
	if total == 0 || r.ok*2 < total {
		return fmt.Errorf("bench: only %d of %d requests were accepted: these figures measure a failing gateway (see its log)", r.ok, total)
	}
	return nil
}

// waitReady waits until the gateway at base answers /readyz with 200.
func waitReady(ctx context.Context, base string, within time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(within)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/readyz", nil)
		if err != nil {
			return fmt.Errorf("bench: --url: %w", err)
		}
		res, err := client.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: the gateway at %s is not ready after %s (start it first: gateway serve)", base, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// drain waits, up to o.drain, until the gateway's database holds no job
// waiting or running. It reads the database the gateway uses (DATABASE_URL,
// or the private server the running gateway started); without one it says
// how long to leave the target up instead.
func drain(ctx context.Context, env Env, o options) error {
	if o.drain <= 0 {
		fmt.Fprintf(env.Stdout, "drain:   not waited for (--drain 0): what the gateway has not forwarded yet retries against a target that is gone, and the next run starts behind it\n")
		return nil
	}
	pool, closeDB, err := env.Open(ctx, 2)
	if err != nil {
		fmt.Fprintf(env.Stdout, "drain:   cannot read the gateway's database (%v); jobs not yet forwarded will retry against a stopped target\n", err)
		return nil
	}
	defer closeDB()
	t0 := time.Now()
	if err := waitQueueEmpty(ctx, pool, o.drain); err != nil {
		return fmt.Errorf("bench: the gateway did not forward everything within --drain %s: %w; "+
			"its jobs retry until they succeed or run out of attempts: stop the gateway and delete its data directory (GATEWAY_DATA_DIR) to start afresh", o.drain, err)
	}
	fmt.Fprintf(env.Stdout, "drain:   no dispatch left to run %s after the last request (each forwarded, or superseded by a newer event of its entity)\n",
		time.Since(t0).Round(time.Millisecond))
	return nil
}

// generator makes signed deliveries, each with a fresh id.
type generator struct {
	senders map[string]sender // by provider: those workload names
	pad     string            // a JSON array that brings a delivery to its size
	n       atomic.Int64
	run     string
}

// sender is a configured provider, which the generator signs for as its
// kind's sender signs (providers.NewRequest).
type sender struct {
	src providers.SourceConfig
}

// workload are the providers the generator sends for: the figures
// docs/performance.md gives are of this mix.
var workload = []string{"github", "stripe"}

// newGenerator returns a generator signing with the registry's providers; the
// workload's must all be configured, as the gateway has them.
func newGenerator(registry *providers.Registry, bodyBytes int) (*generator, error) {
	g := &generator{senders: map[string]sender{}}
	var vars []string
	for _, name := range workload {
		if src, _, ok := registry.Source(name); ok {
			g.senders[name] = sender{src}
		}
		vars = append(vars, providers.Kinds[name].Env)
	}
	if len(g.senders) < len(workload) {
		return nil, fmt.Errorf("bench: set %s as the gateway has them", strings.Join(vars, " and "))
	}
	// The padding is made once: the tool's own CPU is taken from the gateway.
	g.pad, g.run = padding(max(bodyBytes-400, 0)), randomHex(4)
	return g, nil
}

// padding returns a JSON array of about n bytes of commit-like objects, which
// compresses about as well as real payloads do (random hashes, repeated keys
// and URLs), so that the database stores and compresses what it would in use.
func padding(n int) string {
	words := []string{"fix", "retry", "webhook", "order", "ledger", "invoice", "subscription", "timeout", "refactor", "docs"}
	word := func() string { return words[mrand.IntN(len(words))] }
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		sha := randomHex(20)
		fmt.Fprintf(&b, `{"id":%q,"tree_id":%q,"distinct":true,"message":"%s %s in %s","timestamp":"2026-11-30T12:%02d:%02d+00:00",`+
			`"url":"https://github.com/hookgate/bench/commit/%s","author":{"name":"Octo Cat","email":"octocat@users.noreply.github.com",`+
			`"username":"octocat"},"added":[],"removed":[],"modified":["internal/%s/%s.go"]}`,
			sha, randomHex(20), word(), word(), word(), i%60, i*7%60, sha, word(), word())
	}
	b.WriteByte(']')
	return b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// next returns a request for the gateway at base, and the delivery it carries.
func (g *generator) next(base string) (*http.Request, string) {
	i := g.n.Add(1)
	now := time.Now()
	var provider, event, id string
	var body []byte
	switch i % 4 {
	case 0: // a pull request update
		provider, event, id = "github", "pull_request.synchronize", fmt.Sprintf("bench-%s-%d", g.run, i)
		body = fmt.Appendf(nil, `{"action":"synchronize","number":%d,"pull_request":{"id":%d,"state":"open","title":"Bench","updated_at":%q,"commits":%s},"repository":{"id":1,"full_name":"hookgate/bench"},"sender":{"login":"octocat"}}`,
			i, i%5000, now.UTC().Format(time.RFC3339), g.pad)
	case 1: // a push
		provider, event, id = "github", "push", fmt.Sprintf("bench-%s-%d", g.run, i)
		body = fmt.Appendf(nil, `{"ref":"refs/heads/b%d","before":"0000","after":"1111","repository":{"id":2,"full_name":"hookgate/bench","pushed_at":%d},"commits":%s,"sender":{"login":"octocat"}}`,
			i%500, now.Unix(), g.pad)
	default: // a Stripe invoice or subscription event
		provider, event, id = "stripe", "invoice.paid", fmt.Sprintf("evt_bench_%s_%d", g.run, i)
		obj := fmt.Sprintf(`{"id":"in_%d","object":"invoice","amount_paid":2000,"currency":"usd","lines":%s}`, i, g.pad)
		if i%4 == 3 {
			event, obj = "customer.subscription.updated", fmt.Sprintf(`{"id":"sub_%d","object":"subscription","customer":"cus_1","status":"active","items":%s}`, i%5000, g.pad)
		}
		body = fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2024-06-20","type":%q,"created":%d,"livemode":false,"data":{"object":%s}}`,
			id, event, now.Unix(), obj)
	}
	// The workload's sources (github, stripe) are configured, with secrets,
	// so they sign without failing.
	req, _ := providers.NewRequest(context.Background(), g.senders[provider].src, base+"/webhooks/"+provider, body, id, event, now)
	return req, id
}

// result is one phase's figures.
type result struct {
	ok, errors int
	statuses   map[int]int
	took       time.Duration
	latencies  []time.Duration
}

func (r result) perSecond() float64 { return float64(r.ok) / r.took.Seconds() }

func (r result) String() string {
	slices.Sort(r.latencies)
	p := func(q float64) string {
		if len(r.latencies) == 0 {
			return "-"
		}
		return r.latencies[min(int(q*float64(len(r.latencies))), len(r.latencies)-1)].Round(10 * time.Microsecond).String()
	}
	var st []string
	for code, n := range r.statuses {
		st = append(st, fmt.Sprintf("%d:%d", code, n))
	}
	slices.Sort(st)
	return fmt.Sprintf("%d accepted in %s = %.0f/s; latency p50 %s p90 %s p99 %s max %s; errors %d; statuses %s",
		r.ok, r.took.Round(time.Millisecond), r.perSecond(), p(.50), p(.90), p(.99), p(1), r.errors, strings.Join(st, " "))
}

// add merges another worker's figures.
func (r *result) add(o result) {
	r.ok += o.ok
	r.errors += o.errors
	r.latencies = append(r.latencies, o.latencies...)
	for k, v := range o.statuses {
		r.statuses[k] += v
	}
}

// load runs step from o.concurrency workers until o.duration has passed, and
// returns their figures together.
func load(ctx context.Context, o options, step func(local *result)) result {
	deadline := time.Now().Add(o.duration)
	var mu sync.Mutex
	total := result{statuses: map[int]int{}}
	var wg sync.WaitGroup
	start := time.Now()
	for range o.concurrency {
		wg.Go(func() {
			local := result{statuses: map[int]int{}}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				step(&local)
			}
			mu.Lock()
			defer mu.Unlock()
			total.add(local)
		})
	}
	wg.Wait()
	total.took = time.Since(start)
	return total
}

// runHTTP posts at o.concurrency for o.duration.
func runHTTP(ctx context.Context, o options, gen *generator) result {
	transport := &http.Transport{MaxIdleConns: o.concurrency, MaxIdleConnsPerHost: o.concurrency, MaxConnsPerHost: o.concurrency, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	return load(ctx, o, func(local *result) {
		req, _ := gen.next(o.url)
		t0 := time.Now()
		res, err := client.Do(req.WithContext(ctx))
		if err != nil {
			local.errors++
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		local.statuses[res.StatusCode]++
		if res.StatusCode/100 == 2 {
			local.ok++
			local.latencies = append(local.latencies, time.Since(t0))
		}
	})
}

// runCeiling does the database work of ingest without HTTP, one transaction
// per delivery, at the same concurrency, and returns deliveries per second.
func runCeiling(ctx context.Context, env Env, o options, gen *generator) (float64, error) {
	// Each sender holds its own transaction, as the gateway's requests would
	// without coalescing: a smaller pool would queue them and lower the
	// ceiling.
	pool, closeDB, err := env.Open(ctx, o.concurrency+1)
	if err != nil {
		return 0, err
	}
	defer closeDB()
	routes := env.Config.Table
	if err := routes.CheckBuiltins(handlers.Default(nil).Names()); err != nil {
		return 0, err
	}
	client, err := dispatch.NewInserter(pool, nil)
	if err != nil {
		return 0, err
	}
	in := ingest.NewIngester(pool, &receipts.Store{Retention: env.Config.Retention, Keys: env.Config.Keys},
		dispatch.NewEnqueuer(client, routes, dispatch.EnqueuerConfig{MaxAttempts: env.Config.MaxAttempts}), ingest.Config{})
	provs := map[string]providers.Provider{}
	for _, p := range env.Providers.Providers() {
		provs[p.Name()] = p
	}
	if flush, err := commitLatency(ctx, pool, 200); err == nil {
		fmt.Fprintf(env.Stdout, "ceiling: a durable commit alone takes p50 %s here (the flush that a transaction per delivery waits for)\n",
			flush.Round(time.Microsecond))
	}
	total := load(ctx, o, func(local *result) {
		req, _ := gen.next("http://ceiling")
		body, _ := io.ReadAll(req.Body)
		d, err := providers.Parse(provs[filepath.Base(req.URL.Path)], req.Header, body, time.Now())
		if err != nil {
			local.errors++
			return
		}
		t0 := time.Now()
		out, err := in.AcceptMany(ctx, []providers.Delivery{d}) // one transaction per delivery
		if err != nil || out[0].Err != nil {
			local.errors++
			return
		}
		local.ok++
		local.latencies = append(local.latencies, time.Since(t0))
	})
	fmt.Fprintf(env.Stdout, "ceiling: %s\n", total)
	// Let the gateway work off the ceiling's jobs before the HTTP phase, so
	// that both phases start from an empty queue.
	if err := waitQueueEmpty(ctx, pool, time.Minute); err != nil {
		fmt.Fprintf(env.Stdout, "ceiling: %v; measuring anyway\n", err)
	}
	return total.perSecond(), nil
}

// commitLatency returns the median time of n durable commits, one at a time,
// of a transaction that writes one tiny WAL record. It is mostly the disk's
// flush time, the part of a transaction per delivery that coalescing shares:
// the faster it is, the nearer the ceiling comes to coalesced ingest.
func commitLatency(ctx context.Context, pool *pgxpool.Pool, n int) (time.Duration, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	took := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		// A transactional message is a WAL record of the transaction's own, so
		// its commit waits for the flush (a transaction id alone does not).
		if err := store.CommitWALMessage(ctx, conn); err != nil {
			return 0, err
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	return took[n/2], nil
}

func waitQueueEmpty(ctx context.Context, pool *pgxpool.Pool, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		// Whether any job is left, not how many: the tool's own queries are
		// counted in the PostgreSQL CPU it reports, and counting a backlog
		// of 30,000 jobs five times a second cost about 50 µs per delivery.
		left, err := store.AnyUnfinishedJob(ctx, pool)
		if err != nil {
			return err
		}
		if !left {
			return nil
		}
		if time.Now().After(deadline) {
			n, err := backlog(ctx, pool)
			if err != nil {
				return err
			}
			return fmt.Errorf("%d jobs still queued after %s", n, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// findPostmaster returns the postmaster of the gateway's database server when
// it runs on this machine, or 0.
func findPostmaster(ctx context.Context, env Env) int {
	pool, closeDB, err := env.Open(ctx, 1)
	if err != nil {
		return 0
	}
	defer closeDB()
	return postmasterOf(ctx, pool)
}

// backlog is how many River jobs wait or run: every kind, River's own table
// read as the bench's gauge, not a dispatch row.
func backlog(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	return store.CountUnfinishedJobs(ctx, pool)
}

// listeningPID returns the pid of the process that listens on the TCP port
// of base (the gateway being measured), or 0: a socket's inode from
// /proc/net/tcp and tcp6, then the process holding it.
func listeningPID(base string) int {
	u, err := url.Parse(base)
	if err != nil {
		return 0
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return 0
	}
	want := fmt.Sprintf(":%04X", n)
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			f := strings.Fields(line)
			// local_address is f[1], st is f[3] (0A: LISTEN), inode is f[9].
			if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); err == nil && inodes[link] {
				return pid
			}
		}
	}
	return 0
}

// peakRSS reads a process's peak resident set size.
func peakRSS(pid int) string {
	if pid == 0 {
		return ""
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return fmt.Sprintf("%.1f MB", float64(kb)/1024)
		}
	}
	return ""
}

// sink is the forward target: it answers 200 and notes when each delivery
// first arrived.
type sink struct {
	srv     *http.Server
	mu      sync.Mutex
	arrived map[string]time.Time
}

func startSink(addr string) (*sink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: target: %w", err)
	}
	s := &sink{arrived: map[string]time.Time{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now()
		id := r.Header.Get("X-Hookgate-Delivery")
		s.mu.Lock()
		if _, seen := s.arrived[id]; !seen {
			s.arrived[id] = now
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) close() { _ = s.srv.Close() }

// count is how many deliveries have reached the target.
func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.arrived)
}

// endToEnd offers o.rate deliveries per second for o.duration to a gateway
// that forwards to this tool's target, and reports receipt-to-target latency
// and the queue's backlog over time.
func endToEnd(ctx context.Context, env Env, o options, target *sink, gen *generator) error {
	pool, closeDB, err := env.Open(ctx, 2)
	if err != nil {
		return err
	}
	defer closeDB()

	var mu sync.Mutex // guards acked and ackLat; target.mu guards arrivals
	acked := map[string]time.Time{}

	transport := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	var sent, failed atomic.Int64
	var ackLat []time.Duration
	var wg sync.WaitGroup
	work := make(chan struct{}, o.rate) // a slot per offered delivery
	for range 128 {
		wg.Go(func() {
			for range work {
				req, id := gen.next(o.url)
				t0 := time.Now()
				res, err := client.Do(req.WithContext(ctx))
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode/100 != 2 {
					failed.Add(1)
					continue
				}
				now := time.Now()
				mu.Lock()
				acked[id] = now
				ackLat = append(ackLat, now.Sub(t0))
				mu.Unlock()
				sent.Add(1)
			}
		})
	}

	var samples []string
	sample := func(label string) {
		n, err := backlog(ctx, pool)
		if err == nil {
			samples = append(samples, fmt.Sprintf("%s %d", label, n))
		}
	}
	start := time.Now()
	interval := time.Second / time.Duration(o.rate)
	next := start
	lastSample := start
	dropped := 0
	for time.Since(start) < o.duration && ctx.Err() == nil {
		select {
		case work <- struct{}{}:
		default:
			dropped++ // the senders are all busy: the gateway is not keeping up
		}
		if time.Since(lastSample) >= 10*time.Second {
			lastSample = time.Now()
			sample(fmt.Sprintf("t=%ds", int(time.Since(start).Seconds())))
		}
		next = next.Add(interval)
		time.Sleep(time.Until(next))
	}
	close(work)
	wg.Wait()
	sample("end")
	offeredFor := time.Since(start)

	// Wait for the target to receive everything acknowledged.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		target.mu.Lock()
		missing := 0
		for id := range acked {
			if _, ok := target.arrived[id]; !ok {
				missing++
			}
		}
		target.mu.Unlock()
		mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			if missing > 0 {
				fmt.Fprintf(env.Stdout, "e2e: %d acknowledged deliveries never reached the target within 2m\n", missing)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sample("drained")

	mu.Lock()
	defer mu.Unlock()
	target.mu.Lock()
	defer target.mu.Unlock()
	var lat []time.Duration
	for id, a := range acked {
		if t, ok := target.arrived[id]; ok {
			lat = append(lat, t.Sub(a))
		}
	}
	slices.Sort(lat)
	slices.Sort(ackLat)
	q := func(l []time.Duration, f float64) time.Duration {
		if len(l) == 0 {
			return 0
		}
		return l[min(int(f*float64(len(l))), len(l)-1)].Round(100 * time.Microsecond)
	}
	fmt.Fprintf(env.Stdout, "e2e: offered %d/s for %s: %d acknowledged (%.0f/s), %d failed, %d not sent (senders busy)\n",
		o.rate, offeredFor.Round(time.Second), sent.Load(), float64(sent.Load())/offeredFor.Seconds(), failed.Load(), dropped)
	fmt.Fprintf(env.Stdout, "e2e: ack latency p50 %s p99 %s max %s\n", q(ackLat, .5), q(ackLat, .99), q(ackLat, 1))
	fmt.Fprintf(env.Stdout, "e2e: receipt-to-target p50 %s p90 %s p99 %s max %s (%d deliveries)\n", q(lat, .5), q(lat, .9), q(lat, .99), q(lat, 1), len(lat))
	fmt.Fprintf(env.Stdout, "e2e: queued jobs: %s\n", strings.Join(samples, ", "))
	if rss := peakRSS(o.pid); rss != "" {
		fmt.Fprintf(env.Stdout, "gateway: pid %d, peak RSS %s\n", o.pid, rss)
	}
	return nil
}
