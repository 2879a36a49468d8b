package bench

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// The load tool sends what a gateway accepts: every generated delivery
// verifies and parses, has a distinct id, is several KB, and the mix covers
// both providers and entities.
func TestGeneratorMakesAcceptableDeliveries(t *testing.T) {
	t.Parallel()
	cfg := config.Config{GitHubSecrets: config.SecretList{"gh"}, StripeSecrets: config.SecretList{"whsec_s"}}
	gen := newGenerator(cfg, 6000)
	provs := map[string]providers.Provider{
		"github": providers.GitHub{Secrets: verify.Secrets{"gh"}},
		"stripe": providers.Stripe{Secrets: verify.Secrets{"whsec_s"}, Tolerance: time.Minute},
	}
	seen := map[string]bool{}
	events := map[string]bool{}
	for range 40 {
		req, id := gen.next("http://gateway")
		body, _ := io.ReadAll(req.Body)
		d, err := provs[filepath.Base(req.URL.Path)].Parse(req.Header, body, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", req.URL.Path, err)
		}
		if d.DeliveryID != id || seen[id] {
			t.Fatalf("delivery id %q (tool says %q), seen before: %v", d.DeliveryID, id, seen[id])
		}
		seen[id] = true
		if len(body) < 5000 || d.Entity == "" || d.EventTime.IsZero() {
			t.Fatalf("%s: %d bytes, entity %q", d.Event, len(body), d.Entity)
		}
		events[d.Provider+" "+d.Event] = true
	}
	if len(events) != 4 {
		t.Fatalf("events: %v", events)
	}
}
