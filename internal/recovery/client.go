package recovery

import (
	"context"
	"errors"
	"strings"
	"time"
)

// The providers' API clients, as recovery's policy sees them. The policy
// (github.go, stripe.go) asks these interfaces what a provider sent and
// decides what to ask for or store; the clients (github_client.go,
// stripe_client.go, over transport.go) make the requests and know nothing of
// the database. *GitHub and *Stripe are their implementations; Recoverer
// holds those, so that a nil client still means "not configured".

// githubAPI is GitHub's hook deliveries API.
type githubAPI interface {
	// Hooks are the hooks whose deliveries recovery lists.
	Hooks() []Hook
	// deliveries returns the API of one hook's deliveries. It may ask GitHub
	// for the App's installation on the hook's repository or organization.
	deliveries(ctx context.Context, h Hook) (hookDeliveries, error)
}

// hookDeliveries is one GitHub hook's log of delivery attempts, and its
// redelivery requests.
type hookDeliveries interface {
	// list reads one page of the log, newest first: the first page for an
	// empty cursor, else the page cursor names. next names the page after
	// it, "" after the last. Rate limits are waited out (ErrRateLimited past
	// MaxWait), and an answer that is no page of deliveries is an error,
	// never an empty page.
	list(ctx context.Context, cursor string) (page []hookDelivery, next string, err error)
	// redeliver asks GitHub to send the attempt id again. A failure that no
	// ask reached GitHub with (an installation token GitHub would not give)
	// is a *notAsked; one GitHub's API answered with a redirect away from the
	// API URL is ErrRedirectRefused.
	redeliver(ctx context.Context, id int64) error
}

// hookDelivery is one attempt in a hook's log.
type hookDelivery struct {
	id         int64     // the attempt's id, the one to redeliver
	guid       string    // the delivery's GUID (X-GitHub-Delivery), shared by its attempts
	at         time.Time // when the attempt was made
	statusCode int       // the hook's answer's status; 0 without one
}

// notAsked is a redelivery request's failure that no ask reached GitHub
// with. Its text is the failure's own.
type notAsked struct{ err error }

// Error implements error.
func (e *notAsked) Error() string { return e.err.Error() }

// Unwrap returns the failure.
func (e *notAsked) Unwrap() error { return e.err }

// stripeAPI is Stripe's events API.
type stripeAPI interface {
	// list calls fn with each event created since since, newest first; see
	// (*Stripe).list.
	list(ctx context.Context, since time.Time, fn func(event) error, skip func(id, reason string)) error
	// maxBodyBytes is the largest event list passes with its bytes.
	maxBodyBytes() int64
}

// ErrRateLimited means the provider's rate limit stopped a run before it was
// done; the next run carries on from the same checkpoint.
var ErrRateLimited = errors.New("rate limited")

// ErrRedirectRefused means a provider's API answered with a redirect to
// another scheme, host or port than its configured URL's. It is not
// followed: the request carries the credential, which goes nowhere else.
var ErrRedirectRefused = errors.New("a redirect away from the configured API URL's scheme, host and port was not followed")

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
// credentials), or what is wrong with s: every setting, one line each,
// each naming its variable. It makes no request.
func Clients(s Settings) (*GitHub, *Stripe, error) {
	var gh *GitHub
	var st *Stripe
	var errs []error
	hooks, err := ParseHooks(s.GitHubHooks)
	switch {
	case err != nil:
		// Each line its variable's name.
		for _, line := range strings.Split(err.Error(), "\n") {
			errs = append(errs, errors.New("GITHUB_RECOVERY_HOOKS: "+line))
		}
	case len(hooks) > 0:
		if gh, err = NewGitHub(GitHubConfig{Hooks: hooks, Token: s.GitHubToken, AppID: s.GitHubAppID,
			AppKeyFile: s.GitHubAppKeyFile, APIURL: s.GitHubAPIURL}); err != nil {
			errs = append(errs, err)
		}
	case s.GitHubAppID != 0 || s.GitHubAppKeyFile != "":
		errs = append(errs, errors.New("GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE are for recovery: set GITHUB_RECOVERY_HOOKS too"))
	}
	if s.StripeAPIKey != "" {
		if st, err = NewStripe(StripeConfig{APIKey: s.StripeAPIKey, APIURL: s.StripeAPIURL, MaxBodyBytes: s.MaxBodyBytes}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return gh, st, nil
}
