package eventschema_test

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/eventschema"
	"github.com/hookgate/hookgate/internal/providers"
)

func compile(t testing.TB, files map[string]string) *eventschema.Set {
	t.Helper()
	s, err := eventschema.Compile(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pullRequest(t testing.TB, edit func(string) string) providers.Delivery {
	t.Helper()
	b, err := os.ReadFile("testdata/pull_request.opened.json")
	if err != nil {
		t.Fatal(err)
	}
	return providers.Delivery{Provider: "github", Event: "pull_request.opened", ContentType: "application/json", Body: []byte(edit(string(b)))}
}

func same(s string) string { return s }

// A payload is checked against every schema whose pattern matches its
// event (a $ref to a file beside the schema included), and the first
// failure is said by the failing value's JSON Pointer, the keyword that
// failed and the validator's message.
func TestAPayloadFailsItsSchemaAtAPathByARule(t *testing.T) {
	s := compile(t, map[string]string{"github:pull_request": "testdata/pull_request.json"})
	if e := s.Check(pullRequest(t, same)); e != nil {
		t.Fatalf("a real pull request: %+v; want it valid", e)
	}
	for _, c := range []struct {
		name, from, to string
		path, rule     string
	}{
		{"a missing field", `"number": 2,`, ``, "", "required"},
		{"a wrong type, through a $ref", `"title": "Update the README with new information."`, `"title": 7`, "/pull_request/title", "type"},
		{"an array's element", `"name": "deploy",`, ``, "/pull_request/labels/0", "required"},
		{"an enum", `"action": "opened"`, `"action": "exploded"`, "/action", "enum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := s.Check(pullRequest(t, func(b string) string { return strings.Replace(b, c.from, c.to, 1) }))
			if e == nil || e.Schema != "github:pull_request" || e.Path != c.path || e.Rule != c.rule || e.Message == "" {
				t.Fatalf("%+v; want %s at %q", e, c.rule, c.path)
			}
		})
	}
	// Another event is not checked; nor is anything with no schema.
	other := pullRequest(t, func(string) string { return `not json` })
	other.Event = "push"
	if e := s.Check(other); e != nil {
		t.Errorf("an event no schema names: %+v", e)
	}
	var none *eventschema.Set
	if e := none.Check(pullRequest(t, func(string) string { return `{}` })); e != nil {
		t.Errorf("no schemas: %+v", e)
	}
}

// A payload that is not JSON fails with the rule "json"; a form-encoded
// GitHub payload is checked as its JSON.
func TestAPayloadIsReadAsJSONOrAsGitHubsForm(t *testing.T) {
	s := compile(t, map[string]string{"github:pull_request": "testdata/pull_request.json"})
	if e := s.Check(pullRequest(t, func(b string) string { return b[:40] })); e == nil || e.Rule != "json" || e.Path != "" {
		t.Errorf("a truncated payload: %+v; want rule json", e)
	}
	d := pullRequest(t, func(b string) string { return "payload=" + url.QueryEscape(b) })
	d.ContentType = "application/x-www-form-urlencoded"
	if e := s.Check(d); e != nil {
		t.Errorf("a form-encoded pull request: %+v; want it valid", e)
	}
}

// A message quoting a long value of the payload is cut short.
func TestAFailuresMessageIsBounded(t *testing.T) {
	s := compile(t, map[string]string{"github:pull_request": "testdata/pull_request.json"})
	e := s.Check(pullRequest(t, func(b string) string {
		return strings.Replace(b, `"login": "octocat"`, `"login": "`+strings.Repeat("é", 1000)+`"`, 1)
	}))
	if e == nil || len(e.Message) > eventschema.MaxMessage+len("…") || !strings.HasSuffix(e.Message, "…") {
		t.Fatalf("%+v; want a message of at most %d bytes", e, eventschema.MaxMessage)
	}
}

// BenchmarkCheck is the cost of checking one pull request (1.2 KB) against
// a schema of two files.
func BenchmarkCheck(b *testing.B) {
	s := compile(b, map[string]string{"github:pull_request": "testdata/pull_request.json"})
	d := pullRequest(b, same)
	b.ReportAllocs()
	b.SetBytes(int64(len(d.Body)))
	for b.Loop() {
		if e := s.Check(d); e != nil {
			b.Fatal(e)
		}
	}
}
