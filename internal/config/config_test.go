package config_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/providers"
)

// env loads the configuration from vars alone (as the environment would
// hold them), never from the process's environment: the tests run in
// parallel.
func env(vars map[string]string) (config.Resolved, error) {
	c, err := config.FromEnv(func(name string) (string, bool) { v, ok := vars[name]; return v, ok })
	r, rerr := c.Resolve()
	if err := errors.Join(err, rerr); err != nil {
		return config.Resolved{}, err
	}
	return r, nil
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	c, err := env(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "./.data" || c.Addr != ":8080" || c.StripeTolerance != 5*time.Minute || c.MaxBodyBytes != 26214400 ||
		c.Retention != 720*time.Hour || c.ForwardTimeout != 10*time.Second || c.MaxAttempts != 25 || c.Workers != config.DefaultWorkers() ||
		c.DatabaseURL != "" || len(c.GitHubSecrets) != 0 || len(c.Table) != 0 || len(c.Providers.Providers()) != 0 || c.MaxInflightBytes != 256<<20 || c.MetricsAddr != "" ||
		c.Console != "on" || c.RecoveryInterval != 5*time.Minute || c.RecoveryLookback != 72*time.Hour ||
		c.GitHubAPIURL != "https://api.github.com" || c.StripeAPIURL != "https://api.stripe.com" ||
		c.IDRetention != 7200*time.Hour || c.BodyRate() != 1024 || c.MaxInflightBytesPerAddr != 32<<20 {
		t.Fatalf("defaults = %+v", c)
	}
	// The zero Config, as a library user's code leaves it, is the same.
	z, err := config.Config{}.Resolve()
	if err != nil || fmt.Sprintf("%+v", z.Config) != fmt.Sprintf("%+v", c.Config) {
		t.Fatalf("the zero Config: %v\n%+v\nwant\n%+v", err, z.Config, c.Config)
	}
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, value, want string
	}{
		{"GATEWAY_RETENTION", "24h", "GATEWAY_RETENTION: must be from 72h"},
		{"GATEWAY_RETENTION", "1000000h", "GATEWAY_RETENTION: must be from 72h0m0s (providers retry for 3 days) to 87600h0m0s"},
		{"GATEWAY_RETENTION", "soon", "GATEWAY_RETENTION"},
		{"STRIPE_TOLERANCE", "0s", "STRIPE_TOLERANCE: must be positive"},
		{"GATEWAY_MAX_BODY_BYTES", "-1", "GATEWAY_MAX_BODY_BYTES: must be positive"},
		{"GATEWAY_MAX_INFLIGHT_BYTES", "1048576", "GATEWAY_MAX_INFLIGHT_BYTES: must be at least GATEWAY_MAX_BODY_BYTES"},
		{"GATEWAY_MAX_INFLIGHT_BYTES", "lots", "GATEWAY_MAX_INFLIGHT_BYTES"},
		{"GATEWAY_METRICS_ADDR", ":8080", "GATEWAY_METRICS_ADDR: must differ from GATEWAY_ADDR"},
		{"GATEWAY_ID_RETENTION", "100h", "GATEWAY_ID_RETENTION: must be at least 720h0m0s and at least GATEWAY_RETENTION"},
		{"GATEWAY_ID_RETENTION", "-1h", "GATEWAY_ID_RETENTION: must be at least"},
		{"GATEWAY_MAX_INFLIGHT_BYTES_PER_ADDR", "1024", "GATEWAY_MAX_INFLIGHT_BYTES_PER_ADDR: must be 0"},
		{"GATEWAY_MIN_BODY_RATE", "1KiB", "GATEWAY_MIN_BODY_RATE: must be a size per second"},
		{"GATEWAY_MIN_BODY_RATE", "fast/s", "GATEWAY_MIN_BODY_RATE: must be a size per second"},
		{"GATEWAY_MIN_BODY_RATE", "3XB/s", "GATEWAY_MIN_BODY_RATE: must be a size per second"},
		{"GATEWAY_ADMIN_TOKEN", " ", "GATEWAY_ADMIN_TOKEN: must not begin or end with white space"},
		{"GATEWAY_ADMIN_TOKEN", "topsecret ", "GATEWAY_ADMIN_TOKEN: must not begin or end with white space"},
		{"GATEWAY_MAX_ATTEMPTS", "0", "GATEWAY_MAX_ATTEMPTS: must be at least 1"},
		{"GATEWAY_WORKERS", "many", "GATEWAY_WORKERS"},
		{"STRIPE_WEBHOOK_SECRET", "sk_live_oops", "STRIPE_WEBHOOK_SECRET: each secret must be a whsec_"},
		{"GITHUB_WEBHOOK_SECRET", "topsecret,,other", "GITHUB_WEBHOOK_SECRET: an empty secret"},
		{"GITHUB_WEBHOOK_SECRET", "  ", "GITHUB_WEBHOOK_SECRET: white space only"},
		{"GATEWAY_FORWARD_SECRET", "topsecret,,other", "GATEWAY_FORWARD_SECRET: an empty secret"},
		{"GATEWAY_FORWARD_SECRET", "topsecret,", "GATEWAY_FORWARD_SECRET: an empty secret"},
		{"GATEWAY_CONSOLE", "maybe", "GATEWAY_CONSOLE: must be on or off"},
		{"GATEWAY_TRUSTED_PROXIES", "10.0.0.0/8,topsecret", "GATEWAY_TRUSTED_PROXIES: entry 2 must be a CIDR"},
		{"GATEWAY_RECOVERY_INTERVAL", "10s", "GATEWAY_RECOVERY_INTERVAL: must be at least 1m"},
		{"GATEWAY_RECOVERY_LOOKBACK", "2000h", "GATEWAY_RECOVERY_LOOKBACK: must be 1h to 720h"},
		{"GITHUB_APP_ID", "-3", "GITHUB_APP_ID: must be a positive number"},
		{"GITHUB_APP_ID", "12ab", "GITHUB_APP_ID: must be a whole number"},
		{"GATEWAY_RECOVERY_INTERVAL", "often", "GATEWAY_RECOVERY_INTERVAL: must be a duration"},
		{"GITHUB_TOKEN", "ghp_topsecret\n", "GITHUB_TOKEN: must not hold white space"},
		{"GITHUB_TOKEN", "ghp topsecret", "GITHUB_TOKEN: must not hold white space"},
		{"STRIPE_API_KEY", "rk_topsecret\t", "STRIPE_API_KEY: must not hold white space"},
		{"STRIPE_API_KEY", "pk_live_topsecret", "STRIPE_API_KEY: must be a secret (sk_...) or restricted (rk_...) key"},
		{"STRIPE_API_KEY", "whsec_topsecret", "STRIPE_API_KEY: must be a secret"},
		{"GATEWAY_PUBLIC_URL", "hooks.example.com", "GATEWAY_PUBLIC_URL: must be an http:// or https:// URL"},
		{"GATEWAY_PUBLIC_URL", "https://hooks.example.com/gateway", "GATEWAY_PUBLIC_URL: must be an http:// or https:// URL"},
		{"GATEWAY_PUBLIC_URL", "https://hooks.example.com/?x=1", "GATEWAY_PUBLIC_URL: must be an http:// or https:// URL"},
		{"GATEWAY_PUBLIC_URL", "https://ops:topsecret@hooks.example.com", "GATEWAY_PUBLIC_URL: must be an http:// or https:// URL"},
		{"GATEWAY_LOG_FORMAT", "topsecret", "GATEWAY_LOG_FORMAT: must be text or json"},
		{"GATEWAY_LOG_FORMAT", "JSON ", "GATEWAY_LOG_FORMAT: must be text or json"},
		{"GATEWAY_LOG_LEVEL", "verbose", "GATEWAY_LOG_LEVEL: must be debug, info, warn or error"},
		{"GATEWAY_LOG_LEVEL", "warning", "GATEWAY_LOG_LEVEL: must be debug, info, warn or error"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			_, err := env(map[string]string{tt.name: tt.value})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "topsecret") || strings.Contains(err.Error(), "sk_live_oops") {
				t.Fatalf("error shows a secret: %v", err)
			}
		})
	}
}

// GATEWAY_PUBLIC_URL is an origin, with or without its last slash.
func TestLoadPublicURL(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"https://hooks.example.com", "http://127.0.0.1:8080/"} {
		if c, err := env(map[string]string{"GATEWAY_PUBLIC_URL": v}); err != nil || c.PublicURL != v {
			t.Fatalf("GATEWAY_PUBLIC_URL=%s: %v, %q", v, err, c.PublicURL)
		}
	}
}

// Every error is reported at once, one line each, a value that does not
// parse among them.
func TestLoadReportsEveryErrorAtOnce(t *testing.T) {
	t.Parallel()
	_, err := env(map[string]string{"STRIPE_TOLERANCE": "5", "GATEWAY_RETENTION": "1h", "GATEWAY_WORKERS": "0",
		"GATEWAY_MAX_ATTEMPTS": "many", "GATEWAY_ROUTES": "a=nowhere:x>builtin:log"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"STRIPE_TOLERANCE: must be a duration", "GATEWAY_RETENTION: must be from 72h", "GATEWAY_WORKERS: must be 1 to 10000",
		"GATEWAY_MAX_ATTEMPTS: must be a whole number",
		`GATEWAY_ROUTES: bad route, entry 1 ("a"): key match: provider nowhere is not configured (no source has that name); the configured ones: none`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 5 {
		t.Errorf("%d lines, want one for each of the 5 errors:\n%v", n, err)
	}
}

// GATEWAY_FORWARD_SECRET takes comma-separated secrets, the old and the new
// one during a rotation, and never prints them.
func TestLoadForwardSecrets(t *testing.T) {
	t.Parallel()
	c, err := env(map[string]string{"GATEWAY_FORWARD_SECRET": "whsec_b2xkLWZvcndhcmQta2V5, new-forward-key"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.ForwardSecrets) != 2 || c.ForwardSecrets[0] != "whsec_b2xkLWZvcndhcmQta2V5" || c.ForwardSecrets[1] != "new-forward-key" {
		t.Fatalf("ForwardSecrets = %q, want the two secrets in order", []string(c.ForwardSecrets))
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, c); strings.Contains(out, "b2xkLWZvcndhcmQta2V5") || strings.Contains(out, "new-forward-key") {
			t.Fatalf("%s shows a forward secret: %s", format, out)
		}
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	t.Parallel()
	c, err := env(map[string]string{"GITHUB_WEBHOOK_SECRET": "gh-one, gh-two", "GATEWAY_ADMIN_TOKEN": "admintoken",
		"DATABASE_URL":   "postgres://u:dbpassword@h/db",
		"GATEWAY_ROUTES": "billing=github:push>https://u:targetpassword@billing.internal/hook?token=targettoken"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.GitHubSecrets) != 2 || c.GitHubSecrets[1] != "gh-two" || c.AdminToken.Value() != "admintoken" {
		t.Fatalf("secrets = %v %v", []string(c.GitHubSecrets), c.AdminToken.Value())
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for what, v := range map[string]any{"the resolved configuration": c, "the configuration": c.Config} {
			out := fmt.Sprintf(format, v)
			for _, secret := range []string{"gh-one", "gh-two", "admintoken", "dbpassword", "targetpassword", "targettoken"} {
				if strings.Contains(out, secret) {
					t.Fatalf("%s of %s shows %q: %s", format, what, secret, out)
				}
			}
		}
	}
}

// A secret may be read from the file its _FILE variant names, without the
// environment being written; an empty file, or both set, is an error.
func TestSecretFromFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("whsec_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := env(map[string]string{"STRIPE_WEBHOOK_SECRET_FILE": path})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.StripeSecrets) != 1 || c.StripeSecrets[0] != "whsec_fromfile" {
		t.Fatalf("secrets = %v", []string(c.StripeSecrets))
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := env(map[string]string{"STRIPE_WEBHOOK_SECRET_FILE": empty}); err == nil || !strings.Contains(err.Error(), "STRIPE_WEBHOOK_SECRET_FILE: the file it names is empty") {
		t.Fatalf("an empty secret file: %v", err)
	}
	if _, err := env(map[string]string{"STRIPE_WEBHOOK_SECRET_FILE": path, "STRIPE_WEBHOOK_SECRET": "whsec_both"}); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Fatalf("err = %v", err)
	}
}

// Reading the configuration never writes the process's environment, from a
// secret's file least of all.
func TestLoadNeverWritesTheEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("whsec_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRIPE_WEBHOOK_SECRET_FILE", path)
	t.Setenv("STRIPE_WEBHOOK_SECRET", "")
	os.Unsetenv("STRIPE_WEBHOOK_SECRET")
	before := os.Environ()
	c, err := config.Load()
	if err != nil || len(c.StripeSecrets) != 1 {
		t.Fatalf("Load: %v, %v", err, c.StripeSecrets)
	}
	if after := os.Environ(); !slices.Equal(before, after) {
		t.Fatalf("Load changed the environment")
	}
}

// A secret put in a _FILE variable instead of its file's path is not shown
// by the error that follows.
func TestSecretFileErrorsNeverShowTheValue(t *testing.T) {
	for _, tt := range []struct{ name, value, want string }{
		{"GITHUB_WEBHOOK_SECRET", "B7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2", "GITHUB_WEBHOOK_SECRET_FILE: the file it names cannot be read: no such file or directory"},
		{"STRIPE_WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "STRIPE_WEBHOOK_SECRET_FILE: the file it names cannot be read: no such file or directory"},
		{"GATEWAY_ADMIN_TOKEN", "B7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2", "GATEWAY_ADMIN_TOKEN_FILE: the file it names cannot be read"},
		{"DATABASE_URL", "postgres://hookgate:B7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2@db/hookgate", "DATABASE_URL_FILE: the file it names cannot be read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := env(map[string]string{tt.name + "_FILE": tt.value})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "B7E1F0A9") || strings.Contains(err.Error(), "MfKQ9r8") {
				t.Fatalf("error shows the secret: %v", err)
			}
		})
	}
}

// Each built-in kind's variable (providers.Kind.Env) configures a source of
// that kind named after it, as the configuration file's sources are: a
// built-in kind the environment does not read fails here.
func TestEveryBuiltinKindIsConfiguredByItsVariable(t *testing.T) {
	for _, k := range providers.Builtins() {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			c, err := env(map[string]string{providers.Kinds[k].Env: "whsec_one,whsec_two"})
			if err != nil {
				t.Fatal(err)
			}
			registry := c.Providers
			src, _, ok := registry.Source(k)
			if !ok || src.Name != k || src.Kind != k || len(src.Secrets) != 2 || len(registry.Providers()) != 1 {
				t.Fatalf("%s set: source %+v (%v), %d configured", providers.Kinds[k].Env, src, ok, len(registry.Providers()))
			}
			if src.Kind == "stripe" && src.Tolerance != 5*time.Minute {
				t.Errorf("STRIPE_TOLERANCE's default: %s", src.Tolerance)
			}
		})
	}
}

// A secret pasted into a variable that is no secret's is not shown either:
// the error names the variable and what it must hold.
func TestErrorsNeverShowAPastedSecret(t *testing.T) {
	const pasted = "B7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2"
	for _, tt := range []struct{ name, want string }{
		{"GATEWAY_CONSOLE", "GATEWAY_CONSOLE: must be on or off"},
		{"GATEWAY_CONFIG_FILE", "GATEWAY_CONFIG_FILE: the file it names cannot be read: no such file or directory"},
		{"GATEWAY_METRICS_ADDR", "GATEWAY_METRICS_ADDR: must differ from GATEWAY_ADDR"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{tt.name: pasted}
			if tt.name == "GATEWAY_METRICS_ADDR" {
				vars["GATEWAY_ADDR"] = pasted
			}
			_, err := env(vars)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "B7E1F0A9") {
				t.Fatalf("the error shows the value: %v", err)
			}
		})
	}
}

// GATEWAY_MIN_BODY_RATE is a size per second in binary or decimal units, or
// 0 for none (a negative rate: zero is the default).
func TestByteRates(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]config.ByteRate{"0": -1, "512B/s": 512, "1KiB/s": 1024, "2MiB/s": 2 << 20, "10kB/s": 10000, " 3MB/s ": 3000000} {
		var r config.ByteRate
		if err := r.Decode(in); err != nil || r != want {
			t.Errorf("%q: %d, %v; want %d", in, r, err, want)
		}
	}
}

// Each variable's default tag, read as the environment would give it, is the
// value a zero field takes: the documentation's defaults (docs test them
// against these tags) are the gateway's.
func TestDefaultTagsAreTheDefaults(t *testing.T) {
	t.Parallel()
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		name, def := f.Tag.Get("env"), f.Tag.Get("default")
		if def == "" {
			continue
		}
		fromTag, err := env(map[string]string{name: def})
		if err != nil {
			t.Fatalf("%s=%s: %v", name, def, err)
		}
		zero, err := config.Config{}.Resolve()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := reflect.ValueOf(zero.Config).Field(i).Interface(), reflect.ValueOf(fromTag.Config).Field(i).Interface(); got != want {
			t.Errorf("%s: a zero field takes %v, its default tag says %v", name, got, want)
		}
	}
}

// GATEWAY_LOG_FORMAT and GATEWAY_LOG_LEVEL make the logger: text (log/slog's
// text handler) at info by default; json writes one object a line with
// time, level, msg and the attributes; a level drops what is below it.
func TestLoggerFollowsFormatAndLevel(t *testing.T) {
	t.Parallel()
	logged := func(vars map[string]string) string {
		t.Helper()
		c, err := env(vars)
		if err != nil {
			t.Fatal(err)
		}
		var buf strings.Builder
		logger, err := c.Logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		logger.Debug("details", "n", 1)
		logger.Info("gateway listening", "addr", ":8080")
		logger.Warn("ingest rejected", "provider", "github")
		return buf.String()
	}
	if got := logged(nil); strings.Count(got, "\n") != 2 || !strings.Contains(got, `level=INFO msg="gateway listening" addr=:8080`) ||
		!strings.Contains(got, `level=WARN msg="ingest rejected" provider=github`) || !strings.HasPrefix(got, "time=") {
		t.Errorf("by default (text, info):\n%s", got)
	}
	got := logged(map[string]string{"GATEWAY_LOG_FORMAT": "json", "GATEWAY_LOG_LEVEL": "debug"})
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 {
		t.Fatalf("json at debug: %d lines, want 3:\n%s", len(lines), got)
	}
	for i, want := range []map[string]any{{"level": "DEBUG", "msg": "details", "n": 1.0}, {"level": "INFO", "msg": "gateway listening", "addr": ":8080"},
		{"level": "WARN", "msg": "ingest rejected", "provider": "github"}} {
		var line map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &line); err != nil {
			t.Fatalf("line %d is not JSON: %s", i, lines[i])
		}
		if _, ok := line["time"]; !ok || len(line) != len(want)+1 {
			t.Errorf("line %d: %v, want time and %v", i, line, want)
		}
		for k, v := range want {
			if line[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, line[k], v)
			}
		}
	}
	if got := logged(map[string]string{"GATEWAY_LOG_LEVEL": "WARN"}); strings.Count(got, "\n") != 1 || !strings.Contains(got, "level=WARN") {
		t.Errorf("at warn:\n%s", got)
	}
	if _, err := (config.Config{LogLevel: "loud"}).Logger(io.Discard); err == nil {
		t.Error("a Config filled in code with a bad level made a logger")
	}
}

// A route whose match names a provider that is not configured (GitHub or
// Stripe without its secret) stops the gateway, naming the route, the
// provider and the configured ones; once per provider of the route; * is
// any configured provider.
func TestARouteNeedsItsProviderConfigured(t *testing.T) {
	t.Parallel()
	_, err := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x",
		"GATEWAY_ROUTES": "ci=github:push,github:pull_request>http://ci.internal/ ok=stripe:invoice.*>builtin:log all=*:*>builtin:log"})
	want := `GATEWAY_ROUTES: bad route, entry 1 ("ci"): key match: provider github is not configured (GITHUB_WEBHOOK_SECRET is unset); the configured ones: stripe`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	_, err = env(map[string]string{"GATEWAY_ROUTES": "ci=stripe:invoice.*>http://ci.internal/"})
	if err == nil || !strings.Contains(err.Error(), "provider stripe is not configured (STRIPE_WEBHOOK_SECRET is unset); the configured ones: none") {
		t.Fatalf("no provider configured: %v", err)
	}
	// A Config filled in code, its routes named by their place.
	_, err = config.Config{GitHubSecrets: config.SecretList{"s"}, Routes: []config.Route{{Name: "pay", Match: []string{"stripe:*"}, Target: "builtin:log"}}}.Resolve()
	if err == nil || !strings.Contains(err.Error(), `route 1 ("pay"): key match: provider stripe is not configured (STRIPE_WEBHOOK_SECRET is unset); the configured ones: github`) {
		t.Fatalf("in code: %v", err)
	}
	// Configured, it resolves.
	if _, err := env(map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GATEWAY_ROUTES": "ci=github:push>http://ci.internal/"}); err != nil {
		t.Fatal(err)
	}
}

// Every entry of GATEWAY_ROUTES that cannot be read is reported, not only
// the first, beside what is wrong with the entries that can.
func TestEveryBadRouteEntryIsReported(t *testing.T) {
	t.Parallel()
	_, err := env(map[string]string{"GITHUB_WEBHOOK_SECRET": "s",
		"GATEWAY_ROUTES": "a=github:push>http://x/ b-no-target=github:push Bad=github:push>http://x/ nothing c=github:push>ftp://x/"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`entry 2 ("b-no-target"): no >target`, `entry 3: the name must be`, `entry 4: want name=provider:pattern`,
		`entry 5 ("c"): key target`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 4 {
		t.Errorf("%d lines, want one for each of the 4 bad entries:\n%v", n, err)
	}
}

// Variables is the list of what the loader reads: every name FromEnv asks
// for is in it, besides those the configuration file names, and every name
// in it is asked for. A variable read by the loader but missing here, or
// listed but no longer read, fails this test.
func TestVariablesAreWhatTheLoaderReads(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "hookgate.yaml")
	fileNamed := []string{"CLERK_WEBHOOK_SECRET", "CLERK_WEBHOOK_SECRET_FILE", "CI_TARGET", "CI_TARGET_FILE"}
	if err := os.WriteFile(file, []byte(`
sources:
  - {name: clerk, kind: standard-webhooks, secret_env: CLERK_WEBHOOK_SECRET}
routes:
  - {name: ci, match: ["clerk:user.*"], target_env: CI_TARGET}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"GATEWAY_CONFIG_FILE": file, "CLERK_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "CI_TARGET": "http://ci.internal/"}
	asked := map[string]bool{}
	c, err := config.FromEnv(func(name string) (string, bool) {
		asked[name] = true
		v, ok := vars[name]
		return v, ok
	})
	if err != nil || len(c.Routes) != 1 || len(c.Sources) != 1 {
		t.Fatalf("FromEnv: %v, %d routes, %d sources", err, len(c.Routes), len(c.Sources))
	}
	known := config.Variables()
	for name := range asked {
		if !slices.Contains(known, name) && !slices.Contains(fileNamed, name) {
			t.Errorf("FromEnv reads %s, which Variables does not list", name)
		}
	}
	for _, name := range known {
		if !asked[name] {
			t.Errorf("Variables lists %s, which FromEnv does not read", name)
		}
	}
	for _, name := range fileNamed {
		if !asked[name] {
			t.Errorf("FromEnv does not read %s, which the file names", name)
		}
	}
}

// A variable that looks meant for hookgate (GATEWAY_*, HOOKGATE_*, *WEBHOOK*,
// or a misspelling of a name it reads) and that it does not read is a stray,
// named with the closest name it reads, or with how a source's secret is
// read; what it reads (the file's secret_env too, the operator commands'
// HOOKGATE_URL when given), other names and Kubernetes' service variables
// are not.
func TestStraysNameTheClosestVariable(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "hookgate.yaml")
	if err := os.WriteFile(file, []byte("sources:\n  - {name: clerk, kind: standard-webhooks, secret_env: CLERK_WEBHOOK_SECRET}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := []string{
		"GATEWAY_ROUTE=ci=github:push>http://x/", "GATEWAY_CONFIG_FILE=" + file, "CLERK_WEBHOOK_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"GITHUB_WEBHOOK_SECRET=s", "GITHUB_WEBHOOK_SECRET_FILE=", "GATEWAY_LOG_LEVEL=debug", "HOOKGATE_URL=http://127.0.0.1:8080",
		"GITHUB_WEBHOOK_SECRETS=topsecret", // a misspelling
		"ACME_WEBHOOK_SECRET=topsecret", "HOOKGATE_URLS=x", "GATEWAY_ADMIN_TOKN=topsecret",
		"GATEWAY_WORKER=8", "GATEWAY_SERVICE_HOST=10.0.0.1", "GATEWAY_SERVICE_PORT=8080", "GATEWAY_SERVICE_PORT_HTTP=8080", "GATEWAY_PORT=tcp://10.0.0.1:8080",
		"GATEWAY_PORT_8080_TCP_ADDR=10.0.0.1", "HOOKGATE_PORT_8080_TCP=tcp://10.0.0.1:8080", "PATH=/usr/bin", "MY_GATEWAY_THING=x", "GATEWAY=x",
	}
	got := config.Strays(environ, "HOOKGATE_URL")
	want := []config.Stray{
		{Name: "ACME_WEBHOOK_SECRET", Hint: "a source's secret is read only when a source of the configuration file (GATEWAY_CONFIG_FILE) names it in secret_env"},
		{Name: "GATEWAY_ADMIN_TOKN", Closest: "GATEWAY_ADMIN_TOKEN"},
		{Name: "GATEWAY_ROUTE", Closest: "GATEWAY_ROUTES"},
		{Name: "GATEWAY_WORKER", Closest: "GATEWAY_WORKERS"},
		{Name: "GITHUB_WEBHOOK_SECRETS", Closest: "GITHUB_WEBHOOK_SECRET"},
		{Name: "HOOKGATE_URLS", Closest: "HOOKGATE_URL"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Strays = %v\nwant %v", got, want)
	}
	// Without the operator commands' name, HOOKGATE_URL is a stray too.
	if got := config.Strays([]string{"HOOKGATE_URL=x"}); len(got) != 1 || got[0].Name != "HOOKGATE_URL" {
		t.Errorf("HOOKGATE_URL, not given as known: %v", got)
	}
}

// GATEWAY_WORKERS's default follows the cores the process may use: a
// hundred each, at most the largest concurrency a route
// may have; set, it is what it says.
func TestWorkersFollowTheMachine(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct{ cores, want int }{{1, 100}, {2, 200}, {16, 1600}, {101, 10_000}} {
		runtime.GOMAXPROCS(tc.cores)
		c, err := env(nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Workers != tc.want || c.RouteDefaults().Concurrency != tc.want {
			t.Errorf("%d cores: workers %d, route concurrency %d, want %d", tc.cores, c.Workers, c.RouteDefaults().Concurrency, tc.want)
		}
	}
	c, err := env(map[string]string{"GATEWAY_WORKERS": "7"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Workers != 7 {
		t.Errorf("GATEWAY_WORKERS=7: workers %d", c.Workers)
	}
}
