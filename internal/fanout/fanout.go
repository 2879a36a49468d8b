// Package fanout is the fan-out table: which routes a delivery goes to, by
// provider and event name, where each route sends it (an http(s) URL or a
// builtin handler), and each route's limits (concurrency, rate, timeout,
// attempts, circuit). The table comes from GATEWAY_ROUTES (Parse) or from the
// configuration file, which package config reads; config.Load picks. It knows
// nothing of River or the database; package dispatch dispatches what it
// decides, package routes keeps each route's shared state.
package fanout

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/transform"
)

// Limits on what a route may ask for, so that a typo cannot exhaust a process
// or the database.
const (
	MaxConcurrency = 10_000
	MaxRate        = 100_000
	MaxMaxAttempts = 1_000
	MaxTimeout     = time.Hour
	MaxCooldown    = 24 * time.Hour
	// MaxOrderWindow is the longest a route may hold a new dispatch back so
	// that an older event still in flight goes first.
	MaxOrderWindow = time.Minute
)

// Order is what order means for a route's target, per entity (an event that
// names an entity and a time: package providers).
type Order string

// The orders a route may ask for.
const (
	// OrderLatest, for a target that keeps an entity's current state: one
	// dispatch of an entity at a time, and an event older than the newest
	// one the target accepted is superseded, not sent. The default.
	OrderLatest Order = "latest"
	// OrderAll, for a target that counts, sums or appends: every event is
	// handled, one at a time per entity, the oldest waiting first; one older
	// than an event already handled is handled late.
	OrderAll Order = "all"
	// OrderNone: no per-entity serialisation; events go as they come.
	OrderNone Order = "none"
)

// Orders are the orders a route may ask for, as written.
var Orders = []Order{OrderLatest, OrderAll, OrderNone}

// ErrBadTable means GATEWAY_ROUTES could not be parsed.
var ErrBadTable = errors.New("bad route")

// Route is one entry of the fan-out table: deliveries whose provider and event
// match any of Matches are dispatched to Target.
type Route struct {
	// Name identifies the route in dispatch rows, Idempotency-Keys and replays.
	Name string
	// Matches are the route's provider:pattern pairs.
	Matches []Match
	// Target is an http(s) URL or "builtin:<name>".
	Target string
	// Concurrency is how many of the route's dispatches one process works
	// at once.
	Concurrency int
	// Rate limits the attempts started, all processes together; the zero
	// Rate is no limit.
	Rate Rate
	// Timeout bounds one attempt.
	Timeout time.Duration
	// MaxAttempts is the attempts per dispatch before it is discarded.
	MaxAttempts int
	// Circuit stops the route's attempts for a while after consecutive failures.
	Circuit Circuit
	// Filter, when set, must be true for a delivery its matches match: a
	// CEL expression over the delivery's provider, event, headers and
	// payload (configuration file only).
	Filter *filter.Filter
	// Transform, when set, shapes what an attempt sends to an http(s)
	// target: its body, added headers, a path, or no request at all
	// (package transform).
	Transform *transform.Transform
	// Order is what order means for the route's target; "" is OrderLatest.
	Order Order
	// OrderWindow holds each new dispatch back this long, so that an older
	// event of its entity still in flight from the sender goes first.
	OrderWindow time.Duration
}

// Ordered reports whether the route hands an entity's events one at a time.
func (r Route) Ordered() bool { return r.Order != OrderNone }

// Supersedes reports whether an event older than one the target accepted
// is superseded rather than handled late.
func (r Route) Supersedes() bool { return r.Order == "" || r.Order == OrderLatest }

// OldestFirst reports whether, among an entity's events waiting at once, the
// oldest takes the turn first: on a route that handles every event, and on
// one with an order window (the window exists for it).
func (r Route) OldestFirst() bool { return r.Order == OrderAll || r.Ordered() && r.OrderWindow > 0 }

// Rate is at most N attempts started in any window of Per (a second or a
// minute).
type Rate struct {
	N   int
	Per time.Duration
}

// String is the rate as written in the configuration ("20/s"), or "" for none.
func (r Rate) String() string {
	switch {
	case r.N == 0:
		return ""
	case r.Per == time.Minute:
		return fmt.Sprintf("%d/m", r.N)
	default:
		return fmt.Sprintf("%d/s", r.N)
	}
}

// Circuit is a route's circuit breaker: after Failures consecutive failed
// attempts no attempt starts for Cooldown, then one probe decides. Failures 0
// turns it off.
type Circuit struct {
	Failures int
	Cooldown time.Duration
}

// DefaultCircuit is a route's circuit unless configured.
var DefaultCircuit = Circuit{Failures: 20, Cooldown: 30 * time.Second}

// Defaults are the limits of a route that sets none of its own: the
// environment's GATEWAY_WORKERS, GATEWAY_FORWARD_TIMEOUT and
// GATEWAY_MAX_ATTEMPTS.
type Defaults struct {
	Concurrency int
	Timeout     time.Duration
	MaxAttempts int
	// Sources are the configuration file's sources' names, which a match
	// may name besides the built-in providers.
	Sources []string
}

// BuiltinConcurrency bounds the default concurrency of a builtin route (one
// that sets none): each of its dispatches holds a database connection while
// its handler runs, so its default does not grow with GATEWAY_WORKERS's.
const BuiltinConcurrency = 50

// ConcurrencyFor is the concurrency of a route to target that sets none:
// Concurrency, or for a builtin target at most BuiltinConcurrency.
func (d Defaults) ConcurrencyFor(target string) int {
	if _, ok := builtinName(target); ok || target == ListenTarget {
		return min(d.Concurrency, BuiltinConcurrency)
	}
	return d.Concurrency
}

// Queue is the River queue the route's dispatches wait in: one per route, so
// that each route has its own workers and can be paused alone. River's queue
// names are stricter than route names; a name River would refuse, or one
// too long with the prefix, is spelled by its hash.
func (r Route) Queue() string {
	q := "route_" + r.Name
	if len(q) <= 64 && queueNameRE.MatchString(q) {
		return q
	}
	sum := sha256.Sum256([]byte(r.Name))
	return "routeh_" + hex.EncodeToString(sum[:12])
}

// queueNameRE is River's rule for queue names.
var queueNameRE = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)

// ListenTarget is the target of a route whose dispatches go to people's
// machines listening over Server-Sent Events (GET /admin/listen/{route},
// gateway listen) instead of a URL.
const ListenTarget = "listen"

// Listens reports whether the route's target is ListenTarget.
func (r Route) Listens() bool { return r.Target == ListenTarget }

// Builtin returns the handler name of a builtin:<name> target, and whether the
// target is one.
func (r Route) Builtin() (string, bool) { return builtinName(r.Target) }

// builtinName returns the handler name of a builtin:<name> target, and
// whether target is one.
func builtinName(target string) (string, bool) {
	return strings.CutPrefix(target, "builtin:")
}

// Match is one provider:pattern pair of a route.
type Match struct {
	// Provider is a provider name or "*".
	Provider string
	// Pattern matches an event name when it equals it or a dot-separated
	// prefix of it; "*" matches any run of characters, dots included.
	Pattern string
}

// Matches reports whether the pair matches a delivery's provider and event.
func (m Match) Matches(provider, event string) bool {
	if m.Provider != "*" && m.Provider != provider {
		return false
	}
	if glob(m.Pattern, event) {
		return true
	}
	for i := range len(event) {
		if event[i] == '.' && glob(m.Pattern, event[:i]) {
			return true
		}
	}
	return false
}

// glob matches s against pattern, where '*' matches any run of bytes.
func glob(pattern, s string) bool {
	// The classic linear-time wildcard walk: on a mismatch, let the last star
	// swallow one more byte.
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Table is the fan-out table, its routes in the order they were configured.
type Table []Route

// String names the routes and nothing else: a target may carry a credential,
// and a configuration printed with %v or %+v must not show it.
func (rs Table) String() string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Name
	}
	return "routes[" + strings.Join(names, " ") + "]"
}

// GoString is String, for %#v.
func (rs Table) GoString() string { return rs.String() }

// Matching returns the names of the routes that match a delivery: one of
// their matches matches its provider and event, and their filter, if any, is
// true for it. A filter that cannot be evaluated on the delivery is false,
// and failed, when not nil, is told which route's and why. The payload is
// parsed once, and only when a route whose matches match has a filter.
func (rs Table) Matching(in *filter.Input, failed func(route string, err error)) []string {
	var names []string
	for _, r := range rs {
		if !r.MatchesEvent(in.Provider, in.Event) {
			continue
		}
		if r.Filter != nil {
			ok, err := r.Filter.Match(in)
			if err != nil && failed != nil {
				failed(r.Name, err)
			}
			if !ok {
				continue
			}
		}
		names = append(names, r.Name)
	}
	return names
}

// FiltersFor reports whether a route whose matches match an event has a
// filter: only then does the event's payload decide anything.
func (rs Table) FiltersFor(provider, event string) bool {
	for _, r := range rs {
		if r.Filter != nil && r.MatchesEvent(provider, event) {
			return true
		}
	}
	return false
}

// MatchesEvent reports whether one of the route's matches matches an event
// (its filter aside).
func (r Route) MatchesEvent(provider, event string) bool {
	for _, m := range r.Matches {
		if m.Matches(provider, event) {
			return true
		}
	}
	return false
}

// MaxTimeout is the longest attempt time limit of any route (d when there
// are no routes, or all are shorter).
func (rs Table) MaxTimeout(d time.Duration) time.Duration {
	for _, r := range rs {
		d = max(d, r.Timeout)
	}
	return d
}

// ByName returns the route with the given name.
func (rs Table) ByName(name string) (Route, bool) {
	for _, r := range rs {
		if r.Name == name {
			return r, true
		}
	}
	return Route{}, false
}

var (
	routeNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	handlerNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	patternRE     = regexp.MustCompile(`^[A-Za-z0-9_.*-]{1,255}$`)
)

// Parse parses GATEWAY_ROUTES: space-separated name=match[,match...]>target.
// A builtin target must name one of builtins (nil: any name, left to
// CheckBuiltins once the handlers are known). Each route's limits are d's,
// and its circuit DefaultCircuit.
func Parse(s string, builtins []string, d Defaults) (Table, error) {
	var rs Table
	seen := map[string]bool{}
	for i, entry := range strings.Fields(s) {
		// An entry is named by its place and name, never shown: its target
		// may carry a credential, in its path too, and what was written
		// by mistake may be a URL or a secret alone.
		where := fmt.Sprintf("entry %d", i+1)
		name, rest, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("%w, %s: want name=provider:pattern[,...]>target", ErrBadTable, where)
		}
		if !routeNameRE.MatchString(name) {
			return nil, fmt.Errorf("%w, %s: the name must be 1-64 of a-z, 0-9, _ and -, starting with a letter or digit", ErrBadTable, where)
		}
		where = fmt.Sprintf("%s (%q)", where, name)
		if seen[name] {
			return nil, fmt.Errorf("%w, %s: the name %s is used twice", ErrBadTable, where, name)
		}
		seen[name] = true
		matches, target, ok := strings.Cut(rest, ">")
		if !ok || target == "" {
			return nil, fmt.Errorf("%w, %s: no >target", ErrBadTable, where)
		}
		r := Route{Name: name, Target: target, Concurrency: d.ConcurrencyFor(target), Timeout: d.Timeout, MaxAttempts: d.MaxAttempts, Circuit: DefaultCircuit}
		for m := range strings.SplitSeq(matches, ",") {
			match, err := ParseMatch(m, d.Sources)
			if err != nil {
				return nil, fmt.Errorf("%w, %s: %w", ErrBadTable, where, err)
			}
			r.Matches = append(r.Matches, match)
		}
		if err := checkTarget(target, builtins); err != nil {
			return nil, fmt.Errorf("%w, %s: %w", ErrBadTable, where, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// CheckBuiltins reports the first route whose builtin:<name> target names no
// handler of names, naming the route and the handler.
func (t Table) CheckBuiltins(names []string) error {
	var errs []error
	for _, r := range t {
		if name, ok := r.Builtin(); ok && !slices.Contains(names, name) {
			errs = append(errs, fmt.Errorf("%w: route %q: no builtin handler named %q (have %s)", ErrBadTable, r.Name, name, strings.Join(names, ", ")))
		}
	}
	return errors.Join(errs...)
}

// ParseMatch parses one provider:pattern; the provider is a built-in one
// (providers.Builtins), one of sources, or *.
func ParseMatch(m string, sources []string) (Match, error) {
	provider, pattern, ok := strings.Cut(m, ":")
	known := slices.Contains(providers.Builtins(), provider) || slices.Contains(sources, provider)
	if !ok || (provider != "*" && !known) || !patternRE.MatchString(pattern) {
		names := slices.Concat(providers.Builtins(), sources)
		slices.Sort(names)
		// Not the match itself: whatever was pasted there may be a secret.
		return Match{}, fmt.Errorf("a match must be provider:pattern with provider %s or *", strings.Join(slices.Compact(names), ", "))
	}
	return Match{Provider: provider, Pattern: pattern}, nil
}

// CheckName reports whether name can name a route: 1-64 of a-z, 0-9, _ and
// -, starting with a letter or digit.
func CheckName(name string) error {
	if !routeNameRE.MatchString(name) {
		return errors.New("must be 1-64 of a-z, 0-9, _ and -, starting with a letter or digit")
	}
	return nil
}

// CheckTarget checks a route's target: an http(s) URL, listen or builtin:<name>,
// the name checked against the handlers by Table.CheckBuiltins once they are
// known. Its errors do not show the target: even redacted, a URL may carry a
// credential in its path.
func CheckTarget(target string) error { return checkTarget(target, nil) }

// checkTarget is CheckTarget that also checks a builtin's name against
// builtins, unless nil.
func checkTarget(target string, builtins []string) error {
	if target == ListenTarget {
		return nil
	}
	if name, ok := builtinName(target); ok {
		if !handlerNameRE.MatchString(name) {
			// Not the name: whatever was pasted there may be a secret.
			return errors.New("builtin:<name> names a handler by 1-64 of a-z, 0-9, _ and -")
		}
		if builtins != nil && !slices.Contains(builtins, name) {
			return fmt.Errorf("no builtin handler named %q (have %s)", name, strings.Join(builtins, ", "))
		}
		return nil
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return errors.New("the target must be an http:// or https:// URL, builtin:<name> or listen")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return errors.New("the target's port must be 1 to 65535")
		}
	}
	return nil
}

// RedactURL returns a URL without what may be a credential: its userinfo and
// its query values are dropped (the query's names are kept, to tell targets
// apart). A target's URL is shown this way in errors, logs and metrics. Text
// that is no URL is not shown at all.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unreadable URL)"
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	if u.RawQuery != "" {
		q := u.Query()
		for name := range q {
			q[name] = []string{""}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}
