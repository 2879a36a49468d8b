package recovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v88/github"
	"github.com/jackc/pgx/v5"
	"github.com/tidwall/gjson"

	"github.com/hookgate/hookgate/internal/providers"
)

// Hook is one GitHub webhook whose deliveries recovery lists: a repository's
// ("repo:OWNER/NAME:ID"), an organization's ("org:ORG:ID"), or the GitHub
// App's own ("app").
type Hook struct {
	// Kind is "repo", "org" or "app".
	Kind string
	// Owner is the repository's owner or the organization; Repo the
	// repository's name.
	Owner, Repo string
	// ID is the hook's id (X-GitHub-Hook-ID); 0 for the App's hook.
	ID int64
}

// String returns the hook as GITHUB_RECOVERY_HOOKS spells it.
func (h Hook) String() string {
	switch h.Kind {
	case "repo":
		return "repo:" + h.Owner + "/" + h.Repo + ":" + strconv.FormatInt(h.ID, 10)
	case "org":
		return "org:" + h.Owner + ":" + strconv.FormatInt(h.ID, 10)
	}
	return h.Kind
}

// scope is the receipt scope the hook's deliveries are stored under: its id.
// The App's hook id is not in its configuration, so its deliveries are
// looked for under any scope ("" here).
func (h Hook) scope() string {
	if h.Kind == "app" {
		return ""
	}
	return strconv.FormatInt(h.ID, 10)
}

// ParseHooks reads GITHUB_RECOVERY_HOOKS: hooks separated by white space.
func ParseHooks(s string) ([]Hook, error) {
	var hooks []Hook
	seen := map[Hook]bool{}
	// An entry is named by its place, never shown: a secret pasted into
	// the variable would be.
	for i, f := range strings.Fields(s) {
		h, err := parseHook(f)
		if err != nil {
			return nil, fmt.Errorf("entry %d %w", i+1, err)
		}
		if seen[h] {
			return nil, fmt.Errorf("entry %d is listed twice", i+1)
		}
		seen[h] = true
		hooks = append(hooks, h)
	}
	return hooks, nil
}

func parseHook(f string) (Hook, error) {
	if f == "app" {
		return Hook{Kind: "app"}, nil
	}
	bad := errors.New("is not repo:OWNER/NAME:HOOK_ID, org:ORG:HOOK_ID or app")
	if strings.Contains(f, ",") {
		bad = fmt.Errorf("%w (hooks are separated by spaces, not commas)", bad)
	}
	kind, rest, ok := strings.Cut(f, ":")
	if !ok {
		return Hook{}, bad
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return Hook{}, bad
	}
	id, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil || id <= 0 {
		return Hook{}, errors.New("has a hook id that is not a positive number")
	}
	name := rest[:i]
	h := Hook{Kind: kind, ID: id}
	switch kind {
	case "repo":
		owner, repo, ok := strings.Cut(name, "/")
		if !ok || !validName(owner) || !validName(repo) {
			return Hook{}, bad
		}
		h.Owner, h.Repo = owner, repo
	case "org":
		if !validName(name) {
			return Hook{}, bad
		}
		h.Owner = name
	default:
		return Hook{}, bad
	}
	return h, nil
}

// validName accepts what GitHub allows in an owner's or repository's name.
func validName(s string) bool {
	if s == "" || len(s) > 100 || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// GitHubConfig configures the GitHub API client.
type GitHubConfig struct {
	Hooks []Hook
	// Token is a personal access token or any token the API takes; or
	// AppID and AppKeyFile, a GitHub App's id and private key (PEM).
	Token      string
	AppID      int64
	AppKeyFile string
	// APIURL is GitHub's REST API: https://api.github.com (the default), or
	// a GitHub Enterprise Server's https://HOST/api/v3.
	APIURL string
	// Transport carries the requests; http.DefaultTransport when nil.
	Transport http.RoundTripper
	// MutationGap is the least time between two redelivery requests: GitHub
	// asks integrations to leave a second between requests that change
	// something. 1s when 0.
	MutationGap time.Duration
	// MaxWait is the longest a run waits for a rate limit to pass; past it
	// the run stops (ErrRateLimited) and the next one carries on. 2m when 0.
	MaxWait time.Duration
}

// GitHub lists GitHub hooks' deliveries and asks for redeliveries, through
// go-github.
type GitHub struct {
	cfg    GitHubConfig
	base   *url.URL
	origin origin
	token  *github.Client
	apps   *ghinstallation.AppsTransport

	mu        sync.Mutex
	clients   map[Hook]*github.Client
	lastAsked time.Time
}

// NewGitHub checks cfg and returns its client; it makes no request.
func NewGitHub(cfg GitHubConfig) (*GitHub, error) {
	if len(cfg.Hooks) == 0 {
		return nil, errors.New("GITHUB_RECOVERY_HOOKS names no hook")
	}
	if cfg.APIURL == "" {
		cfg.APIURL = "https://api.github.com"
	}
	if err := checkAPIURL(cfg.APIURL); err != nil {
		return nil, fmt.Errorf("GITHUB_API_URL: %w", err)
	}
	base, err := url.Parse(strings.TrimRight(cfg.APIURL, "/") + "/")
	if err != nil {
		return nil, fmt.Errorf("GITHUB_API_URL: %w", err)
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	// Whatever carries a credential (the token, the App's JWT, an
	// installation token) goes through pinned: to the API URL's host only.
	cfg.Transport = listingsChecked{next: capped{next: pinned{origin: originOf(base), next: cfg.Transport}}}
	if cfg.MutationGap <= 0 {
		cfg.MutationGap = time.Second
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 2 * time.Minute
	}
	g := &GitHub{cfg: cfg, base: base, origin: originOf(base), clients: map[Hook]*github.Client{}}
	hasApp := cfg.AppID != 0 || cfg.AppKeyFile != ""
	switch {
	case hasApp && (cfg.AppID <= 0 || cfg.AppKeyFile == ""):
		return nil, errors.New("a GitHub App needs both GITHUB_APP_ID (a positive number) and GITHUB_APP_PRIVATE_KEY_FILE")
	case hasApp:
		// Read here, not by ghinstallation, whose error shows the path: the
		// key itself may have been put where its path belongs.
		key, err := os.ReadFile(cfg.AppKeyFile)
		if err != nil {
			if pe := (*os.PathError)(nil); errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("GITHUB_APP_PRIVATE_KEY_FILE: the file it names cannot be read: %w", err)
		}
		if g.apps, err = ghinstallation.NewAppsTransport(cfg.Transport, cfg.AppID, key); err != nil {
			// Not err's text alone: it does not name the variable.
			return nil, fmt.Errorf("GITHUB_APP_PRIVATE_KEY_FILE: %w", err)
		}
		g.apps.BaseURL = strings.TrimRight(base.String(), "/")
		// ghinstallation sends the token exchange through its transport; its
		// Client is what a version of it may use instead.
		g.apps.Client = g.httpClient(cfg.Transport)
	case cfg.Token == "":
		return nil, errors.New("GITHUB_RECOVERY_HOOKS needs GITHUB_TOKEN or a GitHub App (GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE)")
	}
	for _, h := range cfg.Hooks {
		if h.Kind == "app" && g.apps == nil {
			return nil, errors.New("GITHUB_RECOVERY_HOOKS: the hook \"app\" needs a GitHub App (GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE); a token cannot read an App's deliveries")
		}
	}
	if cfg.Token != "" {
		if g.token, err = g.newClient(cfg.Transport, github.WithAuthToken(cfg.Token)); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Hooks are the hooks recovery lists.
func (g *GitHub) Hooks() []Hook { return g.cfg.Hooks }

// httpClient is an http.Client of tr that follows no redirect away from the
// API URL's host.
func (g *GitHub) httpClient(tr http.RoundTripper) *http.Client {
	return &http.Client{Transport: tr, Timeout: time.Minute, CheckRedirect: g.origin.followWithin}
}

func (g *GitHub) newClient(tr http.RoundTripper, more ...github.ClientOptionsFunc) (*github.Client, error) {
	base := g.base.String()
	c, err := github.NewClient(append([]github.ClientOptionsFunc{
		github.WithHTTPClient(g.httpClient(tr)),
		github.WithURLs(&base, nil),
	}, more...)...)
	if err != nil {
		return nil, fmt.Errorf("GitHub client: %w", err)
	}
	return c, nil
}

// client returns the API client for a hook: the App's own for its hook, the
// token's when there is one, else the App's installation on the hook's
// repository or organization.
func (g *GitHub) client(ctx context.Context, h Hook) (*github.Client, error) {
	g.mu.Lock()
	c := g.clients[h]
	g.mu.Unlock()
	if c != nil {
		return c, nil
	}
	var err error
	switch {
	case h.Kind == "app":
		if c, err = g.newClient(g.apps); err != nil {
			return nil, err
		}
	case g.token != nil:
		c = g.token
	default:
		app, err := g.newClient(g.apps)
		if err != nil {
			return nil, err
		}
		var inst *github.Installation
		_, err = g.call(ctx, func(ctx context.Context) (*github.Response, error) {
			var resp *github.Response
			var err error
			if h.Kind == "repo" {
				inst, resp, err = app.Apps.GetRepositoryInstallation(ctx, h.Owner, h.Repo)
			} else {
				inst, resp, err = app.Apps.GetOrganizationInstallation(ctx, h.Owner)
			}
			return resp, err
		})
		if err != nil {
			return nil, fmt.Errorf("find the App's installation: %w", err)
		}
		if inst.GetID() <= 0 {
			return nil, errors.New("find the App's installation: GitHub's answer names no installation")
		}
		itr := ghinstallation.NewFromAppsTransport(g.apps, inst.GetID())
		itr.BaseURL = g.apps.BaseURL
		itr.Client = g.httpClient(g.cfg.Transport)
		if c, err = g.newClient(itr); err != nil {
			return nil, err
		}
	}
	g.mu.Lock()
	g.clients[h] = c
	g.mu.Unlock()
	return c, nil
}

// list reads one page of a hook's deliveries, newest first, waiting out
// rate limits, and checks that it is one (wellFormed).
func (g *GitHub) list(ctx context.Context, c *github.Client, h Hook, opts *github.ListCursorOptions) ([]*github.HookDelivery, *github.Response, error) {
	var page []*github.HookDelivery
	resp, err := g.call(ctx, func(ctx context.Context) (*github.Response, error) {
		var resp *github.Response
		var err error
		switch h.Kind {
		case "repo":
			page, resp, err = c.Repositories.ListHookDeliveries(ctx, h.Owner, h.Repo, h.ID, opts)
		case "org":
			page, resp, err = c.Organizations.ListHookDeliveries(ctx, h.Owner, h.ID, opts)
		default:
			page, resp, err = c.Apps.ListHookDeliveries(ctx, opts)
		}
		return resp, err
	})
	if err == nil {
		err = wellFormed(page, resp)
	}
	return page, resp, err
}

// redeliver asks GitHub to send a delivery again, a MutationGap after the
// previous ask.
func (g *GitHub) redeliver(ctx context.Context, c *github.Client, h Hook, id int64) error {
	g.mu.Lock()
	wait := time.Until(g.lastAsked.Add(g.cfg.MutationGap))
	g.lastAsked = time.Now().Add(max(wait, 0))
	g.mu.Unlock()
	if err := sleep(ctx, wait); err != nil {
		return err
	}
	_, err := g.call(ctx, func(ctx context.Context) (*github.Response, error) {
		var resp *github.Response
		var err error
		switch h.Kind {
		case "repo":
			_, resp, err = c.Repositories.RedeliverHookDelivery(ctx, h.Owner, h.Repo, h.ID, id)
		case "org":
			_, resp, err = c.Organizations.RedeliverHookDelivery(ctx, h.Owner, h.ID, id)
		default:
			_, resp, err = c.Apps.RedeliverHookDelivery(ctx, id)
		}
		var accepted *github.AcceptedError // 202: the redelivery is queued
		if errors.As(err, &accepted) {
			err = nil
		}
		return resp, err
	})
	return err
}

// call makes one API request, waiting out GitHub's rate limits: a secondary
// limit for its Retry-After (a minute when GitHub names no time), the
// primary limit until its reset (go-github refuses requests before then
// without sending them). A wait longer than MaxWait, or a fourth limit in a
// row, ends the run with ErrRateLimited.
func (g *GitHub) call(ctx context.Context, do func(context.Context) (*github.Response, error)) (*github.Response, error) {
	for try := 1; ; try++ {
		resp, err := do(ctx)
		err = redirected(err)
		var primary *github.RateLimitError
		var secondary *github.AbuseRateLimitError
		var wait time.Duration
		switch {
		case errors.As(err, &primary):
			wait = time.Until(primary.Rate.Reset.Time) + time.Second
		case errors.As(err, &secondary):
			wait = time.Minute
			if secondary.RetryAfter != nil {
				wait = *secondary.RetryAfter
			}
		default:
			return resp, err
		}
		if try > 3 || wait > g.cfg.MaxWait {
			return resp, fmt.Errorf("%w: GitHub asks to wait %s: %v", ErrRateLimited, wait.Round(time.Second), err)
		}
		if err := sleep(ctx, wait); err != nil {
			return resp, err
		}
	}
}

// redirected marks as ErrRedirectRefused the failure of an installation
// token's exchange that GitHub answered with a redirect: ghinstallation does
// not follow it, and says only that the answer was not 2xx.
func redirected(err error) error {
	var exchange *ghinstallation.HTTPError
	if errors.As(err, &exchange) && exchange.Response != nil && exchange.Response.StatusCode/100 == 3 && !errors.Is(err, ErrRedirectRefused) {
		return fmt.Errorf("%w: %w", ErrRedirectRefused, err)
	}
	return err
}

// listingsChecked is a transport that fails a 2xx answer to a listing of
// deliveries whose body is not a JSON array: go-github reads an empty body
// as no deliveries, which must never pass for "nothing missing".
type listingsChecked struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (l listingsChecked) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := l.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/deliveries") || res.StatusCode/100 != 2 {
		return res, err
	}
	body, err := io.ReadAll(res.Body) // capped: maxAnswerBytes
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); !gjson.ValidBytes(body) || len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, fmt.Errorf("GitHub's answer (%s, Content-Type %q, %d bytes) is not a JSON list of deliveries", res.Status, res.Header.Get("Content-Type"), len(body))
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	res.ContentLength = int64(len(body))
	return res, nil
}

// wellFormed checks a page of a hook's deliveries as go-github read it: a
// JSON array (null reads as nil) of deliveries each with an id and a time.
// Anything else is no answer of GitHub's, and never passes for "nothing
// missing".
func wellFormed(page []*github.HookDelivery, resp *github.Response) error {
	if page == nil {
		status := "no answer"
		if resp != nil && resp.Response != nil {
			status = resp.Status
		}
		return fmt.Errorf("GitHub's answer (%s) is not a list of deliveries", status)
	}
	for _, d := range page {
		if d == nil || d.ID == nil || d.DeliveredAt == nil || d.DeliveredAt.IsZero() {
			return errors.New("GitHub's answer lists a delivery without an id or a time: it is not a list of deliveries")
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// listed is one GUID as a hook's delivery log shows it.
type listed struct {
	guid string
	id   int64     // the newest attempt's id, the one to redeliver
	at   time.Time // the first attempt's time
	ok   bool      // an attempt was answered 2xx
}

func (r *Recoverer) recoverGitHub(ctx context.Context, opts Options) (Report, error) {
	rep := newReport("github", opts)
	var errs []error
	for _, h := range r.GitHub.cfg.Hooks {
		if err := r.recoverHook(ctx, h, opts, &rep); err != nil {
			errs = append(errs, fmt.Errorf("hook %s: %w", h, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return rep, errors.Join(errs...)
}

// recoverHook lists one hook's deliveries since its checkpoint and asks for
// those without a receipt.
func (r *Recoverer) recoverHook(ctx context.Context, h Hook, opts Options, rep *Report) error {
	start := time.Now()
	source := "github:" + h.String()
	since, mayMove, err := r.window(ctx, source, start, opts)
	if err != nil {
		return err
	}
	c, err := r.GitHub.client(ctx, h)
	if err != nil {
		return err
	}
	deliveries, err := r.listHook(ctx, c, h, since, rep)
	if err != nil {
		return err
	}
	missing, err := r.missingGitHub(ctx, h, deliveries, start.Add(-r.minAge()))
	if err != nil {
		return err
	}
	var guids []string
	for _, l := range missing {
		guids = append(guids, l.guid)
	}
	rep.Found = append(rep.Found, guids...)
	r.Metrics.Recovery("github", "found", len(missing))
	if opts.DryRun {
		return r.explain(ctx, h, guids, rep)
	}

	checkpoint := start.Add(-overlap)
	var refused error
	for _, l := range missing {
		held, refusal, err := r.requestRedelivery(ctx, c, h, l, opts.Actor, rep)
		if err != nil {
			return err
		}
		if held {
			checkpoint = earlier(checkpoint, l.at)
		}
		if refusal != nil {
			refused = errors.Join(refused, refusal)
		}
	}
	if mayMove {
		if err := r.saveCheckpoint(ctx, source, checkpoint); err != nil {
			return err
		}
	}
	return refused
}

// listHook reads a hook's delivery log back to since and returns each GUID
// in it once, newest first. The log is newest first, and a GUID appears in
// it once per attempt. A GUID no delivery could have is reported skipped.
func (r *Recoverer) listHook(ctx context.Context, c *github.Client, h Hook, since time.Time, rep *Report) ([]*listed, error) {
	byGUID := map[string]*listed{}
	var order []*listed
	listOpts := &github.ListCursorOptions{PerPage: 100}
	seenCursors := map[string]bool{}
	skipped := map[string]bool{}
	attempts := 0
	for {
		page, resp, err := r.GitHub.list(ctx, c, h, listOpts)
		if err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		older := false
		for _, d := range page {
			at := d.GetDeliveredAt().Time
			if at.Before(since) {
				older = true
				continue
			}
			guid := d.GetGUID()
			if guid == "" || !providers.ValidID(guid) {
				if id := cutText(guid, 80); !skipped[id] {
					skipped[id] = true
					r.skip(ctx, rep, "github", id, fmt.Sprintf("GitHub listed delivery %d of hook %s with a GUID no delivery could have", d.GetID(), h))
				}
				continue
			}
			l := byGUID[guid]
			if l == nil {
				l = &listed{guid: guid, id: d.GetID(), at: at}
				byGUID[guid] = l
				order = append(order, l)
			}
			if at.Before(l.at) {
				l.at = at
			}
			if code := d.GetStatusCode(); code >= 200 && code < 300 {
				l.ok = true
			}
		}
		if older || resp == nil || resp.Cursor == "" {
			return order, nil
		}
		if attempts += len(page); attempts >= maxListed || seenCursors[resp.Cursor] {
			return nil, fmt.Errorf("list deliveries: GitHub's listing did not end (%d attempts listed); the next run starts again", attempts)
		}
		seenCursors[resp.Cursor] = true
		listOpts.Cursor = resp.Cursor
	}
}

// missingGitHub returns, in their order, the listed GUIDs to ask for: never
// answered 2xx, first sent before young (a younger one is still on its
// ordinary path), and with no receipt of the hook (of any hook, for the
// App's).
func (r *Recoverer) missingGitHub(ctx context.Context, h Hook, deliveries []*listed, young time.Time) ([]*listed, error) {
	// A GUID GitHub saw answered 2xx was stored: the gateway answers 2xx only
	// after its commit. No receipt then means retention removed it, and
	// asking again would repeat its side effects.
	var candidates []*listed
	var guids []string
	for _, l := range deliveries {
		if !l.ok && l.at.Before(young) {
			candidates = append(candidates, l)
			guids = append(guids, l.guid)
		}
	}
	if len(guids) == 0 {
		return nil, nil
	}
	rows, err := r.Pool.Query(ctx, `SELECT DISTINCT delivery_id FROM hookgate_receipts
		WHERE provider = 'github' AND ($1 = '' OR scope = $1) AND delivery_id = ANY($2)`, h.scope(), guids)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	have := map[string]bool{}
	for _, id := range stored {
		have[id] = true
	}
	var missing []*listed
	for _, l := range candidates {
		if !have[l.guid] {
			missing = append(missing, l)
		}
	}
	return missing, nil
}

// requestRedelivery asks GitHub to redeliver one missing delivery, unless it
// was asked for lately or MaxAttempts times already, and reports what it did.
// held says the run's checkpoint must stay at or before the delivery: it may
// still arrive, or be asked for again. refused is GitHub's refusal of this
// delivery, which leaves the others to ask for; err stops the run.
func (r *Recoverer) requestRedelivery(ctx context.Context, c *github.Client, h Hook, l *listed, actor string, rep *Report) (held bool, refused, err error) {
	attempt, err := r.claim(ctx, h, l, actor)
	if err != nil {
		return false, nil, err
	}
	if attempt == 0 { // asked lately, or MaxAttempts times already
		held, err := r.waitOrGiveUp(ctx, h, l.guid, actor, rep)
		return held, nil, err
	}
	// Held from here until it arrives or is given up on, the last ask too:
	// the run that finds it never arrived must still list it.
	if err := r.GitHub.redeliver(ctx, c, h, l.id); err != nil {
		r.Metrics.Recovery("github", "failed", 1)
		refused, err := r.redeliveryFailed(ctx, h, l.guid, actor, err, rep)
		return true, refused, err
	}
	rep.Requested = append(rep.Requested, l.guid)
	r.Metrics.Recovery("github", "requested", 1)
	return true, nil, nil
}

// waitOrGiveUp reports a missing GUID claim did not ask for: one asked for
// lately is waited for; one asked for MaxAttempts times, the last long
// enough ago, is given up on (logged and counted once). held says the run's
// checkpoint must stay at or before it: it was asked for lately, or may be
// asked for again.
func (r *Recoverer) waitOrGiveUp(ctx context.Context, h Hook, guid, actor string, rep *Report) (held bool, err error) {
	n, lately, gaveUp, err := r.settle(ctx, h, guid, actor)
	if err != nil {
		return false, err
	}
	reason := fmt.Sprintf("asked for %d of %d times, the last less than %s ago; waiting for it to arrive", n, MaxAttempts, askAgainAfter)
	if !lately {
		reason = fmt.Sprintf("asked for %d times and it never arrived; not asked for again", n)
	}
	rep.Skipped = append(rep.Skipped, Skip{DeliveryID: guid, Reason: reason})
	if gaveUp {
		r.Metrics.Recovery("github", "given_up", 1)
		r.logger().WarnContext(ctx, "recovery: GitHub was asked for a delivery 3 times and it never arrived",
			"hook", h.String(), "delivery_id", guid)
	}
	return lately || n < MaxAttempts, nil
}

// redeliveryFailed says what a failed redelivery request (reqErr) means. A
// rate limit or the run's end stops the run, the ask counted. A failure that
// is not GitHub's answer about this delivery (a redirect away from the API,
// an installation token GitHub would not give) is no ask: it is taken back,
// and the run stops where it is, its checkpoint unchanged. GitHub's refusal
// of this one (too old, gone, a token that may not write) is no ask either:
// it is taken back, reported skipped and returned as refused, and the others
// may pass.
func (r *Recoverer) redeliveryFailed(ctx context.Context, h Hook, guid, actor string, reqErr error, rep *Report) (refused, err error) {
	if errors.Is(reqErr, ErrRateLimited) || ctx.Err() != nil {
		return nil, reqErr
	}
	var exchange *ghinstallation.HTTPError
	if errors.Is(reqErr, ErrRedirectRefused) || errors.As(reqErr, &exchange) {
		if uerr := r.unclaim(ctx, h, guid, actor, reqErr); uerr != nil {
			return nil, errors.Join(reqErr, uerr)
		}
		return nil, fmt.Errorf("redeliver %s: %w", guid, reqErr)
	}
	// A refusal is no ask: it is not counted against the GUID's 3.
	r.logger().WarnContext(ctx, "recovery: GitHub refused a redelivery", "hook", h.String(), "delivery_id", guid, "error", reqErr)
	if uerr := r.unclaim(ctx, h, guid, actor, reqErr); uerr != nil {
		return nil, errors.Join(reqErr, uerr)
	}
	rep.Skipped = append(rep.Skipped, Skip{DeliveryID: guid, Reason: "GitHub refused the redelivery request (not counted as an ask): " + reqErr.Error()})
	return fmt.Errorf("redeliver %s: %w", guid, reqErr), nil
}

// requestScope is the hook's key among the stored requests.
func requestScope(h Hook) string {
	if h.Kind == "app" {
		return "app"
	}
	return h.scope()
}

// claim counts one more ask for a GUID and records it in the audit log, in
// one transaction, before GitHub is asked: so a GUID is asked for at most
// MaxAttempts times even across crashes, and two processes at once ask once
// (the row's lock makes the second wait, and then it finds the ask too
// recent). It returns the attempt's number, or 0 when the GUID was asked for
// lately or MaxAttempts times already.
func (r *Recoverer) claim(ctx context.Context, h Hook, l *listed, actor string) (int, error) {
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var attempt int
	err = tx.QueryRow(ctx, `INSERT INTO hookgate_recovery_requests AS q (provider, scope, delivery_id, attempts, delivered_at)
		VALUES ('github', $1, $2, 1, $3)
		ON CONFLICT (provider, scope, delivery_id) DO UPDATE SET attempts = q.attempts + 1, asked_at = now()
		WHERE q.attempts < $4 AND q.asked_at < now() - make_interval(secs => $5)
		RETURNING attempts`, requestScope(h), l.guid, l.at, MaxAttempts, askAgainAfter.Seconds()).Scan(&attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	reason := fmt.Sprintf("asked GitHub to redeliver it to hook %s (attempt %d of %d)", h, attempt, MaxAttempts)
	if err := recordAudit(ctx, tx, actor, "github", reason, l.guid); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	return attempt, nil
}

// explain says, for a dry run, which missing GUIDs a run would not ask for
// and why, reading the counts only.
func (r *Recoverer) explain(ctx context.Context, h Hook, missing []string, rep *Report) error {
	rows, err := r.Pool.Query(ctx, `SELECT delivery_id, attempts, asked_at >= now() - make_interval(secs => $3)
		FROM hookgate_recovery_requests WHERE provider = 'github' AND scope = $1 AND delivery_id = ANY($2)`,
		requestScope(h), missing, askAgainAfter.Seconds())
	if err != nil {
		return fmt.Errorf("read attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var guid string
		var n int
		var lately bool
		if err := rows.Scan(&guid, &n, &lately); err != nil {
			return fmt.Errorf("read attempts: %w", err)
		}
		switch {
		case lately:
			rep.Skipped = append(rep.Skipped, Skip{DeliveryID: guid, Reason: fmt.Sprintf("asked for %d of %d times, the last less than %s ago; a run would wait for it", n, MaxAttempts, askAgainAfter)})
		case n >= MaxAttempts:
			rep.Skipped = append(rep.Skipped, Skip{DeliveryID: guid, Reason: fmt.Sprintf("asked for %d times and it never arrived; a run would not ask again", n)})
		}
	}
	return rows.Err()
}

// unclaim takes back the ask claim counted for a GUID GitHub then refused,
// with an audit entry saying so, in one transaction.
func (r *Recoverer) unclaim(ctx context.Context, h Hook, guid, actor string, refusal error) error {
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("unclaim: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The first ask's row goes; a later ask's count goes down by one.
	_, err = tx.Exec(ctx, `DELETE FROM hookgate_recovery_requests
		WHERE provider = 'github' AND scope = $1 AND delivery_id = $2 AND attempts = 1`, requestScope(h), guid)
	if err == nil {
		_, err = tx.Exec(ctx, `UPDATE hookgate_recovery_requests SET attempts = attempts - 1
			WHERE provider = 'github' AND scope = $1 AND delivery_id = $2 AND attempts > 1`, requestScope(h), guid)
	}
	if err != nil {
		return fmt.Errorf("unclaim: %w", err)
	}
	reason := fmt.Sprintf("GitHub refused to redeliver it to hook %s (not counted as an ask): %s", h, cutText(refusal.Error(), 200))
	if err := recordAudit(ctx, tx, actor, "github", reason, guid); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("unclaim: %w", err)
	}
	return nil
}

// settle tells about a GUID claim did not ask for: how many times it was
// asked for, whether lately (less than askAgainAfter ago), and whether the
// gateway gave up on it just now (asked for MaxAttempts times, the last one
// long enough ago, and not given up on before: recorded with an audit entry,
// once).
func (r *Recoverer) settle(ctx context.Context, h Hook, guid, actor string) (n int, lately, gaveUp bool, err error) {
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return 0, false, false, fmt.Errorf("read attempts: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err = tx.QueryRow(ctx, `WITH given_up AS (
			UPDATE hookgate_recovery_requests SET given_up_at = now()
			WHERE provider = 'github' AND scope = $1 AND delivery_id = $2 AND attempts >= $3
				AND asked_at < now() - make_interval(secs => $4) AND given_up_at IS NULL
			RETURNING 1)
		SELECT attempts, asked_at >= now() - make_interval(secs => $4), EXISTS (SELECT FROM given_up)
		FROM hookgate_recovery_requests WHERE provider = 'github' AND scope = $1 AND delivery_id = $2`,
		requestScope(h), guid, MaxAttempts, askAgainAfter.Seconds()).Scan(&n, &lately, &gaveUp)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, false, fmt.Errorf("read attempts: %w", err)
	}
	if gaveUp {
		reason := fmt.Sprintf("gave up: asked GitHub %d times to redeliver it to hook %s, and it never arrived", MaxAttempts, h)
		if err := recordAudit(ctx, tx, actor, "github", reason, guid); err != nil {
			return 0, false, false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, false, fmt.Errorf("read attempts: %w", err)
	}
	return n, lately, gaveUp, nil
}

// cutText cuts s to at most n bytes, marking the cut.
func cutText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
