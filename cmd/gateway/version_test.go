package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/version"
)

// checkout returns the commit the repository's checkout is at, with -dirty
// when it has changes not committed (what the Go toolchain records: git
// status --porcelain says anything), and skips the test, saying why, when
// there is no git or no checkout.
func checkout(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH: the version's commit comes from the git checkout")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse HEAD: %v): the version's commit comes from one", err)
	}
	commit := strings.TrimSpace(string(head))
	status, err := exec.Command("git", "status", "--porcelain").Output()
	if err != nil {
		t.Fatalf("git status: %v", err)
	}
	if len(status) > 0 {
		commit += "-dirty"
	}
	return commit
}

// buildGateway builds the gateway with the go build flags given into a
// directory removed when the test ends.
func buildGateway(t *testing.T, env []string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(dbtest.SharedDir(t, "hookgate-version-"), "gateway")
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, ".")...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(flags, " "), err, out)
	}
	return bin
}

// versionOf runs bin version and bin version --json.
func versionOf(t *testing.T, bin string) (string, version.Info) {
	t.Helper()
	line, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("gateway version: %v", err)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("gateway version --json: %v", err)
	}
	var fields map[string]any
	if err := json.Unmarshal(out, &fields); err != nil || len(fields) != 3 {
		t.Fatalf("gateway version --json = %s (%v); want {\"version\",\"commit\",\"go\"}", out, err)
	}
	var info version.Info
	_ = json.Unmarshal(out, &info)
	return strings.TrimSpace(string(line)), info
}

// A binary names the commit of the checkout it was built from, the release
// and the Go version that built it: built by `make build` (CGO_ENABLED=0,
// -trimpath, the commit passed to the linker, so a git worktree and
// -buildvcs=false too), or by a plain go build in a clone, which records the
// commit itself. One built outside a checkout (the Docker image's context
// holds no .git) names the commit the Dockerfile passes the linker.
func TestVersionNamesTheCheckoutsCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	commit := checkout(t)
	want := version.Info{Version: version.Number, Commit: commit, Go: runtime.Version()}
	check := func(t *testing.T, bin string, want version.Info) {
		t.Helper()
		line, info := versionOf(t, bin)
		if info != want {
			t.Errorf("gateway version --json = %+v; want %+v", info, want)
		}
		if line != want.String() {
			t.Errorf("gateway version = %q; want %q", line, want.String())
		}
	}

	t.Run("make build", func(t *testing.T) {
		if _, err := exec.LookPath("make"); err != nil {
			t.Skip("no make on PATH")
		}
		bin := filepath.Join(dbtest.SharedDir(t, "hookgate-version-"), "gateway")
		if out, err := exec.Command("make", "-s", "-C", "../..", "build", "BIN="+bin).CombinedOutput(); err != nil {
			t.Fatalf("make build: %v\n%s", err, out)
		}
		check(t, bin, want)
	})
	t.Run("go build in a clone", func(t *testing.T) {
		if fi, err := os.Stat("../../.git"); err != nil || !fi.IsDir() {
			t.Skip("this checkout's .git is not a directory (a git worktree): go build records no commit there, make build passes it")
		}
		check(t, buildGateway(t, []string{"CGO_ENABLED=0"}, "-trimpath", "-buildvcs=true"), want)
	})
	t.Run("outside a checkout", func(t *testing.T) {
		const linked = "0b8e8c4710cd6cc1bd0c345e44d2e37a1293151e"
		bin := buildGateway(t, []string{"CGO_ENABLED=0"}, "-trimpath", "-buildvcs=false",
			"-ldflags=-s -w -X github.com/hookgate/hookgate/internal/version.commit="+linked)
		check(t, bin, version.Info{Version: version.Number, Commit: linked, Go: runtime.Version()})
	})
}

// version takes --json and nothing else: anything else is a usage error
// (exit 2), and it needs no configuration.
func TestVersionCommand(t *testing.T) {
	t.Setenv("GATEWAY_ROUTES", "not a route")
	var out bytes.Buffer
	if err := run(t.Context(), []string{"version"}, &out, &out); err != nil || !strings.HasPrefix(out.String(), "hookgate "+version.Number+" (") {
		t.Fatalf("gateway version = %v %q", err, out.String())
	}
	out.Reset()
	if err := run(t.Context(), []string{"version", "--json"}, &out, &out); err != nil {
		t.Fatalf("gateway version --json: %v", err)
	}
	var info version.Info
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || info.Version != version.Number || info.Commit == "" || info.Go != runtime.Version() {
		t.Fatalf("gateway version --json = %q (%v)", out.String(), err)
	}
	for _, args := range [][]string{{"version", "extra"}, {"version", "--yaml"}} {
		var exit *cli.ExitError
		if err := run(t.Context(), args, &out, &out); !errors.As(err, &exit) || exit.Code != cli.ExitUsage {
			t.Errorf("gateway %s = %v; want a usage error (exit 2)", strings.Join(args, " "), err)
		}
	}
}
