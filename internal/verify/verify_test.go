package verify_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/verify"
)

// GitHub documents this vector in "Validating webhook deliveries".
func TestHMACSHA256GitHubVector(t *testing.T) {
	t.Parallel()
	got := verify.SignGitHub("It's a Secret to Everybody", []byte("Hello, World!"))
	want := "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	idx, err := verify.Secrets{"old", "It's a Secret to Everybody"}.MatchHex([]byte("Hello, World!"), strings.TrimPrefix(want, "sha256="))
	if err != nil || idx != 1 {
		t.Fatalf("MatchHex = %d, %v; want 1, nil", idx, err)
	}
}

func TestSecretsMatch(t *testing.T) {
	t.Parallel()
	msg := []byte(`{"a":1}`)
	macA := verify.HMACSHA256([]byte("a"), msg)
	macB := verify.HMACSHA256([]byte("b"), msg)

	tests := []struct {
		name    string
		secrets verify.Secrets
		check   func(verify.Secrets) (int, error)
		wantIdx int
		wantErr error
	}{
		{"hex primary", verify.Secrets{"a", "b"}, func(s verify.Secrets) (int, error) { return s.MatchHex(msg, hex.EncodeToString(macA)) }, 0, nil},
		{"hex rotated", verify.Secrets{"a", "b"}, func(s verify.Secrets) (int, error) { return s.MatchHex(msg, hex.EncodeToString(macB)) }, 1, nil},
		{"hex uppercase", verify.Secrets{"a"}, func(s verify.Secrets) (int, error) { return s.MatchHex(msg, strings.ToUpper(hex.EncodeToString(macA))) }, 0, nil},
		{"hex wrong secret", verify.Secrets{"c"}, func(s verify.Secrets) (int, error) { return s.MatchHex(msg, hex.EncodeToString(macA)) }, -1, verify.ErrSignatureMismatch},
		{"hex not hex", verify.Secrets{"a"}, func(s verify.Secrets) (int, error) { return s.MatchHex(msg, "zz") }, -1, verify.ErrSignatureMismatch},
		{"hex truncated", verify.Secrets{"a"}, func(s verify.Secrets) (int, error) { return s.MatchHex(msg, hex.EncodeToString(macA[:16])) }, -1, verify.ErrSignatureMismatch},
		{"hex empty", verify.Secrets{"a"}, func(s verify.Secrets) (int, error) { return s.MatchHex(msg, "") }, -1, verify.ErrMissingSignature},
		{"base64", verify.Secrets{"x", "b"}, func(s verify.Secrets) (int, error) {
			return s.MatchBase64(msg, base64.StdEncoding.EncodeToString(macB))
		}, 1, nil},
		{"base64 bad", verify.Secrets{"b"}, func(s verify.Secrets) (int, error) { return s.MatchBase64(msg, "!!!") }, -1, verify.ErrSignatureMismatch},
		{"no secrets", nil, func(s verify.Secrets) (int, error) { return s.MatchHex(msg, hex.EncodeToString(macA)) }, -1, verify.ErrSignatureMismatch},
		{"message changed", verify.Secrets{"a"}, func(s verify.Secrets) (int, error) { return s.MatchHex([]byte(`{"a":2}`), hex.EncodeToString(macA)) }, -1, verify.ErrSignatureMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			idx, err := tt.check(tt.secrets)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if idx != tt.wantIdx {
				t.Fatalf("idx = %d, want %d", idx, tt.wantIdx)
			}
		})
	}
}

func TestStripe(t *testing.T) {
	t.Parallel()
	const (
		secret  = "whsec_test_secret"
		rotated = "whsec_new_secret"
	)
	body := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	now := time.Unix(1_700_000_000, 0)
	sig := func(secret string, at time.Time) string {
		return strings.TrimPrefix(verify.SignTimestamped(secret, at, body), "t="+strconv.FormatInt(at.Unix(), 10)+",v1=")
	}
	ts := "t=" + strconv.FormatInt(now.Unix(), 10)
	good := sig(secret, now)
	other := sig("whsec_other", now)

	tests := []struct {
		name    string
		secrets verify.Secrets
		header  string
		now     time.Time
		wantIdx int
		wantErr error
	}{
		{"one v1", verify.Secrets{secret}, ts + ",v1=" + good, now, 0, nil},
		{"several v1, second matches", verify.Secrets{secret}, ts + ",v1=" + other + ",v1=" + good, now, 0, nil},
		{"v0 ignored", verify.Secrets{secret}, ts + ",v1=" + good + ",v0=" + other, now, 0, nil},
		{"v0 alone does not pass", verify.Secrets{secret}, ts + ",v0=" + good, now, -1, verify.ErrSignatureMismatch},
		{"unknown keys ignored", verify.Secrets{secret}, ts + ",x=y,v1=" + good, now, 0, nil},
		{"spaces after commas", verify.Secrets{secret}, ts + ", v1=" + good, now, 0, nil},
		{"non-hex v1 skipped", verify.Secrets{secret}, ts + ",v1=nothex,v1=" + good, now, 0, nil},
		{"only non-hex v1", verify.Secrets{secret}, ts + ",v1=nothex", now, -1, verify.ErrSignatureMismatch},
		{"malformed pair", verify.Secrets{secret}, ts + ",v1" + good, now, -1, verify.ErrSignatureMismatch},
		{"malformed pair beside a good one", verify.Secrets{secret}, ts + ",garbage,v1=" + good, now, -1, verify.ErrSignatureMismatch},
		{"no t", verify.Secrets{secret}, "v1=" + good, now, -1, verify.ErrSignatureMismatch},
		{"t not a number", verify.Secrets{secret}, "t=soon,v1=" + good, now, -1, verify.ErrSignatureMismatch},
		{"two t", verify.Secrets{secret}, ts + "," + ts + ",v1=" + good, now, -1, verify.ErrSignatureMismatch},
		{"empty", verify.Secrets{secret}, "", now, -1, verify.ErrMissingSignature},
		{"wrong secret", verify.Secrets{"whsec_nope"}, ts + ",v1=" + good, now, -1, verify.ErrSignatureMismatch},
		{"second secret of a rotation", verify.Secrets{rotated, secret}, ts + ",v1=" + good, now, 1, nil},
		{"t changed after signing", verify.Secrets{secret}, "t=" + strconv.FormatInt(now.Unix()+1, 10) + ",v1=" + good, now, -1, verify.ErrSignatureMismatch},
		{"too old", verify.Secrets{secret}, ts + ",v1=" + good, now.Add(5*time.Minute + time.Second), 0, verify.ErrTimestampOutOfTolerance},
		{"too new", verify.Secrets{secret}, ts + ",v1=" + good, now.Add(-5*time.Minute - time.Second), 0, verify.ErrTimestampOutOfTolerance},
		{"at the edge of tolerance", verify.Secrets{secret}, ts + ",v1=" + good, now.Add(5 * time.Minute), 0, nil},
		{"old and wrong is a wrong signature", verify.Secrets{"whsec_nope"}, ts + ",v1=" + good, now.Add(time.Hour), -1, verify.ErrSignatureMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			idx, err := verify.Stripe(tt.secrets, tt.header, body, tt.now, 5*time.Minute)
			if tt.wantErr == nil && err != nil || !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if idx != tt.wantIdx {
				t.Fatalf("idx = %d, want %d", idx, tt.wantIdx)
			}
		})
	}
}

// FuzzParseStripeHeader checks that the parser never panics, and that whatever
// it accepts has a timestamp and at least one v1 of a SHA-256's length or other.
func FuzzParseStripeHeader(f *testing.F) {
	for _, seed := range []string{
		"t=1700000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
		"t=1700000000,v1=abc,v1=def0,v0=1234",
		"t=,v1=",
		"t=1,v1",
		",,,",
		"v1=00",
		"t=99999999999999999999,v1=00",
		"t=-5,v1=00",
		" t = 1 , v1 = 00 ",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		h, err := verify.ParseStripeHeader(header)
		if err != nil {
			if !errors.Is(err, verify.ErrSignatureMismatch) && !errors.Is(err, verify.ErrMissingSignature) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(h.V1) == 0 {
			t.Fatalf("accepted %q without a v1", header)
		}
		if !strings.Contains(header, "t=") {
			t.Fatalf("accepted %q without t", header)
		}
	})
}
