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
package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
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

// ErrRateLimited means the provider's rate limit stopped a run before it was
// done; the next run carries on from the same checkpoint.
var ErrRateLimited = errors.New("rate limited")

// ErrRedirectRefused means a provider's API answered with a redirect to
// another scheme, host or port than its configured URL's. It is not
// followed: the request carries the credential, which goes nowhere else.
var ErrRedirectRefused = errors.New("a redirect away from the configured API URL's scheme, host and port was not followed")

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
	r.Metrics.Recovery(provider, "skipped", 1)
	r.logger().WarnContext(ctx, "recovery: the provider's API listed a delivery the gateway cannot store", "provider", provider, "delivery_id", id, "reason", reason)
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
	Pool *pgxpool.Pool
	// GitHub and Stripe are the providers' API clients; nil: not configured.
	GitHub *GitHub
	Stripe *Stripe
	// Ingester stores recovered Stripe events and their dispatches.
	Ingester *ingest.Ingester
	// Lookback bounds how far back a run lists (DefaultLookback when 0);
	// Retention, when set, bounds it too: a receipt older than that is gone,
	// and its absence must not pass for a delivery missed.
	Lookback, Retention time.Duration
	Metrics             *metrics.Metrics
	Logger              *slog.Logger
	// MinAge overrides minAge (tests set it to a millisecond).
	MinAge time.Duration
}

// Providers lists the providers recovery is configured for.
func (r *Recoverer) Providers() []string {
	var names []string
	if r.GitHub != nil {
		names = append(names, "github")
	}
	if r.Stripe != nil {
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
	case provider == "github" && r.GitHub != nil:
		run = r.recoverGitHub
	case provider == "stripe" && r.Stripe != nil:
		run = r.recoverStripe
	case provider == "github":
		return newReport(provider, opts), fmt.Errorf("%w: set GITHUB_RECOVERY_HOOKS and GITHUB_TOKEN or a GitHub App", ErrNotConfigured)
	case provider == "stripe":
		return newReport(provider, opts), fmt.Errorf("%w: set STRIPE_API_KEY", ErrNotConfigured)
	default:
		return newReport(provider, opts), fmt.Errorf("%w: recovery knows github and stripe, not %q", ErrNotConfigured, provider)
	}
	rep, err := guarded(ctx, provider, opts, run)
	r.Metrics.RecoveryRun(provider, err == nil)
	if err != nil {
		r.logger().WarnContext(ctx, "recovery: a run failed; the next run starts again from the checkpoint", "provider", provider,
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
	lookback := r.Lookback
	if lookback <= 0 {
		lookback = DefaultLookback
	}
	if r.Retention > 0 {
		lookback = min(lookback, r.Retention)
	}
	return now.Add(-lookback)
}

// window returns where a run of source starts listing, and whether it
// started from the checkpoint (so may move it).
func (r *Recoverer) window(ctx context.Context, source string, start time.Time, opts Options) (time.Time, bool, error) {
	floor := r.Floor(start)
	var cp time.Time
	err := r.Pool.QueryRow(ctx, `SELECT checkpoint FROM hookgate_recovery_checkpoints WHERE source = $1`, source).Scan(&cp)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, fmt.Errorf("read checkpoint of %s: %w", source, err)
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
	_, err := r.Pool.Exec(ctx, `INSERT INTO hookgate_recovery_checkpoints (source, checkpoint) VALUES ($1, $2)
		ON CONFLICT (source) DO UPDATE SET checkpoint = greatest(hookgate_recovery_checkpoints.checkpoint, excluded.checkpoint), updated_at = now()`,
		source, at)
	if err != nil {
		return fmt.Errorf("save checkpoint of %s: %w", source, err)
	}
	return nil
}

// minAge is how old a delivery must be before a run recovers it.
func (r *Recoverer) minAge() time.Duration {
	if r.MinAge > 0 {
		return r.MinAge
	}
	return minAge
}

func (r *Recoverer) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
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
	keep := max(r.Lookback, DefaultLookback) + 7*24*time.Hour
	_, err := r.Pool.Exec(ctx, `DELETE FROM hookgate_recovery_requests WHERE delivered_at < now() - make_interval(secs => $1)`, keep.Seconds())
	if err != nil {
		return fmt.Errorf("prune recovery requests: %w", err)
	}
	return nil
}

// Settings are recovery's part of the gateway's configuration. The errors
// of Clients name each setting by its environment variable.
type Settings struct {
	// GitHubHooks are the GitHub hooks whose deliveries recovery lists
	// (GITHUB_RECOVERY_HOOKS, as ParseHooks reads it). Defaults to none: no
	// GitHub recovery.
	GitHubHooks string
	// GitHubToken (GITHUB_TOKEN) authenticates the GitHub API requests; or a
	// GitHub App does: GitHubAppID (GITHUB_APP_ID) and GitHubAppKeyFile
	// (GITHUB_APP_PRIVATE_KEY_FILE, the App's private key, PEM). All three
	// default to empty, and are for GitHubHooks only.
	GitHubToken      string
	GitHubAppID      int64
	GitHubAppKeyFile string
	// GitHubAPIURL is GitHub's REST API (GITHUB_API_URL). Defaults to
	// https://api.github.com.
	GitHubAPIURL string
	// StripeAPIKey is a key that can read Stripe's events (STRIPE_API_KEY).
	// Defaults to empty: no Stripe recovery.
	StripeAPIKey string
	// StripeAPIURL is Stripe's API (STRIPE_API_URL). Defaults to
	// https://api.stripe.com.
	StripeAPIURL string
	// MaxBodyBytes is the largest Stripe event stored
	// (GATEWAY_MAX_BODY_BYTES). Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// Clients returns the API clients s asks for (nil for a provider without
// credentials), or what is wrong with s. It makes no request.
func Clients(s Settings) (*GitHub, *Stripe, error) {
	var gh *GitHub
	var st *Stripe
	hooks, err := ParseHooks(s.GitHubHooks)
	if err != nil {
		return nil, nil, fmt.Errorf("GITHUB_RECOVERY_HOOKS: %w", err)
	}
	if len(hooks) > 0 {
		gh, err = NewGitHub(GitHubConfig{Hooks: hooks, Token: s.GitHubToken, AppID: s.GitHubAppID,
			AppKeyFile: s.GitHubAppKeyFile, APIURL: s.GitHubAPIURL})
		if err != nil {
			return nil, nil, err
		}
	} else if s.GitHubAppID != 0 || s.GitHubAppKeyFile != "" {
		return nil, nil, errors.New("GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE are for recovery: set GITHUB_RECOVERY_HOOKS too")
	}
	if s.StripeAPIKey != "" {
		if st, err = NewStripe(StripeConfig{APIKey: s.StripeAPIKey, APIURL: s.StripeAPIURL, MaxBodyBytes: s.MaxBodyBytes}); err != nil {
			return nil, nil, err
		}
	}
	return gh, st, nil
}

// checkAPIURL refuses an API URL that is not http(s), or that carries a user,
// a password, a query or a fragment (a client would send the first two and
// lose the others). The URL is shown without what may be a credential.
func checkAPIURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		// Not the value, even redacted: whatever was pasted there may be a secret.
		return errors.New("must be an http(s) URL without a user, password, query or fragment, such as https://api.example.com")
	}
	return nil
}

// origin is an API URL's scheme, host and port: the only place its
// credential is sent.
type origin struct{ scheme, host, port string }

func originOf(u *url.URL) origin {
	o := origin{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname()), port: u.Port()}
	if o.port == "" {
		switch o.scheme {
		case "https":
			o.port = "443"
		case "http":
			o.port = "80"
		}
	}
	return o
}

// followWithin is an http.Client's CheckRedirect: a redirect within o is
// followed (10 at most in a row), one anywhere else is refused with
// ErrRedirectRefused. An API client adds its credential in its transport,
// on every hop, so Go's own rule (which keeps Authorization for another port
// of the same host) would not keep it from another server.
func (o origin) followWithin(req *http.Request, via []*http.Request) error {
	if originOf(req.URL) != o {
		status := 0
		if req.Response != nil {
			status = req.Response.StatusCode
		}
		return fmt.Errorf("%w: the API answered %d, to %s", ErrRedirectRefused, status, fanout.RedactURL(req.URL.String()))
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// pinned is the innermost transport of every provider API client: it sends
// nothing to another scheme, host or port than the API URL's, whatever a
// client above it does with a redirect.
type pinned struct {
	origin origin
	next   http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (p pinned) RoundTrip(req *http.Request) (*http.Response, error) {
	if originOf(req.URL) != p.origin {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: refused to send a request to %s", ErrRedirectRefused, fanout.RedactURL(req.URL.String()))
	}
	return p.next.RoundTrip(req)
}

// Bounds on what a provider's API may make a run read: an answer's size, and
// how many deliveries or events one run lists from one source. A run that
// reaches one stops with an error; the next starts again from the checkpoint.
const (
	maxAnswerBytes = 32 << 20
	maxListed      = 100_000
)

// capped is a transport whose answers' bodies fail past maxAnswerBytes, so
// that an API answering without end cannot exhaust memory.
type capped struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (c capped) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(req)
	if err == nil {
		res.Body = &cappedBody{ReadCloser: res.Body, left: maxAnswerBytes}
	}
	return res, err
}

type cappedBody struct {
	io.ReadCloser
	left int64
}

// Read implements io.Reader, failing past the cap.
func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("the API's answer is larger than %d bytes", maxAnswerBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
