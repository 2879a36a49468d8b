package hookgate

import (
	"fmt"
	"os"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/searchkeys"
)

// Config is the gateway's configuration, a plain struct a service fills in
// code, or from the environment with ConfigFromEnv (exactly what `gateway
// serve` reads). Its zero fields take the documented defaults: the zero
// Config runs a gateway on a private PostgreSQL under ./.data, on :8080,
// with no provider and no route. Each field's comment names its default and
// the variable ConfigFromEnv reads it from (docs/configuration.md lists
// them). New checks it, reporting every error at once.
//
//	cfg := hookgate.Config{
//		DatabaseURL:   hookgate.Secret(os.Getenv("DATABASE_URL")),
//		StripeSecrets: hookgate.SecretList{os.Getenv("STRIPE_WEBHOOK_SECRET")},
//		Routes: []hookgate.Route{
//			{Name: "ledger", Match: []string{"stripe:invoice.*"}, Target: "builtin:ledger"},
//		},
//	}
type Config = config.Config

// Route is one route of Config.Routes: the deliveries whose provider and
// event match one of its Match pairs (and its Filter, when set) go to its
// Target, an http(s) URL or builtin:<name>, a handler given WithHandler. Its
// zero limits take the Config's.
type Route = config.Route

// Circuit is a route's circuit breaker (Route.Circuit).
type Circuit = config.Circuit

// Source is a sender besides GitHub and Stripe (Config.Sources): its Name
// (its endpoint is /webhooks/<name>), Kind (standard-webhooks, shopify,
// slack, gitlab or hmac), Secrets, and what its kind asks for: a signed
// time's Tolerance, the Order paths of its entity and time, an hmac kind's
// HMAC scheme (docs/sources.md).
type Source = config.Source

// SearchKeys are the values indexed at ingest (Config.SearchKeys): per
// provider, each key's name and the dot-separated JSON path of its value in
// the payload, found by GET /admin/deliveries?key=name:value.
type SearchKeys = searchkeys.Paths

// Notification sends operators' events to people and systems
// (Config.Notifications): its Name, Kind (slack, or webhook signed like
// forwards with Config.ForwardSecrets), URL and the Events it takes
// (route.circuit_opened, route.failing, dispatch.discarded,
// ingest.signature_failures, recovery.failed, archive.failed).
type Notification = config.Notification

// OrderPaths name a source's entity and event time in its payload
// (Source.Order).
type OrderPaths = providers.OrderPaths

// HMACScheme is how an hmac source signs (Source.HMAC).
type HMACScheme = providers.HMACScheme

// Secret is a string that never prints (fmt shows "[redacted]").
type Secret = config.Secret

// SecretList is a list of secrets, the first one primary, that never
// prints.
type SecretList = config.SecretList

// ByteRate is a rate in bytes a second (Config.MinBodyRate); negative is
// none.
type ByteRate = config.ByteRate

// ConfigFromEnv reads the configuration as `gateway serve` does: the
// environment (a secret's _FILE variant read as its value, the environment
// never written) and the configuration file GATEWAY_CONFIG_FILE names. Its
// error names every variable, file line and key that is wrong, one line each,
// never a value that may be a secret. A route whose target names a Go
// handler (builtin:<name>) is checked by New, once the handlers are known;
// so are recovery's settings.
//
// On error, the Config holds what could be read and keeps the rest: New
// refuses it, reporting the same errors beside its own (the handlers, the
// options, recovery's settings). So a main that hands it to New anyway, as
// `gateway serve` does, reports every error at once; a Config read in part
// never runs.
func ConfigFromEnv() (Config, error) {
	c, err := config.FromEnv(os.LookupEnv)
	c = config.Remember(c, err) // Resolve reports it, first
	if _, err := c.Resolve(); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}
