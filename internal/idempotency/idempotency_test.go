package idempotency_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/idempotency"
)

func TestRequestHash(t *testing.T) {
	t.Parallel()
	h := func(path, body string) []byte {
		t.Helper()
		sum, err := idempotency.RequestHash(path, []byte(body))
		if err != nil {
			t.Fatalf("RequestHash(%q, %q): %v", path, body, err)
		}
		return sum
	}
	same := []struct{ a, b string }{
		{`{"force":true,"reason":"r"}`, `{ "reason": "r",  "force": true }`},
		{``, `{}`},
		{"  \n", `{}`},
		{`{"routes":["a","b"],"x":{"z":1,"y":2}}`, `{"x":{"y":2,"z":1},"routes":["a","b"]}`},
		{`{"n":1.50}`, `{"n":1.50}`},
	}
	for _, c := range same {
		if !bytes.Equal(h("/p", c.a), h("/p", c.b)) {
			t.Errorf("%q and %q hash differently", c.a, c.b)
		}
	}
	different := []struct{ a, b string }{
		{`{"force":true}`, `{"force":false}`},
		{`{"routes":["a","b"]}`, `{"routes":["b","a"]}`},
		{`{"n":1.5}`, `{"n":1.50}`},
	}
	for _, c := range different {
		if bytes.Equal(h("/p", c.a), h("/p", c.b)) {
			t.Errorf("%q and %q hash the same", c.a, c.b)
		}
	}
	if bytes.Equal(h("/admin/deliveries/github/a/replay", `{}`), h("/admin/deliveries/github/b/replay", `{}`)) {
		t.Error("the path is not part of the hash")
	}
	for _, bad := range []string{`{`, `{"a":1}{"b":2}`, `nope`} {
		if _, err := idempotency.RequestHash("/p", []byte(bad)); !errors.Is(err, idempotency.ErrBadBody) {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}

// A key is text PostgreSQL must store and lock on; a header can carry bytes
// it refuses, and those are the client's mistake.
func TestCheckKey(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "k-1", "clé-2", strings.Repeat("k", idempotency.MaxKeyLen)} {
		if err := idempotency.CheckKey(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"k\xff", "\x80", "k\x00", "k\x7f", strings.Repeat("k", idempotency.MaxKeyLen+1)} {
		if err := idempotency.CheckKey(bad); !errors.Is(err, idempotency.ErrBadKey) {
			t.Errorf("%q: err = %v, want ErrBadKey", bad, err)
		}
	}
}
