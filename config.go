package hookgate

import (
	"fmt"

	"github.com/hookgate/hookgate/internal/config"
)

// Config is the gateway's configuration: exactly what `gateway serve` reads,
// the environment (DATABASE_URL, GATEWAY_ADDR, the providers' secrets,
// GATEWAY_ROUTES, ...: docs/configuration.md) and the configuration file
// GATEWAY_CONFIG_FILE names (routes with their limits and filters, sources).
// Get one from ConfigFromEnv; the zero Config is not usable.
type Config struct {
	env config.Config
}

// ConfigFromEnv reads and checks the configuration as `gateway serve` does.
// Its error names every variable, file line and key that is wrong, never a
// value that may be a secret. A route whose target names a Go handler
// (builtin:<name>) is checked by New, once the handlers are known.
func ConfigFromEnv() (Config, error) {
	env, err := config.Load()
	if err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	return Config{env: env}, nil
}

// Addr is the address the gateway listens on (GATEWAY_ADDR).
func (c Config) Addr() string { return c.env.Addr }

// Routes are the names of the configured routes, in their order.
func (c Config) Routes() []string {
	names := make([]string, len(c.env.Routes))
	for i, r := range c.env.Routes {
		names[i] = r.Name
	}
	return names
}
