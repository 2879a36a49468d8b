package errtext_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hookgate/hookgate/internal/errtext"
)

// Every cleaned text is valid UTF-8, holds no NUL and is at most MaxBytes;
// one that had to be cut ends in Truncated, and a clean short text is kept as
// it is.
func TestCleanBoundsAndRepairs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"clean text is kept", "target answered 500: oops", "target answered 500: oops"},
		{"NUL removed", "a\x00b\x00", "ab"},
		{"invalid bytes replaced", "a\xffb\xc3", "a\uFFFDb\uFFFD"},
		{"exactly the limit is kept", strings.Repeat("x", errtext.MaxBytes), strings.Repeat("x", errtext.MaxBytes)},
		{"one past the limit is cut", strings.Repeat("x", errtext.MaxBytes+1),
			strings.Repeat("x", errtext.MaxBytes-len(errtext.Truncated)) + errtext.Truncated},
		{"NULs do not count", strings.Repeat("x", errtext.MaxBytes) + "\x00\x00", strings.Repeat("x", errtext.MaxBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errtext.Clean(tc.in); got != tc.want {
				t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestCleanNeverExceedsTheBound(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		strings.Repeat("\xff", 32<<20),             // each byte grows to three
		strings.Repeat("é", errtext.MaxBytes),      // two-byte runes across the cut
		strings.Repeat("\x00", 1<<20) + "tail",     // all removed
		strings.Repeat("日本\x00\xfe", 1000),         // a mix
		"\xf0\x9f\x98" + strings.Repeat("a", 4000), // a rune cut short at the start
	} {
		got := errtext.Clean(in)
		if len(got) > errtext.MaxBytes || !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Errorf("Clean of %d bytes: %d bytes, valid %v, NUL at %d", len(in), len(got), utf8.ValidString(got), strings.IndexByte(got, 0))
		}
	}
	if got := errtext.Clean(strings.Repeat("\x00", 1<<20) + "tail"); got != "tail" {
		t.Errorf("NULs then tail: %q", got)
	}
}

func TestWrapKeepsTheChain(t *testing.T) {
	t.Parallel()
	err := errtext.Wrap(fmt.Errorf("handler: \x00%w", io.ErrUnexpectedEOF))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Error("errors.Is does not see through Wrap")
	}
	if err.Error() != "handler: unexpected EOF" {
		t.Errorf("text %q", err.Error())
	}
	if errtext.Wrap(err) != err {
		t.Error("a cleaned error is wrapped again")
	}
	if errtext.Wrap(nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}

// An excerpt keeps at most n bytes, never half a character, and says it was
// cut.
func TestExcerpt(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 10, "abcdefghij…"},
		{"ééééé", 5, "éé…"}, // é is two bytes: the third would be cut in half
	} {
		if got := errtext.Excerpt(c.s, c.n); got != c.want {
			t.Errorf("Excerpt(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
