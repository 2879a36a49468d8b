package version

import (
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A binary names the commit it was built from: the checkout's (with -dirty
// for changes not committed) when hookgate is the main module, the commit of
// a pseudo-version when a service requires hookgate at one, the linker's
// when the build recorded none, and "unknown" when nothing names one.
func TestCommitOf(t *testing.T) {
	const rev = "0b8e8c4710cd6cc1bd0c345e44d2e37a1293151e"
	vcs := func(settings ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i+1 < len(settings); i += 2 {
			out = append(out, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return out
	}
	main := func(settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: module, Version: "(devel)"}, Settings: settings}
	}
	service := func(dep debug.Module) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "example.com/service"}, Deps: []*debug.Module{
			{Path: "github.com/jackc/pgx/v5", Version: "v5.7.1"}, &dep}}
	}
	for _, tc := range []struct {
		name   string
		bi     *debug.BuildInfo
		linked string
		want   string
	}{
		{"a clean checkout", main(vcs("vcs", "git", "vcs.revision", rev, "vcs.modified", "false")...), "", rev},
		{"a checkout with changes", main(vcs("vcs", "git", "vcs.revision", rev, "vcs.modified", "true")...), "", rev + "-dirty"},
		{"the checkout wins over the linker", main(vcs("vcs.revision", rev)...), "feedface", rev},
		{"an archive, linked", main(vcs("-trimpath", "true")...), "feedface", "feedface"},
		{"an archive", main(vcs("-trimpath", "true")...), "", Unknown},
		{"no build information", nil, "", Unknown},
		{"a service, hookgate at a pseudo-version", service(debug.Module{Path: module, Version: "v0.0.0-20261205104508-0b8e8c4710cd"}), "", "0b8e8c4710cd"},
		{"a service, hookgate at a pre-release's pseudo-version", service(debug.Module{Path: module, Version: "v0.7.0-dev.0.20261205104508-0b8e8c4710cd+incompatible"}), "", "0b8e8c4710cd"},
		{"a service, hookgate replaced", service(debug.Module{Path: module, Version: "v0.6.0",
			Replace: &debug.Module{Path: "github.com/someone/hookgate", Version: "v0.6.1-0.20261205104508-0b8e8c4710cd"}}), "", "0b8e8c4710cd"},
		{"a service, hookgate at a tag", service(debug.Module{Path: module, Version: "v0.7.0"}), "", Unknown},
		{"a service, hookgate replaced by a directory", service(debug.Module{Path: module, Version: "v0.6.0",
			Replace: &debug.Module{Path: "../hookgate"}}), "", Unknown},
		{"a service's own revision is not hookgate's", &debug.BuildInfo{Main: debug.Module{Path: "example.com/service"},
			Settings: vcs("vcs.revision", rev)}, "", Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := commitOf(tc.bi, tc.linked); got != tc.want {
				t.Errorf("commit = %q; want %q", got, tc.want)
			}
		})
	}
}

// The line `gateway version` prints, and the release it names.
func TestInfo(t *testing.T) {
	i := Get()
	if i.Version != Number || i.Go != runtime.Version() || i.Commit == "" {
		t.Fatalf("Get() = %+v", i)
	}
	got := Info{Version: "0.7.0", Commit: "0b8e8c4", Go: "go1.26.8"}.String()
	if want := "hookgate 0.7.0 (0b8e8c4, go1.26.8)"; got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
}

var (
	semverRE  = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(-dev)?$`)
	sectionRE = regexp.MustCompile(`(?m)^## (.+)$`)
	releaseRE = regexp.MustCompile(`^(\d+\.\d+\.\d+) \(\d{4}-\d{2}-\d{2}[,)]`)
)

// parse returns X.Y.Z's numbers.
func parse(t *testing.T, v string) []int {
	t.Helper()
	m := semverRE.FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("%q is not a version X.Y.Z or X.Y.Z-dev", v)
	}
	var n []int
	for _, s := range m[1:4] {
		i, _ := strconv.Atoi(s)
		n = append(n, i)
	}
	return n
}

// CHANGELOG.md has a section for this release, so that Number and the
// changelog cannot drift apart: while Number ends in -dev, "Unreleased" is
// the top section and no section has the number yet, which is newer than
// every release the changelog names; once released, the number's own section
// ("## X.Y.Z (date)") is the newest. Released sections run newest first.
func TestChangelogHasThisVersionsSection(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	this, dev := strings.CutSuffix(Number, "-dev")
	n := parse(t, Number)

	var sections, released []string
	for _, m := range sectionRE.FindAllStringSubmatch(string(b), -1) {
		sections = append(sections, m[1])
		if r := releaseRE.FindStringSubmatch(m[1]); r != nil {
			released = append(released, r[1])
		}
	}
	if len(released) == 0 {
		t.Fatalf("CHANGELOG.md names no release (## X.Y.Z (YYYY-MM-DD...)); sections: %q", sections)
	}
	for i := 1; i < len(released); i++ {
		if slices.Compare(parse(t, released[i-1]), parse(t, released[i])) <= 0 {
			t.Errorf("CHANGELOG.md: %s comes before %s; newest first", released[i-1], released[i])
		}
	}
	if dev {
		if sections[0] != "Unreleased" {
			t.Errorf("version.Number is %s, a release under work, but CHANGELOG.md's first section is %q; want \"Unreleased\"", Number, sections[0])
		}
		if slices.Contains(released, this) {
			t.Errorf("CHANGELOG.md has a section for %s, released; version.Number %s is not: drop -dev, or start the next release", this, Number)
		}
		if newest := released[0]; slices.Compare(n, parse(t, newest)) <= 0 {
			t.Errorf("version.Number %s is not newer than %s, CHANGELOG.md's newest release", Number, newest)
		}
		return
	}
	if released[0] != this {
		t.Errorf("version.Number is %s, released, but CHANGELOG.md's newest release is %s; name the Unreleased section \"## %s (YYYY-MM-DD)\"", Number, released[0], Number)
	}
}
