package deliveries_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestSummary(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		states  []string
		invalid bool
		want    string
	}{
		{nil, false, "stored"},
		{nil, true, "invalid"},
		{[]string{"succeeded", "discarded"}, false, "discarded"},
		{[]string{"superseded", "succeeded"}, false, "succeeded"},
		{[]string{"pending", "retrying", "running"}, false, "retrying"},
		{[]string{"cancelled", "pending"}, false, "pending"},
		{[]string{"superseded"}, false, "superseded"},
	} {
		if got := deliveries.Summary(tt.states, tt.invalid); got != tt.want {
			t.Errorf("Summary(%v, %v) = %s, want %s", tt.states, tt.invalid, got, tt.want)
		}
	}
}

func TestFilterFromQuery(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f, err := deliveries.FilterFromQuery(url.Values{"since": {"24h"}, "until": {"2026-11-30T11:00:00Z"}, "state": {"stored"}, "event": {"invoice.*"}}, now, nil, nil)
	if err != nil || !f.Since.Equal(now.Add(-24*time.Hour)) || !f.Until.Equal(now.Add(-time.Hour)) || f.State != "stored" {
		t.Fatalf("filter = %+v, %v", f, err)
	}
	for _, q := range []url.Values{
		{"provider": {"gitlab"}}, {"state": {"done"}}, {"since": {"last week"}}, {"event": {"a b"}},
		{"since": {"2026-11-30T11:00:00Z"}, "until": {"2026-11-30T10:00:00Z"}}, {"since": {"-5h"}},
	} {
		if _, err := deliveries.FilterFromQuery(q, now, nil, nil); !errors.Is(err, deliveries.ErrBadFilter) {
			t.Errorf("%v: err = %v", q, err)
		}
	}
	// A provider is one the gateway knows: the built-in ones, and the
	// sources its registry configures.
	gitlab, err := providers.NewSource(providers.SourceConfig{Name: "gitlab", Kind: "gitlab", Secrets: verify.Secrets{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	known, err := providers.NewRegistry(gitlab)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"github", "stripe", "gitlab"} {
		if f, err := deliveries.FilterFromQuery(url.Values{"provider": {p}}, now, known, nil); err != nil || f.Provider != p {
			t.Errorf("provider %s: %+v, %v", p, f, err)
		}
	}
	if _, err := deliveries.FilterFromQuery(url.Values{"provider": {"clerk"}}, now, known, nil); err == nil ||
		!strings.Contains(err.Error(), "provider must be one of github, stripe, gitlab") {
		t.Errorf("an unknown provider: %v", err)
	}
	c := deliveries.Cursor{ReceivedAt: now, Provider: "github", DeliveryID: "x"}
	if back, err := deliveries.DecodeCursor(c.Encode()); err != nil || back != c {
		t.Fatalf("cursor round trip: %+v, %v", back, err)
	}
	if _, err := deliveries.DecodeCursor("bm9wZQ"); !errors.Is(err, deliveries.ErrBadFilter) {
		t.Fatalf("garbage cursor: %v", err)
	}
}

// A cursor is opaque but comes back from the client: one holding what no
// stored delivery could (text PostgreSQL refuses, overlong text, a time JSON
// cannot write) is a bad filter, never a query that fails.
func TestDecodeCursorRefusesWhatNoDeliveryHolds(t *testing.T) {
	t.Parallel()
	forge := func(fields string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(`{"t":"2026-11-30T12:00:00Z",` + fields + `}`))
	}
	if _, err := deliveries.DecodeCursor(forge(`"p":"github","d":"é-1"`)); err != nil {
		t.Fatalf("a cursor of printable UTF-8: %v", err)
	}
	for name, cursor := range map[string]string{
		"NUL in the provider":    forge(`"p":"git\u0000hub","d":"x"`),
		"NUL in the delivery id": forge(`"p":"github","d":"\u0000"`),
		"a control character":    forge(`"p":"github","d":"a\nb"`),
		"an overlong id":         forge(`"p":"github","d":"` + strings.Repeat("x", 256) + `"`),
		"no time":                base64.RawURLEncoding.EncodeToString([]byte(`{"p":"github","d":"x"}`)),
		"a time before year 1":   base64.RawURLEncoding.EncodeToString([]byte(`{"t":"0000-12-31T23:00:00Z","p":"github","d":"x"}`)),
	} {
		if _, err := deliveries.DecodeCursor(cursor); !errors.Is(err, deliveries.ErrBadFilter) {
			t.Errorf("%s: err = %v, want ErrBadFilter", name, err)
		}
	}
}

// Filter times must be ones the replay log can write as JSON.
func TestParseTimeRefusesYearsOutOfRange(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{"0000-01-01T00:00:00+01:00", "0000-06-01T00:00:00Z"} {
		if _, err := deliveries.ParseTime(s, now); !errors.Is(err, deliveries.ErrBadFilter) {
			t.Errorf("%s: err = %v, want ErrBadFilter", s, err)
		}
	}
	if _, err := deliveries.ParseTime("0001-01-01T00:00:00Z", now); err != nil {
		t.Errorf("year 1: %v", err)
	}
}

// Ingest stores only printable UTF-8 provider names and ids, so anything else
// names no delivery, and is not found without asking PostgreSQL, which would
// refuse it.
func TestCheckKey(t *testing.T) {
	t.Parallel()
	for _, k := range [][2]string{{"github", "\x00"}, {"github", "\xff"}, {"git\xffhub", "d-1"}, {"github", "a\tb"}} {
		if err := deliveries.CheckKey(k[0], k[1]); !errors.Is(err, deliveries.ErrNotFound) {
			t.Errorf("%q: err = %v, want ErrNotFound", k, err)
		}
	}
	for _, k := range [][2]string{{"github", "d-1"}, {"github", "a%41"}, {"github", "x/y é"}} {
		if err := deliveries.CheckKey(k[0], k[1]); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
}

// Every dispatch state is either final or in progress, never both; the
// operators' summary knows each one; and the database accepts exactly these:
// a state added in one place and forgotten in another fails here.
func TestDispatchStatesAreOneList(t *testing.T) {
	t.Parallel()
	all := append(slices.Clone(dispatch.FinalStates), dispatch.InProgressStates...)
	for _, s := range all {
		if dispatch.IsFinal(s) == dispatch.IsInProgress(s) {
			t.Errorf("%s is final %v and in progress %v", s, dispatch.IsFinal(s), dispatch.IsInProgress(s))
		}
		if !slices.Contains(deliveries.States, s) {
			t.Errorf("the state filter does not know %s", s)
		}
	}
	if len(deliveries.States) != len(all)+2 { // and "stored", "invalid"
		t.Errorf("the state filter has %v, the dispatch states are %v", deliveries.States, all)
	}
	pool := dbtest.NewPool(t)
	var check string
	err := pool.QueryRow(context.Background(), `SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'hookgate_dispatches'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%state%'`).Scan(&check)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if !strings.Contains(check, "'"+s+"'") {
			t.Errorf("the database's check %s does not allow %s", check, s)
		}
	}
	if n := strings.Count(check, "'::text"); n != len(all) {
		t.Errorf("the database's check allows %d states, the code knows %d: %s", n, len(all), check)
	}
}
