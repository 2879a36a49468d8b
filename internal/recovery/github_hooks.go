package recovery

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Hook is one GitHub webhook whose deliveries recovery lists: a repository's
// ("repo:OWNER/NAME:ID"), an organization's ("org:ORG:ID"), or the GitHub
// App's own ("app").
type Hook struct {
	// Kind is "repo", "org" or "app".
	Kind string
	// Owner is the repository's owner or the organization; Repo the
	// repository's name.
	Owner, Repo string
	// ID is the hook's id (X-GitHub-Hook-ID); 0 for the App's hook.
	ID int64
}

// String returns the hook as GITHUB_RECOVERY_HOOKS spells it.
func (h Hook) String() string {
	switch h.Kind {
	case "repo":
		return "repo:" + h.Owner + "/" + h.Repo + ":" + strconv.FormatInt(h.ID, 10)
	case "org":
		return "org:" + h.Owner + ":" + strconv.FormatInt(h.ID, 10)
	}
	return h.Kind
}

// ParseHooks reads GITHUB_RECOVERY_HOOKS: hooks separated by white space.
// Its error names every entry that is wrong, one line each.
func ParseHooks(s string) ([]Hook, error) {
	var hooks []Hook
	var errs []error
	seen := map[Hook]bool{}
	// An entry is named by its place, never shown: a secret pasted into
	// the variable would be.
	for i, f := range strings.Fields(s) {
		h, err := parseHook(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %d %w", i+1, err))
			continue
		}
		if seen[h] {
			errs = append(errs, fmt.Errorf("entry %d is listed twice", i+1))
			continue
		}
		seen[h] = true
		hooks = append(hooks, h)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return hooks, nil
}

func parseHook(f string) (Hook, error) {
	if f == "app" {
		return Hook{Kind: "app"}, nil
	}
	bad := errors.New("is not repo:OWNER/NAME:HOOK_ID, org:ORG:HOOK_ID or app")
	if strings.Contains(f, ",") {
		bad = fmt.Errorf("%w (hooks are separated by spaces, not commas)", bad)
	}
	kind, rest, ok := strings.Cut(f, ":")
	if !ok {
		return Hook{}, bad
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return Hook{}, bad
	}
	id, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil || id <= 0 {
		return Hook{}, errors.New("has a hook id that is not a positive number")
	}
	name := rest[:i]
	h := Hook{Kind: kind, ID: id}
	switch kind {
	case "repo":
		owner, repo, ok := strings.Cut(name, "/")
		if !ok || !validName(owner) || !validName(repo) {
			return Hook{}, bad
		}
		h.Owner, h.Repo = owner, repo
	case "org":
		if !validName(name) {
			return Hook{}, bad
		}
		h.Owner = name
	default:
		return Hook{}, bad
	}
	return h, nil
}

// validName accepts what GitHub allows in an owner's or repository's name.
func validName(s string) bool {
	if s == "" || len(s) > 100 || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
