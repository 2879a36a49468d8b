package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/config"
)

// serveWith runs `gateway serve` with vars as the only configuration (every
// variable hookgate reads is emptied first, the private PostgreSQL's
// directory a fresh one) and returns its error, the error's lines and what
// it logged. It fails the test if serve started, or if the private
// PostgreSQL was started: a configuration error stops serve before.
func serveWith(t *testing.T, vars map[string]string) (error, []string, string) {
	t.Helper()
	for _, name := range append(config.Variables(), cli.URLVariable) {
		t.Setenv(name, "")
	}
	dataDir := t.TempDir()
	t.Setenv("GATEWAY_DATA_DIR", dataDir)
	for name, value := range vars {
		t.Setenv(name, value)
	}
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve"}, io.Discard, &stderr)
	if err == nil {
		t.Fatal("serve started")
	}
	if entries, _ := os.ReadDir(dataDir); len(entries) > 0 {
		t.Errorf("the private PostgreSQL was started before the configuration error was reported: %s holds %d entries", dataDir, len(entries))
	}
	return err, strings.Split(err.Error(), "\n"), stderr.String()
}

// wantLines fails the test unless lines are exactly want, in any order.
func wantLines(t *testing.T, lines, want []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("no line %q in:\n%s", w, strings.Join(lines, "\n"))
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d lines, want one for each of the %d errors:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
}

// Every configuration error is reported at once, whichever check finds it:
// a value that does not parse, a value out of its range, a route, the
// builtin handler a route names, recovery's settings, the listen address.
// None waits for the others to be fixed, none shows a value, and none is
// found only once the database has started.
func TestServeReportsEveryErrorOfEveryCheckAtOnce(t *testing.T) {
	const hooks = "GITHUB_RECOVERY_HOOKS: entry 1 is not repo:OWNER/NAME:HOOK_ID, org:ORG:HOOK_ID or app"
	const workers = "GATEWAY_WORKERS: must be 1 to 10000, got 0"
	const stripeURL = "STRIPE_API_URL: must be an http(s) URL without a user, password, query or fragment, such as https://api.example.com"
	for _, c := range []struct {
		name string
		vars map[string]string
		want []string
	}{
		{"a value out of range and recovery's hooks",
			map[string]string{"GITHUB_WEBHOOK_SECRET": "g", "GITHUB_TOKEN": "ghp_x", "GITHUB_RECOVERY_HOOKS": "SEKRIT42", "GATEWAY_WORKERS": "0"},
			[]string{"configuration: " + workers, hooks}},
		{"a route that cannot be read and recovery's hooks",
			map[string]string{"GITHUB_WEBHOOK_SECRET": "g", "GITHUB_TOKEN": "ghp_x", "GITHUB_RECOVERY_HOOKS": "SEKRIT42", "GATEWAY_ROUTES": "x=y"},
			[]string{`configuration: GATEWAY_ROUTES: bad route, entry 1 ("x"): no >target`, hooks}},
		{"a value and a builtin handler that is not there",
			map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "GATEWAY_WORKERS": "0", "GATEWAY_ROUTES": "a=stripe:x>builtin:nosuch"},
			[]string{"configuration: " + workers,
				`GATEWAY_ROUTES: bad route: route "a": no builtin handler named "nosuch" (have log, stripe-subscriptions)`}},
		{"recovery's interval and its API URL",
			map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "STRIPE_API_KEY": "rk_x", "STRIPE_API_URL": "ftp://x", "GATEWAY_RECOVERY_INTERVAL": "1s"},
			[]string{"configuration: GATEWAY_RECOVERY_INTERVAL: must be at least 1m, got 1s (Config.RecoveryInterval)", stripeURL}},
		{"both providers' API URLs",
			map[string]string{"GITHUB_WEBHOOK_SECRET": "g", "STRIPE_WEBHOOK_SECRET": "whsec_x", "GITHUB_TOKEN": "ghp_x", "GITHUB_RECOVERY_HOOKS": "repo:acme/api:1",
				"GITHUB_API_URL": "https://alice:PWLEAK@ghe.example/api/v3", "STRIPE_API_KEY": "rk_x", "STRIPE_API_URL": "ftp://x"},
			[]string{"configuration: GITHUB_API_URL: must be an http(s) URL without a user, password, query or fragment, such as https://api.example.com", stripeURL}},
		{"every entry of recovery's hooks",
			map[string]string{"GITHUB_WEBHOOK_SECRET": "g", "GITHUB_TOKEN": "ghp_x", "GITHUB_RECOVERY_HOOKS": "SEKRIT42 org:acme:1 org:acme:1 QLEAK"},
			[]string{"configuration: " + hooks, "GITHUB_RECOVERY_HOOKS: entry 3 is listed twice",
				"GITHUB_RECOVERY_HOOKS: entry 4 is not repo:OWNER/NAME:HOOK_ID, org:ORG:HOOK_ID or app"}},
		{"the listen addresses",
			map[string]string{"GATEWAY_ADDR": "bad", "GATEWAY_METRICS_ADDR": "127.0.0.1:99999", "GATEWAY_WORKERS": "0"},
			[]string{"configuration: " + workers,
				"GATEWAY_ADDR: must be host:port or :port, the port a number from 0 to 65535 (such as :8080 or 127.0.0.1:8080) (Config.Addr)",
				"GATEWAY_METRICS_ADDR: must be host:port or :port, the port a number from 0 to 65535 (such as :9090 or 127.0.0.1:9090) (Config.MetricsAddr)"}},
		{"single sign-on without what it needs",
			map[string]string{"GATEWAY_OIDC_ISSUER": "http://alice:PWLEAK@idp.example.com", "GATEWAY_OIDC_ROLES": "groups:admins=owner", "GATEWAY_OIDC_SCOPES": "email"},
			[]string{
				"configuration: GATEWAY_OIDC_ISSUER: must be an https:// URL (http:// for localhost or 127.0.0.1 only) without a user, query or fragment, such as https://accounts.example.com (Config.OIDCIssuer)",
				"GATEWAY_OIDC_CLIENT_ID: is required with GATEWAY_OIDC_ISSUER (Config.OIDCClientID)",
				"GATEWAY_OIDC_ROLES: entry 1: the role must be viewer, operator or admin (Config.OIDCRoles)",
				"GATEWAY_OIDC_SCOPES: must hold openid (Config.OIDCScopes)",
				"GATEWAY_PUBLIC_URL: is required with GATEWAY_OIDC_ISSUER: the identity provider sends people back to it, at /admin/oidc/callback (Config.PublicURL)",
				"GATEWAY_OIDC_ISSUER: people sign in to the console, which is off (GATEWAY_ADMIN_TOKEN unset, or GATEWAY_CONSOLE=off) (Config.OIDCIssuer)"}},
		{"tracing's exporter and protocol",
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://alice:PWLEAK@otel.example", "OTEL_TRACES_EXPORTER": "zipkin",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "GATEWAY_WORKERS": "0"},
			[]string{"configuration: " + workers, `tracing: OTEL_TRACES_EXPORTER: otlp or none, not "zipkin"`,
				`tracing: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: hookgate exports over http/protobuf, not "grpc"`,
				"tracing: OTEL_EXPORTER_OTLP_ENDPOINT: must carry no user or password: send a credential with OTEL_EXPORTER_OTLP_HEADERS"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err, lines, _ := serveWith(t, c.vars)
			wantLines(t, lines, c.want)
			for _, leak := range []string{"SEKRIT42", "PWLEAK", "QLEAK"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("the error shows a value (%s):\n%v", leak, err)
				}
			}
		})
	}
	// The forms an address may take pass.
	for _, addr := range []string{":0", ":8080", "127.0.0.1:8080", "[::1]:8080", "localhost:65535"} {
		err, _, _ := serveWith(t, map[string]string{"GATEWAY_ADDR": addr, "GATEWAY_WORKERS": "0"})
		if strings.Contains(err.Error(), "GATEWAY_ADDR") {
			t.Errorf("GATEWAY_ADDR=%s refused: %v", addr, err)
		}
	}
}

// writeConfig writes a configuration file for the test and returns its
// path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hookgate.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The configuration file's mistakes are reported every one at once, each
// naming the file, the route or source and the line; a name that is not
// right (a URL with a password pasted there) is named by its place and line,
// never shown; a route whose provider is not configured names its match's
// line too, as every other mistake of the file does.
func TestServeReportsTheFilesMistakesByTheirLines(t *testing.T) {
	file := writeConfig(t, `sources:
  - {name: "https://bob:PWLEAK@h/?t=QLEAK", kind: gitlab, secret_env: SRC_SECRET}
  - {name: acme, kind: gitlab, secret_env: NOT_SET_ANYWHERE}
routes:
  - name: "https://alice:PWLEAK@h/?t=QLEAK"
    match: ["stripe:*"]
    target: builtin:log
  - name: d
    match:
      - "github:push"
    target: builtin:log
  - name: e
    match: ["acme:push"]
    target: builtin:nosuch
    concurrency: 0
    timeout: soon
  - name: f
    match: ["acme:x"]
    target: builtin:nosuch
`)
	_, lines, _ := serveWith(t, map[string]string{"GATEWAY_CONFIG_FILE": file, "STRIPE_WEBHOOK_SECRET": "whsec_x", "SRC_SECRET": "s"})
	at := "configuration file " + file + ": "
	wantLines(t, lines, []string{
		"configuration: " + at + "source 1 (line 2): line 2: key name: must be 1-32 of a-z, 0-9, _ and -, starting with a letter or digit",
		at + `source "acme" (line 3): line 3: key secret_env: the variable it names is not set`,
		at + "route 1 (line 5): line 5: key name: must be 1-64 of a-z, 0-9, _ and -, starting with a letter or digit",
		at + `route "e" (line 12): line 15: key concurrency: must be 1 to 10000, got 0`,
		at + `route "e" (line 12): line 16: key timeout: must be a duration above 0 and at most 1h0m0s, got "soon"`,
		at + `route "d" (line 8): line 9: key match: provider github is not configured (GITHUB_WEBHOOK_SECRET is unset); the configured ones: stripe`,
		// A route that is right in itself is checked for its handler, beside
		// the rest; a route naming a source that could not be read is not
		// reported for it again.
		at + `bad route: route "f": no builtin handler named "nosuch" (have log, stripe-subscriptions)`,
	})
	if leaked := strings.Join(lines, "\n"); strings.Contains(leaked, "PWLEAK") || strings.Contains(leaked, "QLEAK") {
		t.Errorf("a name that is not right is shown:\n%s", leaked)
	}
}

// A file the configuration names is read up to a bound: a secret's file (a
// _FILE variant, hookgate's own or one the configuration file names) up to
// 64 KiB, the App's key too, the configuration file up to 1 MiB. /dev/zero
// named by mistake is refused at once, with a message that shows nothing of
// it, in little memory; before, it filled the memory until the process died.
func TestServeRefusesAFileTooLargeForWhatItHolds(t *testing.T) {
	large := filepath.Join(t.TempDir(), "large")
	if err := os.WriteFile(large, bytes.Repeat([]byte("routes: []  # LEAK\n"), (1<<20)/19+1), 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeConfig(t, `sources:
  - {name: acme, kind: gitlab, secret_env: ACME_SECRET}
routes:
  - {name: a, match: ["acme:push"], target_env: A_TARGET}
`)
	const tooLarge = "holds more than 64 KiB, the most it may; is it the right file? (nothing of it is shown)"
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	_, lines, _ := serveWith(t, map[string]string{
		"GITHUB_WEBHOOK_SECRET_FILE": "/dev/zero", "GATEWAY_ADMIN_TOKEN_FILE": large,
		"GITHUB_RECOVERY_HOOKS": "app", "GITHUB_APP_ID": "1", "GITHUB_APP_PRIVATE_KEY_FILE": "/dev/zero",
		"GATEWAY_CONFIG_FILE": file, "ACME_SECRET_FILE": "/dev/zero", "A_TARGET_FILE": "/dev/zero",
	})
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	at := "configuration file " + file + ": "
	wantLines(t, lines, []string{
		"configuration: GITHUB_WEBHOOK_SECRET_FILE: the file it names " + tooLarge,
		"GATEWAY_ADMIN_TOKEN_FILE: the file it names " + tooLarge,
		at + `source "acme" (line 2): line 2: key secret_env: the file that the variable's _FILE variant names ` + tooLarge,
		at + `route "a" (line 4): line 4: key target_env: the file that the variable's _FILE variant names ` + tooLarge,
		"GITHUB_APP_PRIVATE_KEY_FILE: the file it names " + tooLarge,
	})
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 32<<20 {
		t.Errorf("reading the configuration allocated %d MiB", allocated>>20)
	}
	_, lines, _ = serveWith(t, map[string]string{"GATEWAY_CONFIG_FILE": large})
	wantLines(t, lines, []string{"configuration: configuration file " + large + ": the file holds more than 1 MiB, the most it may; is it the right file? (nothing of it is shown)"})
	_, lines, _ = serveWith(t, map[string]string{"GATEWAY_CONFIG_FILE": "/dev/zero"})
	if !strings.Contains(lines[0], "holds more than 1 MiB") || strings.Contains(strings.Join(lines, "\n"), "LEAK") {
		t.Errorf("GATEWAY_CONFIG_FILE=/dev/zero: %s", strings.Join(lines, "\n"))
	}
}

// A route to a provider that is neither built in nor a source names that
// provider and the configured ones only; a provider part that could be no
// source's name, or looks like a secret, is not shown.
func TestServeNamesTheUnknownProviderOfARoute(t *testing.T) {
	_, lines, _ := serveWith(t, map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x",
		"GATEWAY_ROUTES": "c=clerk:user.*>http://127.0.0.1:9/x d=whsec_abcdef:x>builtin:log e=" + strings.Repeat("p", 40) + ":x>builtin:log f=Clerk:x>builtin:log"})
	const malformed = "key match: a match must be provider:pattern with provider stripe or *, the pattern 1-255 of A-Z, a-z, 0-9, _, ., - and *"
	wantLines(t, lines, []string{
		`configuration: GATEWAY_ROUTES: bad route, entry 1 ("c"): key match: provider clerk is not configured (no source has that name); the configured ones: stripe`,
		`GATEWAY_ROUTES: bad route, entry 2 ("d"): ` + malformed,
		`GATEWAY_ROUTES: bad route, entry 3 ("e"): ` + malformed,
		`GATEWAY_ROUTES: bad route, entry 4 ("f"): ` + malformed,
	})
}

// With GATEWAY_LOG_FORMAT=json, the log stays one JSON object a line when
// the configuration stops serve: each error is a line at ERROR (msg
// "configuration error", the error in error), after the warnings, and main
// writes nothing more. In text, main writes the error as before.
func TestServeLogsItsStoppingErrorAsJSON(t *testing.T) {
	vars := map[string]string{"GATEWAY_LOG_FORMAT": "json", "GATEWAY_WORKERS": "0", "GITHUB_RECOVERY_HOOKS": "SEKRIT42", "GATEWAY_ROUTE": "x"}
	err, _, logged := serveWith(t, vars)
	var errorsLogged []string
	for _, line := range strings.Split(strings.TrimSpace(logged), "\n") {
		var entry struct{ Level, Msg, Error string }
		if jerr := json.Unmarshal([]byte(line), &entry); jerr != nil {
			t.Fatalf("a line that is no JSON object: %q (%v)", line, jerr)
		}
		if entry.Level == "ERROR" {
			if entry.Msg != "configuration error" {
				t.Errorf("msg %q, want configuration error", entry.Msg)
			}
			errorsLogged = append(errorsLogged, entry.Error)
		}
	}
	wantLines(t, errorsLogged, []string{"GATEWAY_WORKERS: must be 1 to 10000, got 0",
		"GITHUB_RECOVERY_HOOKS: entry 1 is not repo:OWNER/NAME:HOOK_ID, org:ORG:HOOK_ID or app"})
	var written bytes.Buffer
	if code := report(&written, err); code != cli.ExitFailed || written.Len() != 0 {
		t.Errorf("main after a JSON log: exit %d, wrote %q; want 1 and nothing", code, written.String())
	}
	// In text, main writes it, and the log holds no error line.
	vars["GATEWAY_LOG_FORMAT"] = "text"
	err, _, logged = serveWith(t, vars)
	written.Reset()
	if code := report(&written, err); code != cli.ExitFailed || !strings.HasPrefix(written.String(), "gateway: configuration: GATEWAY_WORKERS") {
		t.Errorf("main after a text log: exit %d, wrote %q", code, written.String())
	}
	if strings.Contains(logged, "level=ERROR") {
		t.Errorf("the text log holds the error too:\n%s", logged)
	}
	// A JSON log with a bad level is still JSON.
	vars["GATEWAY_LOG_FORMAT"], vars["GATEWAY_LOG_LEVEL"] = "json", "loud"
	_, _, logged = serveWith(t, vars)
	for _, line := range strings.Split(strings.TrimSpace(logged), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("with a bad level, a line that is no JSON object: %q", line)
		}
	}
	if !strings.Contains(logged, "GATEWAY_LOG_LEVEL: must be debug, info, warn or error") {
		t.Errorf("the bad level is not reported:\n%s", logged)
	}
}

// A variable that looks meant for hookgate is warned of: a misspelling of a
// name it reads (however it is spelt), or a name about webhooks; the hint
// points where the name likely meant, or says how a source's secret is
// read. A name that looks like a secret is not shown, and the variables a
// CI system sets (GitHub Actions') are left alone.
func TestServeWarnsOfMisspeltVariables(t *testing.T) {
	secretName := "GATEWAY_TOKEN_ghp_" + strings.Repeat("Z", 36)
	vars := map[string]string{
		"GATEWAY_WORKERS":                    "0", // stops serve before the database
		"GITHUB_WEBHOOK_SECRT":               "x",
		"GITHUB_WEBHOK_SECRET":               "x",
		"GITHUB_WEBHOOK_SECRET_FIEL":         "x",
		"GATEWAY_CONFIG":                     "x",
		"GATEWAY_DATABASE_URL":               "x",
		"CLERK_WEBHOOK_SECRET":               "x",
		secretName:                           "x",
		"GATEWAY_" + strings.Repeat("A", 70): "x",
	}
	for name, value := range githubActions {
		vars[name] = value
	}
	_, _, logged := serveWith(t, vars)
	for _, want := range []string{
		`msg="GITHUB_WEBHOOK_SECRT: not a variable hookgate reads; did you mean GITHUB_WEBHOOK_SECRET?"`,
		`msg="GITHUB_WEBHOK_SECRET: not a variable hookgate reads; did you mean GITHUB_WEBHOOK_SECRET?"`,
		`msg="GITHUB_WEBHOOK_SECRET_FIEL: not a variable hookgate reads; did you mean GITHUB_WEBHOOK_SECRET_FILE?"`,
		`msg="GATEWAY_CONFIG: not a variable hookgate reads; did you mean GATEWAY_CONFIG_FILE?"`,
		`msg="GATEWAY_DATABASE_URL: not a variable hookgate reads; did you mean DATABASE_URL?"`,
		`msg="CLERK_WEBHOOK_SECRET: not a variable hookgate reads; a source's secret is read only when a source of the configuration file (GATEWAY_CONFIG_FILE) names it in secret_env" variable=CLERK_WEBHOOK_SECRET`,
		`level=WARN msg="a variable whose name looks like a secret is none hookgate reads (its name is not shown)"`,
	} {
		if !strings.Contains(logged, want) {
			t.Errorf("no warning %s in:\n%s", want, logged)
		}
	}
	if n := strings.Count(logged, "looks like a secret"); n != 2 {
		t.Errorf("%d warnings of a name that looks like a secret, want 2:\n%s", n, logged)
	}
	if strings.Contains(logged, "ghp_") || strings.Contains(logged, "AAAAAAAAAA") {
		t.Errorf("a name that looks like a secret is logged:\n%s", logged)
	}
	for name := range githubActions {
		if strings.Contains(logged, name+":") || strings.Contains(logged, "variable="+name+" ") {
			t.Errorf("GitHub Actions' %s warned of:\n%s", name, logged)
		}
	}
}

// githubActions is what a GitHub Actions job's environment holds, and a few
// more variables of tools beside the gateway (Stripe's CLI): none is
// hookgate's, nor a misspelling of one.
var githubActions = map[string]string{
	"CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_ACTION": "__run", "GITHUB_ACTION_PATH": "/a", "GITHUB_ACTION_REPOSITORY": "a/b",
	"GITHUB_ACTOR": "octocat", "GITHUB_ACTOR_ID": "1", "GITHUB_API_URL": "https://api.github.com", "GITHUB_BASE_REF": "main",
	"GITHUB_ENV": "/e", "GITHUB_EVENT_NAME": "push", "GITHUB_EVENT_PATH": "/e.json", "GITHUB_GRAPHQL_URL": "https://api.github.com/graphql",
	"GITHUB_HEAD_REF": "x", "GITHUB_JOB": "test", "GITHUB_OUTPUT": "/o", "GITHUB_PATH": "/p", "GITHUB_REF": "refs/heads/main",
	"GITHUB_REF_NAME": "main", "GITHUB_REF_PROTECTED": "false", "GITHUB_REF_TYPE": "branch", "GITHUB_REPOSITORY": "a/b",
	"GITHUB_REPOSITORY_ID": "1", "GITHUB_REPOSITORY_OWNER": "a", "GITHUB_REPOSITORY_OWNER_ID": "1", "GITHUB_RETENTION_DAYS": "90",
	"GITHUB_RUN_ATTEMPT": "1", "GITHUB_RUN_ID": "1", "GITHUB_RUN_NUMBER": "1", "GITHUB_SERVER_URL": "https://github.com",
	"GITHUB_SHA": "ffac537e6cbbf934b08745a378932722df287a53", "GITHUB_STATE": "/s", "GITHUB_STEP_SUMMARY": "/s", "GITHUB_TRIGGERING_ACTOR": "octocat",
	"GITHUB_WORKFLOW": "ci", "GITHUB_WORKFLOW_REF": "a/b/.github/workflows/ci.yml@refs/heads/main", "GITHUB_WORKFLOW_SHA": "ffac537e",
	"GITHUB_WORKSPACE": "/w", "RUNNER_ARCH": "X64", "RUNNER_ENVIRONMENT": "github-hosted", "RUNNER_NAME": "r", "RUNNER_OS": "Linux",
	"RUNNER_TEMP": "/t", "RUNNER_TOOL_CACHE": "/c", "ACTIONS_RUNTIME_TOKEN": "t", "ACTIONS_ID_TOKEN_REQUEST_URL": "https://x",
	"ACTIONS_RESULTS_URL": "https://x", "ACTIONS_CACHE_URL": "https://x", "STRIPE_KEY": "x", "STRIPE_SECRET_KEY": "x", "GH_TOKEN": "x",
	"GITLAB_TOKEN": "x", "TEST_DATABASE_URL": "x", "DATABASE_USER": "x",
}
