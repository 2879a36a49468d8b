package fanout_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider, pattern string
		evProvider, event string
		want              bool
	}{
		{"github", "push", "github", "push", true},
		{"github", "push", "stripe", "push", false},
		{"github", "issues", "github", "issues.opened", true},
		{"github", "issue", "github", "issues.opened", false},
		{"github", "pull_request.opened", "github", "pull_request.opened", true},
		{"github", "pull_request.opened", "github", "pull_request.closed", false},
		{"github", "pull_request.*", "github", "pull_request.opened", true},
		{"github", "pull_request.*", "github", "pull_request", false},
		{"stripe", "invoice.*", "stripe", "invoice.payment_failed", true},
		{"stripe", "invoice.*", "stripe", "invoices.x", false},
		{"stripe", "customer.subscription", "stripe", "customer.subscription.updated", true},
		{"stripe", "customer", "stripe", "customer.subscription.updated", true},
		{"stripe", "customer.sub", "stripe", "customer.subscription.updated", false},
		{"*", "*", "github", "ping", true},
		{"*", "*", "stripe", "a.b.c", true},
		{"stripe", "*.paid", "stripe", "invoice.paid", true},
		{"stripe", "*.paid", "stripe", "invoice.paid.extra", true},
		{"stripe", "*.paid", "stripe", "invoice.unpaid", false},
		{"stripe", "in*ce.paid", "stripe", "invoice.paid", true},
		{"stripe", "a*b*c", "stripe", "axxbyybzzc", true},
		{"stripe", "a*b*c", "stripe", "axxbyy", false},
		{"stripe", "invoice*", "stripe", "invoice", true},
	}
	for _, tt := range tests {
		m := fanout.Match{Provider: tt.provider, Pattern: tt.pattern}
		if got := m.Matches(tt.evProvider, tt.event); got != tt.want {
			t.Errorf("%s:%s on %s %s = %v, want %v", tt.provider, tt.pattern, tt.evProvider, tt.event, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	handlers := []string{"log", "stripe-subscriptions"}
	rs, err := fanout.Parse("ci=github:push,github:pull_request.*>http://127.0.0.1:9000/ci billing=stripe:invoice.*,stripe:customer.subscription.*>https://billing.internal/stripe  audit=*:*>builtin:log", handlers, fanout.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Name != "ci" || len(rs[0].Matches) != 2 || rs[0].Target != "http://127.0.0.1:9000/ci" {
		t.Fatalf("routes = %+v", rs)
	}
	if name, ok := rs[2].Builtin(); !ok || name != "log" {
		t.Fatalf("builtin = %q %v", name, ok)
	}
	if got := rs.Matching(&filter.Input{Provider: "github", Event: "pull_request.opened"}, nil); !slices.Equal(got, []string{"ci", "audit"}) {
		t.Fatalf("matching = %v", got)
	}
	if got := rs.Matching(&filter.Input{Provider: "stripe", Event: "invoice.paid"}, nil); !slices.Equal(got, []string{"billing", "audit"}) {
		t.Fatalf("matching = %v", got)
	}
	if rs, err := fanout.Parse("  ", handlers, fanout.Defaults{}); err != nil || len(rs) != 0 {
		t.Fatalf("empty: %v %v", rs, err)
	}

	for _, bad := range []string{
		"nameonly",
		"a=github:push",
		"a=github:push>",
		"a=gitlab:push>builtin:log",
		"a=github>builtin:log",
		"a=github:>builtin:log",
		"a=github:pu sh>builtin:log",
		"A=github:push>builtin:log",
		"a=github:push>builtin:nope",
		"a=github:push>ftp://x/y",
		"a=github:push>http://",
		"a=github:push>http://127.0.0.1:99999999/x",
		"a=github:push>http://:8080/x",
		"a=github:push>builtin:log a=stripe:x>builtin:log",
	} {
		if _, err := fanout.Parse(bad, handlers, fanout.Defaults{}); !errors.Is(err, fanout.ErrBadTable) {
			t.Errorf("Parse(%q) err = %v, want ErrBadTable", bad, err)
		}
	}
}

// A GATEWAY_ROUTES error names the entry by its place and name, never shows
// it: its target may carry a credential in its path, and an entry written by
// mistake may be a URL or a secret alone.
func TestParseErrorsNeverShowAnEntry(t *testing.T) {
	t.Parallel()
	const secret = "B7E1F0A9C3D2E1F0A9B8C7D6E5F4A3B2"
	slack := "hooks.slack.com/services/T0000/B0000/" + secret
	for _, tt := range []struct{ routes, want string }{
		{"https://" + slack, "bad route, entry 1: want name="},
		{"ok=github:push>builtin:log " + secret, "bad route, entry 2: want name="},
		{"ci=github:push>" + slack, `bad route, entry 1 ("ci"): the target must be an http:// or https:// URL`},
		{"ci=github:push>https://hooks.slack.com:99999/services/T0000/B0000/" + secret, `bad route, entry 1 ("ci"): the target's port must be 1 to 65535`},
		{"a=github:push>builtin:log ci=github:push>https://" + slack + " ci=github:push>builtin:log", `bad route, entry 3 ("ci"): the name ci is used twice`},
		{"ci=" + secret + ">builtin:log", `bad route, entry 1 ("ci"): a match must be provider:pattern`},
		{"ci=github:push>builtin:" + secret, `bad route, entry 1 ("ci"): builtin:<name> names a handler by`},
	} {
		_, err := fanout.Parse(tt.routes, []string{"log"}, fanout.Defaults{})
		if !errors.Is(err, fanout.ErrBadTable) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q):\n got %v\nwant %s", tt.routes, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "slack")) {
			t.Errorf("Parse(%q) shows the entry: %v", tt.routes, err)
		}
	}
}

// A route entry's target may carry a credential: an error about the entry
// shows it redacted.
func TestParseErrorsRedactTheTarget(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"Bad=github:push>http://user:pw@h.example/x?token=tk",
		"ci=nope:push>http://user:pw@h.example/x?token=tk",
		"ci=github:push>ftp://user:pw@h.example/x?token=tk",
	} {
		_, err := fanout.Parse(bad, nil, fanout.Defaults{})
		if err == nil || strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "tk") {
			t.Errorf("Parse(%q) = %v", bad, err)
		}
	}
}

// A route's queue is a name River accepts, one per route.
func TestQueueNames(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, name := range []string{"ci", "a-b", "a--b", "a_", "x-", strings.Repeat("a", 64), strings.Repeat("a", 59), "route_x"} {
		q := fanout.Route{Name: name}.Queue()
		if len(q) > 64 || strings.Contains(q, "--") || strings.HasSuffix(q, "-") || strings.HasSuffix(q, "_") {
			t.Errorf("%q: queue %q is not a River queue name", name, q)
		}
		if other, dup := seen[q]; dup {
			t.Errorf("%q and %q share the queue %q", name, other, q)
		}
		seen[q] = name
	}
	if q := (fanout.Route{Name: "ci"}).Queue(); q != "route_ci" {
		t.Errorf("ci's queue is %q, want route_ci", q)
	}
}

// A route that sets no concurrency takes the default's, but a builtin one at
// most BuiltinConcurrency: each of its dispatches holds a connection.
func TestBuiltinRoutesTakeABoundedDefaultConcurrency(t *testing.T) {
	table, err := fanout.Parse("a=github:*>http://127.0.0.1:9/a b=github:*>builtin:log", []string{"log"}, fanout.Defaults{Concurrency: 400})
	if err != nil || len(table) != 2 {
		t.Fatal(table, err)
	}
	if table[0].Concurrency != 400 || table[1].Concurrency != fanout.BuiltinConcurrency {
		t.Errorf("concurrency: forward %d, builtin %d", table[0].Concurrency, table[1].Concurrency)
	}
	table, err = fanout.Parse("b=github:*>builtin:log", []string{"log"}, fanout.Defaults{Concurrency: 3})
	if err != nil || table[0].Concurrency != 3 {
		t.Errorf("builtin with a default of 3: %v %v", table, err)
	}
}
