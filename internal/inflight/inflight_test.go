package inflight_test

import (
	"errors"
	"testing"

	"github.com/hookgate/hookgate/internal/inflight"
)

// An address holds at most its share and its arriving requests; other
// addresses are unaffected until the whole budget is held; everything
// released is free again.
func TestBudgetByAddress(t *testing.T) {
	t.Parallel()
	b := inflight.New(100, 60, 2)
	a, other := inflight.AddressOf("192.0.2.1:1234"), inflight.AddressOf("192.0.2.2:1234")
	h1, err := b.Enter(a)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := b.Enter(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enter(a); !errors.Is(err, inflight.ErrAddressFull) {
		t.Fatalf("a third arriving request from one address: %v, want ErrAddressFull", err)
	}
	h1.Arrived() // its body is in: it holds bytes but no longer an arriving request
	h3, err := b.Enter(a)
	if err != nil {
		t.Fatalf("once one arrived: %v", err)
	}
	if err := h1.Take(50); err != nil {
		t.Fatal(err)
	}
	if err := h2.Take(20); !errors.Is(err, inflight.ErrAddressFull) {
		t.Fatalf("past the address's share: %v, want ErrAddressFull", err)
	}
	o, err := b.Enter(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Take(50); err != nil {
		t.Fatalf("another address: %v", err)
	}
	if err := o.Take(10); !errors.Is(err, inflight.ErrFull) {
		t.Fatalf("past the whole budget: %v, want ErrFull", err)
	}
	if b.Held() != 100 {
		t.Fatalf("held %d, want 100", b.Held())
	}
	for _, h := range []*inflight.Hold{h1, h2, h3, o, o} {
		h.Release()
	}
	if b.Held() != 0 {
		t.Fatalf("held %d after every release", b.Held())
	}
	if err := func() error { h, err := b.Enter(a); _ = h; return err }(); err != nil {
		t.Fatalf("after every release: %v", err)
	}
}

// IPv4 addresses count alone; an IPv6 address counts by its /64, mapped
// IPv4 as IPv4.
func TestAddressOf(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{
		{"192.0.2.1:80", "192.0.2.1/32"},
		{"192.0.2.1", "192.0.2.1/32"},
		{"[2001:db8::1]:80", "2001:db8::/64"},
		{"[2001:db8::ffff:1]:80", "2001:db8::/64"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1/32"},
	} {
		if got := inflight.AddressOf(c[0]).String(); got != c[1] {
			t.Errorf("AddressOf(%s) = %s, want %s", c[0], got, c[1])
		}
	}
}
