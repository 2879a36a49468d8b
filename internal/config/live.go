package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hookgate/hookgate/internal/fanout"
)

// lineNumber is the "line N: " the configuration file's errors start with.
var lineNumber = regexp.MustCompile(`line \d+: `)

// ErrBadLiveRoute means a route given to the API (GATEWAY_ROUTES_FROM=
// database) that is not one the configuration file could hold.
var ErrBadLiveRoute = errors.New("bad route")

// LiveRoute reads a route of the database's: body is the configuration
// file's route shape as JSON (match, target or target_env, filter, order,
// the limits), name the route's (a name in the body must be the same). It
// checks the route as the file's routes are checked at start, a builtin
// target against builtins, and returns it, and its spec to store: the body,
// its name in it. Its error names every key that is wrong, never a value
// (a target may carry a credential).
func (r Resolved) LiveRoute(name string, body []byte, builtins []string) (fanout.Route, []byte, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadLiveRoute}, args...)...)
	}
	if err := fanout.CheckName(name); err != nil {
		return fanout.Route{}, nil, bad("name: %v", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(body, &spec); err != nil || spec == nil {
		return fanout.Route{}, nil, bad("the body must be a JSON object: a route as the configuration file has it")
	}
	if problems := shapeProblems(body, spec, name); len(problems) > 0 {
		return fanout.Route{}, nil, bad("%s", strings.Join(problems, "; "))
	}
	spec["name"] = name
	stored, _ := json.Marshal(spec)
	var doc yaml.Node
	if err := yaml.Unmarshal(stored, &doc); err != nil || len(doc.Content) == 0 {
		return fanout.Route{}, nil, bad("the body must be a JSON object")
	}
	providers := r.configured(r.sourceNames)
	route, errs := readRoute(doc.Content[0], r.sourceNames, providers, os.LookupEnv)
	if len(errs) > 0 {
		// The YAML reader's line numbers mean nothing in a JSON body.
		text := lineNumber.ReplaceAllString(strings.ReplaceAll(errors.Join(errs...).Error(), "\n", "; "), "")
		return fanout.Route{}, nil, bad("%s", text)
	}
	d := r.RouteDefaults()
	d.Sources = r.sourceNames
	fr, keyErrs := resolveRoute(route, d, providers)
	keyErrs = append(keyErrs, unconfigured(fr, providers, nil)...)
	var problems []string
	for _, ke := range keyErrs {
		problems = append(problems, ke.Error())
	}
	if handler, ok := fr.Builtin(); ok && len(keyErrs) == 0 && !slices.Contains(builtins, handler) {
		problems = append(problems, fmt.Sprintf("key target: no builtin handler named %q (have %s)", handler, strings.Join(builtins, ", ")))
	}
	if len(problems) > 0 {
		return fanout.Route{}, nil, bad("%s", strings.Join(problems, "; "))
	}
	return fr, stored, nil
}

// routeKeyKinds are the JSON kinds of a route's keys: "strings" a list of
// strings, "int" a whole number, "object" the circuit.
var routeKeyKinds = map[string]string{"name": "string", "match": "strings", "target": "string", "target_env": "string",
	"concurrency": "int", "rate": "string", "timeout": "string", "max_attempts": "int", "circuit": "object", "filter": "string", "transform": "string",
	"order": "string", "order_window": "string"}

// shapeProblems names every key of a route's JSON body that is unknown,
// given twice or of the wrong kind, and a name other than the path's: all
// of them, before what the values mean is checked.
func shapeProblems(body []byte, spec map[string]any, name string) []string {
	problems := duplicateKeys(body)
	for _, key := range slices.Sorted(maps.Keys(spec)) {
		v := spec[key]
		kind, known := routeKeyKinds[key]
		switch {
		case !known:
			problems = append(problems, fmt.Sprintf("key %s: not a key of a route (%s)", key, strings.Join(routeKeys, ", ")))
		case !ofKind(v, kind):
			problems = append(problems, fmt.Sprintf("key %s: must be %s", key, kindNames[kind]))
		case key == "name" && v != name:
			problems = append(problems, fmt.Sprintf("key name: must be the route's name in the path, %s", name))
		case key == "circuit":
			c := v.(map[string]any)
			for _, ck := range slices.Sorted(maps.Keys(c)) {
				switch {
				case ck == "failures" && !ofKind(c[ck], "int"):
					problems = append(problems, "key circuit.failures: must be a whole number")
				case ck == "cooldown" && !ofKind(c[ck], "string"):
					problems = append(problems, "key circuit.cooldown: must be a string, a duration such as 30s")
				case ck != "failures" && ck != "cooldown":
					problems = append(problems, fmt.Sprintf("key circuit.%s: not a key of a circuit (failures, cooldown)", ck))
				}
			}
		}
	}
	return problems
}

var kindNames = map[string]string{"string": "a string", "strings": "a list of strings", "int": "a whole number", "object": "an object"}

// ofKind reports whether a decoded JSON value is of kind.
func ofKind(v any, kind string) bool {
	switch kind {
	case "string":
		_, ok := v.(string)
		return ok
	case "int":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f) && math.Abs(f) < 1<<53
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "strings":
		list, ok := v.([]any)
		return ok && !slices.ContainsFunc(list, func(x any) bool { _, s := x.(string); return !s })
	}
	return false
}

// duplicateKeys names the keys a JSON object gives twice, its objects'
// included: encoding/json keeps the last, silently.
func duplicateKeys(body []byte) []string {
	var problems []string
	dec := json.NewDecoder(bytes.NewReader(body))
	var walk func(path string) bool
	walk = func(path string) bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return false
				}
				key, _ := k.(string)
				if seen[key] {
					problems = append(problems, fmt.Sprintf("key %s%s: given twice", path, key))
				}
				seen[key] = true
				if !walk(path + key + ".") {
					return false
				}
			}
			_, err = dec.Token()
			return err == nil
		case json.Delim('['):
			for dec.More() {
				if !walk(path) {
					return false
				}
			}
			_, err = dec.Token()
			return err == nil
		}
		return true
	}
	walk("")
	return problems
}

// SeedSpecs are the configured routes (the file's or GATEWAY_ROUTES) as
// specs of the database's, in their order: what GATEWAY_ROUTES_FROM=database
// seeds an empty table with. A target_env's target is stored as its value.
func (r Resolved) SeedSpecs() (names []string, specs [][]byte) {
	for _, route := range r.Routes {
		s := map[string]any{"name": route.Name, "match": route.Match, "target": route.Target}
		if route.Concurrency > 0 {
			s["concurrency"] = route.Concurrency
		}
		if route.Rate != "" {
			s["rate"] = route.Rate
		}
		if route.Timeout > 0 {
			s["timeout"] = route.Timeout.String()
		}
		if route.MaxAttempts > 0 {
			s["max_attempts"] = route.MaxAttempts
		}
		if c := route.Circuit; c != nil {
			circuit := map[string]any{"failures": c.Failures}
			if c.Cooldown > 0 {
				circuit["cooldown"] = c.Cooldown.String()
			}
			s["circuit"] = circuit
		}
		if route.Filter != "" {
			s["filter"] = route.Filter
		}
		if route.Transform != "" {
			s["transform"] = route.Transform
		}
		if route.Order != "" {
			s["order"] = route.Order
		}
		if route.OrderWindow > 0 {
			s["order_window"] = route.OrderWindow.String()
		}
		b, _ := json.Marshal(s)
		names, specs = append(names, route.Name), append(specs, b)
	}
	return names, specs
}
