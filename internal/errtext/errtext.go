// Package errtext makes the text of an error safe to store and to show: valid
// UTF-8 without NUL bytes, and bounded. An error's text may quote what a
// target answered or what a handler returned, and PostgreSQL refuses a NUL in
// text and jsonb (SQLSTATE 22P05) and invalid UTF-8 in text (22021): one such
// text in River's batched completion would fail the completion of every job
// in its batch, again and again. So every error text leaves a worker or a
// handler through Clean, once, whatever wrote it.
package errtext

import (
	"strings"
	"unicode/utf8"
)

// MaxBytes bounds a cleaned text, Truncated included.
const MaxBytes = 2048

// Truncated ends a text that was cut.
const Truncated = "...(truncated)"

// Clean returns s as valid UTF-8 (each invalid byte replaced by U+FFFD), with
// NUL bytes removed, and at most MaxBytes long: a longer text is cut on a
// rune boundary and ends in Truncated. Only the bytes it keeps are read, so a
// text of many megabytes costs no more than a short one.
func Clean(s string) string {
	if len(s) <= MaxBytes && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), MaxBytes))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r == 0 {
			continue
		}
		// An invalid byte decodes as utf8.RuneError of size 1, and is
		// written as U+FFFD's three bytes.
		if b.Len()+utf8.RuneLen(r) > MaxBytes {
			return cut(b.String(), MaxBytes-len(Truncated)) + Truncated
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Excerpt returns s, or its first n bytes at most (cut on a rune boundary)
// and "…" after them: text an error or a message quotes, kept short.
func Excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cut(s, n) + "…"
}

// cut returns s cut to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Error is an error whose text is cleaned (Clean); errors.Is and errors.As
// see through it to the error it cleans.
type Error struct {
	text string
	err  error
}

// Wrap returns err with its text cleaned, or nil for nil. An error already
// cleaned is returned as it is.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*Error); ok {
		return err
	}
	return &Error{text: Clean(err.Error()), err: err}
}

func (e *Error) Error() string { return e.text }

// Unwrap returns the error whose text was cleaned.
func (e *Error) Unwrap() error { return e.err }
