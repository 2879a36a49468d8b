package payload_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/payload"
)

// What a payload must be: one well-formed JSON object within the depth and
// value limits; anything else is refused, saying which rule it broke.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		body string
		want error
	}{
		{"an object", `{"a":[1,2,{"b":"c"}]}`, nil},
		{"white space around", " \n{}\t", nil},
		{"brackets inside strings count for nothing", `{"a":"[[[[,,,,{{{{\"]]"}`, nil},
		{"an array", `[1]`, payload.ErrNotObject},
		{"a string", `"x"`, payload.ErrNotObject},
		{"empty", ``, payload.ErrNotObject},
		{"not closed", `{"a":1`, payload.ErrInvalid},
		{"a trailing value", `{"a":1} {}`, payload.ErrInvalid},
		{"a trailing comma", `{"a":1,}`, payload.ErrInvalid},
		{"a bare word", `{"a":nope}`, payload.ErrInvalid},
		{"an unescaped control character", "{\"a\":\"\x01\"}", payload.ErrInvalid},
		{"300 levels", `{"a":` + strings.Repeat("[", 299) + strings.Repeat("]", 299) + `}`, nil},
		{"301 levels", `{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, payload.ErrTooDeep},
		{"a million levels, never recursed into", `{"a":` + strings.Repeat("[", 1e6), payload.ErrTooDeep},
		{"values up to the limit", `{"a":[` + strings.Repeat("0,", payload.MaxValues-3) + `0]}`, nil},
		{"one value past the limit", `{"a":[` + strings.Repeat("0,", payload.MaxValues-2) + `0]}`, payload.ErrTooMany},
	} {
		if err := payload.Check([]byte(c.body)); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// Fields are found by their exact names, the first of a duplicate key
// counts, escapes in keys and values are read as JSON means them, and a name
// that is path syntax to gjson is only a name.
func TestGet(t *testing.T) {
	o, err := payload.Parse([]byte(`{"a":{"b":"first","b":"second"},"\u0069d":42,"x.y":"dotted","*":"star",
		"@this":"at","n":-1.5e3,"t":"2026-01-02T03:04:05+01:00","u":1767225600,"list":[{"id":"l0"},{"id":"l1"}],
		"esc":"line\nbreak \u00e9","big":18446744073709551616,"neg":-7}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path []string
		text string
		id   string
	}{
		{[]string{"a", "b"}, "first", "first"},
		{[]string{"id"}, "", "42"},
		{[]string{"x.y"}, "dotted", "dotted"},
		{[]string{"x", "y"}, "", ""},
		{[]string{"*"}, "star", "star"},
		{[]string{"@this"}, "at", "at"},
		{[]string{"list", "1", "id"}, "l1", "l1"},
		{[]string{"list", "id"}, "", ""},
		{[]string{"esc"}, "line\nbreak é", "line\nbreak é"},
		{[]string{"big"}, "", ""},
		{[]string{"neg"}, "", "-7"},
		{[]string{"n"}, "", ""},
		{[]string{"missing", "deeper"}, "", ""},
		{[]string{"a", "b", "c"}, "", ""},
	} {
		v := o.Get(c.path...)
		if v.Text() != c.text || v.ID() != c.id {
			t.Errorf("%q: text %q, id %q; want %q, %q", c.path, v.Text(), v.ID(), c.text, c.id)
		}
	}
	if got := o.Get("n").Number(); got != "-1.5e3" {
		t.Errorf("a number's text is as written: %q", got)
	}
	if got, want := o.Get("t").Time(), time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("RFC 3339 time: %v", got)
	}
	if got := o.Get("u").Time(); !got.Equal(time.Unix(1767225600, 0)) {
		t.Errorf("unix time: %v", got)
	}
	for _, bad := range []string{`{"t":"yesterday"}`, `{"t":253402300800}`, `{"t":0}`, `{"t":"9999-12-31T23:00:00-02:00"}`, `{"t":true}`} {
		o, err := payload.Parse([]byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		if got := o.Get("t").Time(); !got.IsZero() {
			t.Errorf("%s: %v, want no time", bad, got)
		}
	}
}

// Reading a few fields of a payload of a million tiny values allocates what
// the fields need, not a tree of the payload.
func TestReadingAllocatesOnlyTheFields(t *testing.T) {
	body := []byte(`{"values":[` + strings.Repeat("0,", 1e6) + `0],"repository":{"id":7},"ref":"refs/heads/main"}`)
	allocs := testing.AllocsPerRun(5, func() {
		o, err := payload.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		if o.Get("repository", "id").ID() != "7" || o.Get("ref").Text() != "refs/heads/main" {
			t.Fatal("fields not read")
		}
	})
	if allocs > 20 {
		t.Errorf("%v allocations for two fields of a million-value payload", allocs)
	}
}

// Check agrees with encoding/json on what is a well-formed object, whatever
// its escapes (a quote after an even or odd run of backslashes), when the
// body is within the limits.
func FuzzCheckAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"\\"}`, `{"a":"\\\""}`, `{"a":"\"\\\\"}`, `{"a":"\\\\\"]"}`, `{"a":"x\\`,
		`{"a":[1,{"b":"]}\"["}]}`, `{"a":"\\\\"}]`, "{\"a\":\"\x1f\"}", `{"\\":1}`, `{"a":"\u00e9\n"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		err := payload.Check(body)
		if errors.Is(err, payload.ErrTooDeep) || errors.Is(err, payload.ErrTooMany) {
			return
		}
		var v any
		wellFormed := json.Unmarshal(body, &v) == nil
		_, object := v.(map[string]any)
		// Both accept invalid UTF-8 inside strings (encoding/json replaces
		// it; the gateway stores the bytes as they came).
		if want := wellFormed && object; (err == nil) != want {
			t.Fatalf("Check(%q) = %v; encoding/json says well-formed object: %v", body, err, want)
		}
	})
}
