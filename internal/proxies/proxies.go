// Package proxies names a request's remote address when the gateway runs
// behind reverse proxies (a TLS terminator, a load balancer): X-Forwarded-For
// is believed only when the connection comes from a proxy the operator trusts
// (GATEWAY_TRUSTED_PROXIES), and only as far back as trusted proxies added
// to it. Anyone else's X-Forwarded-For is ignored: a sender could write any
// address there, to hide from the rejections log or to spend another
// address's guessing budget.
package proxies

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Trusted is the set of proxies whose X-Forwarded-For names the client. The
// zero Trusted trusts none: the connection's address is the remote address.
type Trusted struct {
	prefixes []netip.Prefix
}

// Parse reads a comma-separated list of CIDRs (10.0.0.0/8, fd00::/8) or
// single addresses. Its errors name an entry by its place, not its value:
// what was pasted there may be a secret.
func Parse(s string) (Trusted, error) {
	var t Trusted
	if strings.TrimSpace(s) == "" {
		return t, nil
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		p, err := netip.ParsePrefix(entry)
		if err != nil {
			a, aerr := netip.ParseAddr(entry)
			if aerr != nil || a.Zone() != "" {
				return Trusted{}, fmt.Errorf("entry %d must be a CIDR such as 10.0.0.0/8 or fd00::/8, or one address", i+1)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		t.prefixes = append(t.prefixes, p.Masked())
	}
	return t, nil
}

// Len is how many prefixes are trusted.
func (t Trusted) Len() int { return len(t.prefixes) }

// trusts reports whether a is one of the trusted proxies.
func (t Trusted) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientAddr is the address of whoever sent r: the connection's, unless it
// comes from a trusted proxy; then, walking X-Forwarded-For from its last
// entry back, the first address that is not a trusted proxy (or the first
// entry, when all are). An entry that is not an address ends the walk at the
// hop before it. ok is false when r.RemoteAddr is not an address.
func (t Trusted) ClientAddr(r *http.Request) (addr netip.Addr, ok bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	peer = peer.Unmap()
	if len(t.prefixes) == 0 || !t.trusts(peer) {
		return peer, true
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil || hop.Zone() != "" {
			break // a proxy we trust did not write this: believe nothing before it
		}
		client = hop.Unmap()
		if !t.trusts(client) {
			break
		}
	}
	return client, true
}

// Handler sets each request's RemoteAddr to its ClientAddr (the address
// alone, without a port) when a trusted proxy forwarded it, so that
// everything after it (the rejections log, the guessing budgets, logs) sees
// the client.
func (t Trusted) Handler(next http.Handler) http.Handler {
	if len(t.prefixes) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a, ok := t.ClientAddr(r); ok {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			if peer, err := netip.ParseAddr(host); err != nil || peer.Unmap() != a {
				r = r.Clone(r.Context())
				r.RemoteAddr = a.String()
			}
		}
		next.ServeHTTP(w, r)
	})
}
