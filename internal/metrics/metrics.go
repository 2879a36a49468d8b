// Package metrics holds hookgate's Prometheus metrics (client_golang) and the
// /metrics handler: ingest outcomes and ack latency, deliveries accepted with a
// non-primary secret, dispatch outcomes and receipt-to-success latency,
// recoveries through the providers' APIs, the
// River queue's depth, the build (hookgate_build_info), and Go's runtime and
// process metrics.
//
// Code under test that needs metrics but reads none gets them from Discard.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/throttle"
	"github.com/hookgate/hookgate/internal/version"
)

// Metrics records hookgate's metrics into its own registry.
type Metrics struct {
	archive    *prometheus.CounterVec
	notices    *prometheus.CounterVec
	registry   *prometheus.Registry
	ingest     *prometheus.CounterVec
	secondary  *prometheus.CounterVec
	ack        *prometheus.HistogramVec
	dispatches *prometheus.CounterVec
	toSuccess  *prometheus.HistogramVec
	attempts   *prometheus.CounterVec
	recovery   *prometheus.CounterVec
	runs       *prometheus.CounterVec
	filters    *prometheus.CounterVec
	invalid    *prometheus.CounterVec
	queue      *queueCollector // nil without a pool
}

// New returns metrics registered in a new registry; pool, when not nil, is
// queried for the queue depth at each scrape.
func New(pool *pgxpool.Pool) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		ingest: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_ingest_requests_total",
			Help: "Ingest requests by provider and outcome (accepted, duplicate, or the error code).",
		}, []string{"provider", "outcome"}),
		secondary: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_ingest_secondary_secret_total",
			Help: "Deliveries verified by a secret other than the first configured one: a rotation in progress.",
		}, []string{"provider"}),
		ack: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookgate_ingest_ack_seconds",
			Help:    "Time from request to answer for ingest requests that were verified.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"provider"}),
		dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_dispatches_total",
			Help: "Dispatches that reached a final state, by route and state.",
		}, []string{"route", "state"}),
		toSuccess: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookgate_receipt_to_success_seconds",
			Help:    "Time from a delivery's first receipt to its dispatch's success, by route.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
		}, []string{"route"}),
	}
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_forward_attempts_total",
		Help: "Forward attempts by route and outcome: succeeded, status_4xx, status_5xx, timeout, connection (no answer); skipped (the route's transformation asked for no request), transform_failed (it failed on the delivery; nothing was sent).",
	}, []string{"route", "outcome"})
	m.recovery = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_recovery_total",
		Help: "Recovery through the providers' APIs, by provider and outcome: found (missing here), requested (a redelivery asked of GitHub), stored (a Stripe event stored from the API), failed (a request or a store that failed), skipped (listed by the API but not storable), given_up (asked 3 times, never arrived).",
	}, []string{"provider", "outcome"})
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_recovery_runs_total",
		Help: "Recovery runs by provider and result (ok, failed): alert when a provider's failed runs keep growing and its ok runs do not.",
	}, []string{"provider", "result"})
	m.filters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_filter_failures_total",
		Help: "Deliveries on which a route's filter could not be evaluated (a field missing, the cost limit, a payload that is not JSON), by route: the route did not take them.",
	}, []string{"route"})
	m.invalid = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_deliveries_invalid_total",
		Help: "Deliveries accepted whose payload failed its JSON Schema, by provider: stored and acknowledged, dispatched to no route (state invalid).",
	}, []string{"provider"})
	m.archive = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_archive_days_total",
		Help: "Days of one provider's deliveries the archive was asked to take, by provider and result: ok (written and read back against its manifest), failed (kept, tried again at retention's next run). Alert when failed grows.",
	}, []string{"provider", "result"})
	m.notices = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookgate_notifications_total",
		Help: "Events sent to a notification, by notification and result: sent, failed (an attempt that failed; River tries again), suppressed (sent less than 10 minutes before), dropped (not queued).",
	}, []string{"notification", "result"})
	m.registry.MustRegister(m.ingest, m.secondary, m.ack, m.dispatches, m.toSuccess, m.attempts, m.recovery, m.runs, m.filters, m.invalid, m.archive, m.notices,
		buildInfo(version.Get()), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if pool != nil {
		c := &queueCollector{pool: pool,
			desc: prometheus.NewDesc("hookgate_queue_depth", "River jobs waiting or running, by state.", []string{"state"}, nil),
			oldest: prometheus.NewDesc("hookgate_dispatch_oldest_unfinished_seconds",
				"Age of each route's oldest dispatch not yet finished (waiting, retrying or running); 0 for a configured route that has none.",
				[]string{"route"}, nil)}
		c.q = throttle.Value[queue]{Every: queueEvery, Read: c.read}
		m.registry.MustRegister(c)
		m.queue = c
	}
	return m
}

// buildInfo is hookgate_build_info{version,commit} = 1: which release and
// commit each scraped gateway runs, so a rolling upgrade can be watched
// (count by (version) (hookgate_build_info)).
func buildInfo(v version.Info) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "hookgate_build_info",
		Help:        "Always 1; its labels are the release (version) and the git commit this gateway was built from.",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit},
	})
	g.Set(1)
	return g
}

// Discard returns metrics that no one reads: they record into a registry of
// their own that is served nowhere, for code that must be given metrics where
// none are wanted (tests).
func Discard() *Metrics { return New(nil) }

// Known are the label values a gateway knows at start.
type Known struct {
	// Providers are the configured providers (ingest's provider label).
	Providers []string
	// Routes are the configured routes.
	Routes []string
	// Recovery are the providers recovery is configured for.
	Recovery []string
	// Notifications are the configured notifications' names.
	Notifications []string
}

// The label values Declare makes present: ingest's outcomes that a dashboard
// or an alert reads (ingest.Accepted, ingest.Duplicate, the 503s' error
// codes, and invalid_signature: a sender whose secret is not the gateway's), the final states of a dispatch that are counted (dispatch's),
// forward.Outcome's outcomes, and the recovery outcomes every provider has.
var (
	declaredIngest   = []string{"accepted", "duplicate", "unavailable", "overloaded", "invalid_signature"}
	declaredStates   = []string{"succeeded", "superseded", "discarded"}
	declaredForward  = []string{"succeeded", "status_4xx", "status_5xx", "timeout", "connection", "skipped", "transform_failed"}
	declaredRecovery = []string{"found", "failed"}
	declaredNotices  = []string{"sent", "failed", "suppressed", "dropped"}
)

// Declare makes the series alerts and dashboards read present from the
// start, at zero, for the label values the gateway knows: a counter that
// first appears at 1 hides that first increase from rate() and increase(),
// and an absent series cannot be told from one that is not exported. The
// age of each known route's oldest unfinished dispatch is 0 when it has none.
func (m *Metrics) Declare(k Known) {
	for _, p := range k.Providers {
		for _, outcome := range declaredIngest {
			m.ingest.WithLabelValues(p, outcome)
		}
		m.ack.WithLabelValues(p)
		m.secondary.WithLabelValues(p)
		m.invalid.WithLabelValues(p)
		// Whether or not an archive is configured: one configured later
		// starts from zero too.
		m.archive.WithLabelValues(p, "ok")
		m.archive.WithLabelValues(p, "failed")
	}
	for _, r := range k.Routes {
		for _, state := range declaredStates {
			m.dispatches.WithLabelValues(r, state)
		}
		m.toSuccess.WithLabelValues(r)
		for _, outcome := range declaredForward {
			m.attempts.WithLabelValues(r, outcome)
		}
		m.filters.WithLabelValues(r)
	}
	for _, p := range k.Recovery {
		for _, outcome := range declaredRecovery {
			m.recovery.WithLabelValues(p, outcome)
		}
		m.runs.WithLabelValues(p, "ok")
		m.runs.WithLabelValues(p, "failed")
	}
	for _, n := range k.Notifications {
		for _, result := range declaredNotices {
			m.notices.WithLabelValues(n, result)
		}
	}
	if m.queue != nil {
		routes := append([]string(nil), k.Routes...)
		m.queue.routes.Store(&routes)
	}
}

// Handler serves the registry in Prometheus text format. A metric that
// cannot be read (the queue depth while the database is down) is left out;
// the others are still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Ingest records an answered ingest request. secretIndex is the matched
// secret's index, or -1 when none matched; took is only observed for
// verified requests.
func (m *Metrics) Ingest(provider, outcome string, secretIndex int, took time.Duration) {
	m.ingest.WithLabelValues(provider, outcome).Inc()
	if secretIndex > 0 {
		m.secondary.WithLabelValues(provider).Inc()
	}
	if secretIndex >= 0 {
		m.ack.WithLabelValues(provider).Observe(took.Seconds())
	}
}

// Dispatch records a dispatch's final state; for a success, receivedAt is its
// delivery's first receipt time.
func (m *Metrics) Dispatch(route, state string, receivedAt time.Time) {
	m.dispatches.WithLabelValues(route, state).Inc()
	if state == "succeeded" && !receivedAt.IsZero() {
		m.toSuccess.WithLabelValues(route).Observe(time.Since(receivedAt).Seconds())
	}
}

// Gauge reports a value read at each scrape, such as a queue's length: read
// must be cheap and need no database. A name registered twice panics.
func (m *Metrics) Gauge(name, help string, read func() float64) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, read))
}

// RouteGauge is one route's pause and circuit state.
type RouteGauge struct {
	Route   string
	Paused  bool
	Circuit string // closed, open or probing
}

// Routes reports, at each scrape, every route's pause
// (hookgate_route_paused, 1 when paused) and circuit
// (hookgate_route_circuit{state}, 1 for the route's current state) as read
// returns them; read must need no database.
func (m *Metrics) Routes(read func() []RouteGauge) {
	m.registry.MustRegister(&routeCollector{read: read,
		paused: prometheus.NewDesc("hookgate_route_paused", "1 while an operator has paused the route, else 0.", []string{"route"}, nil),
		circuit: prometheus.NewDesc("hookgate_route_circuit",
			"1 for the route's circuit state (closed, open or probing), 0 for the others.", []string{"route", "state"}, nil),
	})
}

type routeCollector struct {
	read            func() []RouteGauge
	paused, circuit *prometheus.Desc
}

func (c *routeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.paused; ch <- c.circuit }

func (c *routeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.read() {
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, bool01(g.Paused), g.Route)
		for _, state := range []string{"closed", "open", "probing"} {
			ch <- prometheus.MustNewConstMetric(c.circuit, prometheus.GaugeValue, bool01(g.Circuit == state), g.Route, state)
		}
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ForwardAttempt records one forward attempt's outcome on a route.
func (m *Metrics) ForwardAttempt(route, outcome string) {
	m.attempts.WithLabelValues(route, outcome).Inc()
}

// Recovery counts n recoveries of a provider's deliveries with an outcome.
func (m *Metrics) Recovery(provider, outcome string, n int) {
	if n == 0 {
		return
	}
	m.recovery.WithLabelValues(provider, outcome).Add(float64(n))
}

// ArchivedDay counts a day of one provider's deliveries the archive was
// asked to take, ok or failed.
func (m *Metrics) ArchivedDay(provider string, ok bool) {
	result := "failed"
	if ok {
		result = "ok"
	}
	m.archive.WithLabelValues(provider, result).Inc()
}

// Notification counts one event of a notification: sent, failed,
// suppressed or dropped.
func (m *Metrics) Notification(notification, result string) {
	m.notices.WithLabelValues(notification, result).Inc()
}

// Invalid counts one delivery accepted whose payload failed its schema.
func (m *Metrics) Invalid(provider string) {
	m.invalid.WithLabelValues(provider).Inc()
}

// FilterFailed counts one delivery on which a route's filter failed.
func (m *Metrics) FilterFailed(route string) {
	m.filters.WithLabelValues(route).Inc()
}

// RecoveryRun counts one recovery run of a provider, ok or failed.
func (m *Metrics) RecoveryRun(provider string, ok bool) {
	result := "failed"
	if ok {
		result = "ok"
	}
	m.runs.WithLabelValues(provider, result).Inc()
}

// queueCollector reads River's queue depth, at most once a second however
// often /metrics is scraped: the endpoint needs no token, and a flood of
// scrapes must not become a flood of queries.
type queueCollector struct {
	pool   *pgxpool.Pool
	desc   *prometheus.Desc
	oldest *prometheus.Desc
	routes atomic.Pointer[[]string] // Declare's: their age is 0 when they have none

	q throttle.Value[queue]
}

// queue is what one read of River's jobs found.
type queue struct {
	depth  map[string]float64 // jobs by state
	oldest map[string]float64 // seconds, by route of a dispatch job
}

// queueEvery is how old the queue depth may be.
const queueEvery = time.Second

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc; ch <- c.oldest }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	q, _, err := c.q.Get(context.Background())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for state, n := range q.depth {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, n, state)
	}
	for route, age := range q.oldest {
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, route)
	}
	if routes := c.routes.Load(); routes != nil {
		for _, route := range *routes {
			if _, ok := q.oldest[route]; !ok {
				ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, 0, route)
			}
		}
	}
}

// read counts River's unfinished jobs by state and finds each route's oldest
// unfinished dispatch, in one query (store.UnfinishedJobsOf).
func (c *queueCollector) read(ctx context.Context) (queue, error) {
	q := queue{depth: map[string]float64{"available": 0, "scheduled": 0, "retryable": 0, "running": 0}, oldest: map[string]float64{}}
	jobs, err := store.UnfinishedJobsOf(ctx, c.pool)
	if err != nil {
		return queue{}, errors.New("queue depth: the database did not answer")
	}
	for _, j := range jobs {
		q.depth[j.State] += float64(j.Count)
		if j.Route != nil {
			q.oldest[*j.Route] = max(q.oldest[*j.Route], j.OldestSeconds)
		}
	}
	return q, nil
}
