package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/filter"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/transform"
)

// KeyError is what is wrong with one key of a route: the configuration
// file names its line, Resolve its route.
type KeyError struct {
	Key, Problem string
}

func (e *KeyError) Error() string { return "key " + e.Key + ": " + e.Problem }

// resolveRoute checks r and makes the fan-out table's route of it, its limits
// left at zero taken from d. A match's provider may be any a source could be
// named: whether it is configured is unconfigured's to say, naming it among
// configured. It reports what is wrong with each of its keys, all of them,
// as a *KeyError each; none shows a target, which may carry a credential.
func resolveRoute(r Route, d fanout.Defaults, configured []string) (fanout.Route, []*KeyError) {
	fr := fanout.Route{Name: r.Name, Concurrency: d.ConcurrencyFor(r.Target), Timeout: d.Timeout, MaxAttempts: d.MaxAttempts, Circuit: fanout.DefaultCircuit}
	var errs []*KeyError
	bad := func(key, format string, args ...any) {
		errs = append(errs, &KeyError{Key: key, Problem: fmt.Sprintf(format, args...)})
	}
	if err := fanout.CheckName(r.Name); err != nil {
		bad("name", "%v", err)
	}
	if len(r.Match) == 0 {
		bad("match", "list at least one provider:pattern")
	}
	for _, m := range r.Match {
		match, ok := parseMatch(m, d.Sources)
		if !ok {
			// Not the match itself: whatever was pasted there may be a secret.
			which := "* or a configured one (none is)"
			if len(configured) > 0 {
				which = strings.Join(configured, ", ") + " or *"
			}
			bad("match", "a match must be provider:pattern with provider %s, the pattern 1-255 of A-Z, a-z, 0-9, _, ., - and *", which)
			continue
		}
		fr.Matches = append(fr.Matches, match)
	}
	if r.Target == "" {
		bad("target", "give an http(s) URL or builtin:<name>")
	} else if err := fanout.CheckTarget(r.Target); err != nil {
		bad("target", "%v", err)
	} else {
		fr.Target = r.Target
	}
	if r.Concurrency != 0 {
		if r.Concurrency < 1 || r.Concurrency > fanout.MaxConcurrency {
			bad("concurrency", "must be 1 to %d, got %d", fanout.MaxConcurrency, r.Concurrency)
		}
		fr.Concurrency = r.Concurrency
	}
	if r.Rate != "" {
		rate, err := parseRate(r.Rate)
		if err != nil {
			bad("rate", "%v", err)
		}
		fr.Rate = rate
	}
	if r.Timeout != 0 {
		if r.Timeout < 0 || r.Timeout > fanout.MaxTimeout {
			bad("timeout", "must be a duration above 0 and at most %s, got %s", fanout.MaxTimeout, r.Timeout)
		}
		fr.Timeout = r.Timeout
	}
	if r.MaxAttempts != 0 {
		if r.MaxAttempts < 1 || r.MaxAttempts > fanout.MaxMaxAttempts {
			bad("max_attempts", "must be 1 to %d, got %d", fanout.MaxMaxAttempts, r.MaxAttempts)
		}
		fr.MaxAttempts = r.MaxAttempts
	}
	if r.Filter != "" {
		f, err := filter.Compile(r.Filter)
		if err != nil {
			bad("filter", "%v", err)
		}
		fr.Filter = f
	}
	if r.Transform != "" {
		if strings.HasPrefix(r.Target, "builtin:") {
			bad("transform", "shapes what is sent to an http(s) target; a builtin handler reads the delivery itself")
		}
		t, err := transform.Compile(r.Transform)
		if err != nil {
			bad("transform", "%v", err)
		}
		fr.Transform = t
	}
	switch o := fanout.Order(r.Order); o {
	case "":
		fr.Order = fanout.OrderLatest
	case fanout.OrderLatest, fanout.OrderAll, fanout.OrderNone:
		fr.Order = o
	default:
		bad("order", "must be latest, all or none, got %q", r.Order)
	}
	if r.OrderWindow != 0 {
		if r.OrderWindow < 0 || r.OrderWindow > fanout.MaxOrderWindow {
			bad("order_window", "must be a duration from 0s to %s, got %s", fanout.MaxOrderWindow, r.OrderWindow)
		}
		if fr.Order == fanout.OrderNone {
			bad("order_window", "holds events so that an older one goes first; a route with order none keeps no order")
		}
		fr.OrderWindow = r.OrderWindow
	}
	if c := r.Circuit; c != nil {
		if c.Failures < 0 || c.Failures > 1_000_000 {
			bad("circuit.failures", "must be 0 (off) to 1000000, got %d", c.Failures)
		}
		fr.Circuit.Failures = c.Failures
		if c.Cooldown != 0 {
			if c.Cooldown < 0 || c.Cooldown > fanout.MaxCooldown {
				bad("circuit.cooldown", "must be a duration above 0 and at most %s, got %s", fanout.MaxCooldown, c.Cooldown)
			}
			fr.Circuit.Cooldown = c.Cooldown
		}
	}
	return fr, errs
}

// parseMatch parses one provider:pattern, its provider a built-in one, one
// of sources, * or any name a source could take that does not look like a
// secret (a provider not configured is reported, by its name, by
// unconfigured).
func parseMatch(m string, sources []string) (fanout.Match, bool) {
	if match, err := fanout.ParseMatch(m, sources); err == nil {
		return match, true
	}
	provider, _, _ := strings.Cut(m, ":")
	if providers.CheckSourceName(provider) != nil || LooksLikeSecret(provider) {
		return fanout.Match{}, false
	}
	match, err := fanout.ParseMatch(m, append(slices.Clip(sources), provider))
	return match, err == nil
}

var rateRE = regexp.MustCompile(`^([0-9]{1,9})/([sm])$`)

// parseRate parses a rate: N/s (attempts in any second) or N/m (any minute).
func parseRate(s string) (fanout.Rate, error) {
	m := rateRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return fanout.Rate{}, fmt.Errorf("must be N/s or N/m, got %q", s)
	}
	n, _ := strconv.Atoi(m[1])
	if n < 1 || n > fanout.MaxRate {
		return fanout.Rate{}, fmt.Errorf("N must be 1 to %d, got %d", fanout.MaxRate, n)
	}
	per := time.Second
	if m[2] == "m" {
		per = time.Minute
	}
	return fanout.Rate{N: n, Per: per}, nil
}

// parseSpec reads GATEWAY_ROUTES: space-separated name=match[,match...]>target.
// An entry is named by its place and name, never shown: its target may carry
// a credential, in its path too, and what was written by mistake may be a URL
// or a secret alone. Every entry that cannot be read is reported, one error
// each; the others are returned. What the routes say is checked by Resolve.
func parseSpec(spec string) ([]Route, error) {
	var rs []Route
	var errs []error
	for i, entry := range strings.Fields(spec) {
		where := fmt.Sprintf("GATEWAY_ROUTES: bad route, entry %d", i+1)
		name, rest, ok := strings.Cut(entry, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("%s: want name=provider:pattern[,...]>target", where))
			continue
		}
		if err := fanout.CheckName(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: the name %w", where, err))
			continue
		}
		matches, target, ok := strings.Cut(rest, ">")
		if !ok || target == "" {
			errs = append(errs, fmt.Errorf("%s (%q): no >target", where, name))
			continue
		}
		rs = append(rs, Route{Name: name, Match: strings.Split(matches, ","), Target: target, entry: i + 1})
	}
	return rs, errors.Join(errs...)
}
