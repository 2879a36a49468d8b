package providers

import (
	"fmt"
	"slices"
	"strings"
)

// Registry is one gateway's providers: the sources its configuration
// configures (GitHub and Stripe from their variables, the configuration
// file's sources) and the names every layer may name. It is built once, at
// start, and handed to whatever names providers: the server (its webhook
// endpoints and metrics labels), route matches, operator filters, the
// console and the CLI. A nil Registry knows the built-in kinds and
// configures nothing.
type Registry struct {
	configured []Provider
	names      []string
}

// NewRegistry returns the registry of the configured providers, each built
// from its SourceConfig (New, NewSource) or a GitHub or Stripe value. Two of
// one name are an error.
func NewRegistry(configured ...Provider) (*Registry, error) {
	r := &Registry{configured: configured, names: Builtins()}
	for i, p := range configured {
		if _, ok := p.(Configured); !ok {
			return nil, fmt.Errorf("provider %s: not built from a source configuration", p.Name())
		}
		if slices.ContainsFunc(configured[:i], func(q Provider) bool { return q.Name() == p.Name() }) {
			return nil, fmt.Errorf("provider %s is configured twice", p.Name())
		}
		if !slices.Contains(r.names, p.Name()) {
			r.names = append(r.names, p.Name())
		}
	}
	return r, nil
}

// Providers are the configured providers, in the order given: each serves
// /webhooks/<name>.
func (r *Registry) Providers() []Provider {
	if r == nil {
		return nil
	}
	return slices.Clone(r.configured)
}

// Names are the providers' names that routes, receipts, operator filters,
// metrics and the CLI may name: the built-in kinds' (configured or not: a
// route may name github before its secret is set), then the configured
// sources', in their order.
func (r *Registry) Names() []string {
	if r == nil {
		return Builtins()
	}
	return slices.Clone(r.names)
}

// Known reports whether name is one of Names.
func (r *Registry) Known(name string) bool {
	if r == nil {
		return slices.Contains(Builtins(), name)
	}
	return slices.Contains(r.names, name)
}

// Source returns the configuration of the configured provider named name,
// and its kind: what gateway send and the bench sign with. False when no
// provider of that name is configured (a built-in kind whose variable is
// unset, or an unknown name).
func (r *Registry) Source(name string) (SourceConfig, Kind, bool) {
	if r == nil {
		return SourceConfig{}, Kind{}, false
	}
	for _, p := range r.configured {
		if p.Name() == name {
			c := p.(Configured).Source()
			return c, Kinds[c.Kind], true
		}
	}
	return SourceConfig{}, Kind{}, false
}

// String names the configured providers and nothing else: a Registry printed
// with %v or %+v (inside a configuration) must not show their secrets.
func (r *Registry) String() string {
	var names []string
	for _, p := range r.Providers() {
		names = append(names, p.Name())
	}
	return "providers[" + strings.Join(names, " ") + "]"
}

// GoString is String, for %#v.
func (r *Registry) GoString() string { return r.String() }
