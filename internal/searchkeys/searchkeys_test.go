package searchkeys_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/searchkeys"
)

// A key's value is a JSON string or number at its path, as text; anything
// else, or text no key holds, gives the delivery no value for that key.
func TestOf(t *testing.T) {
	t.Parallel()
	s, err := searchkeys.New(searchkeys.Paths{"stripe": {"customer": "data.object.customer", "amount": "data.object.amount", "flag": "data.object.flag"}})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", searchkeys.MaxValueLen+1)
	for body, want := range map[string]string{
		`{"data":{"object":{"customer":"cus_1","amount":2000}}}`:       "[amount:2000 customer:cus_1]",
		`{"data":{"object":{"customer":"cus_1","customer":"cus_2"}}}`:  "[customer:cus_1]",
		`{"data":{"object":{"amount":1e3,"flag":true}}}`:               "[amount:1e3]",
		`{"data":{"object":{"customer":{"id":"cus_1"},"amount":[1]}}}`: "[]",
		`{"data":{"object":{"customer":"","amount":null}}}`:            "[]",
		`{"data":{"object":{"customer":"` + long + `"}}}`:              "[]",
		`{"data":{"object":{"customer":"a\u0000b"}}}`:                  "[]",
		`{"data":"not an object"}`:                                     "[]",
		`not json`:                                                     "[]",
	} {
		if got := fmt.Sprint(s.Of("stripe", "application/json", []byte(body))); got != want {
			t.Errorf("%.60s: %s, want %s", body, got, want)
		}
	}
	if got := s.Of("github", "application/json", []byte(`{"data":{"object":{"customer":"cus_1"}}}`)); got == nil || len(got) != 0 {
		t.Errorf("a provider without keys: %v, want an empty list, never nil", got)
	}
	var none *searchkeys.Set
	if got := none.Of("stripe", "application/json", []byte(`{}`)); got == nil || len(got) != 0 || none.Names() != nil {
		t.Errorf("the nil Set: %v, %v", got, none.Names())
	}
	// A form-encoded GitHub delivery's keys are its payload field's.
	gh, _ := searchkeys.New(searchkeys.Paths{"github": {"pr": "pull_request.number"}})
	form := "payload=" + url.QueryEscape(`{"pull_request":{"number":42}}`)
	if got := fmt.Sprint(gh.Of("github", "application/x-www-form-urlencoded", []byte(form))); got != "[pr:42]" {
		t.Errorf("form-encoded: %s", got)
	}
}

// A filter's key is name:value, its name one the Set indexes.
func TestParse(t *testing.T) {
	t.Parallel()
	s, _ := searchkeys.New(searchkeys.Paths{"github": {"repo": "repository.full_name"}, "stripe": {"customer": "data.object.customer"}})
	if k, err := s.Parse("repo:acme/api:v2"); err != nil || k.Name != "repo" || k.Value != "acme/api:v2" {
		t.Errorf("a value holding colons: %+v, %v", k, err)
	}
	for filter, want := range map[string]string{
		"repo":                             "such as customer:cus_123; the keys are customer, repo",
		"repos:acme":                       `"repos" is not a configured search key: the keys are customer, repo`,
		"repo:":                            "1 to 255 bytes",
		"repo:" + strings.Repeat("x", 256): "1 to 255 bytes",
		"repo:a\tb":                        "printable",
	} {
		_, err := s.Parse(filter)
		if !errors.Is(err, searchkeys.ErrBad) || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", filter, err, want)
		}
	}
	var none *searchkeys.Set
	if _, err := none.Parse("repo:x"); err == nil || !strings.Contains(err.Error(), "no search key is configured") {
		t.Errorf("no keys: %v", err)
	}
}

// New refuses a name or a path no key can have, naming each.
func TestNewRefusesWhatIsWrong(t *testing.T) {
	t.Parallel()
	_, err := searchkeys.New(searchkeys.Paths{"stripe": {"Customer": "a", "ok": "a..b", "fine": "data.id"}})
	if err == nil || !strings.Contains(err.Error(), `stripe: search key: "Customer"`) || !strings.Contains(err.Error(), `stripe.ok: search key: "a..b"`) {
		t.Fatalf("New = %v", err)
	}
}
