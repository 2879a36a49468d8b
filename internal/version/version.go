// Package version says which hookgate a binary is: its release number, kept
// here and nowhere else, and the commit and Go version it was built from,
// read from the build information the Go toolchain embeds in every binary
// (runtime/debug.ReadBuildInfo).
//
// Releases follow semantic versioning (https://semver.org). While a release
// is being made, Number ends in "-dev" and CHANGELOG.md's "Unreleased"
// section lists what it holds; releasing it drops the suffix and names that
// section after the number. A test holds the two together.
package version

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
)

// Number is this source tree's release: the next minor release after the
// last one in CHANGELOG.md, with "-dev" until it is released.
const Number = "0.7.0-dev"

// Unknown is the commit of a binary whose build recorded none: built outside
// a git checkout (an archive, the Docker image's context) without the
// linker's -X flag for commit.
const Unknown = "unknown"

// module is hookgate's module path: the binary's main module, or one of a
// service's dependencies when the service embeds hookgate.
const module = "github.com/hookgate/hookgate"

// commit is the commit a build outside a git checkout names with
// -ldflags "-X github.com/hookgate/hookgate/internal/version.commit=<hash>"
// (the Dockerfile's COMMIT argument). The checkout's own commit, when the
// build information has one, wins over it.
var commit string

// Info is what a binary says about itself (`gateway version --json`).
type Info struct {
	// Version is the release, Number.
	Version string `json:"version"`
	// Commit is the git commit hookgate was built from, with "-dirty" when
	// the checkout had changes not committed; Unknown when the build
	// recorded none.
	Commit string `json:"commit"`
	// Go is the Go version that built it (go1.26.8).
	Go string `json:"go"`
}

// String is the line `gateway version` prints:
// "hookgate 0.7.0 (<commit>, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("hookgate %s (%s, %s)", i.Version, i.Commit, i.Go)
}

// Get returns this binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo() // nil when the binary has none
	return Info{Version: Number, Commit: commitOf(bi, commit), Go: runtime.Version()}
}

// pseudoRev is a pseudo-version's commit: the 12 hex digits after its
// timestamp (v0.0.0-20261205104508-0b8e8c4710cd).
var pseudoRev = regexp.MustCompile(`[.-]\d{14}-([0-9a-f]{12})(\+.*)?$`)

// commitOf finds hookgate's commit in bi: the checkout's revision when
// hookgate is the main module (go build in a git checkout records it, with
// -trimpath too), or the commit a pseudo-version names when a service
// requires hookgate at one. A tagged version names no commit: linked, or
// Unknown.
func commitOf(bi *debug.BuildInfo, linked string) string {
	if bi != nil && bi.Main.Path == module {
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			if modified == "true" {
				rev += "-dirty"
			}
			return rev
		}
	}
	if bi != nil && bi.Main.Path != module {
		for _, dep := range bi.Deps {
			if dep.Path != module {
				continue
			}
			if dep.Replace != nil {
				dep = dep.Replace
			}
			if m := pseudoRev.FindStringSubmatch(dep.Version); m != nil {
				return m[1]
			}
		}
	}
	if linked != "" {
		return linked
	}
	return Unknown
}
