package recovery

import "github.com/hookgate/hookgate/internal/config"

// FromConfig is Clients with c's recovery settings.
//
// Deprecated: use Clients. FromConfig is left only for internal/cli's recover
// command; once that builds a Settings too, this file goes, and with it
// recovery's import of internal/config.
func FromConfig(c config.Config) (*GitHub, *Stripe, error) {
	return Clients(Settings{
		GitHubHooks: c.GitHubRecoveryHooks, GitHubToken: c.GitHubToken.Value(), GitHubAppID: c.GitHubAppID,
		GitHubAppKeyFile: c.GitHubAppKeyFile, GitHubAPIURL: c.GitHubAPIURL,
		StripeAPIKey: c.StripeAPIKey.Value(), StripeAPIURL: c.StripeAPIURL, MaxBodyBytes: c.MaxBodyBytes,
	})
}
