package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/notify"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/searchkeys"
)

// ErrBadFile means the configuration file could not be read or holds a value
// that makes no sense. Its message names the file, the route or source, and
// the key with its line; never the value of secret_env or target_env, nor
// what the variable they name holds.
var ErrBadFile = errors.New("configuration file")

// The keys each level of the file may hold; anything else is refused.
var (
	fileKeys   = []string{"routes", "sources", "search_keys", "schemas", "notifications"}
	sourceKeys = []string{"name", "kind", "secret_env", "tolerance", "order", "signature_header", "algorithm", "encoding", "prefix",
		"timestamp_header", "id_header", "id_field", "event_header", "event_field"}
	orderKeys   = []string{"entity", "time"}
	routeKeys   = []string{"name", "match", "target", "target_env", "concurrency", "rate", "timeout", "max_attempts", "circuit", "filter", "transform", "order", "order_window"}
	circuitKeys = []string{"failures", "cooldown"}
	notifyKeys  = []string{"name", "kind", "url", "url_env", "events"}
)

// fileRoute is one route as written in the file; a pointer tells a value
// left out from a zero.
type fileRoute struct {
	Name        string   `yaml:"name"`
	Match       []string `yaml:"match"`
	Target      string   `yaml:"target"`
	TargetEnv   string   `yaml:"target_env"`
	Concurrency *int     `yaml:"concurrency"`
	Rate        string   `yaml:"rate"`
	Timeout     string   `yaml:"timeout"`
	MaxAttempts *int     `yaml:"max_attempts"`
	Circuit     *struct {
		Failures *int   `yaml:"failures"`
		Cooldown string `yaml:"cooldown"`
	} `yaml:"circuit"`
	Filter      *string `yaml:"filter"`
	Transform   *string `yaml:"transform"`
	Order       string  `yaml:"order"`
	OrderWindow string  `yaml:"order_window"`
}

// read is what routesAndSources found.
type read struct {
	// routes are the routes that could be read; from says where: the
	// configuration file ("configuration file PATH") or GATEWAY_ROUTES.
	routes []Route
	from   string
	// file is the configuration file's path when the routes are its.
	file string
	// sources are the configuration file's sources that could be read;
	// unreadSources the names of those that could not, which routes may
	// still name without a second error.
	sources       []Source
	unreadSources []string
	// searchKeys are the file's search keys, as written (Resolve checks
	// their providers), and keyLines each provider's line.
	searchKeys searchkeys.Paths
	keyLines   map[string]int
	// schemas are the file's JSON Schemas, provider:pattern to a file's
	// path (Resolve compiles them).
	schemas map[string]string
	// notifications are the file's notifications that could be read.
	notifications []notify.Notification
}

// routesAndSources returns the routes and the configuration file's sources:
// the routes from the file at path when it lists routes, else from
// GATEWAY_ROUTES (spec), which may name the file's sources. Both at once is
// an error. builtins are the built-in providers configured. Each route is
// checked as Resolve checks it, so that a file's error names its line. The
// error names everything that could not be read, one line each; what could
// be is returned beside it.
func routesAndSources(spec, path string, lookup Lookup, builtins []string) (read, error) {
	if path == "" {
		rs, err := parseSpec(spec)
		return read{routes: rs, from: routesVariable}, err
	}
	if err := statOK(path); err != nil {
		return read{}, fmt.Errorf("GATEWAY_CONFIG_FILE: the file it names cannot be read: %w", err)
	}
	f, err := readFile(path, lookup, builtins)
	r := read{sources: f.sources, unreadSources: f.unreadSources, searchKeys: f.searchKeys, keyLines: f.keyLines,
		schemas: f.schemas, notifications: f.notifications}
	if !f.routesListed {
		rs, serr := parseSpec(spec)
		r.routes, r.from = rs, routesVariable
		return r, errors.Join(err, serr)
	}
	if strings.TrimSpace(spec) != "" {
		return r, errors.Join(err, fmt.Errorf("%w %s: routes are given both here and in GATEWAY_ROUTES; keep one", ErrBadFile, path))
	}
	r.routes, r.from, r.file = f.routes, "configuration file "+path, path
	return r, err
}

// file is what the configuration file holds.
type file struct {
	// routes are the file's routes that could be read; routesListed says
	// whether it has a routes key at all.
	routes       []Route
	routesListed bool
	// sources are the senders besides GitHub and Stripe that could be read,
	// checked; unreadSources the names of those that could not.
	sources       []Source
	unreadSources []string
	// searchKeys are the file's search keys whose names and paths are
	// right, and keyLines each provider's line.
	searchKeys searchkeys.Paths
	keyLines   map[string]int
	// schemas are the file's JSON Schemas, provider:pattern to a file's
	// path, relative ones made relative to the configuration file's folder.
	schemas map[string]string
	// notifications are those that could be read, checked but for their
	// signing secret (Resolve's).
	notifications []notify.Notification
}

// readFile reads the YAML configuration file at path. A target_env names the
// variable holding the target's URL (or its _FILE variant, a file holding
// it), so that a URL carrying a credential stays out of the file; a source's
// secret_env names the variable holding its secrets, likewise. builtins are
// the built-in providers configured, for a route's messages. Every route and
// source that cannot be read is reported, each of its mistakes on a line of
// its own; the others are returned.
func readFile(path string, lookup Lookup, builtins []string) (file, error) {
	var f file
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: "+format, append([]any{ErrBadFile, path}, args...)...)
	}
	b, err := readBounded(path, MaxConfigFileBytes)
	if err != nil {
		return f, bad("the file %w", err)
	}
	// A file that holds nothing (a volume not mounted yet, a template left
	// empty) must not pass for a choice of no routes; nor may a second YAML
	// document go unread.
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return f, bad("the file is empty")
	} else if err != nil {
		return f, bad("%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return f, bad("the file holds more than one YAML document (a line ---); keep one")
	}
	if len(doc.Content) == 0 {
		return f, bad("the file is empty")
	}
	top := doc.Content[0]
	if err := checkKeys(top, fileKeys); err != nil {
		return f, bad("%w", err)
	}
	var errs []error
	names := f.readSources(value(top, "sources"), lookup, func(err error) { errs = append(errs, bad("%w", err)) })
	f.searchKeys, f.keyLines = readSearchKeys(value(top, "search_keys"), func(err error) { errs = append(errs, bad("%w", err)) })
	f.schemas = readSchemas(value(top, "schemas"), filepath.Dir(path), func(err error) { errs = append(errs, bad("%w", err)) })
	f.notifications = readNotifications(value(top, "notifications"), lookup, func(err error) { errs = append(errs, bad("%w", err)) })
	list := value(top, "routes")
	if list == nil {
		return f, errors.Join(errs...)
	}
	f.routesListed = true
	if list.Kind != yaml.SequenceNode {
		return f, errors.Join(append(errs, bad("line %d: routes must be a list of routes", list.Line))...)
	}
	configured := slices.Concat(builtins, names)
	seen := map[string]bool{}
	for i, n := range list.Content {
		where := itemName("route", i, n, fanout.CheckName)
		if name := value(n, "name"); name != nil && fanout.CheckName(name.Value) == nil {
			if seen[name.Value] {
				errs = append(errs, bad("%s: %w", where, keyErrors(n)("name", "%s is used by another route", name.Value)))
				continue
			}
			seen[name.Value] = true
		}
		r, routeErrs := readRoute(n, names, configured, lookup)
		for _, err := range routeErrs {
			errs = append(errs, bad("%s: %w", where, err))
		}
		if len(routeErrs) == 0 {
			f.routes = append(f.routes, r)
		}
	}
	return f, errors.Join(errs...)
}

// readSources reads the file's sources (list, when the file has them) into
// f, passing each error to report, and returns the names routes may give:
// every source's whose name is right, read or not (a route naming a source
// that could not be read is no second mistake).
func (f *file) readSources(list *yaml.Node, lookup Lookup, report func(error)) []string {
	if list == nil {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		report(fmt.Errorf("line %d: sources must be a list of sources", list.Line))
		return nil
	}
	var names []string
	for i, n := range list.Content {
		where := itemName("source", i, n, providers.CheckSourceName)
		// A source's name, when it can be one; not github or stripe, which
		// a source cannot take (readSource says so).
		name := ""
		if v := value(n, "name"); v != nil && providers.CheckSourceName(v.Value) == nil && !slices.Contains(providers.Builtins(), v.Value) {
			name = v.Value
		}
		if name != "" && slices.Contains(names, name) {
			report(fmt.Errorf("%s: %w", where, keyErrors(n)("name", "%s is used by another source", name)))
			continue
		}
		if name != "" {
			names = append(names, name)
		}
		src, err := readSource(n, lookup)
		if err != nil {
			report(fmt.Errorf("%s: %w", where, err))
			if name != "" {
				f.unreadSources = append(f.unreadSources, name)
			}
			continue
		}
		f.sources = append(f.sources, src)
	}
	return names
}

// readSearchKeys reads the file's search_keys (n, when the file has them):
// a mapping of providers, each a mapping of key names to dot-separated JSON
// paths. Each mistake is passed to report with its line; the keys that are
// right are returned, with each provider's line. Whether a provider is
// configured is Resolve's to say.
func readSearchKeys(n *yaml.Node, report func(error)) (searchkeys.Paths, map[string]int) {
	if n == nil {
		return nil, nil
	}
	const shape = "search_keys maps providers to their keys' JSON paths, such as stripe: {customer: data.object.customer}"
	if n.Kind != yaml.MappingNode {
		report(fmt.Errorf("line %d: %s", n.Line, shape))
		return nil, nil
	}
	paths, lines := searchkeys.Paths{}, map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		p, keys := n.Content[i], n.Content[i+1]
		if _, seen := paths[p.Value]; seen {
			report(fmt.Errorf("line %d: search_keys: provider %q given twice", p.Line, p.Value))
			continue
		}
		if keys.Kind != yaml.MappingNode {
			report(fmt.Errorf("line %d: search_keys: %s", keys.Line, shape))
			continue
		}
		paths[p.Value], lines[p.Value] = map[string]string{}, p.Line
		for j := 0; j+1 < len(keys.Content); j += 2 {
			name, path := keys.Content[j], keys.Content[j+1]
			switch {
			case searchkeys.CheckName(name.Value) != nil:
				report(fmt.Errorf("line %d: search_keys: %s: %w", name.Line, p.Value, searchkeys.CheckName(name.Value)))
			case paths[p.Value][name.Value] != "":
				report(fmt.Errorf("line %d: search_keys: %s.%s given twice", name.Line, p.Value, name.Value))
			case path.Kind != yaml.ScalarNode || searchkeys.CheckPath(path.Value) != nil:
				report(fmt.Errorf("line %d: search_keys: %s.%s: %w", path.Line, p.Value, name.Value, cmp.Or(searchkeys.CheckPath(path.Value), searchkeys.ErrBad)))
			default:
				paths[p.Value][name.Value] = path.Value
			}
		}
	}
	return paths, lines
}

// readSchemas reads the file's schemas (n, when the file has them): a
// mapping of provider:pattern to a JSON Schema file's path, a relative path
// being relative to dir, the configuration file's folder. Each mistake of
// shape is passed to report with its line; whether a pattern and a file can
// be used is Resolve's to say (it compiles them).
func readSchemas(n *yaml.Node, dir string, report func(error)) map[string]string {
	if n == nil {
		return nil
	}
	const shape = "schemas maps provider:pattern to a JSON Schema file, such as github:pull_request: schemas/pull_request.json"
	if n.Kind != yaml.MappingNode {
		report(fmt.Errorf("line %d: %s", n.Line, shape))
		return nil
	}
	files := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode || strings.TrimSpace(v.Value) == "":
			report(fmt.Errorf("line %d: %s", k.Line, shape))
		case files[k.Value] != "":
			report(fmt.Errorf("line %d: schemas: %q given twice", k.Line, k.Value))
		case filepath.IsAbs(v.Value):
			files[k.Value] = v.Value
		default:
			files[k.Value] = filepath.Join(dir, v.Value)
		}
	}
	return files
}

// itemName names the i-th item of a list for messages: by its name and line
// when it has a name that valid accepts, else by its place and line. A name
// that is not right is never shown: what was written there may be a URL
// with a password, or a secret.
func itemName(what string, i int, n *yaml.Node, valid func(string) error) string {
	if name := value(n, "name"); name != nil && name.Kind == yaml.ScalarNode && valid(name.Value) == nil {
		return fmt.Sprintf("%s %q (line %d)", what, name.Value, n.Line)
	}
	return fmt.Sprintf("%s %d (line %d)", what, i+1, n.Line)
}

// fileSource is one source as the file spells it.
type fileSource struct {
	Name      string `yaml:"name"`
	Kind      string `yaml:"kind"`
	SecretEnv string `yaml:"secret_env"`
	Tolerance string `yaml:"tolerance"`
	Order     *struct {
		Entity string `yaml:"entity"`
		Time   string `yaml:"time"`
	} `yaml:"order"`
	SignatureHeader string `yaml:"signature_header"`
	Algorithm       string `yaml:"algorithm"`
	Encoding        string `yaml:"encoding"`
	Prefix          string `yaml:"prefix"`
	TimestampHeader string `yaml:"timestamp_header"`
	IDHeader        string `yaml:"id_header"`
	IDField         string `yaml:"id_field"`
	EventHeader     string `yaml:"event_header"`
	EventField      string `yaml:"event_field"`
}

// readSource reads and checks one source of the file, its secrets from the
// variable it names.
func readSource(n *yaml.Node, lookup Lookup) (Source, error) {
	var none Source
	if err := checkKeys(n, sourceKeys); err != nil {
		return none, err
	}
	if o := value(n, "order"); o != nil {
		if err := checkKeys(o, orderKeys); err != nil {
			return none, fmt.Errorf("order: %w", err)
		}
	}
	var fs fileSource
	if err := n.Decode(&fs); err != nil {
		return none, errors.New(strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "))
	}
	bad := keyErrors(n)
	c := providers.SourceConfig{Name: fs.Name, Kind: fs.Kind, HMAC: providers.HMACScheme{
		SignatureHeader: fs.SignatureHeader, Algorithm: fs.Algorithm, Encoding: fs.Encoding, Prefix: fs.Prefix,
		TimestampHeader: fs.TimestampHeader, IDHeader: fs.IDHeader, IDField: fs.IDField, EventHeader: fs.EventHeader, EventField: fs.EventField,
	}}
	if fs.Order != nil {
		c.Order = &providers.OrderPaths{Entity: fs.Order.Entity, Time: fs.Order.Time}
	}
	if fs.Tolerance != "" {
		t, err := time.ParseDuration(fs.Tolerance)
		if err != nil || t <= 0 || t > time.Hour {
			return none, bad("tolerance", "must be a duration above 0 and at most 1h, got %q", fs.Tolerance)
		}
		c.Tolerance = t
	}
	if fs.SecretEnv == "" {
		return none, bad("secret_env", "name the variable that holds the source's secrets")
	}
	secrets, err := fromEnv(fs.SecretEnv, lookup)
	if err != nil {
		return none, bad("secret_env", "%w", err)
	}
	for secret := range strings.SplitSeq(secrets, ",") {
		if secret = strings.TrimSpace(secret); secret == "" {
			return none, bad("secret_env", "the variable it names holds an empty secret in its list")
		}
		c.Secrets = append(c.Secrets, secret)
	}
	if _, err := providers.NewSource(c); err != nil {
		if ke := (*providers.KeyError)(nil); errors.As(err, &ke) {
			return none, bad(ke.Key, "%s", ke.Problem)
		}
		return none, err
	}
	return c, nil
}

// readRoute reads one route of the file and checks it as Resolve does,
// every mistake an error of its own naming the key's line; sources are the
// file's sources' names, which a match may name, and configured the
// providers configured, which a message lists. The route's lines are kept
// for Resolve's messages.
func readRoute(n *yaml.Node, sources, configured []string, lookup Lookup) (Route, []error) {
	var r Route
	if err := checkKeys(n, routeKeys); err != nil {
		return r, []error{err}
	}
	if c := value(n, "circuit"); c != nil {
		if err := checkKeys(c, circuitKeys); err != nil {
			return r, []error{fmt.Errorf("circuit: %w", err)}
		}
	}
	key := keyErrors(n)
	var errs []error
	said := map[string]bool{} // the keys found wrong
	bad := func(name, format string, args ...any) {
		said[name] = true
		errs = append(errs, key(name, format, args...))
	}
	for _, name := range []string{"concurrency", "max_attempts", "circuit.failures"} {
		// The decoder would cut 8.5 down to 8.
		if v := valueAt(n, name); v != nil && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!float" {
			bad(name, "must be a whole number, got %s", v.Value)
		}
	}
	if len(errs) > 0 {
		return r, errs
	}
	var f fileRoute
	if err := n.Decode(&f); err != nil {
		return r, []error{errors.New(strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "))}
	}
	r = Route{Name: f.Name, Match: f.Match, Rate: f.Rate, line: n.Line, keyLines: map[string]int{}}
	for _, k := range routeKeys {
		if kn := keyAt(n, k); kn != nil {
			r.keyLines[k] = kn.Line
		}
	}
	r.Target = readTarget(f, lookup, bad)
	// Written out, a zero is a mistake: in code it would mean the default.
	if f.Concurrency != nil && *f.Concurrency < 1 {
		bad("concurrency", "must be 1 to %d, got %d", fanout.MaxConcurrency, *f.Concurrency)
	}
	if f.MaxAttempts != nil && *f.MaxAttempts < 1 {
		bad("max_attempts", "must be 1 to %d, got %d", fanout.MaxMaxAttempts, *f.MaxAttempts)
	}
	r.Concurrency, r.MaxAttempts = max(deref(f.Concurrency), 0), max(deref(f.MaxAttempts), 0)
	r.Timeout = readDuration(f.Timeout, "timeout", 0, fanout.MaxTimeout, bad)
	if f.Filter != nil {
		if strings.TrimSpace(*f.Filter) == "" {
			bad("filter", "is empty: give a CEL expression, or leave the key out")
		}
		r.Filter = *f.Filter
	}
	if f.Transform != nil {
		if strings.TrimSpace(*f.Transform) == "" {
			bad("transform", "is empty: give a CEL expression, or leave the key out")
		}
		r.Transform = *f.Transform
	}
	r.Order = f.Order
	r.OrderWindow = readDuration(f.OrderWindow, "order_window", -1, fanout.MaxOrderWindow, bad)
	if c := f.Circuit; c != nil {
		r.Circuit = &Circuit{Failures: fanout.DefaultCircuit.Failures}
		if c.Failures != nil {
			r.Circuit.Failures = *c.Failures
		}
		r.Circuit.Cooldown = readDuration(c.Cooldown, "circuit.cooldown", 0, fanout.MaxCooldown, bad)
	}
	// A key found wrong above is said once, not again by resolveRoute (a
	// target_env's mistake leaves no target).
	said["target"] = said["target"] || said["target_env"]
	_, keyErrs := resolveRoute(r, fanout.Defaults{Concurrency: 1, Timeout: time.Second, MaxAttempts: 1, Sources: sources}, configured)
	for _, ke := range keyErrs {
		if !said[ke.Key] {
			bad(ke.Key, "%s", ke.Problem)
		}
	}
	return r, errs
}

// readNotifications reads the file's notifications (list, when the file
// has them), passing each mistake to report, and returns those without one.
// A URL is written as url, or, since a Slack webhook's URL is a secret, in
// the variable url_env names.
func readNotifications(list *yaml.Node, lookup Lookup, report func(error)) []notify.Notification {
	if list == nil {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		report(fmt.Errorf("line %d: notifications must be a list, each with name, kind, url or url_env, and events", list.Line))
		return nil
	}
	var out []notify.Notification
	seen := map[string]bool{}
	for i, n := range list.Content {
		where := itemName("notification", i, n, notify.CheckName)
		if err := checkKeys(n, notifyKeys); err != nil {
			report(fmt.Errorf("%s: %w", where, err))
			continue
		}
		var fn struct {
			Name   string   `yaml:"name"`
			Kind   string   `yaml:"kind"`
			URL    string   `yaml:"url"`
			URLEnv string   `yaml:"url_env"`
			Events []string `yaml:"events"`
		}
		if err := n.Decode(&fn); err != nil {
			report(fmt.Errorf("%s: %s", where, strings.TrimPrefix(err.Error(), "yaml: ")))
			continue
		}
		keyErr := keyErrors(n)
		nt := notify.Notification{Name: fn.Name, Kind: fn.Kind, URL: fn.URL, Events: fn.Events}
		var errs []error
		switch {
		case fn.URL != "" && fn.URLEnv != "":
			errs = append(errs, keyErr("url_env", "url is given too; give one"))
		case fn.URLEnv != "":
			u, err := fromEnv(fn.URLEnv, lookup)
			if err != nil {
				errs = append(errs, keyErr("url_env", "%w", err))
			}
			nt.URL = u
		case fn.URL != "":
			if u, err := url.Parse(fn.URL); err == nil && u.User != nil {
				errs = append(errs, keyErr("url", "a URL with a user or password is a credential; put it in a variable and name it with url_env"))
			}
		default:
			errs = append(errs, keyErr("url", "give url or url_env (a Slack webhook's URL is a secret: url_env)"))
		}
		if seen[fn.Name] {
			errs = append(errs, keyErr("name", "%s is used by another notification", fn.Name))
		}
		seen[fn.Name] = true
		for _, err := range nt.Check(true) {
			errs = append(errs, err)
		}
		for _, err := range errs {
			report(fmt.Errorf("%s: %w", where, err))
		}
		if len(errs) == 0 {
			out = append(out, nt)
		}
	}
	return out
}

// readTarget reads a file route's target or target_env, passing what is
// wrong to bad; "" when there is none to read.
func readTarget(f fileRoute, lookup Lookup, bad func(key, format string, args ...any)) string {
	switch {
	case f.Target != "" && f.TargetEnv != "":
		bad("target_env", "target is given too; give one")
	case f.TargetEnv != "":
		target, err := fromEnv(f.TargetEnv, lookup)
		if err != nil {
			bad("target_env", "%w", err)
			return ""
		}
		if err := fanout.CheckTarget(target); err != nil {
			bad("target_env", "the value of the variable it names (not shown): %w", err)
			return ""
		}
		return target
	case f.Target != "":
		if u, err := url.Parse(f.Target); err == nil && u.User != nil {
			// Secrets never go in the file.
			bad("target", "a URL with a user or password is a credential; put it in a variable and name it with target_env")
			return ""
		}
		return f.Target
	default:
		bad("target", "give target or target_env")
	}
	return ""
}

// readDuration reads a file route's duration key (empty: 0), passing a
// value that does not parse, or is not above least and at most most, to
// bad.
func readDuration(s, key string, least, most time.Duration, bad func(key, format string, args ...any)) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= least || d > most {
		if least < 0 {
			bad(key, "must be a duration from 0s to %s, got %q", most, s)
		} else {
			bad(key, "must be a duration above 0 and at most %s, got %q", most, s)
		}
		return 0
	}
	return d
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// conventionalRE is what a variable's name looks like by convention.
var conventionalRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// notAName is said of a secret_env or target_env that cannot be a
// variable's name, or is no usual name and names no variable that is set.
const notAName = "is not the name of a variable (such as ACME_WEBHOOK_SECRET) that is set: " +
	"give the variable's name, not its value (what was given is not shown: it may be a secret)"

// fromEnv reads a value (a target URL, a source's secrets) from the
// variable name, or from the file its _FILE variant names. Its errors show
// neither name nor the _FILE variant's path: what was written there by
// mistake may be the secret itself, and a secret may look like a variable's
// name (upper-case hex). The caller says where name was written instead.
func fromEnv(name string, lookup Lookup) (string, error) {
	if !envNameRE.MatchString(name) {
		return "", errors.New(notAName)
	}
	v, set := lookup(name)
	path, fileSet := lookup(name + "_FILE")
	switch {
	case set && v != "" && fileSet && path != "":
		return "", errors.New("the variable it names and its _FILE variant are both set; set one")
	case fileSet && path != "":
		b, err := readBounded(path, MaxSecretFileBytes)
		if err != nil {
			return "", fmt.Errorf("the file that the variable's _FILE variant names %w", err)
		}
		if v = strings.TrimSpace(string(b)); v == "" {
			return "", errors.New("the file that the variable's _FILE variant names is empty")
		}
	}
	if strings.TrimSpace(v) == "" {
		if !conventionalRE.MatchString(name) {
			return "", errors.New(notAName)
		}
		return "", errors.New("the variable it names is not set")
	}
	return strings.TrimSpace(v), nil
}

// withoutPath is a file error without the file's path.
func withoutPath(err error) error {
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// keyErrors returns what makes the errors of mapping n's keys: "line L:
// key K: problem", L the line of K when n holds it.
func keyErrors(n *yaml.Node) func(key, format string, args ...any) error {
	return func(key, format string, args ...any) error {
		where := "key " + key
		if k := keyAt(n, key); k != nil {
			where = fmt.Sprintf("line %d: %s", k.Line, where)
		}
		return fmt.Errorf("%s: "+format, append([]any{where}, args...)...)
	}
}

// keyAt returns the node of a key in mapping n, the key a dot-separated path
// (circuit.cooldown), or nil.
func keyAt(n *yaml.Node, key string) *yaml.Node {
	parent, last := n, key
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		parent, last = valueAt(n, key[:i]), key[i+1:]
	}
	if parent == nil || parent.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(parent.Content); i += 2 {
		if parent.Content[i].Value == last {
			return parent.Content[i]
		}
	}
	return nil
}

// valueAt is value along a dot-separated path of keys.
func valueAt(n *yaml.Node, key string) *yaml.Node {
	for part := range strings.SplitSeq(key, ".") {
		n = value(n, part)
	}
	return n
}

// checkKeys refuses a node that is not a mapping, or holds a key not in
// allowed or one key twice.
func checkKeys(n *yaml.Node, allowed []string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of keys (%s)", n.Line, strings.Join(allowed, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !slices.Contains(allowed, k.Value) {
			return fmt.Errorf("line %d: unknown key %q (known: %s)", k.Line, k.Value, strings.Join(allowed, ", "))
		}
		if seen[k.Value] {
			return fmt.Errorf("line %d: key %q given twice", k.Line, k.Value)
		}
		seen[k.Value] = true
	}
	return nil
}

// value returns the value of key in mapping n, or nil.
func value(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
