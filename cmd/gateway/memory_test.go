package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/payload"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// gatewayBinary builds the gateway without the race detector (whose shadow
// memory would hide what the gateway itself holds) into a directory removed
// when the test ends, and returns its path. Go's build cache makes every
// build after the first a link.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(dbtest.SharedDir(t, "hookgate-bin-"), "gateway")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startBinary runs the built gateway with env (PATH added) until the test
// ends, waits until it is ready, and returns the process and its address.
func startBinary(t *testing.T, env ...string) (*exec.Cmd, string) {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(gatewayBinary(t), "serve")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "GATEWAY_ADDR=" + addr}, env...)
	var logs dbtest.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gateway's log:\n%s", logs.String())
		}
	})
	waitFor(t, "http://"+addr+"/readyz", 200, 60*time.Second)
	return cmd, addr
}

// peakRSS is the process's high-water mark of resident memory (VmHWM), in
// bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// numbers is a JSON array of n zeros: two bytes a value, the shape that costs
// a tree parser most per byte.
func numbers(n int) []byte {
	b := make([]byte, 0, 2*n+1)
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '0')
	}
	return append(b, ']')
}

// postAll sends the requests at once and returns their statuses in order (0
// for a request that failed to be answered).
func postAll(t *testing.T, reqs []*http.Request) []int {
	t.Helper()
	codes := make([]int, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			codes[i] = res.StatusCode
		})
	}
	wg.Wait()
	return codes
}

// Memory follows bytes, whatever their shape: six signed 2 MB deliveries of a
// million tiny values each, sent at once, cost the gateway no more than a
// small multiple of their bytes, through a route whose filter reads the big
// list and through a GitLab source (whose token does not cover the body).
// A payload of more values than the gateway reads is refused alone, 400,
// while the valid deliveries sent with it are accepted.
func TestMemoryFollowsBytes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hookgate.yaml")
	if err := os.WriteFile(file, []byte(`sources:
  - {name: lab, kind: gitlab, secret_env: LAB_TOKEN}
routes:
  - name: filtered
    match: ["github:push"]
    filter: 'payload.ref == "refs/heads/main" && size(payload.values) > 0 && payload.values[999999] == 0'
    target: builtin:log
  - {name: lab-log, match: ["lab:*"], target: builtin:log}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, addr := startBinary(t,
		"DATABASE_URL="+dbtest.URL(t),
		"GITHUB_WEBHOOK_SECRET="+secret,
		"LAB_TOKEN=lab-token",
		"GATEWAY_CONFIG_FILE="+file,
	)
	million := numbers(1_000_000)
	push := func(id string, values []byte) *http.Request {
		body := fmt.Appendf(nil, `{"ref":"refs/heads/main","repository":{"id":%d,"pushed_at":1},"values":%s}`, len(id), values)
		return signedRequest(t, github, addr, body, id, "push")
	}
	lab := providers.SourceConfig{Name: "lab", Kind: "gitlab", Secrets: verify.Secrets{"lab-token"}}
	gitlab := func(id string) *http.Request {
		return signedRequest(t, lab, addr, fmt.Appendf(nil, `{"object_kind":"push","values":%s}`, million), id, "push")
	}

	var reqs []*http.Request
	for i := range 6 {
		reqs = append(reqs, push(fmt.Sprint("million-gh-", i), million))
	}
	for i, code := range postAll(t, reqs) {
		if code != http.StatusAccepted {
			t.Errorf("GitHub delivery %d of a million values: %d, want 202", i, code)
		}
	}
	reqs = reqs[:0]
	for i := range 6 {
		reqs = append(reqs, gitlab(fmt.Sprint("million-lab-", i)))
	}
	for i, code := range postAll(t, reqs) {
		if code != http.StatusAccepted {
			t.Errorf("GitLab delivery %d of a million values: %d, want 202", i, code)
		}
	}

	// One payload over the limit in a burst of valid ones.
	reqs = []*http.Request{push("too-many", numbers(payload.MaxValues+1))}
	for i := range 5 {
		reqs = append(reqs, push(fmt.Sprint("beside-too-many-", i), million))
	}
	codes := postAll(t, reqs)
	if codes[0] != http.StatusBadRequest {
		t.Errorf("a payload of %d values: %d, want 400", payload.MaxValues+1, codes[0])
	}
	for i, code := range codes[1:] {
		if code != http.StatusAccepted {
			t.Errorf("a valid delivery sent with it (%d): %d, want 202", i, code)
		}
	}

	if peak := peakRSS(t, cmd.Process.Pid); peak > 300<<20 {
		t.Errorf("peak RSS %d MiB, want under 300 MiB", peak>>20)
	} else {
		t.Logf("peak RSS %d MiB", peak>>20)
	}
}

// The gateway binary sets Go's soft memory limit from
// GATEWAY_MAX_INFLIGHT_BYTES: 32 bodies of 25 MiB with a bad signature, all
// at once, against the default 256 MiB budget, keep the process under 400 MiB
// (without the limit the collector let it reach about 490 MiB).
func TestMemoryPeakFollowsTheBudget(t *testing.T) {
	cmd, addr := startBinary(t,
		"DATABASE_URL="+dbtest.URL(t),
		"GITHUB_WEBHOOK_SECRET="+secret,
	)
	body := bytes.Repeat([]byte("x"), 25<<20)
	// Signed with a secret the gateway does not have: refused once the body
	// is read.
	forger := providers.GitHub{Secrets: verify.Secrets{"not-" + secret}}.Source()
	var reqs []*http.Request
	for i := range 32 {
		reqs = append(reqs, signedRequest(t, forger, addr, body, fmt.Sprint("big-", i), "push"))
	}
	refused := 0
	for _, code := range postAll(t, reqs) {
		switch code {
		case http.StatusUnauthorized, http.StatusServiceUnavailable, 0:
			refused++
		default:
			t.Errorf("a 25 MiB body with a bad signature: %d", code)
		}
	}
	if peak := peakRSS(t, cmd.Process.Pid); peak > 400<<20 {
		t.Errorf("peak RSS %d MiB, want under 400 MiB", peak>>20)
	} else {
		t.Logf("peak RSS %d MiB after %d refusals", peak>>20, refused)
	}
}

// The built binary serves with its secrets in files (GITHUB_WEBHOOK_SECRET_FILE,
// GATEWAY_ADMIN_TOKEN_FILE): reading the budget for the memory limit before
// serving must not make the second read of the configuration see each secret
// twice.
func TestServeReadsSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	ghFile, tokenFile := filepath.Join(dir, "github"), filepath.Join(dir, "token")
	if err := os.WriteFile(ghFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("file-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := startBinary(t, "DATABASE_URL="+dbtest.URL(t), "GITHUB_WEBHOOK_SECRET_FILE="+ghFile, "GATEWAY_ADMIN_TOKEN_FILE="+tokenFile)
	if status, body := sendPing(t, addr, "from-files-1"); status != http.StatusAccepted || body != "accepted" {
		t.Errorf("a ping signed with the file's secret: %d %s", status, body)
	}
}
