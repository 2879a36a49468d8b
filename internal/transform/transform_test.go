package transform_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/transform"
)

const invoice = `{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1","customer":"cus_1","amount_paid":1250,"lines":[{"id":"il_1"}]}}}`

func apply(t *testing.T, src, body string) (transform.Result, error) {
	t.Helper()
	tr, err := transform.Compile(src)
	if err != nil {
		t.Fatalf("Compile(%s): %v", src, err)
	}
	return tr.Apply(&filter.Input{Provider: "stripe", Event: "invoice.paid", Headers: map[string]string{"Stripe-Account": "acct_1"},
		ContentType: "application/json; charset=utf-8", Body: []byte(body)})
}

// A transformation gives the body (a payload value sent as its own bytes,
// a map made of fields as JSON with its keys sorted, a string as it is),
// headers to add, a path and skip; without a body the delivery's bytes and
// content type go.
func TestATransformationShapesWhatIsSent(t *testing.T) {
	for _, c := range []struct {
		src, body, contentType string
	}{
		{`{"body": payload.data.object.lines}`, `[{"id":"il_1"}]`, "application/json"},
		{`{"body": {"invoice": payload.data.object.id, "cents": payload.data.object.amount_paid, "event": event, "ok": true, "none": null}}`,
			`{"cents":1250,"event":"invoice.paid","invoice":"in_1","none":null,"ok":true}`, "application/json"},
		{`{"body": "paid " + payload.data.object.id}`, `paid in_1`, "application/json; charset=utf-8"},
		{`{"path": "/x"}`, invoice, "application/json; charset=utf-8"},
	} {
		res, err := apply(t, c.src, invoice)
		if err != nil || string(res.Body) != c.body || res.ContentType != c.contentType {
			t.Errorf("%s: %q %q, %v; want %q %q", c.src, res.Body, res.ContentType, err, c.body, c.contentType)
		}
	}
	res, err := apply(t, `{"headers": {"X-Account": headers["stripe-account"], "Idempotency-Key": "mine", "X-Hookgate-Route": "x", "webhook-id": "x", "Svix-Signature": "x", "Content-Type": "text/plain", "Host": "evil"}, "path": "/invoices/" + payload.data.object.id, "skip": payload.data.object.amount_paid == 0}`, invoice)
	if err != nil || len(res.Headers) != 1 || res.Headers["X-Account"] != "acct_1" || res.Path != "/invoices/in_1" || res.Skip {
		t.Errorf("headers, path, skip: %+v, %v; want X-Account alone, the path, no skip", res, err)
	}
	if res, err := apply(t, `{"skip": true}`, invoice); err != nil || !res.Skip {
		t.Errorf("skip: %+v, %v", res, err)
	}
}

// A transformation that fails on a delivery, or gives what cannot be sent,
// is ErrFailed saying why; one that cannot compile, or cannot be a map, is
// refused with where it fails.
func TestATransformationThatFailsSaysWhy(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{"body": payload.data.nothere}`, "no such key"},
		{`{"bodyy": 1}`, "its map has the key bodyy"},
		{`{"path": "/../admin"}`, ". or .. segment"},
		{`{"path": "x"}`, "must start with /"},
		{`{"path": 7}`, "path is int"},
		{`{"headers": {"X-A": 1}}`, "X-A must be a string"},
		{`{"headers": {"Bad Name": "v"}}`, "not a header name"},
		{`{"body": {"d": duration("1s")}}`, "no JSON form"},
		{`{"body": 1}`, "body is int: give a map or a list"},
		{`{"body": payload.data.object.amount_paid}`, "body is int"},
		{`{"skip": "yes"}`, "skip is string"},
	} {
		_, err := apply(t, c.src, invoice)
		if !errors.Is(err, transform.ErrFailed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrFailed ... %s", c.src, err, c.want)
		}
	}
	if _, err := apply(t, `{"body": payload}`, `not json`); !errors.Is(err, transform.ErrFailed) {
		t.Errorf("a payload that is not JSON: %v", err)
	}
	for _, src := range []string{`payload.id == "x"`, `"text"`, `{"body": payload.`} {
		if _, err := transform.Compile(src); !errors.Is(err, transform.ErrInvalid) {
			t.Errorf("Compile(%s) = %v; want ErrInvalid", src, err)
		}
	}
	_, err := transform.Compile("{\n  \"body\": nothere\n}")
	if p := transform.PositionOf(err); p == nil || p.Line != 2 || p.Column != 11 || !strings.Contains(err.Error(), "line 2, column 11: undeclared reference") {
		t.Errorf("the position of %v: %+v; want line 2", err, p)
	}
}

// A path goes after the target's own, its query kept.
func TestATransformationsPathFollowsTheTargets(t *testing.T) {
	for _, c := range []struct{ target, path, want string }{
		{"http://svc:8080/hooks", "/invoices/in_1", "http://svc:8080/hooks/invoices/in_1"},
		{"http://svc:8080/hooks/?k=v", "/a%20b", "http://svc:8080/hooks/a%20b?k=v"},
		{"http://svc:8080", "/x", "http://svc:8080/x"},
		{"http://svc:8080/hooks", "", "http://svc:8080/hooks"},
	} {
		if got, err := transform.Target(c.target, c.path); err != nil || got != c.want {
			t.Errorf("Target(%s, %s) = %s, %v; want %s", c.target, c.path, got, err, c.want)
		}
	}
}

// A transformation's cost is bounded as a filter's: a loop that would walk
// the payload again and again stops.
func TestATransformationIsBoundedLikeAFilter(t *testing.T) {
	big := `{"xs":[` + strings.Repeat(`1,`, 20000) + `1]}`
	_, err := apply(t, `{"body": payload.xs.map(x, payload.xs.map(y, x + y))}`, big)
	if !errors.Is(err, transform.ErrFailed) {
		t.Fatalf("a quadratic transformation: %v; want it stopped", err)
	}
}

// BenchmarkTransform is a transformation's cost on a small invoice: a body
// of three fields, a header and a path.
func BenchmarkTransform(b *testing.B) {
	tr, err := transform.Compile(`{"body": {"invoice": payload.data.object.id, "customer": payload.data.object.customer, "cents": payload.data.object.amount_paid}, "headers": {"X-Event": event}, "path": "/invoices"}`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Apply(&filter.Input{Provider: "stripe", Event: "invoice.paid", ContentType: "application/json", Body: []byte(invoice)}); err != nil {
			b.Fatal(err)
		}
	}
}
