// Package recovery closes the gap a gateway's downtime leaves: it asks the
// providers' own APIs what they sent, and recovers what was never stored.
//
// GitHub never retries a failed delivery, but it keeps each hook's deliveries
// for a few days and redelivers one on request, with its original signed
// body: recovery lists a hook's deliveries and asks for every GUID that has
// no receipt of that hook, at most MaxAttempts times ever. Stripe keeps its
// events for 30 days: recovery lists them and stores each one that has no
// receipt as a receipt of scope "recovered", dispatched like any event.
//
// Each source (a GitHub hook, or Stripe's events) keeps a checkpoint in the
// database: where its next run starts listing. A run from the checkpoint
// moves it forward to the oldest delivery still waiting for an answer, or
// to the run's start less an overlap, whichever is earlier.
//
// The package is in two parts. The providers' API clients (client.go, the
// small interfaces the policy asks of them; github_client.go, github_hooks.go
// and stripe_client.go, over transport.go) make the requests and know
// nothing of the database. The policy (recovery.go, github.go, stripe.go,
// job.go) decides what to ask for and what to store, moves the checkpoints,
// and claims, takes back and settles the asks; the statements it runs for
// that are internal/store's.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/store"
)

// Actor is the audit log's actor for what the periodic job does; the CLI
// records its own.
const Actor = "recovery"

// MaxAttempts is how many times a GitHub delivery is asked for, ever.
const MaxAttempts = 3

// Defaults.
const (
	DefaultInterval = 5 * time.Minute
	DefaultLookback = 72 * time.Hour
	// overlap is how far before a run's start the next run starts listing, so
	// that a delivery the provider was still making during a run is seen by
	// the next.
	overlap = 15 * time.Minute
	// minAge leaves the newest deliveries to their ordinary path: one the
	// provider is still sending, or about to retry, is not recovered yet
	// (the next run sees it).
	minAge = 2 * time.Minute
	// askAgainAfter is how long an asked-for GitHub delivery has to arrive
	// before it is asked for again.
	askAgainAfter = 4 * time.Minute
)

// ErrNotConfigured means recovery for that provider has no credentials.
var ErrNotConfigured = errors.New("recovery not configured")

// Report is what one run found and did. Found are the delivery ids missing
// here (GitHub: with no receipt of their hook; Stripe: with no receipt at
// all); Requested the GitHub GUIDs asked for; Stored the Stripe events
// stored; Skipped what was missing or listed and neither asked for nor
// stored, and why.
type Report struct {
	Provider  string   `json:"provider"`
	DryRun    bool     `json:"dry_run"`
	Found     []string `json:"found"`
	Requested []string `json:"requested"`
	Stored    []string `json:"stored"`
	Skipped   []Skip   `json:"skipped"`
}

// Skip is a delivery a run left alone, and why: one the provider's API
// listed that the gateway cannot store (an unusable id, an event without a
// type, a Stripe event larger than GATEWAY_MAX_BODY_BYTES), or a GitHub GUID
// asked for lately or asked for MaxAttempts times.
type Skip struct {
	DeliveryID string `json:"delivery_id"`
	Reason     string `json:"reason"`
}

func newReport(provider string, opts Options) Report {
	return Report{Provider: provider, DryRun: opts.DryRun, Found: []string{}, Requested: []string{}, Stored: []string{}, Skipped: []Skip{}}
}

// skip reports a listed delivery the gateway cannot store: in the report,
// the log and the metrics, since no later run does better.
func (r *Recoverer) skip(ctx context.Context, rep *Report, provider, id, reason string) {
	rep.Skipped = append(rep.Skipped, Skip{DeliveryID: id, Reason: reason})
	r.metrics.Recovery(provider, "skipped", 1)
	r.logger.WarnContext(ctx, "recovery: the provider's API listed a delivery the gateway cannot store", "provider", provider, "delivery_id", id, "reason", reason)
}

// Options are one run's choices.
type Options struct {
	// Since, when set, is where listing starts instead of the checkpoint;
	// such a run leaves the checkpoint alone unless Since is at or before it.
	Since *time.Time
	// DryRun lists and compares, and asks for and stores nothing.
	DryRun bool
	// Actor is the audit log's actor; Actor when empty.
	Actor string
}

// Recoverer runs recovery for the providers it has credentials for.
type Recoverer struct {
	pool *pgxpool.Pool
	// github and stripe are the providers' API clients; nil: not configured.
	github   *GitHub
	stripe   *Stripe
	ingester *ingest.Ingester
	metrics  *metrics.Metrics
	// lookback bounds how far back a run lists; retention, when set, bounds
	// it too: a receipt older than that is gone, and its absence must not
	// pass for a delivery missed.
	lookback, retention time.Duration
	logger              *slog.Logger
	minAge              time.Duration

	// Events, when set, hears of each run that failed (package notify). It
	// must not block.
	Events func(notify.Event)
}

// RecovererConfig are a Recoverer's settings; the zero RecovererConfig is
// the defaults: no provider configured.
type RecovererConfig struct {
	// GitHub and Stripe are the providers' API clients (Clients makes them
	// from the gateway's settings); nil: that provider's recovery is not
	// configured.
	GitHub *GitHub
	Stripe *Stripe
	// Lookback bounds how far back a run lists. Defaults to DefaultLookback.
	// Retention, when set, bounds it too: a receipt older than that is gone,
	// and its absence must not pass for a delivery missed.
	Lookback, Retention time.Duration
	// Logger receives what a run could not do. Defaults to discarding it.
	Logger *slog.Logger
	// MinAge is how old a delivery must be before a run recovers it: the
	// newest are left to their ordinary path. Defaults to two minutes
	// (tests set a millisecond).
	MinAge time.Duration
}

// NewRecoverer returns a Recoverer of the deliveries stored in pool, which
// stores recovered Stripe events and their dispatches through ingester and
// counts what it does in m.
func NewRecoverer(pool *pgxpool.Pool, ingester *ingest.Ingester, m *metrics.Metrics, cfg RecovererConfig) *Recoverer {
	if cfg.Lookback <= 0 {
		cfg.Lookback = DefaultLookback
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MinAge <= 0 {
		cfg.MinAge = minAge
	}
	return &Recoverer{pool: pool, github: cfg.GitHub, stripe: cfg.Stripe, ingester: ingester, metrics: m,
		lookback: cfg.Lookback, retention: cfg.Retention, logger: cfg.Logger, minAge: cfg.MinAge}
}

// Providers lists the providers recovery is configured for.
func (r *Recoverer) Providers() []string {
	var names []string
	if r.github != nil {
		names = append(names, "github")
	}
	if r.stripe != nil {
		names = append(names, "stripe")
	}
	return names
}

// Run recovers one provider's deliveries. A run that fails is counted and
// logged; what it did before failing is in its report.
func (r *Recoverer) Run(ctx context.Context, provider string, opts Options) (Report, error) {
	if opts.Actor == "" {
		opts.Actor = Actor
	}
	var run func(context.Context, Options) (Report, error)
	switch {
	case provider == "github" && r.github != nil:
		run = r.recoverGitHub
	case provider == "stripe" && r.stripe != nil:
		run = r.recoverStripe
	case provider == "github":
		return newReport(provider, opts), fmt.Errorf("%w: set GITHUB_RECOVERY_HOOKS and GITHUB_TOKEN or a GitHub App", ErrNotConfigured)
	case provider == "stripe":
		return newReport(provider, opts), fmt.Errorf("%w: set STRIPE_API_KEY", ErrNotConfigured)
	default:
		return newReport(provider, opts), fmt.Errorf("%w: recovery knows github and stripe, not %q", ErrNotConfigured, provider)
	}
	rep, err := guarded(ctx, provider, opts, run)
	r.metrics.RecoveryRun(provider, err == nil)
	if err != nil && r.Events != nil {
		r.Events(notify.Event{Type: notify.RecoveryFailed, Provider: provider,
			Message: fmt.Sprintf("recovery of %s failed; the next run starts again from its checkpoint: %s", provider, errtext.Clean(err.Error()))})
	}
	if err != nil {
		r.logger.WarnContext(ctx, "recovery: a run failed; the next run starts again from the checkpoint", "provider", provider,
			"found", len(rep.Found), "requested", len(rep.Requested), "stored", len(rep.Stored), "error", err)
	}
	return rep, err
}

// guarded calls run, turning a panic into the run's error: a client library
// that panics on an answer it did not expect must not end the process (the
// CLI) or pass uncounted (the job).
func guarded(ctx context.Context, provider string, opts Options, run func(context.Context, Options) (Report, error)) (rep Report, err error) {
	defer func() {
		if v := recover(); v != nil {
			rep, err = newReport(provider, opts), fmt.Errorf("recovery of %s stopped on an answer its client could not read: %v", provider, v)
		}
	}()
	return run(ctx, opts)
}

// Floor is the earliest time a run starting at now lists from: the lookback
// back, and never past the retention.
func (r *Recoverer) Floor(now time.Time) time.Time {
	lookback := r.lookback
	if r.retention > 0 {
		lookback = min(lookback, r.retention)
	}
	return now.Add(-lookback)
}

// window returns where a run of source starts listing, and whether it
// started from the checkpoint (so may move it).
func (r *Recoverer) window(ctx context.Context, source string, start time.Time, opts Options) (time.Time, bool, error) {
	floor := r.Floor(start)
	cp, err := store.RecoveryCheckpoint(ctx, r.pool, source)
	if err != nil {
		return time.Time{}, false, err
	}
	if opts.Since != nil {
		since := *opts.Since
		if since.Before(floor) {
			since = floor
		}
		return since, !opts.DryRun && (cp.IsZero() || !since.After(cp)), nil
	}
	if cp.Before(floor) {
		cp = floor
	}
	return cp, !opts.DryRun, nil
}

// saveCheckpoint moves source's checkpoint to at; it never moves it back.
func (r *Recoverer) saveCheckpoint(ctx context.Context, source string, at time.Time) error {
	return store.SaveRecoveryCheckpoint(ctx, r.pool, source, at)
}

// recordAudit writes one audit entry per delivery id, in tx.
func recordAudit(ctx context.Context, tx pgx.Tx, actor, provider, reason string, ids ...string) error {
	for _, id := range ids {
		if err := audit.Record(ctx, tx, audit.NewEntry{Actor: actor, Action: audit.Recover, Provider: provider, DeliveryID: id, Reason: reason}); err != nil {
			return err
		}
	}
	return nil
}

// Prune deletes request counts of deliveries too old for any provider to
// still hold: GitHub keeps deliveries for days, and no run lists further back
// than the lookback.
func (r *Recoverer) Prune(ctx context.Context) error {
	keep := max(r.lookback, DefaultLookback) + 7*24*time.Hour
	return store.PruneRedeliveryRequests(ctx, r.pool, keep)
}
