package bench

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
		d, err := providers.Parse(provs[filepath.Base(req.URL.Path)], req.Header, body, time.Now())
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

// --ceiling without the gateway's routes would measure receipts alone (no
// dispatch rows, no River jobs) and flatter the gateway's ratio: it is refused
// before anything is sent.
func TestCeilingNeedsTheGatewaysRoutes(t *testing.T) {
	t.Parallel()
	env := Env{
		Config: config.Config{GitHubSecrets: config.SecretList{"gh"}, StripeSecrets: config.SecretList{"whsec_s"}},
		Open: func(context.Context) (*pgxpool.Pool, func(), error) {
			t.Fatal("the database was opened")
			return nil, nil, nil
		},
		Stdout: io.Discard,
	}
	err := Run(context.Background(), env, []string{"--ceiling", "--url", "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "GATEWAY_ROUTES") {
		t.Fatalf("Run = %v, want an error naming GATEWAY_ROUTES", err)
	}
}
