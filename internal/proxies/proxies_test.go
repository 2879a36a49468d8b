package proxies_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/proxies"
)

// X-Forwarded-For names the client only when the connection comes from a
// trusted proxy, and only as far back as trusted proxies wrote it.
func TestClientAddr(t *testing.T) {
	trusted, err := proxies.Parse("10.0.0.0/8, 192.168.1.7 ,fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"no proxy in between", "203.0.113.9:4000", nil, "203.0.113.9"},
		{"an untrusted peer's header is ignored", "203.0.113.9:4000", []string{"198.51.100.1"}, "203.0.113.9"},
		{"a trusted proxy names the client", "10.1.2.3:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"a single trusted address", "192.168.1.7:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"the neighbour of a trusted address is not trusted", "192.168.1.8:4000", []string{"198.51.100.1"}, "192.168.1.8"},
		{"a client's own forgery before the real hop is ignored", "10.1.2.3:4000", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"through two trusted proxies", "10.1.2.3:4000", []string{"198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"several headers read as one list", "10.1.2.3:4000", []string{"1.2.3.4", "198.51.100.1"}, "198.51.100.1"},
		{"garbage stops the walk at the hop before it", "10.1.2.3:4000", []string{"198.51.100.1, not-an-ip"}, "10.1.2.3"},
		{"only trusted hops: the first one", "10.1.2.3:4000", []string{"10.7.7.7"}, "10.7.7.7"},
		{"IPv6", "[fd00::1]:4000", []string{"2001:db8::5"}, "2001:db8::5"},
		{"a trusted proxy without the header", "10.1.2.3:4000", nil, "10.1.2.3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/webhooks/github", nil)
			r.RemoteAddr = tt.peer
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			var seen string
			trusted.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen = r.RemoteAddr })).ServeHTTP(httptest.NewRecorder(), r)
			if got, _ := trusted.ClientAddr(r); got.String() != tt.want {
				t.Errorf("ClientAddr = %s, want %s", got, tt.want)
			}
			// Rewritten to the address alone, or left as the connection's.
			if seen != tt.want && seen != tt.peer {
				t.Errorf("the handler saw RemoteAddr %q, want %s", seen, tt.want)
			}
			if seen == tt.peer && !strings.Contains(seen, tt.want) {
				t.Errorf("the handler saw the connection's %q, want %s", seen, tt.want)
			}
		})
	}
	// Nobody trusted: the header is never read.
	r := httptest.NewRequest("POST", "/", nil)
	r.RemoteAddr = "10.1.2.3:4000"
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	if got, _ := (proxies.Trusted{}).ClientAddr(r); got.String() != "10.1.2.3" {
		t.Errorf("with no trusted proxy: %s", got)
	}
}

// A list that is not CIDRs and addresses is refused, naming the entry by its
// place and never its value.
func TestParseRefuses(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "sekret-value", "10.0.0.0/8,,", "fe80::1%eth0"} {
		_, err := proxies.Parse(bad)
		if err == nil || strings.Contains(err.Error(), "sekret") {
			t.Errorf("Parse(%q) = %v", bad, err)
		}
	}
}
