// Package config is hookgate's configuration: Config, a plain struct a
// library user may fill in code (the root package's hookgate.Config), whose
// zero fields take the documented defaults; FromEnv, which fills it from the
// environment and the YAML configuration file GATEWAY_CONFIG_FILE names
// (routes with their limits and filters, sources), reading secrets from the
// files their _FILE variants name without ever writing to the environment;
// and Resolve, which fills in the defaults, checks everything, reporting
// every error at once, and makes the fan-out table and the provider registry
// the gateway runs by. Errors name the variable, file line and key that is
// wrong, never a value that may be a secret; secrets are redacted whenever
// the configuration is printed.
package config

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hookgate/hookgate/internal/archive"
	"github.com/hookgate/hookgate/internal/eventschema"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/proxies"
	"github.com/hookgate/hookgate/internal/schema"
	"github.com/hookgate/hookgate/internal/searchkeys"
	"github.com/hookgate/hookgate/internal/sso"
	"github.com/hookgate/hookgate/internal/verify"
)

// Config is the gateway's configuration. Each field's env tag is the
// variable FromEnv reads it from; a field left at its zero value takes the
// default its comment states (and its default tag, as the environment
// writes it: a test holds the two together).
type Config struct {
	// DatabaseURL is the PostgreSQL URL. Empty: a private PostgreSQL is started
	// under DataDir.
	DatabaseURL Secret `env:"DATABASE_URL" secret:"true"`
	// Schema is the PostgreSQL schema hookgate's and River's tables
	// live in; the service's own tables stay in theirs. A database an
	// earlier release made (its tables in public) is moved there at start.
	// Defaults to hookgate.
	Schema string `env:"GATEWAY_DATABASE_SCHEMA" default:"hookgate"`
	// DataDir is where the private PostgreSQL lives. Defaults to ./.data.
	DataDir string `env:"GATEWAY_DATA_DIR" default:"./.data"`
	// Addr is the listen address. Defaults to :8080.
	Addr string `env:"GATEWAY_ADDR" default:":8080"`
	// GitHubSecrets are GitHub's webhook secrets (comma-separated in the
	// environment); any may match. None: GitHub is not configured.
	GitHubSecrets SecretList `env:"GITHUB_WEBHOOK_SECRET" secret:"true"`
	// StripeSecrets are Stripe's whsec_... secrets. None: Stripe is not
	// configured.
	StripeSecrets SecretList `env:"STRIPE_WEBHOOK_SECRET" secret:"true"`
	// StripeTolerance is how far a Stripe signature's time may be from the
	// clock. Defaults to 5m.
	StripeTolerance time.Duration `env:"STRIPE_TOLERANCE" default:"5m" zero:"must be positive"`
	// AdminToken is the bearer token for /admin. Empty: operator endpoints off.
	AdminToken Secret `env:"GATEWAY_ADMIN_TOKEN" secret:"true"`
	// MaxBodyBytes is the largest accepted body. Defaults to 25 MiB, GitHub's cap.
	MaxBodyBytes int64 `env:"GATEWAY_MAX_BODY_BYTES" default:"26214400" zero:"must be positive"`
	// MaxInflightBytes bounds the request bodies held in memory at once, all
	// ingest requests together, counting only bytes that have arrived; past
	// it a request answers 503 overloaded. At least MaxBodyBytes. Defaults to
	// 256 MiB.
	MaxInflightBytes int64 `env:"GATEWAY_MAX_INFLIGHT_BYTES" default:"268435456" zero:"must be positive"`
	// MaxInflightBytesPerAddr bounds what one remote address holds of
	// MaxInflightBytes; past it the address's new requests answer 503
	// overloaded, and other addresses are unaffected. Defaults to an eighth
	// of MaxInflightBytes, and at least MaxBodyBytes.
	MaxInflightBytesPerAddr int64 `env:"GATEWAY_MAX_INFLIGHT_BYTES_PER_ADDR"`
	// MinBodyRate is the slowest a request body may arrive, on average,
	// once its first 10 s have passed: slower, it is answered 408
	// request_timeout and its connection closed. Negative (the environment's
	// "0"): no minimum. Defaults to 1KiB/s.
	MinBodyRate ByteRate `env:"GATEWAY_MIN_BODY_RATE" default:"1KiB/s"`
	// MetricsAddr, when set, is the only address /metrics is served on (an
	// internal port), instead of beside the webhooks on Addr.
	MetricsAddr string `env:"GATEWAY_METRICS_ADDR"`
	// Retention is how long receipts are kept, 72h to 87600h. Defaults to 720h.
	Retention time.Duration `env:"GATEWAY_RETENTION" default:"720h" zero:"must be from 72h0m0s (providers retry for 3 days) to 87600h0m0s"`
	// IDRetention is how long after its receipt a delivery's id (provider,
	// scope, id, body hash) is kept once its body is gone, so that the
	// delivery sent again is a duplicate or a conflict, never new. At least
	// 720h and at least Retention. Defaults to ten times Retention.
	IDRetention time.Duration `env:"GATEWAY_ID_RETENTION"`
	// Routes are the fan-out table, in order. FromEnv reads them from the
	// configuration file when it lists routes, else from GATEWAY_ROUTES.
	// None: deliveries are stored and nothing is dispatched.
	Routes []Route `env:"-"`
	// Sources are the senders besides GitHub and Stripe (the configuration
	// file's sources), which routes may name.
	Sources []Source `env:"-"`
	// SearchKeys are the values indexed at ingest for GET
	// /admin/deliveries?key=name:value (the configuration file's
	// search_keys): per provider, each key's name and the dot-separated
	// JSON path of its value in the payload. None: no key is indexed.
	SearchKeys searchkeys.Paths `env:"-"`
	// Schemas are the JSON Schemas deliveries are checked against (the
	// configuration file's schemas): provider:pattern to a schema file's
	// path. A delivery that fails one of its event's is stored, acknowledged
	// and dispatched to no route (package eventschema). None: nothing is
	// checked.
	Schemas map[string]string `env:"-"`
	// Notifications send operators' events to people and systems (the
	// configuration file's notifications). A webhook notification is
	// signed with ForwardSecrets, which must then be set.
	Notifications []Notification `env:"-"`
	// ForwardSecrets sign what the forwarder sends: each forward carries one
	// signature per secret, so a target holding any one of them verifies it
	// (rotation: add the new secret after the old, then remove the old). A
	// whsec_<base64> secret is keyed, for the Standard Webhooks
	// webhook-signature, by its decoded bytes. None: not signed.
	ForwardSecrets SecretList `env:"GATEWAY_FORWARD_SECRET" secret:"true"`
	// ForwardTimeout is one forward attempt's time limit. Defaults to 10s.
	ForwardTimeout time.Duration `env:"GATEWAY_FORWARD_TIMEOUT" default:"10s" zero:"must be positive"`
	// MaxAttempts is the attempts per dispatch before it is discarded.
	// Defaults to 25.
	MaxAttempts int `env:"GATEWAY_MAX_ATTEMPTS" default:"25" zero:"must be at least 1"`
	// Workers is how many dispatches of one route one process works at once,
	// unless the route sets its own concurrency. Defaults to DefaultWorkers:
	// it follows the machine.
	Workers int `env:"GATEWAY_WORKERS" zero:"must be 1 to 10000"`

	// Console is "on" or "off": the operator console in the browser at
	// /admin/, when AdminToken is set. Defaults to on.
	Console string `env:"GATEWAY_CONSOLE" default:"on"`
	// PublicURL is the URL people reach the gateway at (https://... behind a
	// TLS-terminating proxy): the console's origin for its CSRF check, and its
	// cookie Secure when https. Empty: the request's own.
	PublicURL string `env:"GATEWAY_PUBLIC_URL"`
	// OIDCIssuer, when set, lets people sign in to the console with OpenID
	// Connect at this issuer, as OIDCClientID, their role given by the rules
	// of OIDCRoles; the provider sends them back to PublicURL, which must be
	// set. Empty: the console takes tokens only.
	OIDCIssuer string `env:"GATEWAY_OIDC_ISSUER"`
	// OIDCClientID is the gateway's client id at the issuer.
	OIDCClientID string `env:"GATEWAY_OIDC_CLIENT_ID"`
	// OIDCClientSecret is its client secret; empty: a public client (PKCE
	// alone).
	OIDCClientSecret Secret `env:"GATEWAY_OIDC_CLIENT_SECRET" secret:"true"`
	// OIDCScopes are the scopes asked for, space-separated; openid among
	// them. Defaults to "openid email profile".
	OIDCScopes string `env:"GATEWAY_OIDC_SCOPES" default:"openid email profile"`
	// OIDCRoles gives people roles by their ID token's claims: CLAIM:VALUE=ROLE
	// rules, comma-separated, and *=ROLE for everyone
	// (groups:hookgate-admins=admin,groups:sre=operator,*=viewer). A person
	// several rules match gets the highest role; one that none matches is
	// refused.
	OIDCRoles string `env:"GATEWAY_OIDC_ROLES"`
	// RoutesFrom says who owns the routes: "config" (the configuration file
	// or GATEWAY_ROUTES; the API cannot change them) or "database" (the
	// API's PUT and DELETE, in force on every gateway within seconds; the
	// configured routes seed an empty table once). Defaults to config.
	RoutesFrom string `env:"GATEWAY_ROUTES_FROM" default:"config"`
	// TrustedProxies are the reverse proxies (CIDRs or addresses,
	// comma-separated) whose X-Forwarded-For names the remote address that
	// the rejections log, logs, budgets and guessing limits see. Empty: the
	// connection's address, and X-Forwarded-For is ignored.
	TrustedProxies string `env:"GATEWAY_TRUSTED_PROXIES"`

	// GitHubRecoveryHooks are the GitHub hooks whose deliveries recovery
	// lists: repo:OWNER/NAME:HOOK_ID, org:ORG:HOOK_ID or app, space-separated.
	GitHubRecoveryHooks string `env:"GITHUB_RECOVERY_HOOKS"`
	// GitHubToken authenticates recovery's GitHub API requests; or a GitHub
	// App: GitHubAppID and GitHubAppKeyFile (its private key, PEM).
	GitHubToken      Secret `env:"GITHUB_TOKEN" secret:"true"`
	GitHubAppID      int64  `env:"GITHUB_APP_ID"`
	GitHubAppKeyFile string `env:"GITHUB_APP_PRIVATE_KEY_FILE"`
	// GitHubAPIURL is GitHub's REST API (a GitHub Enterprise Server's is
	// https://HOST/api/v3). Defaults to https://api.github.com.
	GitHubAPIURL string `env:"GITHUB_API_URL" default:"https://api.github.com"`
	// StripeAPIKey is a key that can read Stripe's events, for recovery.
	StripeAPIKey Secret `env:"STRIPE_API_KEY" secret:"true"`
	// StripeAPIURL is Stripe's API. Defaults to https://api.stripe.com.
	StripeAPIURL string `env:"STRIPE_API_URL" default:"https://api.stripe.com"`
	// RecoveryInterval is how often recovery runs, at least 1m. Defaults to
	// 5m.
	RecoveryInterval time.Duration `env:"GATEWAY_RECOVERY_INTERVAL" default:"5m" zero:"must be at least 1m"`
	// SearchBudget bounds the time one search of the deliveries by q takes:
	// past it the search answers what it found, partial, with a cursor that
	// continues. Defaults to 5s.
	SearchBudget time.Duration `env:"GATEWAY_SEARCH_BUDGET" default:"5s" zero:"must be positive"`
	// ArchiveURL is where retention writes each day of deliveries before it
	// deletes them: file:///path, or s3://bucket/prefix (credentials from
	// the standard AWS_* variables). Empty: no archive; retention deletes.
	ArchiveURL string `env:"GATEWAY_ARCHIVE_URL"`
	// ArchiveEndpoint is an S3-compatible store's address for an s3://
	// ArchiveURL (host:port, or an http(s) URL). Empty: AWS.
	ArchiveEndpoint string `env:"GATEWAY_ARCHIVE_ENDPOINT"`
	// RecoveryLookback is how far back a recovery run looks at most, 1h to
	// 720h. Defaults to 72h.
	RecoveryLookback time.Duration `env:"GATEWAY_RECOVERY_LOOKBACK" default:"72h" zero:"must be 1h to 720h"`

	// LogFormat is how log lines are written: "text" (log/slog's text
	// handler, key=value) or "json" (one JSON object a line: time, level,
	// msg and the attributes). Defaults to text. The logger it makes is
	// Logger's; New uses it when given no WithLogger and LogFormat or
	// LogLevel is set.
	LogFormat string `env:"GATEWAY_LOG_FORMAT" default:"text"`
	// LogLevel is the least level logged: "debug", "info", "warn" or
	// "error". Defaults to info.
	LogLevel string `env:"GATEWAY_LOG_LEVEL" default:"info"`

	// routesFrom says where FromEnv read Routes ("GATEWAY_ROUTES", or the
	// configuration file), for Resolve's messages; empty for routes set in
	// code.
	routesFrom string
	// routesFile is the configuration file's path when FromEnv read Routes
	// there, for Resolve's errors (ErrBadFile).
	routesFile string
	// keysFile is the configuration file's path when FromEnv read
	// SearchKeys from it, and keyLines each provider's line there.
	keysFile string
	keyLines map[string]int
	// schemasFile is the configuration file's path when FromEnv read
	// Schemas from it.
	schemasFile string
	// unread is what FromEnv could not read, which Resolve reports first;
	// unreadSources are the names of the configuration file's sources it
	// could not read, which a route may name without a second error.
	unread        error
	unreadSources []string
}

// Notification is one of the configuration file's notifications (package
// notify).
type Notification = notify.Notification

// checkNotifications reports what is wrong with each notification, its
// name first: those read from the file were checked there but for their
// signing secret.
func (c Config) checkNotifications() []error {
	var errs []error
	names := map[string]bool{}
	for i, n := range c.Notifications {
		where := fmt.Sprintf("notification %d", i+1)
		if notify.CheckName(n.Name) == nil {
			where = fmt.Sprintf("notification %q", n.Name)
		}
		if names[n.Name] {
			errs = append(errs, fmt.Errorf("%s: its name is used by another notification", where))
		}
		names[n.Name] = true
		if n.URL == "" {
			errs = append(errs, fmt.Errorf("%s: %w: no URL", where, notify.ErrBad))
		}
		for _, err := range n.Check(len(c.ForwardSecrets) > 0) {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	return errs
}

// Route is one route of the fan-out table, as configured: deliveries whose
// provider and event match any of Match (and Filter, when set) are sent to
// Target. A limit left at zero takes the Config's.
type Route struct {
	// Name identifies the route: 1-64 of a-z, 0-9, _ and -.
	Name string
	// Match are provider:pattern pairs: a provider (github, stripe, a
	// source's name, or *) and an event pattern ("pull_request",
	// "invoice.*"; a pattern matches an event it equals or is a
	// dot-separated prefix of, * any run of characters).
	Match []string
	// Target is an http(s) URL or builtin:<name>, a Go handler.
	Target string
	// Concurrency is how many of the route's dispatches one process works
	// at once, 1 to 10000. Defaults to the Config's Workers, and for a
	// builtin target to at most fanout.BuiltinConcurrency (50).
	Concurrency int
	// Rate limits the attempts started, all processes together: "N/s" or
	// "N/m". Empty: no limit.
	Rate string
	// Timeout bounds one attempt, at most 1h. Defaults to the Config's
	// ForwardTimeout.
	Timeout time.Duration
	// MaxAttempts is the attempts per dispatch, 1 to 1000. Defaults to the
	// Config's MaxAttempts.
	MaxAttempts int
	// Circuit stops the route's attempts for a while after consecutive
	// failures. Nil: 20 failures, then 30 s.
	Circuit *Circuit
	// Filter is a CEL expression over the delivery's provider, event,
	// headers and payload that must be true for it. Empty: none.
	Filter string
	// Transform is a CEL expression over the same variables as Filter
	// that yields a map of what an attempt sends an http(s) target: body,
	// headers, path, skip (package transform). Empty: the delivery as it
	// came.
	Transform string
	// Order is what order means for the target, per entity: "latest" (an
	// event older than the newest one the target accepted is superseded),
	// "all" (every event handled, one at a time per entity, oldest first;
	// an older one arriving after a newer one was handled goes late) or
	// "none" (no per-entity serialisation). Empty: latest.
	Order string
	// OrderWindow holds each new dispatch back this long, at most 1m, so
	// that an older event of its entity still in flight goes first. Zero:
	// none.
	OrderWindow time.Duration

	// entry is the route's place in GATEWAY_ROUTES, from 1, for Resolve's
	// messages (an entry that could not be read is left out of Routes);
	// 0 for a route from elsewhere.
	entry int
	// line is the route's line in the configuration file, and keyLines its
	// keys' lines, for Resolve's messages; 0 and nil for a route from
	// elsewhere.
	line     int
	keyLines map[string]int
}

// String names the route and its matches, never its target, which may
// carry a credential (in its path too): a configuration printed with %v or
// %+v must not show it.
func (r Route) String() string {
	return "route " + r.Name + "[" + strings.Join(r.Match, " ") + "]"
}

// GoString is String, for %#v.
func (r Route) GoString() string { return r.String() }

// MarshalJSON writes the route without its target, when an http(s) URL:
// a configuration marshalled or logged as JSON must not show it either.
func (r Route) MarshalJSON() ([]byte, error) {
	type plain Route // without this method
	p := plain(r)
	if !strings.HasPrefix(p.Target, "builtin:") && p.Target != "" {
		p.Target = "[redacted]"
	}
	return json.Marshal(p)
}

// LogValue is String, for slog's handlers.
func (r Route) LogValue() slog.Value { return slog.StringValue(r.String()) }

// Circuit is a route's circuit breaker: after Failures consecutive failed
// attempts no attempt starts for Cooldown, then one probe decides.
type Circuit struct {
	// Failures, 0 to 1000000; 0 turns the circuit off.
	Failures int
	// Cooldown, at most 24h. Defaults to 30 s.
	Cooldown time.Duration
}

// Source is a sender besides GitHub and Stripe: its name (its endpoint is
// /webhooks/<name>), its kind (standard-webhooks, shopify, slack, gitlab,
// hmac), its secrets, and what its kind asks for.
type Source = providers.SourceConfig

// The bounds of the values that are not a route's.
const (
	// MinRetention is the shortest Retention accepted: GitHub redelivers
	// and Stripe retries for up to 3 days, and a receipt must outlive both.
	MinRetention = 72 * time.Hour
	// MaxRetention is the longest Retention accepted, ten years: a longer
	// one is a mistake, and ten times it (the default IDRetention) must
	// still be a duration.
	MaxRetention = 10 * 365 * 24 * time.Hour
	// MinIDRetention is the shortest IDRetention accepted: a captured
	// delivery must stay recognisable well past every sender's retries.
	MinIDRetention = 30 * 24 * time.Hour
)

// withDefaults returns c with its zero fields at their defaults.
func (c Config) withDefaults() Config {
	str := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	str(&c.DataDir, "./.data")
	str(&c.Schema, schema.Default)
	str(&c.Addr, ":8080")
	str(&c.Console, "on")
	str(&c.RoutesFrom, "config")
	str(&c.OIDCScopes, "openid email profile")
	str(&c.LogFormat, "text")
	str(&c.LogLevel, "info")
	str(&c.GitHubAPIURL, "https://api.github.com")
	str(&c.StripeAPIURL, "https://api.stripe.com")
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	dur(&c.StripeTolerance, 5*time.Minute)
	dur(&c.Retention, 720*time.Hour)
	dur(&c.ForwardTimeout, 10*time.Second)
	dur(&c.RecoveryInterval, 5*time.Minute)
	dur(&c.RecoveryLookback, 72*time.Hour)
	dur(&c.SearchBudget, 5*time.Second)
	if c.IDRetention == 0 {
		c.IDRetention = max(10*min(c.Retention, MaxRetention), MinIDRetention)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 25 << 20
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = 256 << 20
	}
	if c.MaxInflightBytesPerAddr == 0 {
		c.MaxInflightBytesPerAddr = min(max(c.MaxInflightBytes/8, c.MaxBodyBytes), c.MaxInflightBytes)
	}
	if c.MinBodyRate == 0 {
		c.MinBodyRate = 1 << 10
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 25
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers()
	}
	return c
}

// WorkersPerCore is GATEWAY_WORKERS's default per core.
const WorkersPerCore = 100

// DefaultWorkers is GATEWAY_WORKERS's default: WorkersPerCore for each core
// the process may use (runtime.GOMAXPROCS, which follows a container's CPU
// limit), at most fanout.MaxConcurrency.
//
// A route's forwards run at most its workers divided by a forward's time
// from fetch to committed outcome, and most of that time is waits (River's
// fetch, the target, the outcome's durable commit) during which a worker
// costs nothing: with a fixed 50, a route forwarded about 2,500 deliveries a
// second whatever the machine. A hundred per core keeps the machine's cores,
// not the workers, the limit (docs/performance.md). A route's own
// concurrency, and its rate, still bound what its target gets.
func DefaultWorkers() int {
	return min(WorkersPerCore*runtime.GOMAXPROCS(0), fanout.MaxConcurrency)
}

// RouteDefaults are the limits of a route that sets none of its own.
func (c Config) RouteDefaults() fanout.Defaults {
	return fanout.Defaults{Concurrency: c.Workers, Timeout: c.ForwardTimeout, MaxAttempts: c.MaxAttempts}
}

// Resolved is a Config with its defaults filled in and checked, and what the
// gateway runs by made from it.
type Resolved struct {
	Config
	// Table is the fan-out table, each route's limits defaulting to
	// RouteDefaults. A builtin target's handler is not checked: the handlers
	// are known only to who runs them (fanout.Table.CheckBuiltins).
	Table fanout.Table
	// Providers are the senders configured: GitHub and Stripe from their
	// secrets, then the sources.
	Providers *providers.Registry
	// Keys are the search keys indexed at ingest, checked.
	Keys *searchkeys.Set
	// Schemas are the JSON Schemas deliveries are checked against, compiled.
	Schemas *eventschema.Set

	sourceNames []string // the sources' names, as routes may match them
}

// CheckBuiltins reports a route whose builtin:<name> target names no
// handler of names, saying where the route was configured.
func (r Resolved) CheckBuiltins(names []string) error {
	if err := r.Table.CheckBuiltins(names); err != nil {
		if r.routesFrom != "" {
			return fmt.Errorf("%s: %w", r.routesFrom, err)
		}
		return err
	}
	return nil
}

// BodyRate is MinBodyRate in bytes a second, 0 for none.
func (r Resolved) BodyRate() int64 { return max(int64(r.MinBodyRate), 0) }

// Resolve fills in c's defaults, checks every value, and makes the fan-out
// table and the provider registry. Its error names every value that is
// wrong, one line each, by its variable (or route and key), never by a value
// that may be a secret; for a Config FromEnv read, what it could not read
// comes first.
func (c Config) Resolve() (Resolved, error) {
	c = c.withDefaults()
	r := Resolved{Config: c}
	var errs []error
	if c.unread != nil {
		errs = append(errs, c.unread)
	}
	errs = append(errs, c.validate()...)
	reg, sourceNames, err := c.registry()
	if err != nil {
		errs = append(errs, err)
	}
	r.Providers = reg
	d := c.RouteDefaults()
	d.Sources = sourceNames
	r.sourceNames = sourceNames
	configured := c.configured(sourceNames)
	keys, err := searchkeys.New(c.keyPaths(configured, func(err error) { errs = append(errs, c.keysError(err)) }))
	if err != nil {
		errs = append(errs, c.keysError(fmt.Errorf("search_keys: %w", err)))
	}
	r.Keys = keys
	schemas, err := eventschema.Compile(c.Schemas, sourceNames)
	if err != nil {
		errs = append(errs, c.schemasError(fmt.Errorf("schemas: %w", err)))
	}
	r.Schemas = schemas
	errs = append(errs, c.checkNotifications()...)
	seen := map[string]bool{}
	for i, route := range c.Routes {
		where, keyWhere := c.routeWhere(i, route)
		fr, keyErrs := resolveRoute(route, d, configured)
		// unconfigured's are not mistakes of the route itself: it stays in
		// the table for a caller that checks its builtin handler too.
		for _, ke := range append(keyErrs, unconfigured(fr, configured, c.unreadSources)...) {
			errs = append(errs, c.routeError(fmt.Errorf("%s: %s%w", where, keyWhere(ke.Key), ke)))
		}
		if seen[route.Name] {
			errs = append(errs, c.routeError(fmt.Errorf("%s: the name %s is used by another route", where, route.Name)))
			continue
		}
		seen[route.Name] = true
		if len(keyErrs) == 0 {
			r.Table = append(r.Table, fr)
		}
	}
	// On error, r holds the routes that resolved, for a caller that
	// reports what else is wrong with them.
	return r, errors.Join(errs...)
}

// routeWhere names the i-th route for Resolve's messages, and its keys'
// lines (a prefix "line N: ") when it came from the configuration file.
func (c Config) routeWhere(i int, route Route) (string, func(key string) string) {
	noLine := func(string) string { return "" }
	switch {
	case c.routesFrom == routesVariable:
		return fmt.Sprintf("GATEWAY_ROUTES: bad route, entry %d (%q)", cmp.Or(route.entry, i+1), route.Name), noLine
	case c.routesFile != "" && route.line > 0:
		// As the file's own errors do; a name that is not right is never
		// shown.
		where := fmt.Sprintf("route %d (line %d)", i+1, route.line)
		if fanout.CheckName(route.Name) == nil {
			where = fmt.Sprintf("route %q (line %d)", route.Name, route.line)
		}
		return where, func(key string) string {
			if l := route.keyLines[key]; l > 0 {
				return fmt.Sprintf("line %d: ", l)
			}
			return ""
		}
	case c.routesFile != "":
		return fmt.Sprintf("route %q", route.Name), noLine
	}
	return fmt.Sprintf("route %d (%q)", i+1, route.Name), noLine
}

// keyPaths returns the search keys of the providers configured, and reports
// each other provider with its line (one a source that could not be read
// names is reported with that source alone).
func (c Config) keyPaths(configured []string, report func(error)) searchkeys.Paths {
	paths := searchkeys.Paths{}
	for _, p := range slices.Sorted(maps.Keys(c.SearchKeys)) {
		switch {
		case slices.Contains(configured, p):
			paths[p] = c.SearchKeys[p]
		case slices.Contains(c.unreadSources, p):
		default:
			where := ""
			if l := c.keyLines[p]; l > 0 {
				where = fmt.Sprintf("line %d: ", l)
			}
			report(fmt.Errorf("%ssearch_keys: provider %s is not configured (%s); the configured ones: %s", where, p, unsetReason(p), configuredList(configured)))
		}
	}
	return paths
}

// keysError is err, of the search keys, as an error of the configuration
// file (ErrBadFile, naming the file) when they came from there.
func (c Config) keysError(err error) error {
	if c.keysFile == "" {
		return err
	}
	return fmt.Errorf("%w %s: %w", ErrBadFile, c.keysFile, err)
}

// schemasError is err, of the schemas, as an error of the configuration
// file (ErrBadFile, naming the file) when they came from there.
func (c Config) schemasError(err error) error {
	if c.schemasFile == "" {
		return err
	}
	return fmt.Errorf("%w %s: %w", ErrBadFile, c.schemasFile, err)
}

// routeError is err, of a route, as an error of the configuration file
// (ErrBadFile, naming the file) when the routes came from there.
func (c Config) routeError(err error) error {
	if c.routesFile == "" {
		return err
	}
	return fmt.Errorf("%w %s: %w", ErrBadFile, c.routesFile, err)
}

// validate checks the values that are not routes', each error naming its
// variable.
// fieldOf is the name of the Config field that variable fills, or "".
func fieldOf(variable string) string {
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("env") == variable {
			return t.Field(i).Name
		}
	}
	return ""
}

func (c Config) validate() []error {
	var errs []error
	bad := func(name, format string, args ...any) {
		err := fmt.Errorf("%s: "+format, append([]any{name}, args...)...)
		if field := fieldOf(name); field != "" { // for a Config filled in code
			err = fmt.Errorf("%w (Config.%s)", err, field)
		}
		errs = append(errs, err)
	}
	if err := schema.CheckName(c.Schema); err != nil {
		bad("GATEWAY_DATABASE_SCHEMA", "%v", err)
	}
	if c.DatabaseURL == "" && strings.TrimSpace(c.DataDir) == "" {
		bad("GATEWAY_DATA_DIR", "must not be empty when DATABASE_URL is unset")
	}
	for _, s := range c.StripeSecrets {
		if !strings.HasPrefix(s, "whsec_") {
			bad("STRIPE_WEBHOOK_SECRET", "each secret must be a whsec_... signing secret")
			break
		}
	}
	for name, list := range map[string]SecretList{"GITHUB_WEBHOOK_SECRET": c.GitHubSecrets, "STRIPE_WEBHOOK_SECRET": c.StripeSecrets, "GATEWAY_FORWARD_SECRET": c.ForwardSecrets} {
		for _, s := range list {
			if strings.TrimSpace(s) == "" {
				bad(name, "an empty secret in the list")
				break
			}
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
	// Only when the budget itself is right: a default derived from a wrong
	// budget is no mistake of its own.
	if c.MaxInflightBytes >= c.MaxBodyBytes && (c.MaxInflightBytesPerAddr < c.MaxBodyBytes || c.MaxInflightBytesPerAddr > c.MaxInflightBytes) {
		bad("GATEWAY_MAX_INFLIGHT_BYTES_PER_ADDR", "must be 0 (an eighth of GATEWAY_MAX_INFLIGHT_BYTES) or from GATEWAY_MAX_BODY_BYTES (%d) to GATEWAY_MAX_INFLIGHT_BYTES (%d), got %d",
			c.MaxBodyBytes, c.MaxInflightBytes, c.MaxInflightBytesPerAddr)
	}
	// Checked here, not first when the database has started: the form only,
	// what is listening there is Run's to find.
	if !listenAddr(c.Addr) {
		bad("GATEWAY_ADDR", "must be host:port or :port, the port a number from 0 to 65535 (such as :8080 or 127.0.0.1:8080)")
	}
	if c.MetricsAddr != "" && !listenAddr(c.MetricsAddr) {
		bad("GATEWAY_METRICS_ADDR", "must be host:port or :port, the port a number from 0 to 65535 (such as :9090 or 127.0.0.1:9090)")
	}
	if c.MetricsAddr != "" && c.MetricsAddr == c.Addr {
		bad("GATEWAY_METRICS_ADDR", "must differ from GATEWAY_ADDR")
	}
	if c.Retention < MinRetention || c.Retention > MaxRetention {
		bad("GATEWAY_RETENTION", "must be from %s (providers retry for 3 days) to %s, got %s", MinRetention, MaxRetention, c.Retention)
	}
	if c.IDRetention < MinIDRetention || c.IDRetention < c.Retention || c.IDRetention > 10*MaxRetention {
		bad("GATEWAY_ID_RETENTION", "must be at least %s and at least GATEWAY_RETENTION (%s), and at most %s, got %s",
			MinIDRetention, c.Retention, 10*MaxRetention, c.IDRetention)
	}
	if c.SearchBudget <= 0 {
		bad("GATEWAY_SEARCH_BUDGET", "must be positive, got %s", c.SearchBudget)
	}
	switch {
	case c.ArchiveEndpoint != "" && c.ArchiveURL == "":
		bad("GATEWAY_ARCHIVE_ENDPOINT", "is set without GATEWAY_ARCHIVE_URL, which names the bucket")
	case c.ArchiveURL != "":
		if err := archive.Check(c.ArchiveURL, c.ArchiveEndpoint); err != nil {
			name, problem, _ := strings.Cut(err.Error(), ": ")
			bad(name, "%s", problem)
		}
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
	if c.RoutesFrom != "config" && c.RoutesFrom != "database" {
		bad("GATEWAY_ROUTES_FROM", "must be config or database")
	}
	if c.Console != "on" && c.Console != "off" {
		// Not the value: whatever was pasted there may be a secret.
		bad("GATEWAY_CONSOLE", "must be on or off")
	}
	if c.PublicURL != "" && !publicURL(c.PublicURL) {
		// Not the value: a URL may carry a password.
		bad("GATEWAY_PUBLIC_URL", "must be an http:// or https:// URL with a host and no user, path, query or fragment, such as https://hooks.example.com")
	}
	if c.OIDCIssuer != "" || c.OIDCClientID != "" || c.OIDCClientSecret != "" || c.OIDCRoles != "" {
		c.checkOIDC(bad)
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
	// Not the values: whatever was pasted there may be a secret.
	if _, ok := logFormats[c.LogFormat]; !ok {
		bad("GATEWAY_LOG_FORMAT", "must be text or json")
	}
	if _, ok := logLevels[strings.ToLower(c.LogLevel)]; !ok {
		bad("GATEWAY_LOG_LEVEL", "must be debug, info, warn or error")
	}
	return errs
}

// checkOIDC reports what is missing or wrong for people to sign in with
// OpenID Connect, once any GATEWAY_OIDC_* variable is set.
func (c Config) checkOIDC(bad func(name, format string, args ...any)) {
	const with = "is required with GATEWAY_OIDC_ISSUER"
	switch {
	case c.OIDCIssuer == "":
		var set []string
		for name, v := range map[string]string{"GATEWAY_OIDC_CLIENT_ID": c.OIDCClientID, "GATEWAY_OIDC_CLIENT_SECRET": c.OIDCClientSecret.Value(),
			"GATEWAY_OIDC_ROLES": c.OIDCRoles} {
			if v != "" {
				set = append(set, name)
			}
		}
		slices.Sort(set)
		bad("GATEWAY_OIDC_ISSUER", "is required with %s", strings.Join(set, " and "))
	case !issuerURL(c.OIDCIssuer):
		// Not the value: a URL may carry a password.
		bad("GATEWAY_OIDC_ISSUER", "must be an https:// URL (http:// for localhost or 127.0.0.1 only) without a user, query or fragment, such as https://accounts.example.com")
	}
	if c.OIDCClientID == "" {
		bad("GATEWAY_OIDC_CLIENT_ID", "%s", with)
	}
	if c.OIDCRoles == "" {
		bad("GATEWAY_OIDC_ROLES", "%s: CLAIM:VALUE=ROLE rules, such as groups:hookgate-admins=admin,groups:support=viewer", with)
	} else if _, err := sso.ParseRoles(c.OIDCRoles); err != nil {
		bad("GATEWAY_OIDC_ROLES", "%v", err)
	}
	if !slices.Contains(strings.Fields(c.OIDCScopes), "openid") {
		bad("GATEWAY_OIDC_SCOPES", "must hold openid")
	}
	if c.PublicURL == "" {
		bad("GATEWAY_PUBLIC_URL", "%s: the identity provider sends people back to it, at %s", with, sso.CallbackPath)
	}
	if c.AdminToken == "" || c.Console == "off" {
		bad("GATEWAY_OIDC_ISSUER", "people sign in to the console, which is off (GATEWAY_ADMIN_TOKEN unset, or GATEWAY_CONSOLE=off)")
	}
}

// issuerURL reports whether s can be an OpenID Connect issuer: https, or
// http on this machine (a provider in development).
func issuerURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" || u.Hostname() == "" {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		h := u.Hostname()
		return h == "localhost" || h == "127.0.0.1" || h == "::1"
	}
	return false
}

// logFormats are LogFormat's values and the handlers they make.
var logFormats = map[string]func(io.Writer, *slog.HandlerOptions) slog.Handler{
	"text": func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewTextHandler(w, o) },
	"json": func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewJSONHandler(w, o) },
}

// logLevels are LogLevel's values, in lower case.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// Logger returns the logger LogFormat and LogLevel ask for (empty: text,
// info), writing to w: the one `gateway serve` logs with. A value Resolve
// refuses is an error.
func (c Config) Logger(w io.Writer) (*slog.Logger, error) {
	c.LogFormat, c.LogLevel = cmp.Or(c.LogFormat, "text"), cmp.Or(c.LogLevel, "info")
	handler, ok := logFormats[c.LogFormat]
	if !ok {
		return nil, errors.New("GATEWAY_LOG_FORMAT: must be text or json")
	}
	level, ok := logLevels[strings.ToLower(c.LogLevel)]
	if !ok {
		return nil, errors.New("GATEWAY_LOG_LEVEL: must be debug, info, warn or error")
	}
	return slog.New(handler(w, &slog.HandlerOptions{Level: level})), nil
}

// registry returns the gateway's provider registry, and the sources' names:
// the built-in providers the secrets configure (builtins), then Sources.
func (c Config) registry() (*providers.Registry, []string, error) {
	var configured []providers.Provider
	var errs []error
	for _, src := range c.builtins() {
		p, err := providers.New(src)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", providers.Kinds[src.Kind].Env, err))
			continue
		}
		configured = append(configured, p)
	}
	var names []string
	for i, src := range c.Sources {
		p, err := providers.NewSource(src)
		if err != nil {
			errs = append(errs, fmt.Errorf("source %d (%q): %w", i+1, src.Name, err))
			continue
		}
		configured = append(configured, p)
		names = append(names, src.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, names, err
	}
	reg, err := providers.NewRegistry(configured...)
	return reg, names, err
}

// builtins are the built-in providers the secrets configure: GitHubSecrets
// make the source github, of kind github; StripeSecrets with
// StripeTolerance the source stripe, of kind stripe. A provider without
// secrets is not configured.
func (c Config) builtins() []providers.SourceConfig {
	var srcs []providers.SourceConfig
	for _, src := range []providers.SourceConfig{
		{Name: "github", Kind: "github", Secrets: verify.Secrets(c.GitHubSecrets)},
		{Name: "stripe", Kind: "stripe", Secrets: verify.Secrets(c.StripeSecrets), Tolerance: c.StripeTolerance},
	} {
		if len(src.Secrets) > 0 {
			srcs = append(srcs, src)
		}
	}
	return srcs
}

// configured returns the providers whose deliveries the gateway takes: the
// built-in ones whose secrets are set, then the sources.
func (c Config) configured(sources []string) []string {
	var names []string
	for _, src := range c.builtins() {
		names = append(names, src.Name)
	}
	return append(names, sources...)
}

// unconfigured reports each provider r's matches name that is not among
// configured, once each: such a route could never take a delivery, since
// the provider's endpoint answers 404. A source that could not be read
// (unread) is not reported again.
func unconfigured(r fanout.Route, configured, unread []string) []*KeyError {
	var errs []*KeyError
	var seen []string
	for _, m := range r.Matches {
		if m.Provider == "*" || slices.Contains(configured, m.Provider) || slices.Contains(unread, m.Provider) || slices.Contains(seen, m.Provider) {
			continue
		}
		seen = append(seen, m.Provider)
		errs = append(errs, &KeyError{Key: "match", Problem: fmt.Sprintf("provider %s is not configured (%s); the configured ones: %s", m.Provider, unsetReason(m.Provider), configuredList(configured))})
	}
	return errs
}

// unsetReason says why a provider that is not configured is not: its
// secret's variable is unset, or no source has its name.
func unsetReason(provider string) string {
	if k, ok := providers.Kinds[provider]; ok && k.Env != "" {
		return k.Env + " is unset"
	}
	return "no source has that name"
}

// configuredList writes the providers configured for a message.
func configuredList(configured []string) string {
	if len(configured) == 0 {
		return "none"
	}
	return strings.Join(configured, ", ")
}

// listenAddr reports whether s is an address to listen on: host:port or
// :port, the port a number from 0 (any) to 65535, the host without white
// space.
func listenAddr(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || port == "" || len(port) > 5 || strings.ContainsFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535 && strings.Trim(port, "0123456789") == ""
}

// publicURL reports whether s is an origin: scheme and host, nothing more.
func publicURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && u.User == nil &&
		(u.Path == "" || u.Path == "/") && u.RawPath == "" && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.Opaque == ""
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

// MarshalText redacts the secret in JSON, YAML and slog's JSON handler.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// LogValue redacts the secret in slog's handlers.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Value returns the secret itself.
func (s Secret) Value() string { return string(s) }

// SecretList is a list of secrets, the first one primary; in the
// environment, comma-separated.
type SecretList []string

// decode reads a comma-separated list: surrounding spaces are dropped, and
// an empty item, or a value of white space only, is an error.
func (l *SecretList) decode(value string) error {
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

// MarshalText redacts the secrets in JSON, YAML and slog's JSON handler.
func (l SecretList) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// LogValue redacts the secrets in slog's handlers.
func (l SecretList) LogValue() slog.Value { return slog.StringValue(l.String()) }

// ByteRate is a rate in bytes a second; in the environment, a size per
// second: "1KiB/s", "512B/s", "2MiB/s", "10kB/s", or "0" for none (a negative
// ByteRate).
type ByteRate int64

// byteUnits are the sizes a ByteRate may be written in.
var byteUnits = map[string]int64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1000, "KB": 1000, "MB": 1000 * 1000, "GB": 1000 * 1000 * 1000}

// Decode reads a rate as the environment writes it.
func (r *ByteRate) Decode(value string) error {
	value = strings.TrimSpace(value)
	if value == "0" {
		*r = -1
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

// statOK reports why a file cannot be read, without its path (which may be
// a secret pasted there), or nil.
func statOK(path string) error {
	_, err := os.Stat(path)
	return withoutPath(err)
}
