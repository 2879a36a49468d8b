package deliveries_test

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/deliveries"
)

func TestSummary(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		states []string
		want   string
	}{
		{nil, "stored"},
		{[]string{"succeeded", "discarded"}, "discarded"},
		{[]string{"superseded", "succeeded"}, "succeeded"},
		{[]string{"pending", "retrying", "running"}, "retrying"},
		{[]string{"cancelled", "pending"}, "pending"},
		{[]string{"superseded"}, "superseded"},
	} {
		if got := deliveries.Summary(tt.states); got != tt.want {
			t.Errorf("Summary(%v) = %s, want %s", tt.states, got, tt.want)
		}
	}
}

func TestFilterFromQuery(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f, err := deliveries.FilterFromQuery(url.Values{"since": {"24h"}, "until": {"2026-11-30T11:00:00Z"}, "state": {"stored"}, "event": {"invoice.*"}}, now)
	if err != nil || !f.Since.Equal(now.Add(-24*time.Hour)) || !f.Until.Equal(now.Add(-time.Hour)) || f.State != "stored" {
		t.Fatalf("filter = %+v, %v", f, err)
	}
	for _, q := range []url.Values{
		{"provider": {"gitlab"}}, {"state": {"done"}}, {"since": {"last week"}}, {"event": {"a b"}},
		{"since": {"2026-11-30T11:00:00Z"}, "until": {"2026-11-30T10:00:00Z"}}, {"since": {"-5h"}},
	} {
		if _, err := deliveries.FilterFromQuery(q, now); !errors.Is(err, deliveries.ErrBadFilter) {
			t.Errorf("%v: err = %v", q, err)
		}
	}
	c := deliveries.Cursor{ReceivedAt: now, Provider: "github", DeliveryID: "x"}
	if back, err := deliveries.DecodeCursor(c.Encode()); err != nil || back != c {
		t.Fatalf("cursor round trip: %+v, %v", back, err)
	}
	if _, err := deliveries.DecodeCursor("bm9wZQ"); !errors.Is(err, deliveries.ErrBadFilter) {
		t.Fatalf("garbage cursor: %v", err)
	}
}
