// Package eventschema checks deliveries' payloads against JSON Schemas
// (draft 2020-12 unless a schema names another), configured per
// provider:pattern, the way routes match events. A delivery whose payload
// fails a schema of its event is still stored and acknowledged, but
// dispatched to no route: the sender is not at fault for what a route's
// target expects, and a forced replay dispatches it once the schema is fixed.
//
// Schemas are compiled once, at start, with
// github.com/santhosh-tekuri/jsonschema/v6; a file that does not compile
// stops the gateway there. Only files are read: a $ref to another file
// beside the schema works, a $ref to an http URL does not compile.
package eventschema

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"mime"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/providers"
)

// ErrInvalid means a schema could not be used: its pattern is wrong, its
// file cannot be read, or it does not compile.
var ErrInvalid = errors.New("bad schema")

// MaxMessage bounds a failure's message in bytes: a message may quote a
// value of the payload (a pattern's subject), which is never copied whole.
const MaxMessage = 300

// Set is the compiled schemas. The zero Set and a nil *Set check nothing.
type Set struct {
	schemas []compiled
}

type compiled struct {
	name   string // provider:pattern, as configured
	match  fanout.Match
	schema *jsonschema.Schema
}

// Compile compiles the schemas of files, provider:pattern to a schema file's
// path; sources are the configured sources' names, which patterns may name
// besides the built-in providers. Its error names each pattern and file that
// cannot be used, one line each.
func Compile(files map[string]string, sources []string) (*Set, error) {
	s := &Set{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		m, err := fanout.ParseMatch(name, sources)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w %q: %w", ErrInvalid, name, err))
			continue
		}
		sch, err := compileFile(files[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%w %q: %s: %w", ErrInvalid, name, files[name], err))
			continue
		}
		s.schemas = append(s.schemas, compiled{name: name, match: m, schema: sch})
	}
	return s, errors.Join(errs...)
}

// compileFile compiles one schema file.
func compileFile(path string) (*jsonschema.Schema, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// The compiler's own error for a missing file names a URL; this one says
	// what an operator can act on.
	if _, err := os.Stat(abs); err != nil {
		return nil, errors.Unwrap(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	sch, err := c.Compile(abs)
	if err != nil {
		return nil, errors.New(oneLine(err.Error()))
	}
	return sch, nil
}

// Len returns how many schemas the set holds.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.schemas)
}

// Applies reports whether a schema of the set applies to the event.
func (s *Set) Applies(provider, event string) bool {
	if s == nil {
		return false
	}
	return slices.ContainsFunc(s.schemas, func(c compiled) bool { return c.match.Matches(provider, event) })
}

// Check checks a delivery against every schema whose pattern matches its
// provider and event, in the order of their names, and returns why the
// first one fails; nil when it passes them all or none applies. A payload
// that is not JSON fails with the rule "json".
func (s *Set) Check(d providers.Delivery) *providers.SchemaError {
	if !s.Applies(d.Provider, d.Event) {
		return nil
	}
	var doc any
	var parseErr error
	parsed := false
	for _, c := range s.schemas {
		if !c.match.Matches(d.Provider, d.Event) {
			continue
		}
		if !parsed {
			doc, parseErr = parse(d.ContentType, d.Body)
			parsed = true
		}
		if parseErr != nil {
			return &providers.SchemaError{Schema: c.name, Path: "", Rule: "json", Message: errtext.Excerpt("the payload is not JSON: "+parseErr.Error(), MaxMessage)}
		}
		err := c.schema.Validate(doc)
		if err == nil {
			continue
		}
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return &providers.SchemaError{Schema: c.name, Rule: "schema", Message: errtext.Excerpt(err.Error(), MaxMessage)}
		}
		leaf := firstLeaf(ve)
		return &providers.SchemaError{Schema: c.name, Path: pointer(leaf.InstanceLocation), Rule: rule(leaf),
			Message: errtext.Excerpt(oneLine(leaf.ErrorKind.LocalizedString(printer)), MaxMessage)}
	}
	return nil
}

// printer words the validator's messages.
var printer = message.NewPrinter(language.English)

// parse reads a payload as the schema sees it: the body's JSON, or the
// payload field of a form-encoded body (GitHub's form content type).
func parse(contentType string, body []byte) (any, error) {
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/x-www-form-urlencoded" {
		p, err := providers.DecodeGitHubForm(body)
		if err != nil {
			return nil, err
		}
		body = p
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(body))
}

// firstLeaf returns the first error at the bottom of a validation error's
// tree: the value and the keyword that failed, not the schema's "failed".
func firstLeaf(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

// rule is the keyword a leaf error names: the last of its keyword path.
func rule(ve *jsonschema.ValidationError) string {
	kw := ve.ErrorKind.KeywordPath()
	if len(kw) == 0 {
		return "schema"
	}
	return kw[len(kw)-1]
}

// pointer is a JSON Pointer (RFC 6901) of an instance location.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
