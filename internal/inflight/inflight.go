// Package inflight bounds what ingest requests hold while their bodies
// arrive: the bytes of request bodies in memory, all requests together and
// per remote address, and the requests per remote address whose bodies are
// still arriving. Only bytes that have arrived are held: a sender that
// declares a large body and sends nothing holds nothing, so slow senders
// cannot reserve the budget that signed deliveries need; and one address
// cannot take more than its share however many connections it opens.
package inflight

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// Errors returned by Enter and Take; both mean the request is refused as
// overloaded, and nothing was stored.
var (
	// ErrFull means the request bodies held by all requests together are
	// at the budget.
	ErrFull = errors.New("the gateway holds as many request bodies as it may")
	// ErrAddressFull means the request's address holds its share of the
	// budget, or has as many requests whose bodies are still arriving as it
	// may.
	ErrAddressFull = errors.New("the request's address holds as many request bodies as it may")
)

// Budget holds the in-flight bytes and the requests of each address. The
// zero Budget is not usable: make one with New.
type Budget struct {
	max, maxPerAddr int64
	maxArriving     int

	mu    sync.Mutex
	held  int64
	addrs map[netip.Prefix]*share
}

// share is what one address holds.
type share struct {
	bytes    int64
	arriving int // requests whose bodies are still arriving
	holds    int // requests that hold bytes or are arriving
}

// New returns a Budget of max bytes in all, maxPerAddr bytes per address and
// maxArriving requests per address whose bodies are still arriving.
func New(max, maxPerAddr int64, maxArriving int) *Budget {
	return &Budget{max: max, maxPerAddr: maxPerAddr, maxArriving: maxArriving, addrs: map[netip.Prefix]*share{}}
}

// Held returns the bytes held by all requests.
func (b *Budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// AddressOf is the address a request's share is counted by: remoteAddr's IP
// ("host:port" or a bare host, as http.Request.RemoteAddr), an IPv6 address
// by its /64 (one host is given a whole /64). A remote address that does not
// parse is counted as one address with every other such.
func AddressOf(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// Enter admits a request from addr whose body is about to be read; it fails
// with ErrAddressFull when addr already has as many requests whose bodies are
// arriving as it may. The Hold it returns must be released.
func (b *Budget) Enter(addr netip.Prefix) (*Hold, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.addrs[addr]
	if s == nil {
		s = &share{}
		b.addrs[addr] = s
	}
	if s.arriving >= b.maxArriving {
		return nil, fmt.Errorf("%w: %d requests from it are still arriving", ErrAddressFull, s.arriving)
	}
	s.arriving++
	s.holds++
	return &Hold{b: b, addr: addr, s: s, arriving: true}, nil
}

// Hold is one request's part of the budget.
type Hold struct {
	b        *Budget
	addr     netip.Prefix
	s        *share
	bytes    int64
	arriving bool
	released bool
}

// Take adds n bytes to what the request holds, when the budget and the
// address's share allow it; otherwise it takes nothing and fails with
// ErrFull or ErrAddressFull.
func (h *Hold) Take(n int64) error {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.max {
		return fmt.Errorf("%w: %d bytes", ErrFull, b.max)
	}
	if h.s.bytes+n > b.maxPerAddr {
		return fmt.Errorf("%w: %d bytes", ErrAddressFull, b.maxPerAddr)
	}
	b.held += n
	h.s.bytes += n
	h.bytes += n
	return nil
}

// Arrived says the request's body has arrived whole (or will not): it no
// longer counts among its address's requests still arriving. The bytes it
// holds stay held until Release.
func (h *Hold) Arrived() {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.arriving {
		h.arriving = false
		h.s.arriving--
	}
}

// Release gives back everything the request holds. Calling it again does
// nothing.
func (h *Hold) Release() {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	if h.arriving {
		h.arriving = false
		h.s.arriving--
	}
	b.held -= h.bytes
	h.s.bytes -= h.bytes
	h.bytes = 0
	if h.s.holds--; h.s.holds == 0 {
		delete(b.addrs, h.addr)
	}
}
