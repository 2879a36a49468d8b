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
