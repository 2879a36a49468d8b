package config

import (
	"encoding/json"
	"errors"
	"fmt"
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
	if n, ok := spec["name"]; ok && n != name {
		return fanout.Route{}, nil, bad("key name: must be the route's name in the path, %s", name)
	}
	spec["name"] = name
	stored, _ := json.Marshal(spec)
	var doc yaml.Node
	if err := yaml.Unmarshal(stored, &doc); err != nil || len(doc.Content) == 0 {
		return fanout.Route{}, nil, bad("the body must be a JSON object")
	}
	configured := slices.Concat(builtins, r.sourceNames)
	route, errs := readRoute(doc.Content[0], r.sourceNames, configured, os.LookupEnv)
	if len(errs) > 0 {
		// The YAML reader's line numbers mean nothing in a JSON body.
		text := lineNumber.ReplaceAllString(strings.ReplaceAll(errors.Join(errs...).Error(), "\n", "; "), "")
		return fanout.Route{}, nil, bad("%s", text)
	}
	d := r.RouteDefaults()
	d.Sources = r.sourceNames
	fr, keyErrs := resolveRoute(route, d, r.configured(r.sourceNames))
	keyErrs = append(keyErrs, unconfigured(fr, r.configured(r.sourceNames), nil)...)
	var problems []string
	for _, ke := range keyErrs {
		problems = append(problems, ke.Error())
	}
	if err := (fanout.Table{fr}).CheckBuiltins(builtins); err != nil && len(keyErrs) == 0 {
		problems = append(problems, "key target: "+err.Error())
	}
	if len(problems) > 0 {
		return fanout.Route{}, nil, bad("%s", strings.Join(problems, "; "))
	}
	return fr, stored, nil
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
