package forward

import (
	"net/http"
	"testing"
	"time"
)

// A target's Retry-After is read as seconds or an HTTP date, and capped at an
// hour however large (a number past what a Duration holds included); what
// cannot be read, or lies in the past, is no wait.
func TestRetryAfterIsCapped(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"120":                   2 * time.Minute,
		" 7 ":                   7 * time.Second,
		"3600":                  time.Hour,
		"10000000000":           time.Hour,
		"99999999999999999999":  time.Hour,
		"-5":                    0,
		"-99999999999999999999": 0,
		"soon":                  0,
		"":                      0,
		now.Add(30 * time.Minute).Format(http.TimeFormat): 30 * time.Minute,
		now.Add(48 * time.Hour).Format(http.TimeFormat):   time.Hour,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", in, got, want)
		}
	}
}
