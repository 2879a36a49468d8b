// Package docs holds hookgate's documentation, by topic, as Markdown: the
// configuration, senders, routes, forwards, recovery, operators, deployment,
// upgrading, performance, the Go library, guarantees and architecture. It has no code.
// Its tests hold the pages to the gateway: the configuration page lists
// exactly the environment variables the gateway reads (config.Variables), with
// the defaults the configuration declares, and every relative link in the
// README, the changelog and these pages leads to a file, and a heading, that
// exists in the repository.
package docs
