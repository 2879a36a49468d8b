package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
)

// sourceYAML is a source of each kind, as a person writes it in the
// configuration file; a kind missing here fails TestEverySourceKindEndToEnd.
var sourceYAML = map[string]string{
	"standard-webhooks": `{name: e2e-standard-webhooks, kind: standard-webhooks, secret_env: E2E_SW_SECRET, order: {entity: data.id, time: timestamp}}`,
	"shopify":           `{name: e2e-shopify, kind: shopify, secret_env: E2E_PLAIN_SECRET}`,
	"slack":             `{name: e2e-slack, kind: slack, secret_env: E2E_PLAIN_SECRET}`,
	"gitlab":            `{name: e2e-gitlab, kind: gitlab, secret_env: E2E_PLAIN_SECRET}`,
	"hmac": `{name: e2e-hmac, kind: hmac, secret_env: E2E_PLAIN_SECRET, signature_header: X-Acme-Signature, algorithm: sha512,
      encoding: base64, prefix: "sha512=", timestamp_header: X-Acme-Timestamp, id_field: id, event_header: X-Acme-Event}`,
}

// Every kind of source, configured in the file, through every layer a
// provider passes: gateway send signs as the sender does, ingest verifies
// and stores it (202, then 200 duplicate, 409 for its id with another body),
// a route names the source, the operator API and the CLI filter by it, and
// metrics count it under its name. Slack's url_verification is answered and
// stores nothing.
func TestEverySourceKindEndToEnd(t *testing.T) {
	url := dbtest.URL(t)
	addr := freeAddr(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("GATEWAY_ROUTES", "")
	t.Setenv("GATEWAY_ADMIN_TOKEN", "e2e-admin-token")
	t.Setenv("E2E_SW_SECRET", "whsec_bmV3LXNlY3JldC1rZXktMzItYnl0ZXMtbG9uZyEh")
	t.Setenv("E2E_PLAIN_SECRET", "new-secret,old-secret")
	var yaml strings.Builder
	yaml.WriteString("sources:\n")
	for _, k := range providers.KindNames() {
		src, ok := sourceYAML[k]
		if !ok {
			t.Fatalf("kind %s has no source in sourceYAML: add one", k)
		}
		yaml.WriteString("  - " + src + "\n")
	}
	yaml.WriteString("routes:\n")
	for _, k := range providers.KindNames() {
		fmt.Fprintf(&yaml, "  - {name: to-%s, match: [\"e2e-%s:*\"], target: builtin:log}\n", k, k)
	}
	file := filepath.Join(t.TempDir(), "hookgate.yaml")
	if err := os.WriteFile(file, []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GATEWAY_CONFIG_FILE", file)

	serveInBackground(t, addr)
	t.Setenv("HOOKGATE_URL", "http://"+addr)

	// signed is a delivery to the source src, signed as its sender signs.
	signed := func(src providers.SourceConfig, body []byte, id, event string, now time.Time) *http.Request {
		t.Helper()
		req, err := providers.NewRequest(context.Background(), src, "http://"+addr+"/webhooks/"+src.Name, body, id, event, now)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	post := func(req *http.Request) (int, map[string]any) {
		t.Helper()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var answer map[string]any
		_ = json.NewDecoder(res.Body).Decode(&answer)
		return res.StatusCode, answer
	}
	sources, err := fileSources()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range providers.KindNames() {
		name := "e2e-" + k
		// gateway send, signed as the sender signs.
		out, code := cliRun(t, "send", name, "--event", "thing.created", "--url", "http://"+addr, "--json")
		var sent struct {
			Status, Provider, Event string
			Routes                  int
		}
		if code != 0 || json.Unmarshal([]byte(out), &sent) != nil || sent.Status != "accepted" || sent.Provider != name || sent.Routes != 1 {
			t.Errorf("send %s: exit %d, %s", name, code, out)
			continue
		}
		// One delivery twice, then its id with another body.
		src := sources[name]
		kind := providers.Kinds[k]
		now := time.Now()
		id := "e2e-dup-" + k
		body := kind.Sample(src, id, "thing.updated", now)
		if code, answer := post(signed(src, body, id, "thing.updated", now)); code != http.StatusAccepted || answer["event"] == "" {
			t.Errorf("%s first: %d %v", name, code, answer)
		}
		if code, answer := post(signed(src, body, id, "thing.updated", now)); code != http.StatusOK || answer["status"] != "duplicate" {
			t.Errorf("%s again: %d %v", name, code, answer)
		}
		other := append(bytes.TrimSuffix(bytes.Clone(body), []byte("}")), []byte(`,"extra":1}`)...)
		if code, answer := post(signed(src, other, id, "thing.updated", now)); code != http.StatusConflict {
			t.Errorf("%s, its id with another body: %d %v", name, code, answer)
		}
		// A wrong signature: 401, nothing stored.
		wrong := src
		wrong.Secrets = []string{"whsec_c29tZW9uZS1lbHNlcy1rZXktMzItYnl0ZXMhISE="}
		if code, answer := post(signed(wrong, kind.Sample(src, "e2e-forged-"+k, "thing.updated", now), "e2e-forged-"+k, "thing.updated", now)); code != http.StatusUnauthorized {
			t.Errorf("%s forged: %d %v", name, code, answer)
		}
		// The CLI and the operator API filter by the source.
		out, code = cliRun(t, "deliveries", "list", "--provider", name, "--json")
		var listed struct{ Deliveries []map[string]any }
		if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Deliveries) != 2 {
			t.Errorf("deliveries list --provider %s: exit %d, %s", name, code, out)
		}
		if out, code := cliRun(t, "deliveries", "show", name, id); code != 0 || !strings.Contains(out, "to-"+k) {
			t.Errorf("deliveries show %s %s: exit %d, %s", name, id, code, out)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/admin/deliveries?provider="+name, nil)
		req.Header.Set("Authorization", "Bearer e2e-admin-token")
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Errorf("GET /admin/deliveries?provider=%s: %v %v", name, res.StatusCode, err)
		}
		res.Body.Close()
	}

	// A replay, once the first dispatches are done.
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitDispatches(t, pool, "state NOT IN ('succeeded', 'discarded')")
	for _, k := range providers.KindNames() {
		name, id := "e2e-"+k, "e2e-dup-"+k
		if out, code := cliRun(t, "replay", name, id, "--force", "--yes", "--reason", "e2e"); code != 0 || !strings.Contains(out, "1 dispatch") {
			t.Errorf("replay %s %s: exit %d, %s", name, id, code, out)
		}
	}

	// Slack's url_verification.
	src := sources["e2e-slack"]
	challenge := []byte(`{"token":"x","challenge":"e2e-challenge-value","type":"url_verification"}`)
	if code, answer := post(signed(src, challenge, "", "", time.Now())); code != http.StatusOK || answer["challenge"] != "e2e-challenge-value" {
		t.Errorf("url_verification: %d %v", code, answer)
	}

	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, k := range providers.KindNames() {
		if want := fmt.Sprintf(`hookgate_ingest_requests_total{outcome="accepted",provider="e2e-%s"} 2`, k); !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(string(metrics), `hookgate_ingest_requests_total{outcome="challenge",provider="e2e-slack"} 1`) {
		t.Error("metrics lack the challenge")
	}
}

// fileSources reads the sources of the configuration file the environment
// names, by name, as the gateway does.
func fileSources() (map[string]providers.SourceConfig, error) {
	cfg, err := config.Load()
	if err != nil {
		return nil, err
	}
	byName := map[string]providers.SourceConfig{}
	for _, p := range cfg.Providers.Providers() {
		if c, ok := p.(providers.Configured); ok {
			byName[p.Name()] = c.Source()
		}
	}
	return byName, nil
}
