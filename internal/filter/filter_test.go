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

// shape is a payload and a filter whose cost CEL does not see: each of its
// steps may scan far more than CEL charges for it.
type shape struct {
	name, filter string
	body         []byte
}

func zeros(n int) string { return strings.Repeat("0,", n-1) + "0" }

func keys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":0`, i)
	}
	return b.String()
}

// shapes are the payloads on which a filter's time grew as its steps times
// the payload's bytes (a field found again at every step of a loop, past a
// 2 MB string or 100,000 keys; a 256 KB string decoded again at every step),
// or its memory as its keys (an object's keys all made strings before the
// first was iterated).
func shapes() []shape {
	return []shape{
		{"escaped string", `payload.values.exists(v, type(payload.s) == int)`,
			[]byte(`{"s":"` + strings.Repeat(`\u00e9`, 256_000/6) + `","values":[` + zeros(40_000) + `]}`)},
		{"past 2 MB", `payload.values.exists(v, payload.big.x == 2)`,
			[]byte(`{"values":[` + zeros(40_000) + `],"pad":"` + strings.Repeat("x", 2<<20) + `","big":{"x":1}}`)},
		{"past 100k keys", `payload.values.exists(v, payload.big.x == 2)`,
			[]byte(`{"values":[` + zeros(1_000_000) + `],"big":{` + keys(100_000) + `}}`)},
		{"1M keys iterated", `payload.big.exists(k, k == "zz")`,
			[]byte(`{"big":{` + keys(1_000_000) + `}}`)},
	}
}

// measure evaluates a filter on a new delivery of body and returns its
// verdict, the bytes it scanned and the bytes it allocated.
func measure(t testing.TB, src string, body []byte) (bool, error, int64, uint64) {
	t.Helper()
	f := compile(t, src)
	in := &filter.Input{Provider: "acme", Event: "x", ContentType: "application/json", Body: body}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := f.Match(in)
	runtime.ReadMemStats(&after)
	return got, err, filter.Scanned(in), after.TotalAlloc - before.TotalAlloc
}

// A filter's time follows the payload's bytes, whatever its shape: on each
// shape that made a filter scan its steps times the payload, it is false at
// a limit, having scanned and allocated a few times the payload.
func TestFiltersScanABoundedMultipleOfThePayload(t *testing.T) {
	for _, s := range shapes() {
		got, err, scanned, alloc := measure(t, s.filter, s.body)
		t.Logf("%s: %d bytes, scanned %d, allocated %d: %v", s.name, len(s.body), scanned, alloc, err)
		if got || err == nil || !strings.Contains(err.Error(), "limit") {
			t.Errorf("%s: %v, %v; want false at a limit", s.name, got, err)
		}
		if n := int64(len(s.body)); scanned > 4*n {
			t.Errorf("%s: a filter over %d bytes scanned %d", s.name, n, scanned)
		}
		if n := uint64(len(s.body)); alloc > 3*n+4<<20 {
			t.Errorf("%s: a filter over %d bytes allocated %d", s.name, n, alloc)
		}
	}
}

// Iterating an object's keys indexes them (4 bytes a key, and a table to
// find the keys given twice while indexing) and makes each a string only as
// it is reached: at most 3 bytes allocated per payload byte.
func TestFiltersIterateKeysWithoutMakingThemAll(t *testing.T) {
	body := []byte(`{"big":{` + keys(1_000_000) + `}}`)
	_, _, _, alloc := measure(t, `payload.big.exists(k, k == "zz")`, body)
	if alloc > 3*uint64(len(body)) {
		t.Errorf("iterating the keys of %d bytes allocated %d", len(body), alloc)
	}
	// The keys are all there, each once, in order; of a key given twice,
	// the first value counts.
	in := &filter.Input{Provider: "acme", Event: "x", ContentType: "application/json",
		Body: []byte(`{"b":1,"a":2,"b":3,"\u0062":4,"c":{"x":1,"x":2}}`)}
	for _, src := range []string{
		`size(payload) == 3 && payload.map(k, k) == ["b", "a", "c"] && payload.b == 1`,
		`payload.all(k, k in ["a", "b", "c"]) && payload.exists_one(k, k == "b")`,
		`payload == {"b": 1, "a": 2, "c": {"x": 1}} && payload.c == {"x": 1}`,
	} {
		if got, err := compile(t, src).Match(in); !got || err != nil {
			t.Errorf("%s: %v, %v", src, got, err)
		}
	}
}

// A filter whose every step scans anew stops at its scan budget and is
// false with the reason; steps that meet the stopped evaluation's error scan
// nothing. Here two arrays of 100 numbers of 10,000 digits are compared at
// every step: CEL charges 10 for each comparison, the view scans 2 MB, as
// numbers in an array are not remembered but parsed again.
func TestFiltersStopAtTheScanLimit(t *testing.T) {
	numbers := strings.TrimSuffix(strings.Repeat(strings.Repeat("7", 10_000)+",", 100), ",")
	body := []byte(`{"a":[` + numbers + `],"b":[` + numbers + `],"values":[` + zeros(200) + `]}`)
	got, err, scanned, _ := measure(t, `payload.values.exists(v, payload.a == payload.b && v == 1)`, body)
	if got || !errors.Is(err, filter.ErrScanLimit) {
		t.Errorf("arrays compared at every step: %v, %v; want false at the scan limit", got, err)
	}
	if budget := int64(filter.ScanPerByte*len(body) + filter.ScanSlack); scanned > budget+int64(len(body)) {
		t.Errorf("a filter with a budget of %d bytes scanned %d", budget, scanned)
	}
	// Compared once, they are equal.
	if got, err := compile(t, `payload.a == payload.b && payload.values.exists(v, v == 0)`).Match(
		&filter.Input{Provider: "acme", Event: "x", ContentType: "application/json", Body: body}); !got || err != nil {
		t.Errorf("arrays compared once: %v, %v", got, err)
	}
	// Keys looked up one by one, each once, scan the object a few times, not
	// once a key.
	body = []byte(`{"big":{` + keys(100_000) + `}}`)
	got, err, scanned, _ = measure(t, `payload.big.exists(k, payload.big[k] == 1)`, body)
	if got || err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Errorf("a lookup of every key: %v, %v; want false at the cost limit", got, err)
	}
	if scanned > 8*int64(len(body)) {
		t.Errorf("looking up the keys of %d bytes scanned %d", len(body), scanned)
	}
}

// A field read at every step of a loop is found once: a filter reading a
// field past a 100 KB string at each of 1,000 steps is true or false as it
// should be, having scanned about the payload once.
func TestFiltersReadAFieldInALoopOnce(t *testing.T) {
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprintf(`{"id":%d,"name":"item %d"}`, i, i)
	}
	payload := func(target int) []byte {
		return []byte(fmt.Sprintf(`{"items":[%s],"pad":"%s","target":{"id":%d,"name":"item %d"}}`,
			strings.Join(items, ","), strings.Repeat("x", 100<<10), target, target))
	}
	for _, c := range []struct {
		filter string
		target int
		want   bool
	}{
		{`payload.items.exists(i, i.id == payload.target.id)`, 999, true},
		{`payload.items.exists(i, i.id == payload.target.id)`, 1000, false},
		{`payload.items.all(i, i.name != payload.target.name)`, 1000, true},
		{`payload.items.filter(i, i.name.startsWith(payload.target.name)).size() == 11`, 99, true},
	} {
		body := payload(c.target)
		got, err, scanned, _ := measure(t, c.filter, body)
		if got != c.want || err != nil {
			t.Errorf("%s with target %d: %v, %v; want %v", c.filter, c.target, got, err, c.want)
		}
		if scanned > 4*int64(len(body)) {
			t.Errorf("%s: a filter over %d bytes scanned %d", c.filter, len(body), scanned)
		}
	}
}

// BenchmarkFilterShapes is a filter on each of the shapes whose steps scan
// more than CEL charges, each evaluation on a new delivery (its payload
// checked, as the gateway does once per delivery).
//
//	go test -run '^$' -bench FilterShapes -benchmem ./internal/filter/
func BenchmarkFilterShapes(b *testing.B) {
	for _, s := range shapes() {
		f := compile(b, s.filter)
		b.Run(strings.ReplaceAll(s.name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(s.body)))
			for b.Loop() {
				in := &filter.Input{Provider: "acme", Event: "x", ContentType: "application/json", Body: s.body}
				if ok, err := f.Match(in); ok || err == nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
