package providers_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// A registry knows the built-in providers whether or not they are
// configured, and the configured sources; it serves and signs for the
// configured ones only. Two providers of one name are refused.
func TestRegistry(t *testing.T) {
	stripe := source(t, providers.SourceConfig{Name: "stripe", Kind: "stripe", Secrets: verify.Secrets{"whsec_x"}, Tolerance: time.Minute})
	clerk := source(t, kindConfigs()["standard-webhooks"])
	r, err := providers.NewRegistry(stripe, clerk)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Names(); !slices.Equal(got, []string{"github", "stripe", "clerk"}) {
		t.Errorf("Names = %v", got)
	}
	if !r.Known("github") || !r.Known("clerk") || r.Known("shop") {
		t.Errorf("Known: github %v, clerk %v, shop %v", r.Known("github"), r.Known("clerk"), r.Known("shop"))
	}
	if got := len(r.Providers()); got != 2 {
		t.Errorf("%d providers served, want 2", got)
	}
	if c, k, ok := r.Source("stripe"); !ok || c.Kind != "stripe" || c.Tolerance != time.Minute || k.Env != "STRIPE_WEBHOOK_SECRET" {
		t.Errorf("Source(stripe) = %+v, %v", c, ok)
	}
	if _, _, ok := r.Source("github"); ok {
		t.Error("github is known but not configured, yet has a source")
	}
	if _, err := providers.NewRegistry(clerk, clerk); err == nil {
		t.Error("two sources named clerk were accepted")
	}
	var none *providers.Registry
	if !slices.Equal(none.Names(), providers.Builtins()) || none.Known("clerk") || len(none.Providers()) != 0 {
		t.Errorf("a nil registry: %v", none.Names())
	}
}

// A built-in kind is configured by its variable and named after itself; the
// configuration file can name neither it nor its name.
func TestBuiltinKinds(t *testing.T) {
	if got := providers.Builtins(); !slices.Equal(got, []string{"github", "stripe"}) {
		t.Errorf("Builtins = %v", got)
	}
	for _, k := range providers.Builtins() {
		if _, err := providers.New(providers.SourceConfig{Name: "other", Kind: k, Secrets: verify.Secrets{"whsec_x"}}); err == nil {
			t.Errorf("a %s source named other was accepted", k)
		}
	}
}
