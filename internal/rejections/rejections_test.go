package rejections_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/rejections"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newRecorder(t *testing.T) *rejections.Recorder {
	t.Helper()
	return &rejections.Recorder{Pool: dbtest.NewPool(t), Logger: slog.New(slog.DiscardHandler)}
}

func list(t *testing.T, r *rejections.Recorder) []rejections.Rejection {
	t.Helper()
	got, err := rejections.List(context.Background(), r.Pool)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// printable reports whether s is what every recorded string must be.
func printable(s string, max int) bool {
	return len(s) <= max && utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// A rejected request's text is whatever its sender chose: a provider from
// /webhooks/%FF, header names holding invalid bytes or NUL, thousands of
// headers. What is recorded is valid, printable, bounded UTF-8, so it is kept
// like any other rejection and never fails the write of those buffered with it.
func TestRecordKeepsRequestsOfAnyText(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	r.Record(rejections.FromRequest(httptest.NewRequest(http.MethodPost, "/webhooks/gitlab", nil), "gitlab", 404, "provider_not_configured", at))

	bad := httptest.NewRequest(http.MethodPost, "/webhooks/%FF", nil)
	bad.RemoteAddr = "\x00\xfe:1234"
	bad.Header["X-Bad\xff"] = []string{"\xff\x00"}
	bad.Header["X-Nul\x00"] = []string{"v"}
	bad.Header["X-Long-"+strings.Repeat("é", 40)] = []string{"v"}
	for i := range 150 {
		bad.Header[fmt.Sprintf("X-Many-%03d", i)] = []string{"v"}
	}
	provider := strings.TrimPrefix(bad.URL.Path, "/webhooks/")
	if provider != "\xff" {
		t.Fatalf("provider from the URL = %q", provider)
	}
	r.Record(rejections.FromRequest(bad, provider, 404, "provider_not_configured", at.Add(time.Second)))

	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := list(t, r)
	if len(got) != 2 || got[1].Provider != "gitlab" {
		t.Fatalf("rejections = %+v", got)
	}
	newest := got[0]
	if newest.Provider != "\uFFFD" || newest.RemoteAddr != "\uFFFD\uFFFD:1234" || newest.Reason != "provider_not_configured" {
		t.Fatalf("newest = %q %q %q", newest.Provider, newest.RemoteAddr, newest.Reason)
	}
	if len(newest.HeaderNames) != 100 {
		t.Fatalf("%d header names kept, want the first 100", len(newest.HeaderNames))
	}
	for _, name := range newest.HeaderNames {
		if !printable(name, 64) {
			t.Errorf("header name %q is not printable UTF-8 of at most 64 bytes", name)
		}
	}
	if !slices.Contains(newest.HeaderNames, "X-Bad\uFFFD") {
		t.Errorf("header names = %q", newest.HeaderNames)
	}
}

// Whatever reaches Record directly is cleaned too, and bounded.
func TestRecordBoundsEveryString(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	long := strings.Repeat("é", 100) // 200 bytes; a cut must not split a rune
	r.Record(rejections.Rejection{At: at, Provider: long + "\x00", Status: 400, Reason: long, RemoteAddr: long,
		HeaderNames: []string{long, "X-\x1b[31m"}})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := list(t, r)
	if len(got) != 1 {
		t.Fatalf("rejections = %+v", got)
	}
	g := got[0]
	for _, c := range []struct {
		field, value string
		max          int
	}{
		{"provider", g.Provider, 32}, {"reason", g.Reason, 64}, {"remote address", g.RemoteAddr, 64},
		{"header name", g.HeaderNames[0], 64}, {"header name", g.HeaderNames[1], 64},
	} {
		if !printable(c.value, c.max) || c.value == "" {
			t.Errorf("%s %q is not printable UTF-8 of 1 to %d bytes", c.field, c.value, c.max)
		}
	}
	if g.Provider != strings.Repeat("é", 16) || g.HeaderNames[1] != "X-\uFFFD[31m" {
		t.Errorf("provider %q, header name %q", g.Provider, g.HeaderNames[1])
	}
}

// A rejection the database refuses costs only itself: the others buffered
// with it are written, and the error counts the one dropped.
func TestFlushDropsOnlyWhatCannotBeStored(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	r.Record(rejections.Rejection{At: at, Provider: "github", Status: 401, Reason: "first", RemoteAddr: "a"})
	// Before PostgreSQL's earliest timestamp (4713 BC): refused by the database.
	r.Record(rejections.Rejection{At: time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC), Provider: "github", Status: 401, Reason: "unstorable"})
	r.Record(rejections.Rejection{At: at, Provider: "stripe", Status: 401, Reason: "last", RemoteAddr: "b"})

	err := r.Flush(context.Background())
	if err == nil || !strings.Contains(err.Error(), "dropped 1 of 3") {
		t.Fatalf("Flush = %v, want an error counting 1 dropped of 3", err)
	}
	var reasons []string
	for _, g := range list(t, r) {
		reasons = append(reasons, g.Reason)
	}
	if strings.Join(reasons, ",") != "last,first" {
		t.Fatalf("kept %v, want [last first]", reasons)
	}
	// Nothing is left buffered to fail the next write.
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}
