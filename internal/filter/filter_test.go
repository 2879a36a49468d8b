package filter_test

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/filter"
)

// delivery reads a payload from testdata (GitHub's and Stripe's documented
// examples, trimmed) as filters see it.
func delivery(t testing.TB, provider, event, file string) *filter.Input {
	t.Helper()
	body, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return &filter.Input{Provider: provider, Event: event, ContentType: "application/json", Body: body,
		Headers: map[string]string{"X-GitHub-Event": strings.Split(event, ".")[0], "X-GitHub-Hook-ID": "42"}}
}

func compile(t testing.TB, src string) *filter.Filter {
	t.Helper()
	f, err := filter.Compile(src)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return f
}

// The filter cookbook's filters, on real payloads: each is true where it
// should be and false elsewhere, without an error.
func TestFiltersMatchRealPayloads(t *testing.T) {
	pr := func() *filter.Input { return delivery(t, "github", "pull_request.opened", "pull_request.opened.json") }
	push := func() *filter.Input { return delivery(t, "github", "push", "push.json") }
	invoice := func() *filter.Input { return delivery(t, "stripe", "invoice.paid", "invoice.paid.json") }
	for _, c := range []struct {
		filter string
		in     *filter.Input
		want   bool
	}{
		{`payload.repository.full_name == "acme/api" && payload.action in ["opened", "synchronize"]`, pr(), true},
		{`payload.repository.full_name == "acme/web" && payload.action in ["opened", "synchronize"]`, pr(), false},
		{`payload.pull_request.labels.exists(l, l.name == "deploy")`, pr(), true},
		{`payload.pull_request.base.ref == "main" && !payload.pull_request.draft`, pr(), true},
		{`payload.ref == "refs/heads/main" && !payload.deleted`, push(), true},
		{`payload.ref.startsWith("refs/tags/")`, push(), false},
		{`payload.commits.exists(c, c.modified.exists(f, f.startsWith("docs/")))`, push(), false},
		{`payload.data.object.amount_paid >= 10000 && payload.data.object.currency == "eur"`, invoice(), true},
		{`payload.data.object.amount_paid > 20000`, invoice(), false},
		{`payload.data.object.lines.data.exists(l, l.price.lookup_key == "pro_monthly")`, invoice(), true},
		{`provider == "github" && event.startsWith("pull_request.") && headers["x-github-hook-id"] == "42"`, pr(), true},
		{`has(payload.pull_request) && payload.pull_request.draft`, push(), false},
	} {
		got, err := compile(t, c.filter).Match(c.in)
		if err != nil || got != c.want {
			t.Errorf("%s on %s: %v, %v; want %v", c.filter, c.in.Event, got, err, c.want)
		}
	}
}

// A filter that cannot be evaluated on a delivery is false, with the reason:
// a field missing in this payload, a body that is not JSON, a cost limit.
func TestFiltersThatFailAreFalse(t *testing.T) {
	in := delivery(t, "github", "push", "push.json")
	got, err := compile(t, `payload.pull_request.draft == false`).Match(in)
	if got || err == nil || !strings.Contains(err.Error(), "pull_request") {
		t.Errorf("a field missing in the payload: %v, %v", got, err)
	}
	notJSON := &filter.Input{Provider: "github", Event: "push", ContentType: "application/json", Body: []byte("<xml/>")}
	if got, err := compile(t, `event == "push"`).Match(notJSON); got || err == nil {
		t.Errorf("a body that is not JSON: %v, %v", got, err)
	}
	// A push of 300 commits, each walked 300 times: past the cost limit.
	var commits []string
	for i := range 300 {
		commits = append(commits, fmt.Sprintf(`{"id":"%040d","modified":["a","b"]}`, i))
	}
	big := &filter.Input{Provider: "github", Event: "push", ContentType: "application/json",
		Body: []byte(`{"ref":"refs/heads/main","commits":[` + strings.Join(commits, ",") + `]}`)}
	got, err = compile(t, `payload.commits.all(a, payload.commits.exists(b, b.id == a.id))`).Match(big)
	if got || err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Errorf("an expensive filter: %v, %v", got, err)
	}
	// The same filter on a small payload is within the limit.
	if got, err := compile(t, `payload.commits.all(a, payload.commits.exists(b, b.id == a.id))`).Match(in); !got || err != nil {
		t.Errorf("the same filter on one commit: %v, %v", got, err)
	}
}

// Of a key given twice, the filter sees the first, as the delivery's event
// and id are read: a filter and the event name never disagree.
func TestFiltersSeeTheFirstOfADuplicateKey(t *testing.T) {
	in := &filter.Input{Provider: "github", Event: "pull_request.closed", ContentType: "application/json",
		Body: []byte(`{"action":"closed","action":"opened"}`)}
	if got, err := compile(t, `payload.action == "closed"`).Match(in); !got || err != nil {
		t.Errorf("duplicate key: %v, %v", got, err)
	}
}

// Integers compare exactly, past 2^53 too: an id decides as written.
func TestFiltersCompareLargeIntegersExactly(t *testing.T) {
	in := &filter.Input{Provider: "stripe", Event: "x", ContentType: "application/json",
		Body: []byte(`{"n":9007199254740992,"u":18446744073709551614,"f":1.5,"big":1e400}`)}
	for src, want := range map[string]bool{
		`payload.n == 9007199254740993`:      false,
		`payload.n == 9007199254740992`:      true,
		`payload.u == 18446744073709551615u`: false,
		`payload.u == 18446744073709551614u`: true,
		`payload.f > 1 && payload.f < 2`:     true,
		`payload.n > 1.5`:                    true,
	} {
		if got, err := compile(t, src).Match(in); got != want || err != nil {
			t.Errorf("%s: %v, %v; want %v", src, got, err, want)
		}
	}
}

// GitHub's form-encoded deliveries carry their JSON in the payload field.
func TestFiltersReadAFormEncodedPayload(t *testing.T) {
	json, err := os.ReadFile("testdata/pull_request.opened.json")
	if err != nil {
		t.Fatal(err)
	}
	in := &filter.Input{Provider: "github", Event: "pull_request.opened", ContentType: "application/x-www-form-urlencoded",
		Body: []byte("payload=" + url.QueryEscape(string(json)))}
	if got, err := compile(t, `payload.number == 2`).Match(in); !got || err != nil {
		t.Errorf("form-encoded: %v, %v", got, err)
	}
}

// Filters that cannot work are refused when compiled, saying why.
func TestFiltersRefusedAtCompile(t *testing.T) {
	for src, want := range map[string]string{
		`payload.action`:                "not bool",
		`1 + 1`:                         "not bool",
		`payload.action == `:            "Syntax error",
		`payload.action == "opened" &&`: "Syntax error",
		`body.action == "opened"`:       "undeclared reference",
		`event == 1`:                    "no matching overload",
		`  `:                            "empty",
		strings.Repeat(`event == "x" || `, 400) + `true`: "longer than",
	} {
		_, err := filter.Compile(src)
		if !errors.Is(err, filter.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40s: %v, want an error saying %q", src, err, want)
		}
	}
}

// BenchmarkFilter is a typical filter on a pull request, its payload parsed
// once per delivery.
func BenchmarkFilter(b *testing.B) {
	f := compile(b, `payload.repository.full_name == "acme/api" && payload.action in ["opened", "synchronize"]`)
	body, err := os.ReadFile("testdata/pull_request.opened.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		in := &filter.Input{Provider: "github", Event: "pull_request.opened", ContentType: "application/json", Body: body}
		if ok, err := f.Match(in); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// The payload's view behaves as CEL's own maps and lists do, for every
// operation a filter may apply to it.
func TestFiltersSeeThePayloadAsMapsAndLists(t *testing.T) {
	in := func() *filter.Input {
		return &filter.Input{Provider: "acme", Event: "x", ContentType: "application/json",
			Body: []byte(`{"a":{"b":1,"c":[1,"two",{"d":null}]},"list":[1,2],"dup":1,"dup":2,"e":{},"s":"text"}`)}
	}
	for _, src := range []string{
		`size(payload) == 5`,
		`"a" in payload && !("z" in payload)`,
		`has(payload.a.b) && !has(payload.a.z)`,
		`payload.a.c[1] == "two" && payload.a.c[2].d == null`,
		`size(payload.a.c) == 3 && payload.a.c.size() == 3`,
		`2 in payload.list && !(3 in payload.list)`,
		`payload.list + [3] == [1, 2, 3]`,
		`payload.list == [1, 2] && payload.list != [2, 1]`,
		`payload.a.c.exists(x, x == "two")`,
		`payload.list.map(x, x * 2) == [2, 4]`,
		`payload.exists(k, k == "dup") && payload.all(k, k != "")`,
		`payload.dup == 1`,
		`payload.e == {} && payload.a != {}`,
		`{"b": 1, "c": [1, "two", {"d": null}]} == payload.a`,
		`payload.s.startsWith("te") && payload.s.split("x").size() == 2`,
		`type(payload) == map && type(payload.list) == list`,
	} {
		if got, err := compile(t, src).Match(in()); !got || err != nil {
			t.Errorf("%s: %v, %v", src, got, err)
		}
	}
	if _, err := compile(t, `payload.list[5] == 1`).Match(in()); err == nil {
		t.Error("an index out of range is no error")
	}
}

// What one call may scan is bounded by what a filter reads: a payload string
// longer than filter.MaxString is no string to a filter, so split on a 10 MB
// string of commas is false, with the reason, without making ten million
// strings (the allocation is measured; BenchmarkFilterOnAHugeString times
// it).
func TestFiltersDoNotReadHugeStrings(t *testing.T) {
	in := &filter.Input{Provider: "gitlab", Event: "push", ContentType: "application/json",
		Body: []byte(`{"text":"` + strings.Repeat(",", 10<<20) + `","ok":"` + strings.Repeat(",", filter.MaxString) + `"}`)}
	f := compile(t, `payload.text.split(",").size() > 1`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := f.Match(in)
	runtime.ReadMemStats(&after)
	if got || err == nil || !strings.Contains(err.Error(), "longer than filters read") {
		t.Errorf("split on a 10 MB string: %v, %v", got, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("a filter refused a huge string and allocated %d bytes", alloc)
	}
	// A string of exactly MaxString bytes is read.
	if got, err := compile(t, `payload.ok.size() == 262144`).Match(in); !got || err != nil {
		t.Errorf("a string of MaxString bytes: %v, %v", got, err)
	}
}

// A filter over an array of a million values costs its index of the array
// (8 bytes an element) and stops at the cost limit; it never builds a tree.
func TestFiltersOnAMillionValues(t *testing.T) {
	in := &filter.Input{Provider: "github", Event: "push", ContentType: "application/json",
		Body: []byte(`{"values":[` + strings.Repeat("0,", 1e6) + `1]}`)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := compile(t, `payload.values.exists(v, v == 1)`).Match(in)
	runtime.ReadMemStats(&after)
	if got || err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Errorf("a walk of a million values: %v, %v", got, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(in.Body)) {
		t.Errorf("a filter over %d bytes allocated %d bytes", len(in.Body), alloc)
	}
}

// BenchmarkFilterOnAHugeString is split on a 20 MB string of commas (the
// filter is false: no filter reads such a string) and contains on one.
//
//	go test -run '^$' -bench HugeString -benchmem ./internal/filter/
func BenchmarkFilterOnAHugeString(b *testing.B) {
	body := []byte(`{"text":"` + strings.Repeat(",", 20<<20) + `"}`)
	for _, src := range []string{`payload.text.split(",").size() > 1`, `payload.text.contains("x")`, `payload.text.replace(",", "xx") == ""`} {
		f := compile(b, src)
		b.Run(strings.SplitN(strings.TrimPrefix(src, "payload.text."), "(", 2)[0], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ok, err := f.Match(&filter.Input{Provider: "x", Event: "x", ContentType: "application/json", Body: body}); ok || err == nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
