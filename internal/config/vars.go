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
	// Closest is the name hookgate reads that is closest to Name: fewest
	// letters added, removed or changed.
	Closest string
}

// strayPatterns are the names Strays looks at: hookgate's prefixes and the
// webhook secrets' suffix.
var strayPatterns = []string{"GATEWAY_*", "HOOKGATE_*", "*_WEBHOOK_SECRET"}

// kubernetesPatterns are the variables Kubernetes sets for each service in
// the namespace (a service named gateway sets GATEWAY_SERVICE_HOST,
// GATEWAY_PORT_8080_TCP, ...): never a mistake of the operator's.
var kubernetesPatterns = []string{"*_SERVICE_HOST", "*_SERVICE_PORT*", "*_PORT", "*_PORT_*"}

// Strays returns the variables of environ (os.Environ's NAME=value form)
// whose name starts with GATEWAY_ or HOOKGATE_ or ends with _WEBHOOK_SECRET
// and that FromEnv does not read, sorted by name: neither in Variables, nor
// named by the configuration file (a source's secret_env, a route's
// target_env), nor one of also (the operator commands' own). Kubernetes'
// service variables are left out. Each comes with the closest name in
// Variables or also (never a name the configuration file gave, which may be
// a secret pasted in the wrong place). Values are never read beyond the
// configuration's own.
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
		if read[name] || !matchAny(strayPatterns, name) || matchAny(kubernetesPatterns, name) {
			continue
		}
		strays = append(strays, Stray{Name: name, Closest: closest(name, candidates)})
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

// closest returns the name among names nearest to name by edit distance,
// the first of those equally near.
func closest(name string, names []string) string {
	best, bestDistance := "", -1
	for _, n := range names {
		if d := levenshtein(name, n); bestDistance < 0 || d < bestDistance {
			best, bestDistance = n, d
		}
	}
	return best
}

// levenshtein is the number of single characters inserted, deleted or
// substituted that turn a into b (the names are ASCII: bytes are
// characters).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
