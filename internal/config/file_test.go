package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/providers"
)

// load is Load with GATEWAY_ROUTES spec and GATEWAY_CONFIG_FILE path, and
// the built-in providers configured (a route may name them): each route's
// limits are the environment's defaults (GATEWAY_WORKERS follows the cores, 10s, 25 attempts).
func load(t *testing.T, spec, path string) (config.Resolved, error) {
	t.Helper()
	t.Setenv("GATEWAY_ROUTES", spec)
	t.Setenv("GATEWAY_CONFIG_FILE", path)
	for _, k := range providers.Builtins() {
		t.Setenv(providers.Kinds[k].Env, "whsec_"+k)
	}
	return config.Load()
}

// sources are the configured sources' names, in order: the providers
// besides the built-in ones.
func sources(c config.Resolved) []string {
	var names []string
	for _, p := range c.Providers.Providers() {
		if !slices.Contains(providers.Builtins(), p.Name()) {
			names = append(names, p.Name())
		}
	}
	return names
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hookgate.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The file's routes carry their limits; what a route leaves out comes from
// the environment's defaults, its circuit from DefaultCircuit; a target_env
// target is read from the variable it names.
func TestReadFile(t *testing.T) {
	t.Setenv("BILLING_TARGET", "https://user:pw@billing.internal/stripe?token=t")
	path := writeFile(t, `
routes:
  - name: ci
    match: ["github:push", "github:pull_request.*"]
    target: http://127.0.0.1:9000/ci
    concurrency: 8
    rate: 20/s
    timeout: 5s
    max_attempts: 10
    circuit: {failures: 5, cooldown: 1m}
    order: none
  - name: billing
    match: ["stripe:invoice.*"]
    target_env: BILLING_TARGET
    rate: 600/m
    circuit: {failures: 0}
    order: all
    order_window: 2s
  - name: audit
    match: ["*:*"]
    target: builtin:log
`)
	cfg, err := load(t, "", path)
	if err != nil {
		t.Fatal(err)
	}
	table := cfg.Table
	want := fanout.Table{
		{Name: "ci", Matches: []fanout.Match{{Provider: "github", Pattern: "push"}, {Provider: "github", Pattern: "pull_request.*"}}, Target: "http://127.0.0.1:9000/ci",
			Concurrency: 8, Rate: fanout.Rate{N: 20, Per: time.Second}, Timeout: 5 * time.Second, MaxAttempts: 10,
			Circuit: fanout.Circuit{Failures: 5, Cooldown: time.Minute}, Order: fanout.OrderNone},
		{Name: "billing", Matches: []fanout.Match{{Provider: "stripe", Pattern: "invoice.*"}}, Target: "https://user:pw@billing.internal/stripe?token=t",
			Concurrency: config.DefaultWorkers(), Rate: fanout.Rate{N: 600, Per: time.Minute}, Timeout: 10 * time.Second, MaxAttempts: 25,
			Circuit: fanout.Circuit{Failures: 0, Cooldown: 30 * time.Second}, Order: fanout.OrderAll, OrderWindow: 2 * time.Second},
		{Name: "audit", Matches: []fanout.Match{{Provider: "*", Pattern: "*"}}, Target: "builtin:log",
			Concurrency: fanout.BuiltinConcurrency, Timeout: 10 * time.Second, MaxAttempts: 25, Circuit: fanout.DefaultCircuit, Order: fanout.OrderLatest},
	}
	if len(table) != len(want) {
		t.Fatalf("got %d routes, want %d", len(table), len(want))
	}
	for i := range want {
		g, w := table[i], want[i]
		if g.Name != w.Name || g.Target != w.Target || g.Concurrency != w.Concurrency || g.Rate != w.Rate ||
			g.Timeout != w.Timeout || g.MaxAttempts != w.MaxAttempts || g.Circuit != w.Circuit || len(g.Matches) != len(w.Matches) ||
			g.Order != w.Order || g.OrderWindow != w.OrderWindow {
			t.Errorf("route %d = %+v, want %+v", i, g, w)
		}
		for j := range w.Matches {
			if g.Matches[j] != w.Matches[j] {
				t.Errorf("route %d match %d = %+v, want %+v", i, j, g.Matches[j], w.Matches[j])
			}
		}
	}
	if got := table[0].Rate.String(); got != "20/s" {
		t.Errorf("rate shown as %q", got)
	}
}

// A file without routes leaves them to GATEWAY_ROUTES; routes in both places
// stop the gateway, naming both.
func TestLoadTakesRoutesFromOnePlace(t *testing.T) {
	env := "ci=github:push>http://127.0.0.1:9000/ci"
	empty := writeFile(t, "# routes come from GATEWAY_ROUTES\n{}\n")
	cfg, err := load(t, env, empty)
	table := cfg.Table
	if err != nil || len(table) != 1 || table[0].Name != "ci" || table[0].Concurrency != config.DefaultWorkers() || table[0].Circuit != fanout.DefaultCircuit {
		t.Fatalf("Load = %+v, %v", table, err)
	}
	both := writeFile(t, "routes:\n  - {name: a, match: [\"github:push\"], target: \"http://x/\"}\n")
	_, err = load(t, env, both)
	if !errors.Is(err, config.ErrBadFile) || !strings.Contains(err.Error(), "GATEWAY_ROUTES") || !strings.Contains(err.Error(), both) {
		t.Fatalf("both: %v", err)
	}
}

// Whatever is wrong stops the gateway at start, with a message naming the
// file, the route and the key, and never a credential in a target.
func TestReadFileRefusesWhatIsWrong(t *testing.T) {
	t.Setenv("EMPTY_TARGET", "")
	ok := "    match: [\"github:push\"]\n    target: http://127.0.0.1:9000/ci\n"
	for _, tt := range []struct{ text, want string }{
		{"routes:\n  - name: ci\n" + ok + "    concurency: 8\n", `route "ci" (line 2): line 5: unknown key "concurency"`},
		{"route:\n  - name: ci\n" + ok, `unknown key "route"`},
		{"routes:\n  - name: ci\n" + ok + "  - name: ci\n" + ok, `route "ci" (line 5): line 5: key name: ci is used by another route`},
		// A name that is not right is named by its place, never shown.
		{"routes:\n  - name: Ci\n" + ok, `route 1 (line 2): line 2: key name`},
		{"routes:\n  - name: ci\n" + ok + "    concurrency: 0\n", `route "ci" (line 2): line 5: key concurrency: must be 1 to 10000`},
		{"routes:\n  - name: ci\n" + ok + "    concurrency: 8.5\n", `route "ci" (line 2): line 5: key concurrency: must be a whole number, got 8.5`},
		{"routes:\n  - name: ci\n" + ok + "    max_attempts: 2.9\n", `key max_attempts: must be a whole number`},
		{"routes:\n  - name: ci\n" + ok + "    circuit: {failures: 1.5}\n", `key circuit.failures: must be a whole number`},
		{"", `the file is empty`},
		{"# nothing yet\n", `the file is empty`},
		{"routes:\n  - name: ci\n" + ok + "---\nroutes: []\n", `more than one YAML document`},
		{"routes:\n  - name: ci\n" + ok + "    rate: 20/h\n", `key rate: must be N/s or N/m`},
		{"routes:\n  - name: ci\n" + ok + "    rate: 0/s\n", `key rate: N must be 1 to`},
		{"routes:\n  - name: ci\n" + ok + "    timeout: forever\n", `key timeout`},
		{"routes:\n  - name: ci\n" + ok + "    max_attempts: -1\n", `key max_attempts`},
		{"routes:\n  - name: ci\n" + ok + "    circuit: {failures: 3, cooldown: 0s}\n", `key circuit.cooldown`},
		{"routes:\n  - name: ci\n" + ok + "    circuit: {failure: 3}\n", `route "ci" (line 2): circuit: line 5: unknown key "failure"`},
		{"routes:\n  - name: ci\n    match: [\"gitlab:push\"]\n    target: http://x/\n", `key match`},
		{"routes:\n  - name: ci\n    match: []\n    target: http://x/\n", `key match`},
		{"routes:\n  - name: ci\n    match: [\"github:push\"]\n", `key target: give target or target_env`},
		{"routes:\n  - name: ci\n    match: [\"github:push\"]\n    target: ftp://u:secretpw@x/\n", `key target`},
		{"routes:\n  - name: ci\n    match: [\"github:push\"]\n    target: http://x/\n    target_env: X\n", `give one`},
		{"routes:\n  - name: ci\n    match: [\"github:push\"]\n    target_env: EMPTY_TARGET\n", `route "ci" (line 2): line 4: key target_env: the variable it names is not set`},
		{"routes:\n  - name: ci\n    match: [\"github:push\"]\n    target: http://u:secretpw@x/\n", `key target: a URL with a user or password`},
		{"routes: {name: ci}\n", `routes must be a list`},
		{"routes:\n  - name: ci\n" + ok + "    concurrency: many\n", `route "ci" (line 2)`},
		{"routes: [\n", `did not find expected`},
		{"routes:\n  - name: ci\n" + ok + "    filter: payload.action\n", `route "ci" (line 2): line 5: key filter: invalid filter: its type is dyn, not bool`},
		{"routes:\n  - name: ci\n" + ok + "    filter: 'payload.action == '\n", `route "ci" (line 2): line 5: key filter: invalid filter: ERROR`},
		{"routes:\n  - name: ci\n" + ok + "    filter: ''\n", `key filter: is empty`},
		{"routes:\n  - name: ci\n" + ok + "    order: newest\n", `route "ci" (line 2): line 5: key order: must be latest, all or none, got "newest"`},
		{"routes:\n  - name: ci\n" + ok + "    order_window: 2m\n", `line 5: key order_window: must be a duration from 0s to 1m0s, got "2m"`},
		{"routes:\n  - name: ci\n" + ok + "    order_window: soon\n", `key order_window: must be a duration`},
		{"routes:\n  - name: ci\n" + ok + "    order: none\n    order_window: 1s\n", `key order_window: holds events so that an older one goes first`},
	} {
		path := writeFile(t, tt.text)
		_, err := load(t, "", path)
		if !errors.Is(err, config.ErrBadFile) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant %s: ... %s", tt.text, err, path, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("%q: the error shows a credential: %v", tt.text, err)
		}
	}
}

// A route's filter is compiled when the file is read, and decides with its
// matches which deliveries the route takes.
func TestReadFileCompilesFilters(t *testing.T) {
	path := writeFile(t, `
routes:
  - name: api-prs
    match: ["github:pull_request"]
    filter: 'payload.repository.full_name == "acme/api" && payload.action in ["opened", "synchronize"]'
    target: http://127.0.0.1:9000/prs
  - name: all-prs
    match: ["github:pull_request"]
    target: http://127.0.0.1:9000/all
`)
	cfg, err := load(t, "", path)
	if err != nil {
		t.Fatal(err)
	}
	table := cfg.Table
	if table[0].Filter == nil || table[1].Filter != nil {
		t.Fatalf("filters: %v, %v", table[0].Filter, table[1].Filter)
	}
	pr := func(repo, action string) *filter.Input {
		return &filter.Input{Provider: "github", Event: "pull_request." + action, ContentType: "application/json",
			Body: []byte(`{"action":"` + action + `","repository":{"full_name":"` + repo + `"}}`)}
	}
	var failed []string
	report := func(route string, err error) { failed = append(failed, route) }
	for _, c := range []struct {
		in   *filter.Input
		want []string
	}{
		{pr("acme/api", "opened"), []string{"api-prs", "all-prs"}},
		{pr("acme/api", "closed"), []string{"all-prs"}},
		{pr("acme/web", "opened"), []string{"all-prs"}},
		{&filter.Input{Provider: "github", Event: "pull_request.opened", ContentType: "application/json", Body: []byte(`{"action":"opened"}`)}, []string{"all-prs"}},
		{&filter.Input{Provider: "github", Event: "push", ContentType: "application/json", Body: []byte(`{}`)}, nil},
	} {
		if got := table.Matching(c.in, report); !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %v, want %v", c.in.Event, c.in.Body, got, c.want)
		}
	}
	// Only the payload without a repository made the filter fail; a push
	// never reached it.
	if !slices.Equal(failed, []string{"api-prs"}) {
		t.Errorf("failures reported: %v", failed)
	}
}

// Sources in the file: each becomes a provider routes may name; their
// secrets come from the variables they name; what cannot work stops the
// gateway naming the file, the source and the key.
func TestReadFileSources(t *testing.T) {
	t.Setenv("CLERK_SECRET", "whsec_bmV3LXNlY3JldC1rZXktMzItYnl0ZXMtbG9uZyEh")
	secretFile := filepath.Join(t.TempDir(), "gitlab-token")
	if err := os.WriteFile(secretFile, []byte("new-token,old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GITLAB_TOKEN_FILE", secretFile)
	path := writeFile(t, `
sources:
  - name: clerk
    kind: standard-webhooks
    secret_env: CLERK_SECRET
    order: {entity: data.id, time: timestamp}
  - name: gl
    kind: gitlab
    secret_env: GITLAB_TOKEN
routes:
  - name: users
    match: ["clerk:user.*", "gl:merge_request.open"]
    target: builtin:log
`)
	cfg, err := load(t, "", path)
	if err != nil {
		t.Fatal(err)
	}
	table := cfg.Table
	if got := sources(cfg); !slices.Equal(got, []string{"clerk", "gl"}) {
		t.Fatalf("sources: %v", got)
	}
	gl, _, _ := cfg.Providers.Source("gl")
	if !slices.Equal([]string(gl.Secrets), []string{"new-token", "old-token"}) {
		t.Errorf("secrets from GITLAB_TOKEN_FILE: %q", gl.Secrets)
	}
	if got := table.Matching(&filter.Input{Provider: "clerk", Event: "user.created"}, nil); !slices.Equal(got, []string{"users"}) {
		t.Errorf("a route naming a source: %v", got)
	}
	// Routes from GATEWAY_ROUTES may name the file's sources too.
	onlySources := writeFile(t, "sources:\n  - {name: clerk, kind: standard-webhooks, secret_env: CLERK_SECRET}\n")
	if cfg, err := load(t, "u=clerk:user.*>builtin:log", onlySources); err != nil || len(cfg.Table) != 1 {
		t.Errorf("GATEWAY_ROUTES naming a source of the file: %v, %v", cfg.Table, err)
	}

	t.Setenv("EMPTY_SECRET", "")
	t.Setenv("LIST_WITH_HOLE", "a,,b")
	for _, tt := range []struct{ text, want string }{
		{"sources:\n  - {name: a, kind: gitlab, secret_env: NOT_SET_ANYWHERE}\n", `source "a" (line 2): line 2: key secret_env: the variable it names is not set`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: EMPTY_SECRET}\n", `key secret_env: the variable it names is not set`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: LIST_WITH_HOLE}\n", `an empty secret`},
		{"sources:\n  - {name: a, kind: gitlab}\n", `key secret_env: name the variable`},
		{"sources:\n  - {name: a, kind: bitbucket, secret_env: CLERK_SECRET}\n", `key kind: must be one of`},
		{"sources:\n  - {name: github, kind: gitlab, secret_env: CLERK_SECRET}\n", `built in`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: CLERK_SECRET, secret: x}\n", `unknown key "secret"`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: CLERK_SECRET, order: {entity: id}}\n", `key order`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: CLERK_SECRET, order: {entity: id, tme: t}}\n", `unknown key "tme"`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: CLERK_SECRET, tolerance: 2h}\n", `key tolerance`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: CLERK_SECRET}\n  - {name: a, kind: slack, secret_env: CLERK_SECRET}\n", `a is used by another source`},
		{"sources:\n  - {name: a, kind: hmac, secret_env: CLERK_SECRET, id_header: X-Id, event_field: type}\n", `key signature_header`},
		{"sources: {name: a}\n", `sources must be a list`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}\n", `key secret_env: is not the name of a variable`},
		{"sources:\n  - {name: a, kind: gitlab, secret_env: \"whsec_p@ss word\"}\n", `key secret_env: is not the name of a variable`},
		{"routes:\n  - {name: r, match: [\"clerk:user\"], target: builtin:log}\n", `key match`},
	} {
		path := writeFile(t, tt.text)
		_, err := load(t, "", path)
		if !errors.Is(err, config.ErrBadFile) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant ... %s", tt.text, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "whsec_") {
			t.Errorf("the error shows a secret: %v", err)
		}
	}
}

// Secrets pasted where a variable's name or a target belongs.
const (
	hexSecret   = "B7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2" // looks like a variable's name
	whsecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	slackURL    = "https://hooks.slack.com/services/T0000/B0000/" + hexSecret // the path is the credential
)

// A configuration error never shows a value that may be a secret: it names
// the file, the line and the key instead, whatever was written there.
func TestReadFileErrorsNeverShowASecret(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TARGET_WITHOUT_SCHEME", strings.TrimPrefix(slackURL, "https://"))
	t.Setenv("TARGET_BAD_PORT", strings.Replace(slackURL, ".com/", ".com:99999/", 1))
	t.Setenv("SECRET_IN_FILE_VARIANT_FILE", hexSecret)
	t.Setenv("EMPTY_FILE_VARIANT_FILE", secretFile)
	source := func(secretEnv string) string {
		return "sources:\n  - name: clerk\n    kind: standard-webhooks\n    secret_env: " + secretEnv + "\n"
	}
	route := func(key, v string) string {
		return "routes:\n  - name: ci\n    match: [\"github:push\"]\n    " + key + ": " + v + "\n"
	}
	for _, tt := range []struct{ name, text, want string }{
		{"hex secret in secret_env", source(hexSecret), `source "clerk" (line 2): line 4: key secret_env: the variable it names is not set`},
		{"whsec_ secret in secret_env", source(whsecSecret), `source "clerk" (line 2): line 4: key secret_env: is not the name of a variable`},
		{"a URL in secret_env", source(slackURL), `source "clerk" (line 2): line 4: key secret_env: is not the name of a variable`},
		{"secret in a _FILE variant", source("SECRET_IN_FILE_VARIANT"), `source "clerk" (line 2): line 4: key secret_env: the file that the variable's _FILE variant names cannot be read`},
		{"empty _FILE variant", source("EMPTY_FILE_VARIANT"), `source "clerk" (line 2): line 4: key secret_env: the file that the variable's _FILE variant names is empty`},
		{"hex secret in target_env", route("target_env", hexSecret), `route "ci" (line 2): line 4: key target_env: the variable it names is not set`},
		{"URL in target_env", route("target_env", slackURL), `route "ci" (line 2): line 4: key target_env: is not the name of a variable`},
		{"target_env without a scheme", route("target_env", "TARGET_WITHOUT_SCHEME"), `route "ci" (line 2): line 4: key target_env: the value of the variable it names (not shown): the target must be an http`},
		{"target_env with a bad port", route("target_env", "TARGET_BAD_PORT"), `route "ci" (line 2): line 4: key target_env: the value of the variable it names (not shown): the target's port`},
		{"target with a bad port", route("target", strings.Replace(slackURL, ".com/", ".com:99999/", 1)), `route "ci" (line 2): line 4: key target: the target's port`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.text)
			_, err := load(t, "", path)
			if !errors.Is(err, config.ErrBadFile) || !strings.Contains(err.Error(), path+": "+tt.want) {
				t.Errorf("got  %v\nwant %s: %s", err, path, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), hexSecret) || strings.Contains(err.Error(), whsecSecret) ||
				strings.Contains(err.Error(), "hooks.slack.com")) {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
}

// search_keys names, per provider, the JSON paths whose values are indexed
// at ingest; a provider must be configured (a source of the file too), a
// name and a path right, each mistake named with its line.
func TestReadFileSearchKeys(t *testing.T) {
	t.Setenv("CLERK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	path := writeFile(t, `sources:
  - {name: clerk, kind: standard-webhooks, secret_env: CLERK_SECRET}
search_keys:
  stripe: {customer: data.object.customer, invoice: data.object.invoice}
  github: {repo: repository.full_name}
  clerk: {user: data.id}
`)
	cfg, err := load(t, "", path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Keys.Names(), ","); got != "customer,invoice,repo,user" {
		t.Errorf("names = %s", got)
	}
	keys := cfg.Keys.Of("stripe", "application/json", []byte(`{"data":{"object":{"customer":"cus_1","invoice":7}}}`))
	if fmt.Sprint(keys) != "[customer:cus_1 invoice:7]" {
		t.Errorf("stripe's keys = %v", keys)
	}
	// A source that could not be read is reported once, with the source.
	_, err = load(t, "", writeFile(t, "sources:\n  - {name: clerk, kind: nope, secret_env: CLERK_SECRET}\nsearch_keys:\n  clerk: {user: data.id}\n"))
	if err == nil || !strings.Contains(err.Error(), `source "clerk"`) || strings.Contains(err.Error(), "search_keys") {
		t.Errorf("search keys of a source that could not be read: %v", err)
	}
	for _, tt := range []struct{ text, want string }{
		{"search_keys:\n  gitlab: {a: b}\n", `line 2: search_keys: provider gitlab is not configured (no source has that name); the configured ones: github, stripe`},
		{"search_keys:\n  stripe: {Customer: data.object.customer}\n", `line 2: search_keys: stripe: search key: "Customer"`},
		{"search_keys:\n  stripe: {customer: data..customer}\n", `line 2: search_keys: stripe.customer: search key: "data..customer"`},
		{"search_keys:\n  stripe: {customer: [a, b]}\n", `line 2: search_keys: stripe.customer`},
		{"search_keys:\n  stripe: data.object.customer\n", `line 2: search_keys: search_keys maps providers`},
		{"search_keys: [stripe]\n", `line 1: search_keys maps providers`},
		{"search_keys:\n  stripe: {customer: a}\n  stripe: {invoice: b}\n", `provider "stripe" given twice`},
	} {
		_, err := load(t, "", writeFile(t, tt.text))
		if !errors.Is(err, config.ErrBadFile) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant ... %s", tt.text, err, tt.want)
		}
	}
}

// schemas map provider:pattern to a JSON Schema file, a relative path
// being the configuration file's folder's; each mistake is named with its
// line, or with its pattern and file when the schema cannot be compiled.
func TestReadFileSchemas(t *testing.T) {
	path := writeFile(t, "schemas:\n  stripe:invoice.*: schemas/invoice.json\n")
	if err := os.MkdirAll(filepath.Join(filepath.Dir(path), "schemas"), 0o700); err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join(filepath.Dir(path), "schemas", "invoice.json")
	if err := os.WriteFile(schema, []byte(`{"required": ["data"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := load(t, "", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Schemas.Len() != 1 || cfg.Config.Schemas["stripe:invoice.*"] != schema {
		t.Fatalf("schemas = %v", cfg.Config.Schemas)
	}
	if e := cfg.Schemas.Check(providers.Delivery{Provider: "stripe", Event: "invoice.paid", Body: []byte(`{"id":"evt_1"}`)}); e == nil || e.Rule != "required" {
		t.Errorf("an invoice without data: %+v", e)
	}
	for _, tt := range []struct{ text, want string }{
		{"schemas: [a]\n", `line 1: schemas maps provider:pattern`},
		{"schemas:\n  stripe:invoice.*: [a]\n", `line 2: schemas maps provider:pattern`},
		{"schemas:\n  stripe:invoice.*: a.json\n  stripe:invoice.*: b.json\n", `line 3: schemas: "stripe:invoice.*" given twice`},
		{"schemas:\n  gitlab:push: a.json\n", `schemas: bad schema "gitlab:push": a match must be provider:pattern`},
		{"schemas:\n  stripe:invoice.*: nowhere.json\n", `schemas: bad schema "stripe:invoice.*": `},
	} {
		_, err := load(t, "", writeFile(t, tt.text))
		if !errors.Is(err, config.ErrBadFile) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant ... %s", tt.text, err, tt.want)
		}
	}
}

// notifications send operators' events: a Slack one's URL from the variable
// url_env names (a secret), a webhook one's signed with
// GATEWAY_FORWARD_SECRET; each mistake is named with its line, never a URL.
func TestReadFileNotifications(t *testing.T) {
	t.Setenv("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/secretpart")
	t.Setenv("GATEWAY_FORWARD_SECRET", "forward-secret")
	path := writeFile(t, `notifications:
  - name: oncall
    kind: slack
    url_env: SLACK_WEBHOOK_URL
    events: [route.circuit_opened, route.failing, dispatch.discarded, ingest.signature_failures, recovery.failed, archive.failed]
  - name: pager
    kind: webhook
    url: https://alerts.example.com/hookgate
    events: [dispatch.discarded]
`)
	cfg, err := load(t, "", path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Notifications) != 2 || cfg.Notifications[0].URL != "https://hooks.slack.com/services/T0/B0/secretpart" ||
		len(cfg.Notifications[0].Events) != 6 || cfg.Notifications[1].Kind != "webhook" {
		t.Fatalf("notifications %+v", cfg.Notifications)
	}
	for _, tt := range []struct{ text, want string }{
		{"notifications:\n  - {name: a, kind: email, url: 'https://x.example', events: [dispatch.discarded]}\n", `notification "a" (line 2): bad notification: kind: slack or webhook, not "email"`},
		{"notifications:\n  - {name: a, kind: slack, url: 'https://x.example', events: [route.on_fire]}\n", `"route.on_fire" is none of route.circuit_opened`},
		{"notifications:\n  - {name: a, kind: slack, url: 'https://x.example', events: []}\n", `events: name at least one`},
		{"notifications:\n  - {name: a, kind: slack, events: [route.failing]}\n", `(line 2): key url: give url or url_env`},
		{"notifications:\n  - {name: a, kind: slack, url: 'https://x.example', url_env: SLACK_WEBHOOK_URL, events: [route.failing]}\n", `key url_env: url is given too`},
		{"notifications:\n  - {name: a, kind: slack, url_env: NOT_SET_ANYWHERE, events: [route.failing]}\n", `key url_env: the variable it names is not set`},
		{"notifications:\n  - {name: a, kind: slack, url: 'https://u:p@x.example', events: [route.failing]}\n", `a URL with a user or password is a credential`},
		{"notifications:\n  - {name: a, kind: slack, url: 'ftp://x.example', events: [route.failing]}\n", `absolute http(s) URL`},
		{"notifications:\n  - {name: a, kind: slack, url: 'https://x.example', events: [route.failing], to: me}\n", `unknown key "to"`},
		{"notifications:\n  - {name: A!, kind: slack, url: 'https://x.example', events: [route.failing]}\n", `notification 1 (line 2): bad notification: name`},
		{"notifications:\n  - {name: a, kind: slack, url: 'https://x.example', events: [route.failing]}\n  - {name: a, kind: slack, url: 'https://y.example', events: [route.failing]}\n", `a is used by another notification`},
		{"notifications: {name: a}\n", `line 1: notifications must be a list`},
	} {
		_, err := load(t, "", writeFile(t, tt.text))
		if !errors.Is(err, config.ErrBadFile) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant ... %s", tt.text, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secretpart") {
			t.Errorf("%q: the error shows the Slack URL: %v", tt.text, err)
		}
	}
	// A webhook notification without a secret to sign with.
	t.Setenv("GATEWAY_FORWARD_SECRET", "")
	if _, err := load(t, "", path); err == nil || !strings.Contains(err.Error(), `notification "pager": bad notification: kind webhook signs with GATEWAY_FORWARD_SECRET, which is not set`) {
		t.Errorf("a webhook notification without GATEWAY_FORWARD_SECRET: %v", err)
	}
}
