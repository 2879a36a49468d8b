// Package searchkeys names what operators find deliveries by: values read
// from a delivery's payload at ingest, by JSON paths the configuration file
// names per provider (search_keys:), and stored in an index beside the
// receipt, so that "every delivery about cus_123" is one index lookup across
// the whole retention instead of a search through bodies.
//
//	search_keys:
//	  stripe: {customer: data.object.customer}
//	  github: {repo: repository.full_name, pr: pull_request.number}
//
// A key's value is a JSON string or number at its path, as text (a number as
// written); a path that reaches nothing, an object, an array, a boolean, a
// null, or text that is empty, longer than MaxValueLen or not printable gives
// the delivery no value for that key.
package searchkeys

import (
	"errors"
	"fmt"
	"maps"
	"mime"
	"regexp"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/hookgate/hookgate/internal/payload"
	"github.com/hookgate/hookgate/internal/providers"
)

// ErrBad means a search key's name, path or value could not be used.
var ErrBad = errors.New("search key")

// MaxValueLen bounds a key's value: an id, a name, a number.
const MaxValueLen = providers.MaxIDLen

// MaxPerFilter bounds the keys one filter gives: each is one more lookup of
// the index per delivery found.
const MaxPerFilter = 8

// Paths are the configuration's search keys: provider, then key name, then
// the dot-separated JSON path of its value in the payload.
type Paths map[string]map[string]string

// Key is one search key's value, as a delivery carries it
// (providers.Delivery.Keys).
type Key = providers.SearchKey

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// CheckName checks a key's name: a lower-case letter, then up to 63 lower-case
// letters, digits and underscores.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %q: a name is a lower-case letter, then up to 63 lower-case letters, digits or _", ErrBad, name)
	}
	return nil
}

// CheckPath checks a key's path: dot-separated names, at most 256 bytes.
func CheckPath(path string) error {
	if path == "" || len(path) > 256 {
		return fmt.Errorf("%w: a path is 1 to 256 bytes of dot-separated names, such as data.object.customer", ErrBad)
	}
	for part := range strings.SplitSeq(path, ".") {
		if part == "" || !providers.Printable(part) {
			return fmt.Errorf("%w: %q: a path is dot-separated names of printable text, such as data.object.customer", ErrBad, path)
		}
	}
	return nil
}

// Set is the search keys a gateway indexes, checked; the nil Set indexes
// none.
type Set struct {
	byProvider map[string][]named
	names      []string
}

// named is one key of a provider.
type named struct {
	name string
	path []string
}

// New checks paths and returns its Set, each name and path right; that its
// providers are configured is the caller's to check.
func New(paths Paths) (*Set, error) {
	s := &Set{byProvider: map[string][]named{}}
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		for _, name := range slices.Sorted(maps.Keys(paths[p])) {
			path := paths[p][name]
			if err := CheckName(name); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
				continue
			}
			if err := CheckPath(path); err != nil {
				errs = append(errs, fmt.Errorf("%s.%s: %w", p, name, err))
				continue
			}
			s.byProvider[p] = append(s.byProvider[p], named{name: name, path: strings.Split(path, ".")})
			if !slices.Contains(s.names, name) {
				s.names = append(s.names, name)
			}
		}
	}
	slices.Sort(s.names)
	return s, errors.Join(errs...)
}

// Names returns the key names of every provider, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return s.names
}

// Of returns the values of the provider's keys in a delivery's body (as
// route filters read it: the payload field of a form-encoded body): never
// nil, so that a caller tells "read, none" from "not read yet"
// (providers.Delivery.Keys). A body that is no JSON object has none.
func (s *Set) Of(provider, contentType string, body []byte) []Key {
	keys := []Key{}
	if s == nil || len(s.byProvider[provider]) == 0 {
		return keys
	}
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/x-www-form-urlencoded" {
		p, err := providers.DecodeGitHubForm(body)
		if err != nil {
			return keys
		}
		body = p
	}
	o, err := payload.Parse(body)
	if err != nil {
		return keys
	}
	for _, k := range s.byProvider[provider] {
		if v, ok := text(o.Get(k.path...)); ok {
			keys = append(keys, Key{Name: k.name, Value: v})
		}
	}
	return keys
}

// text returns a value as a key holds it: a string's text, a number as
// written; ok is false for anything else and for text no key holds.
func text(v payload.Value) (string, bool) {
	var s string
	switch r := v.Result(); r.Type {
	case gjson.String:
		s = r.Str
	case gjson.Number:
		s = r.Raw
	default:
		return "", false
	}
	return s, CheckValue(s) == nil
}

// CheckValue checks a key's value: 1 to MaxValueLen bytes of printable text.
func CheckValue(v string) error {
	if v == "" || len(v) > MaxValueLen || !providers.Printable(v) {
		return fmt.Errorf("%w: a value is 1 to %d bytes of printable text", ErrBad, MaxValueLen)
	}
	return nil
}

// Parse reads a filter's key, "name:value" (the value may hold colons), and
// checks that s indexes the name.
func (s *Set) Parse(filter string) (Key, error) {
	name, value, ok := strings.Cut(filter, ":")
	if !ok {
		keys := "no search key is configured (search_keys: in the configuration file)"
		if len(s.Names()) > 0 {
			keys = "the keys are " + strings.Join(s.Names(), ", ")
		}
		return Key{}, fmt.Errorf("%w: %q: a key is name:value, such as customer:cus_123; %s", ErrBad, shorten(filter), keys)
	}
	if !slices.Contains(s.Names(), name) {
		if len(s.Names()) == 0 {
			return Key{}, fmt.Errorf("%w: %q: no search key is configured (search_keys: in the configuration file)", ErrBad, shorten(name))
		}
		return Key{}, fmt.Errorf("%w: %q is not a configured search key: the keys are %s", ErrBad, shorten(name), strings.Join(s.Names(), ", "))
	}
	if err := CheckValue(value); err != nil {
		return Key{}, fmt.Errorf("%s: %w", name, err)
	}
	return Key{Name: name, Value: value}, nil
}

// shorten is text a message quotes, cut to 64 bytes.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
