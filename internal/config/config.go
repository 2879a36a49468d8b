// Package config is hookgate's one configuration loader: Load reads the
// environment and the YAML configuration file GATEWAY_CONFIG_FILE names
// (routes with their limits and filters, sources) into one Config, with the
// fan-out table and the provider registry ready, and says what is wrong by
// variable, file line and key, never by a value that may be a secret.
// Secrets are redacted whenever the configuration is printed, and each secret
// may instead be read from the file named by its _FILE variant
// (GITHUB_WEBHOOK_SECRET_FILE).
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/kelseyhightower/envconfig"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/proxies"
	"github.com/hookgate/hookgate/internal/verify"
)

// Config is the gateway's configuration. The envconfig tag is the variable;
// the default tag its default.
type Config struct {
	// DatabaseURL is the PostgreSQL URL. Empty: a private PostgreSQL is started
	// under DataDir.
	DatabaseURL Secret `envconfig:"DATABASE_URL"`
	// DataDir is where the private PostgreSQL lives. Defaults to ./.data.
	DataDir string `envconfig:"GATEWAY_DATA_DIR" default:"./.data"`
	// Addr is the listen address. Defaults to :8080.
	Addr string `envconfig:"GATEWAY_ADDR" default:":8080"`
	// GitHubSecrets are GitHub's webhook secrets, comma-separated; any may
	// match. Empty: GitHub is not configured.
	GitHubSecrets SecretList `envconfig:"GITHUB_WEBHOOK_SECRET"`
	// StripeSecrets are Stripe's whsec_... secrets, comma-separated. Empty:
	// Stripe is not configured.
	StripeSecrets SecretList `envconfig:"STRIPE_WEBHOOK_SECRET"`
	// StripeTolerance is how far a Stripe signature's time may be from the
	// clock. Defaults to 5m.
	StripeTolerance time.Duration `envconfig:"STRIPE_TOLERANCE" default:"5m"`
	// AdminToken is the bearer token for /admin. Empty: operator endpoints off.
	AdminToken Secret `envconfig:"GATEWAY_ADMIN_TOKEN"`
	// MaxBodyBytes is the largest accepted body. Defaults to 25 MiB, GitHub's cap.
	MaxBodyBytes int64 `envconfig:"GATEWAY_MAX_BODY_BYTES" default:"26214400"`
	// MaxInflightBytes bounds the request bodies held in memory at once, all
	// ingest requests together; past it a request answers 503 overloaded.
	// At least MaxBodyBytes. Defaults to 256 MiB.
	MaxInflightBytes int64 `envconfig:"GATEWAY_MAX_INFLIGHT_BYTES" default:"268435456"`
	// MaxInflightBytesPerAddr bounds what one remote address holds of
	// MaxInflightBytes; past it the address's new requests answer 503
	// overloaded, and other addresses are unaffected. 0, the default: an
	// eighth of MaxInflightBytes, and at least MaxBodyBytes.
	MaxInflightBytesPerAddr int64 `envconfig:"GATEWAY_MAX_INFLIGHT_BYTES_PER_ADDR"`
	// MinBodyRate is the slowest a request body may arrive, on average,
	// once its first 10 s have passed: slower, it is answered 408
	// request_timeout and its connection closed. "0" turns the check off.
	// Defaults to 1KiB/s.
	MinBodyRate ByteRate `envconfig:"GATEWAY_MIN_BODY_RATE" default:"1KiB/s"`
	// MetricsAddr, when set, is the only address /metrics is served on (an
	// internal port), instead of beside the webhooks on Addr.
	MetricsAddr string `envconfig:"GATEWAY_METRICS_ADDR"`
	// Retention is how long receipts are kept; at least 72h. Defaults to 720h.
	Retention time.Duration `envconfig:"GATEWAY_RETENTION" default:"720h"`
	// IDRetention is how long after its receipt a delivery's id (provider,
	// scope, id, body hash) is kept once its body is gone, so that the
	// delivery sent again is a duplicate or a conflict, never new. At least
	// 720h and at least Retention. 0, the default: ten times Retention.
	IDRetention time.Duration `envconfig:"GATEWAY_ID_RETENTION"`
	// RouteSpec is GATEWAY_ROUTES, the fan-out table in one line (see
	// fanout.Parse), unless the configuration file lists routes. Empty:
	// deliveries are stored and nothing is dispatched. A Secret: a target may
	// carry a credential.
	RouteSpec Secret `envconfig:"GATEWAY_ROUTES"`
	// ForwardSecrets sign what the forwarder sends, comma-separated: each
	// forward carries one signature per secret, so a target holding any one
	// of them verifies it (rotation: add the new secret after the old, then
	// remove the old). A whsec_<base64> secret is keyed, for the Standard
	// Webhooks webhook-signature, by its decoded bytes. Empty: not signed.
	ForwardSecrets SecretList `envconfig:"GATEWAY_FORWARD_SECRET"`
	// ForwardTimeout is one forward attempt's time limit. Defaults to 10s.
	ForwardTimeout time.Duration `envconfig:"GATEWAY_FORWARD_TIMEOUT" default:"10s"`
	// MaxAttempts is the attempts per dispatch before it is discarded.
	// Defaults to 25.
	MaxAttempts int `envconfig:"GATEWAY_MAX_ATTEMPTS" default:"25"`
	// Workers is how many dispatches of one route one process works at once,
	// unless the route sets its own concurrency. Defaults to 50.
	Workers int `envconfig:"GATEWAY_WORKERS" default:"50"`
	// ConfigFile names the YAML configuration file (routes with their
	// limits). Empty: none.
	ConfigFile string `envconfig:"GATEWAY_CONFIG_FILE"`

	// Console is "on" (the default) or "off": the operator console in the
	// browser at /admin/, when GATEWAY_ADMIN_TOKEN is set.
	Console string `envconfig:"GATEWAY_CONSOLE" default:"on"`
	// PublicURL is the URL people reach the gateway at (https://... behind a
	// TLS-terminating proxy): the console's origin for its CSRF check, and its
	// cookie Secure when https. Empty: the request's own.
	PublicURL string `envconfig:"GATEWAY_PUBLIC_URL"`
	// TrustedProxies are the reverse proxies (CIDRs or addresses,
	// comma-separated) whose X-Forwarded-For names the remote address that
	// the rejections log, logs and guessing budgets see. Empty: the
	// connection's address, and X-Forwarded-For is ignored.
	TrustedProxies string `envconfig:"GATEWAY_TRUSTED_PROXIES"`

	// GitHubRecoveryHooks are the GitHub hooks whose deliveries recovery
	// lists: repo:OWNER/NAME:HOOK_ID, org:ORG:HOOK_ID or app, space-separated.
	GitHubRecoveryHooks string `envconfig:"GITHUB_RECOVERY_HOOKS"`
	// GitHubToken authenticates recovery's GitHub API requests; or a GitHub
	// App: GitHubAppID and GitHubAppKeyFile (its private key, PEM).
	GitHubToken      Secret `envconfig:"GITHUB_TOKEN"`
	GitHubAppID      int64  `envconfig:"GITHUB_APP_ID"`
	GitHubAppKeyFile string `envconfig:"GITHUB_APP_PRIVATE_KEY_FILE"`
	// GitHubAPIURL is GitHub's REST API (a GitHub Enterprise Server's is
	// https://HOST/api/v3).
	GitHubAPIURL string `envconfig:"GITHUB_API_URL" default:"https://api.github.com"`
	// StripeAPIKey is a key that can read Stripe's events, for recovery.
	StripeAPIKey Secret `envconfig:"STRIPE_API_KEY"`
	// StripeAPIURL is Stripe's API.
	StripeAPIURL string `envconfig:"STRIPE_API_URL" default:"https://api.stripe.com"`
	// RecoveryInterval is how often recovery runs; RecoveryLookback how far
	// back a run looks at most.
	RecoveryInterval time.Duration `envconfig:"GATEWAY_RECOVERY_INTERVAL" default:"5m"`
	RecoveryLookback time.Duration `envconfig:"GATEWAY_RECOVERY_LOOKBACK" default:"72h"`

	// Routes is the fan-out table, from the configuration file or
	// GATEWAY_ROUTES, each route's limits defaulting to RouteDefaults. A
	// builtin target's handler is not checked: the handlers are known only
	// to who runs them (fanout.Table.CheckBuiltins).
	Routes fanout.Table `ignored:"true"`
	// Providers are the senders configured: GitHub and Stripe from their
	// variables, then the configuration file's sources.
	Providers *providers.Registry `ignored:"true"`
}

// InflightBytesPerAddr is MaxInflightBytesPerAddr, or its default when 0:
// an eighth of MaxInflightBytes, at least MaxBodyBytes (a body of the largest
// size from one address must fit), at most MaxInflightBytes.
func (c Config) InflightBytesPerAddr() int64 {
	if c.MaxInflightBytesPerAddr > 0 {
		return c.MaxInflightBytesPerAddr
	}
	return min(max(c.MaxInflightBytes/8, c.MaxBodyBytes), c.MaxInflightBytes)
}

// RouteDefaults are the limits of a route that sets none of its own.
func (c Config) RouteDefaults() fanout.Defaults {
	return fanout.Defaults{Concurrency: c.Workers, Timeout: c.ForwardTimeout, MaxAttempts: c.MaxAttempts}
}

// registry returns the gateway's provider registry: the built-in providers
// the environment configures, as sources like the configuration file's
// (GITHUB_WEBHOOK_SECRET makes the source github, of kind github;
// STRIPE_WEBHOOK_SECRET with STRIPE_TOLERANCE the source stripe, of kind
// stripe), then sources, the configuration file's.
func (c Config) registry(sources []providers.Provider) (*providers.Registry, error) {
	var configured []providers.Provider
	for _, src := range []providers.SourceConfig{
		{Name: "github", Kind: "github", Secrets: verify.Secrets(c.GitHubSecrets)},
		{Name: "stripe", Kind: "stripe", Secrets: verify.Secrets(c.StripeSecrets), Tolerance: c.StripeTolerance},
	} {
		if len(src.Secrets) == 0 {
			continue // not configured
		}
		p, err := providers.New(src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", providers.Kinds[src.Kind].Env, err)
		}
		configured = append(configured, p)
	}
	return providers.NewRegistry(append(configured, sources...)...)
}

// expected says what a variable that could not be read should hold, without
// its value (it may be a secret).
func expected(perr *envconfig.ParseError) string {
	switch perr.TypeName {
	case "int", "int64", "int32":
		return "must be a whole number"
	case "time.Duration":
		return "must be a duration such as 30s, 5m or 72h"
	case "bool":
		return "must be true or false"
	}
	return perr.Err.Error() // the type's own decoder: its message names no secret
}

// MinRetention is the shortest GATEWAY_RETENTION accepted: GitHub redelivers
// and Stripe retries for up to 3 days, and a receipt must outlive both.
const MinRetention = 72 * time.Hour

// MaxRetention is the longest GATEWAY_RETENTION accepted, ten years: a
// longer one is a mistake, and ten times it (the default id retention) must
// still be a duration.
const MaxRetention = 10 * 365 * 24 * time.Hour

// MinIDRetention is the shortest GATEWAY_ID_RETENTION accepted: a captured
// delivery must stay recognisable well past every sender's retries.
const MinIDRetention = 30 * 24 * time.Hour

// Load reads the environment and the configuration file, checks them, and
// returns the configuration with its routes and providers. Its error names
// every variable, file line and key that is wrong.
func Load() (Config, error) {
	var c Config
	restore, err := readSecretFiles()
	defer restore()
	if err != nil {
		return c, err
	}
	if err := envconfig.Process("", &c); err != nil {
		var perr *envconfig.ParseError
		if errors.As(err, &perr) {
			// Not perr.Value: it may be a secret.
			return c, fmt.Errorf("%s: %s", perr.KeyName, expected(perr))
		}
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	routes, sources, err := routesAndSources(c.RouteSpec.Value(), c.ConfigFile, c.RouteDefaults())
	if err != nil {
		return c, err
	}
	if c.Providers, err = c.registry(sources); err != nil {
		return c, err
	}
	c.Routes = routes
	return c, nil
}

// Validate checks the values that parse but make no sense.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
	}
	if c.DatabaseURL == "" && strings.TrimSpace(c.DataDir) == "" {
		bad("GATEWAY_DATA_DIR", "must not be empty when DATABASE_URL is unset")
	}
	if c.Addr == "" {
		bad("GATEWAY_ADDR", "must not be empty")
	}
	for _, s := range c.StripeSecrets {
		if !strings.HasPrefix(s, "whsec_") {
			bad("STRIPE_WEBHOOK_SECRET", "each secret must be a whsec_... signing secret")
			break
		}
	}
	if c.StripeTolerance <= 0 {
		bad("STRIPE_TOLERANCE", "must be positive, got %s", c.StripeTolerance)
	}
	if c.MaxBodyBytes <= 0 {
		bad("GATEWAY_MAX_BODY_BYTES", "must be positive, got %d", c.MaxBodyBytes)
	}
	if t := c.AdminToken.Value(); t != "" && (strings.TrimSpace(t) != t || strings.ContainsFunc(t, unicode.IsControl)) {
		// net/http trims a header's surrounding spaces: no request could match.
		bad("GATEWAY_ADMIN_TOKEN", "must not begin or end with white space or hold control characters")
	}
	for name, v := range map[string]string{"GITHUB_TOKEN": c.GitHubToken.Value(), "STRIPE_API_KEY": c.StripeAPIKey.Value()} {
		if strings.ContainsFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
			// A key pasted with its line's end would be refused by the API
			// at every run, long after start.
			bad(name, "must not hold white space or control characters")
		}
	}
	if k := c.StripeAPIKey.Value(); k != "" && !strings.HasPrefix(k, "sk_") && !strings.HasPrefix(k, "rk_") {
		bad("STRIPE_API_KEY", "must be a secret (sk_...) or restricted (rk_...) key that can read events; not a publishable key or a whsec_ signing secret")
	}
	if c.MaxInflightBytes < c.MaxBodyBytes {
		bad("GATEWAY_MAX_INFLIGHT_BYTES", "must be at least GATEWAY_MAX_BODY_BYTES (%d), or a body of the largest size could never be taken, got %d",
			c.MaxBodyBytes, c.MaxInflightBytes)
	}
	if c.MaxInflightBytesPerAddr < 0 || c.MaxInflightBytesPerAddr > 0 && (c.MaxInflightBytesPerAddr < c.MaxBodyBytes || c.MaxInflightBytesPerAddr > c.MaxInflightBytes) {
		bad("GATEWAY_MAX_INFLIGHT_BYTES_PER_ADDR", "must be 0 (an eighth of GATEWAY_MAX_INFLIGHT_BYTES) or from GATEWAY_MAX_BODY_BYTES (%d) to GATEWAY_MAX_INFLIGHT_BYTES (%d), got %d",
			c.MaxBodyBytes, c.MaxInflightBytes, c.MaxInflightBytesPerAddr)
	}
	if c.MetricsAddr != "" && c.MetricsAddr == c.Addr {
		bad("GATEWAY_METRICS_ADDR", "must differ from GATEWAY_ADDR")
	}
	if c.Retention < MinRetention || c.Retention > MaxRetention {
		bad("GATEWAY_RETENTION", "must be from %s (providers retry for 3 days) to %s, got %s", MinRetention, MaxRetention, c.Retention)
	}
	if c.IDRetention != 0 && (c.IDRetention < MinIDRetention || c.IDRetention < c.Retention || c.IDRetention > 10*MaxRetention) {
		bad("GATEWAY_ID_RETENTION", "must be at least %s and at least GATEWAY_RETENTION (%s), and at most %s, got %s",
			MinIDRetention, c.Retention, 10*MaxRetention, c.IDRetention)
	}
	if c.ForwardTimeout <= 0 {
		bad("GATEWAY_FORWARD_TIMEOUT", "must be positive, got %s", c.ForwardTimeout)
	}
	if c.MaxAttempts < 1 {
		bad("GATEWAY_MAX_ATTEMPTS", "must be at least 1, got %d", c.MaxAttempts)
	}
	if c.Workers < 1 || c.Workers > fanout.MaxConcurrency {
		bad("GATEWAY_WORKERS", "must be 1 to %d, got %d", fanout.MaxConcurrency, c.Workers)
	}
	if c.Console != "on" && c.Console != "off" {
		// Not the value: whatever was pasted there may be a secret.
		bad("GATEWAY_CONSOLE", "must be on or off")
	}
	if c.PublicURL != "" && !publicURL(c.PublicURL) {
		// Not the value: a URL may carry a password.
		bad("GATEWAY_PUBLIC_URL", "must be an http:// or https:// URL with a host and no user, path, query or fragment, such as https://hooks.example.com")
	}
	if _, err := proxies.Parse(c.TrustedProxies); err != nil {
		bad("GATEWAY_TRUSTED_PROXIES", "%v", err)
	}
	if c.RecoveryInterval < time.Minute {
		bad("GATEWAY_RECOVERY_INTERVAL", "must be at least 1m, got %s", c.RecoveryInterval)
	}
	if c.RecoveryLookback < time.Hour || c.RecoveryLookback > 30*24*time.Hour {
		// Stripe keeps events for 30 days; GitHub keeps deliveries for fewer.
		bad("GATEWAY_RECOVERY_LOOKBACK", "must be 1h to 720h, got %s", c.RecoveryLookback)
	}
	if c.GitHubAppID < 0 {
		bad("GITHUB_APP_ID", "must be a positive number, got %d", c.GitHubAppID)
	}
	if c.ConfigFile != "" {
		if _, err := os.Stat(c.ConfigFile); err != nil {
			// The reason without the path, which may be a secret pasted there.
			if pe := (*os.PathError)(nil); errors.As(err, &pe) {
				err = pe.Err
			}
			bad("GATEWAY_CONFIG_FILE", "the file it names cannot be read: %v", err)
		}
	}
	return errors.Join(errs...)
}

// publicURL reports whether s is an origin: scheme and host, nothing more.
func publicURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && u.User == nil &&
		(u.Path == "" || u.Path == "/") && u.RawPath == "" && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.Opaque == ""
}

// secretVars may be given as files through their _FILE variants.
var secretVars = []string{"DATABASE_URL", "GITHUB_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET", "GATEWAY_ADMIN_TOKEN", "GATEWAY_FORWARD_SECRET",
	"GITHUB_TOKEN", "STRIPE_API_KEY"}

// readSecretFiles sets each secret variable from its _FILE variant, when that
// is set; setting both is an error. Its errors do not show the _FILE
// variant's value: the secret itself may have been put there instead of
// its file's path.
//
// It returns a func that unsets what it set: Load may run more than once in a
// process (the gateway binary reads GATEWAY_MAX_INFLIGHT_BYTES before serving;
// a library user may load twice), and a variable left set would then count
// as given beside its _FILE variant.
func readSecretFiles() (restore func(), err error) {
	var set []string
	restore = func() {
		for _, name := range set {
			os.Unsetenv(name)
		}
	}
	defer func() {
		if err != nil {
			restore()
		}
	}()
	for _, name := range secretVars {
		path, ok := os.LookupEnv(name + "_FILE")
		if !ok || path == "" {
			continue
		}
		if v, both := os.LookupEnv(name); both && v != "" {
			return restore, fmt.Errorf("%s and %s_FILE are both set; set one", name, name)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			if pe := (*os.PathError)(nil); errors.As(err, &pe) {
				err = pe.Err
			}
			return restore, fmt.Errorf("%s_FILE: the file it names cannot be read: %w", name, err)
		}
		value := strings.TrimSpace(string(b))
		if value == "" {
			// A secret not mounted yet must not pass for a choice to leave it unset.
			return restore, fmt.Errorf("%s_FILE: the file it names is empty", name)
		}
		if err := os.Setenv(name, value); err != nil {
			return restore, fmt.Errorf("%s_FILE: %w", name, err)
		}
		set = append(set, name)
	}
	return restore, nil
}

// Secret is a string that never prints.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts the secret in %#v.
func (s Secret) GoString() string { return s.String() }

// Value returns the secret itself.
func (s Secret) Value() string { return string(s) }

// SecretList is a comma-separated list of secrets, the first one primary.
type SecretList []string

// Decode implements envconfig.Decoder: commas separate, surrounding spaces
// are dropped, and an empty item, or a value of white space only, is an error.
func (l *SecretList) Decode(value string) error {
	*l = nil
	if value == "" {
		return nil
	}
	if strings.TrimSpace(value) == "" {
		// Not to be taken for a choice to leave the provider off.
		return errors.New("white space only; unset it instead")
	}
	for item := range strings.SplitSeq(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return errors.New("an empty secret in the list")
		}
		*l = append(*l, item)
	}
	return nil
}

// String redacts the secrets, showing only how many there are.
func (l SecretList) String() string {
	if len(l) == 0 {
		return ""
	}
	return fmt.Sprintf("[%d redacted]", len(l))
}

// GoString redacts the secrets in %#v.
func (l SecretList) GoString() string { return l.String() }

// ByteRate is a rate in bytes a second, written as a size per second: "1KiB/s",
// "512B/s", "2MiB/s", "10kB/s", or "0" for none.
type ByteRate int64

// byteUnits are the sizes a ByteRate may be written in.
var byteUnits = map[string]int64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1000, "KB": 1000, "MB": 1000 * 1000, "GB": 1000 * 1000 * 1000}

// Decode implements envconfig.Decoder.
func (r *ByteRate) Decode(value string) error {
	value = strings.TrimSpace(value)
	if value == "0" {
		*r = 0
		return nil
	}
	size, ok := strings.CutSuffix(value, "/s")
	i := strings.IndexFunc(size, func(c rune) bool { return c < '0' || c > '9' })
	if !ok || i <= 0 {
		return errors.New("must be a size per second such as 1KiB/s, 512B/s or 2MiB/s, or 0 for none")
	}
	unit, known := byteUnits[size[i:]]
	n, err := strconv.ParseInt(size[:i], 10, 64)
	if !known || err != nil || n <= 0 || n > (1<<40)/unit {
		return errors.New("must be a size per second such as 1KiB/s, 512B/s or 2MiB/s (units B, KiB, MiB, GiB, kB, MB, GB), or 0 for none")
	}
	*r = ByteRate(n * unit)
	return nil
}
