package config

import (
	"cmp"
	"path"
	"reflect"
	"slices"
	"strings"
)

// The variables FromEnv reads besides the Config fields' env tags: listed by
// Variables, read through these names.
const (
	routesVariable     = "GATEWAY_ROUTES"
	configFileVariable = "GATEWAY_CONFIG_FILE"
)

// Variables are the names of the environment variables Load reads: each
// Config field's env tag, GATEWAY_ROUTES and GATEWAY_CONFIG_FILE, then each
// secret's _FILE variant. FromEnv reads through this list's sources (the
// fields' tags, the two constants), and a test holds every name it asks for
// to it. A deployment that sets any other name configures nothing; the
// deployment files' tests check theirs against this list, and Strays warns
// of a name that looks meant for hookgate and is not in it. (A configuration
// file's sources and routes name their own variables; those are not here.)
func Variables() []string {
	names := []string{routesVariable, configFileVariable}
	var files []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		if name := f.Tag.Get("env"); name != "" && name != "-" {
			names = append(names, name)
			if f.Tag.Get("secret") == "true" {
				files = append(files, name+"_FILE")
			}
		}
	}
	return slices.Clip(append(names, files...))
}

// Stray is a variable of the environment that looks meant for hookgate but
// is none it reads: a misspelling, or a name an older release read.
type Stray struct {
	// Name is the variable's name; its value is never kept.
	Name string
	// Closest is the name hookgate reads that Name most likely meant (see
	// Strays); empty when Hint says more.
	Closest string
	// Hint, when Closest is empty, says how a variable such as Name is
	// read.
	Hint string
}

// sourceSecretHint is a Stray's Hint for a name about webhooks that is no
// misspelling of one hookgate reads, such as a source's secret with no
// source naming it.
const sourceSecretHint = "a source's secret is read only when a source of the configuration file (GATEWAY_CONFIG_FILE) names it in secret_env"

// fileVariableHint is a Stray's Hint for any other name that is no
// misspelling of one hookgate reads.
const fileVariableHint = "a variable besides hookgate's own is read only when the configuration file (GATEWAY_CONFIG_FILE) names it: a source's secret_env, a route's target_env"

// Message is what the gateway logs of s: its name (never its value), and
// the name it likely meant or how such a name is read. A name that looks
// like a secret (LooksLikeSecret) is not shown.
func (s Stray) Message() string {
	if LooksLikeSecret(s.Name) {
		return "a variable whose name looks like a secret is none hookgate reads (its name is not shown)"
	}
	switch {
	case s.Closest != "":
		return s.Name + ": not a variable hookgate reads; did you mean " + s.Closest + "?"
	case s.Hint != "":
		return s.Name + ": not a variable hookgate reads; " + s.Hint
	}
	return s.Name + ": not a variable hookgate reads"
}

// LogAttrs are the attributes of s's log line: variable and did_you_mean,
// each when there is one to show.
func (s Stray) LogAttrs() []any {
	if LooksLikeSecret(s.Name) {
		return nil
	}
	attrs := []any{"variable", s.Name}
	if s.Closest != "" {
		attrs = append(attrs, "did_you_mean", s.Closest)
	}
	return attrs
}

// maxShownName is the longest variable name a message shows: a longer one
// is more likely a secret pasted where a name belongs than a name.
const maxShownName = 64

// secretMarks are what secret tokens begin with: GitHub's tokens, Stripe's
// keys and signing secrets.
var secretMarks = []string{"ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "rk_", "whsec_"}

// LooksLikeSecret reports whether a name (of a variable, a provider) looks
// like a secret token rather than a name: longer than 64 characters, or
// holding what GitHub's tokens or Stripe's keys and secrets begin with.
// Such a name is never shown.
func LooksLikeSecret(name string) bool {
	if len(name) > maxShownName {
		return true
	}
	for _, m := range secretMarks {
		if strings.Contains(name, m) {
			return true
		}
	}
	return false
}

// strayPatterns are the names Strays looks at whatever their spelling:
// hookgate's prefixes, and anything about webhooks.
var strayPatterns = []string{"GATEWAY_*", "HOOKGATE_*", "*WEBHOOK*"}

// namespaces are the prefixes of hookgate's own names: a word they share
// says little of which name was meant.
var namespaces = []string{"GATEWAY", "HOOKGATE"}

// kubernetesPatterns are the variables Kubernetes sets for each service in
// the namespace (a service named gateway sets GATEWAY_SERVICE_HOST,
// GATEWAY_PORT_8080_TCP, ...): never a mistake of the operator's.
var kubernetesPatterns = []string{"*_SERVICE_HOST", "*_SERVICE_PORT*", "*_PORT", "*_PORT_*"}

// Strays returns the variables of environ (os.Environ's NAME=value form)
// that look meant for hookgate and that FromEnv does not read, sorted by
// name. A name looks meant for hookgate when it starts with GATEWAY_ or
// HOOKGATE_, holds WEBHOOK, or is a misspelling of a name hookgate reads
// (typo: one edit away, or two for a name of 16 characters or more, a swap
// of two neighbouring characters counting as one), so that the variables
// of CI systems and other tools (GITHUB_SHA, GITHUB_RUN_ID, STRIPE_KEY)
// are left alone. A name FromEnv reads is none: in Variables, named by the
// configuration file (a source's secret_env, a route's target_env), or one
// of also (the operator commands' own). Kubernetes' service variables are
// left out. Each comes with the name it most likely meant (closest), among
// Variables and also (never a name the configuration file gave, which may
// be a secret pasted in the wrong place), or a Hint. Values are never read
// beyond the configuration's own.
func Strays(environ []string, also ...string) []Stray {
	env := map[string]string{}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		env[name] = value
	}
	// What FromEnv asks for, the file's variables included: the loader's
	// own reads, not a list beside it.
	read := map[string]bool{}
	_, _ = FromEnv(func(name string) (string, bool) {
		read[name] = true
		v, ok := env[name]
		return v, ok
	})
	candidates := append(Variables(), also...)
	for _, name := range candidates {
		read[name] = true
	}
	var strays []Stray
	for name := range env {
		if read[name] || matchAny(kubernetesPatterns, name) {
			continue
		}
		misspelt := typo(name, candidates)
		if misspelt == "" && !matchAny(strayPatterns, name) {
			continue
		}
		s := Stray{Name: name, Closest: misspelt}
		if s.Closest == "" {
			s.Closest = closest(name, candidates)
		}
		if s.Closest == "" {
			s.Hint = fileVariableHint
			if strings.HasSuffix(strings.TrimSuffix(name, "_FILE"), "_SECRET") {
				s.Hint = sourceSecretHint
			}
		}
		strays = append(strays, s)
	}
	slices.SortFunc(strays, func(a, b Stray) int { return cmp.Compare(a.Name, b.Name) })
	return strays
}

// matchAny reports whether name matches one of the shell patterns (a
// variable's name holds no slash, so * is any run of characters).
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// typo returns the name among names that name is a misspelling of: the
// nearest within one edit, or two for a name of 16 characters or more (a
// swap of neighbouring characters is one edit); "" when none is that near.
func typo(name string, names []string) string {
	best, bestDistance := "", 0
	for _, n := range names {
		allowed := 1
		if min(len(name), len(n)) >= 16 {
			allowed = 2
		}
		if len(name) > len(n)+allowed || len(n) > len(name)+allowed {
			continue // farther than allowed, whatever the letters
		}
		if d := editDistance(name, n); d <= allowed && (best == "" || d < bestDistance) {
			best, bestDistance = n, d
		}
	}
	return best
}

// closest returns the name among names that name, no misspelling of any,
// most likely meant: one it is the beginning of, by whole words
// (GATEWAY_CONFIG: GATEWAY_CONFIG_FILE), the shortest; else one it holds,
// by whole words (GATEWAY_DATABASE_URL: DATABASE_URL), the longest; else,
// for a name in hookgate's namespaces (GATEWAY_, HOOKGATE_), the one that
// shares most of its words (a namespace counting for less than any other
// word), then the one fewest edits away. "" for a name outside the
// namespaces that none of these finds: a guess would mislead.
func closest(name string, names []string) string {
	if LooksLikeSecret(name) {
		return "" // never shown, and perhaps long
	}
	var longer, within string
	for _, n := range names {
		if strings.HasPrefix(n, name+"_") && (longer == "" || len(n) < len(longer)) {
			longer = n
		}
		if wordsWithin(n, name) && len(n) > len(within) {
			within = n
		}
	}
	if longer != "" {
		return longer
	}
	if within != "" {
		return within
	}
	if !matchAny([]string{"GATEWAY_*", "HOOKGATE_*"}, name) {
		return ""
	}
	best, bestScore, bestDistance := "", -1, 0
	for _, n := range names {
		score := sharedWords(name, n)
		d := editDistance(name, n)
		if score > bestScore || score == bestScore && d < bestDistance {
			best, bestScore, bestDistance = n, score, d
		}
	}
	return best
}

// wordsWithin reports whether known is a run of whole words of name (its
// words separated by _), and not name itself.
func wordsWithin(known, name string) bool {
	return known != name && strings.Contains("_"+name+"_", "_"+known+"_")
}

// sharedWords scores how many words (separated by _) a and b share: 2 for
// each word, 1 for a namespace (GATEWAY, HOOKGATE).
func sharedWords(a, b string) int {
	words := strings.Split(b, "_")
	score := 0
	for _, w := range slices.Compact(slices.Sorted(slices.Values(strings.Split(a, "_")))) {
		if w == "" || !slices.Contains(words, w) {
			continue
		}
		if slices.Contains(namespaces, w) {
			score++
		} else {
			score += 2
		}
	}
	return score
}

// editDistance is the number of single characters inserted, deleted or
// substituted, or pairs of neighbouring characters swapped, that turn a
// into b (the optimal string alignment distance; the names are ASCII:
// bytes are characters).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
