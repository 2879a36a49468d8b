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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v88/github"
	"github.com/tidwall/gjson"
)

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

// NewGitHub checks cfg and returns its client; it makes no request. Its
// error names every setting that is wrong, one line each.
func NewGitHub(cfg GitHubConfig) (*GitHub, error) {
	if len(cfg.Hooks) == 0 {
		return nil, errors.New("GITHUB_RECOVERY_HOOKS names no hook")
	}
	if cfg.APIURL == "" {
		cfg.APIURL = "https://api.github.com"
	}
	errs := checkGitHub(cfg)
	var key []byte
	if cfg.AppID > 0 && cfg.AppKeyFile != "" {
		// Read here, not by ghinstallation, whose error shows the path: the
		// key itself may have been put where its path belongs.
		var err error
		if key, err = readKeyFile(cfg.AppKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("GITHUB_APP_PRIVATE_KEY_FILE: the file it names %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
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
	if key != nil {
		if g.apps, err = ghinstallation.NewAppsTransport(cfg.Transport, cfg.AppID, key); err != nil {
			// Not err's text alone: it does not name the variable.
			return nil, fmt.Errorf("GITHUB_APP_PRIVATE_KEY_FILE: %w", err)
		}
		g.apps.BaseURL = strings.TrimRight(base.String(), "/")
		// ghinstallation sends the token exchange through its transport; its
		// Client is what a version of it may use instead.
		g.apps.Client = g.httpClient(cfg.Transport)
	}
	if cfg.Token != "" {
		if g.token, err = g.newClient(cfg.Transport, github.WithAuthToken(cfg.Token)); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// checkGitHub returns what is wrong with cfg that can be told without
// reading a file: its API URL, its credentials, and a hook that needs an
// App. Every mistake, one error each.
func checkGitHub(cfg GitHubConfig) []error {
	var errs []error
	if err := checkAPIURL(cfg.APIURL); err != nil {
		errs = append(errs, fmt.Errorf("GITHUB_API_URL: %w", err))
	}
	hasApp := cfg.AppID != 0 || cfg.AppKeyFile != ""
	switch {
	case hasApp && (cfg.AppID <= 0 || cfg.AppKeyFile == ""):
		errs = append(errs, errors.New("a GitHub App needs both GITHUB_APP_ID (a positive number) and GITHUB_APP_PRIVATE_KEY_FILE"))
	case !hasApp && cfg.Token == "":
		errs = append(errs, errors.New("GITHUB_RECOVERY_HOOKS needs GITHUB_TOKEN or a GitHub App (GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE)"))
	}
	if !hasApp && slices.ContainsFunc(cfg.Hooks, func(h Hook) bool { return h.Kind == "app" }) {
		errs = append(errs, errors.New("GITHUB_RECOVERY_HOOKS: the hook \"app\" needs a GitHub App (GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE); a token cannot read an App's deliveries"))
	}
	return errs
}

// maxKeyFileBytes bounds the App's private key file, as the configuration
// bounds a secret's file: a PEM key is a few KiB.
const maxKeyFileBytes = 64 << 10

// readKeyFile reads the App's private key, refusing a file past
// maxKeyFileBytes. Its errors complete "the file it names ...", and show
// neither the path nor anything read.
func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", withoutPath(err))
	}
	defer f.Close()
	key, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", withoutPath(err))
	}
	if len(key) > maxKeyFileBytes {
		return nil, fmt.Errorf("holds more than %d KiB, the most it may; is it the right file? (nothing of it is shown)", maxKeyFileBytes>>10)
	}
	return key, nil
}

// withoutPath is a file error without the file's path.
func withoutPath(err error) error {
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

var _ githubAPI = (*GitHub)(nil)

// Hooks are the hooks recovery lists.
func (g *GitHub) Hooks() []Hook { return g.cfg.Hooks }

// deliveries implements githubAPI: h's deliveries through the hook's client.
func (g *GitHub) deliveries(ctx context.Context, h Hook) (hookDeliveries, error) {
	c, err := g.client(ctx, h)
	if err != nil {
		return nil, err
	}
	return &githubHook{g: g, c: c, h: h}, nil
}

// githubHook is one hook's deliveries through its go-github client.
type githubHook struct {
	g *GitHub
	c *github.Client
	h Hook
}

// list implements hookDeliveries, a hundred attempts a page.
func (k *githubHook) list(ctx context.Context, cursor string) ([]hookDelivery, string, error) {
	page, resp, err := k.g.list(ctx, k.c, k.h, &github.ListCursorOptions{PerPage: 100, Cursor: cursor})
	if err != nil {
		return nil, "", err
	}
	ds := make([]hookDelivery, len(page))
	for i, d := range page { // each with an id and a time: wellFormed
		ds[i] = hookDelivery{id: d.GetID(), guid: d.GetGUID(), at: d.GetDeliveredAt().Time, statusCode: d.GetStatusCode()}
	}
	next := ""
	if resp != nil {
		next = resp.Cursor
	}
	return ds, next, nil
}

// redeliver implements hookDeliveries. An installation token's exchange
// that failed is no ask: GitHub's redelivery endpoint never saw one.
func (k *githubHook) redeliver(ctx context.Context, id int64) error {
	err := k.g.redeliver(ctx, k.c, k.h, id)
	var exchange *ghinstallation.HTTPError
	if errors.As(err, &exchange) {
		return &notAsked{err: err}
	}
	return err
}

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
