package upgrade_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/faults"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/schema"
	"github.com/hookgate/hookgate/internal/verify"
	"github.com/hookgate/hookgate/internal/version"
)

// The previous release: the one this release runs beside during a rolling
// upgrade, and rolls back to. It is the newest release CHANGELOG.md names
// before version.Number (TestPreviousIsTheReleaseBeforeThisOne holds it
// there); once a release is made, the next one names it here, with the
// commit it was made from.
const (
	previousVersion = "0.6.0"
	previousCommit  = "0b8e8c4710cd6cc1bd0c345e44d2e37a1293151e"
)

const (
	secret = "upgrade-github-secret"
	route  = "sink"
	// thisAgent is the User-Agent of this release's forwards: the sink
	// tells the two releases' forwards apart by it.
	thisAgent = "hookgate/" + version.Number
)

func TestMain(m *testing.M) { dbtest.Main(m) }

var releaseRE = regexp.MustCompile(`(?m)^## (\d+)\.(\d+)\.(\d+) \(\d{4}-\d{2}-\d{2}(?:, ([0-9a-f]{7,40}))?\)`)

// The release this test runs beside this one is the newest CHANGELOG.md
// names before version.Number, at the commit the changelog names for it:
// making a release, and starting the next one, fails here until the test
// runs the release before it.
func TestPreviousIsTheReleaseBeforeThisOne(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	numbers := func(m []string) []int {
		var n []int
		for _, s := range m {
			i, _ := strconv.Atoi(s)
			n = append(n, i)
		}
		return n
	}
	this := strings.TrimSuffix(version.Number, "-dev")
	m := regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)$`).FindStringSubmatch(this)
	if m == nil {
		t.Fatalf("version.Number %q is not X.Y.Z or X.Y.Z-dev", version.Number)
	}
	var before []int
	var name, commit string
	for _, r := range releaseRE.FindAllStringSubmatch(string(b), -1) {
		n := numbers(r[1:4])
		if slices.Compare(n, numbers(m[1:4])) < 0 && (before == nil || slices.Compare(n, before) > 0) {
			before, name, commit = n, fmt.Sprintf("%d.%d.%d", n[0], n[1], n[2]), r[4]
		}
	}
	if name != previousVersion {
		t.Fatalf("the release before %s in CHANGELOG.md is %q, but this test runs %s beside it: name that release and its commit in previousVersion and previousCommit",
			version.Number, name, previousVersion)
	}
	if commit != "" && !strings.HasPrefix(previousCommit, commit) {
		t.Errorf("CHANGELOG.md says %s is commit %s; previousCommit is %s", name, commit, previousCommit)
	}
}

// The previous release and this one run at once on one database, both
// taking deliveries and both forwarding them; then this one stops and the
// previous one, started again on the database this one migrated, serves and
// forwards alone. Every delivery is acknowledged and reaches the target
// exactly once (by Idempotency-Key), whichever release took it and whichever
// forwarded it.
func TestPreviousReleaseBesideThisOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two releases of the gateway and runs them")
	}
	began := time.Now()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	requireHistory(t, root)
	tmp := dbtest.SharedDir(t, "hookgate-upgrade-")
	prevBin, thisBin := filepath.Join(tmp, "gateway-"+previousVersion), filepath.Join(tmp, "gateway")
	faults.Build(t, extract(t, root, previousCommit, filepath.Join(tmp, previousVersion)), prevBin)
	faults.Build(t, root, thisBin)
	t.Logf("built %s (%.7s) and this release in %s", previousVersion, previousCommit, time.Since(began).Round(100*time.Millisecond))

	ctx := context.Background()
	target := &sink{got: map[string][]string{}}
	targetSrv := httptest.NewServer(target)
	t.Cleanup(targetSrv.Close)
	dbURL := dbtest.EmptyURL(t)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + dbURL,
		"GITHUB_WEBHOOK_SECRET=" + secret,
		"GATEWAY_ROUTES=" + route + "=github:*>" + targetSrv.URL + "/hook",
		"GATEWAY_WORKERS=8",
	}
	var prevLog, thisLog dbtest.Buffer
	prev := &faults.Gateway{Bin: prevBin, Addr: fmt.Sprintf("127.0.0.1:%d", faults.FreePort(t)), Env: env, Log: &prevLog}
	this := &faults.Gateway{Bin: thisBin, Addr: fmt.Sprintf("127.0.0.1:%d", faults.FreePort(t)), Env: env, Log: &thisLog}
	t.Cleanup(func() {
		prev.Kill()
		this.Kill()
		if t.Failed() {
			t.Logf("%s's log:\n%s", previousVersion, tail(prevLog.String()))
			t.Logf("this release's log:\n%s", tail(thisLog.String()))
		}
	})
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	schema.Use(cfg.ConnConfig, schema.Default, "public")
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	// The previous release alone, as before the upgrade: it makes the
	// database.
	phase := time.Now()
	if err := prev.Start(); err != nil {
		t.Fatal(err)
	}
	sent := send(t, prev, "before", 10)
	target.waitForwarded(t, pool, sent)
	t.Logf("%s alone: %d deliveries in %s", previousVersion, len(sent), time.Since(phase).Round(100*time.Millisecond))

	// This release starts beside it and migrates the database under it. Both
	// take deliveries at once, and both forward, in rounds until each has
	// forwarded some (River gives a job to whichever asks first).
	phase = time.Now()
	if err := this.Start(); err != nil {
		t.Fatal(err)
	}
	var beside []string
	for round := 0; round < 10; round++ {
		var wg sync.WaitGroup
		var byPrev, byThis []string
		wg.Go(func() { byPrev = send(t, prev, fmt.Sprintf("beside-%d-to-%s", round, previousVersion), 10) })
		wg.Go(func() { byThis = send(t, this, fmt.Sprintf("beside-%d-to-this", round), 10) })
		wg.Wait()
		beside = append(append(beside, byPrev...), byThis...)
		sent = append(append(sent, byPrev...), byThis...)
		target.waitForwarded(t, pool, sent)
		if forwards := target.agents(beside); forwards[thisAgent] > 0 && len(forwards) > 1 {
			break
		}
	}
	forwards := target.agents(beside)
	if forwards[thisAgent] == 0 || len(forwards) < 2 {
		t.Errorf("side by side, the target saw forwards by %v: want both releases forwarding (this one's User-Agent is %s)", forwards, thisAgent)
	}
	for _, g := range []*faults.Gateway{prev, this} {
		if status := get(t, g, "/readyz"); status != http.StatusOK {
			t.Errorf("side by side, %s answers /readyz %d", g.Bin, status)
		}
	}
	if text := metrics(t, this); !strings.Contains(text, `hookgate_build_info{commit="`) || !strings.Contains(text, `version="`+version.Number+`"} 1`) {
		t.Errorf("this release's /metrics does not name its version %s in hookgate_build_info", version.Number)
	}
	t.Logf("side by side: %d deliveries in %s, forwarded %v", len(beside), time.Since(phase).Round(100*time.Millisecond), forwards)

	// Roll back: this release stops, and the previous one, started again,
	// works alone on the database this one migrated.
	phase = time.Now()
	if err := this.Stop(); err != nil {
		t.Errorf("this release did not stop cleanly: %v", err)
	}
	if err := prev.Stop(); err != nil {
		t.Errorf("%s did not stop cleanly: %v", previousVersion, err)
	}
	if err := prev.Start(); err != nil {
		t.Fatalf("%s on the database this release migrated: %v", previousVersion, err)
	}
	if status := get(t, prev, "/readyz"); status != http.StatusOK {
		t.Errorf("%s, started again on the database this release migrated, answers /readyz %d", previousVersion, status)
	}
	after := send(t, prev, "after", 10)
	sent = append(sent, after...)
	target.waitForwarded(t, pool, sent)
	if forwards := target.agents(after); forwards[thisAgent] != 0 {
		t.Errorf("after this release stopped, the target saw forwards by %v", forwards)
	}
	t.Logf("%s alone again: %d deliveries in %s", previousVersion, len(after), time.Since(phase).Round(100*time.Millisecond))

	var failed []string
	rows, err := pool.Query(ctx, `SELECT kind || ': ' || errors::text FROM river_job WHERE errors IS NOT NULL ORDER BY id`)
	if err == nil {
		for rows.Next() {
			var s string
			if rows.Scan(&s) == nil {
				failed = append(failed, s)
			}
		}
		err = rows.Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Errorf("River jobs failed an attempt (a job one release cannot work?):\n%s", strings.Join(failed, "\n"))
	}
	t.Logf("the whole test took %s", time.Since(began).Round(100*time.Millisecond))
}

// requireHistory skips the test, saying why, when the previous release
// cannot be built from the repository at root: no git, or its commit not in
// the history (not a checkout, a shallow clone). In CI (CI set) it fails
// instead: the clean clone CI tests has the history.
func requireHistory(t *testing.T, root string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set, and "+format, args...)
		}
		t.Skipf("the upgrade test builds release %s from its commit, but "+format, append([]any{previousVersion}, args...)...)
	}
	for _, tool := range []string{"git", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing("there is no %s on PATH", tool)
		}
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", previousCommit+"^{commit}").CombinedOutput(); err != nil {
		missing("commit %s is not in the history of %s (not a git checkout, or a shallow clone: git fetch --unshallow): %v %s",
			previousCommit, root, err, bytes.TrimSpace(out))
	}
}

// extract writes the tree of commit, in the repository at root, to dir
// (git archive | tar -x) and returns dir.
func extract(t *testing.T, root, commit, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	// One buffer each: two processes' copying goroutines never share one.
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, archiveErr.Bytes())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, untarErr.Bytes())
	}
	return dir
}

var (
	github = providers.GitHub{Secrets: verify.Secrets{secret}}.Source()
	client = &http.Client{Timeout: 10 * time.Second}
	// pullRequests numbers the pull requests the deliveries open: each its
	// own entity, so each forward goes through the entity's lease and
	// watermark and none supersedes another.
	pullRequests atomic.Int64
)

// send posts n signed GitHub deliveries, their ids starting with phase, to
// g, and checks that each is acknowledged as new (202); it returns the ids.
// Half are pull requests opened, dispatched in order per entity, half pings,
// which name none.
func send(t *testing.T, g *faults.Gateway, phase string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%02d", phase, i)
		event, body := "ping", fmt.Appendf(nil, `{"zen":"Design for failure.","hook_id":1,"id":%q}`, id)
		if i%2 == 0 {
			pr := 1000 + pullRequests.Add(1)
			event = "pull_request.opened"
			body = fmt.Appendf(nil, `{"action":"opened","number":%d,"pull_request":{"id":%d,"state":"open","updated_at":%q},"repository":{"id":1}}`,
				pr, pr, time.Now().UTC().Format(time.RFC3339))
		}
		req, err := providers.NewRequest(context.Background(), github, "http://"+g.Addr+"/webhooks/github", body, id, event, time.Now())
		if err != nil {
			t.Error(err)
			return ids
		}
		res, err := client.Do(req)
		if err != nil {
			t.Errorf("%s to %s: %v", id, g.Bin, err)
			continue
		}
		answer, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusAccepted || !bytes.Contains(answer, []byte(`"status":"accepted"`)) {
			t.Errorf("%s to %s: %d %s; want 202 accepted", id, g.Bin, res.StatusCode, bytes.TrimSpace(answer))
			continue
		}
		ids = append(ids, id)
	}
	return ids
}

// sink is the route's target: it answers 200 and keeps the User-Agent of
// each forward it received, by Idempotency-Key.
type sink struct {
	mu  sync.Mutex
	got map[string][]string
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	key := r.Header.Get("Idempotency-Key")
	s.got[key] = append(s.got[key], r.Header.Get("User-Agent"))
}

// waitForwarded waits until every delivery of ids has reached the sink and
// every dispatch in the database has succeeded, then checks that each
// reached it exactly once, and that nothing else did.
func (s *sink) waitForwarded(t *testing.T, pool *pgxpool.Pool, ids []string) {
	t.Helper()
	keys := map[string]bool{}
	for _, id := range ids {
		keys[forward.IdempotencyKey("github", id, route)] = true
	}
	dbtest.Eventually(t, 60*time.Second, fmt.Sprintf("%d deliveries forwarded", len(ids)), func() error {
		s.mu.Lock()
		missing := 0
		for key := range keys {
			if len(s.got[key]) == 0 {
				missing++
			}
		}
		s.mu.Unlock()
		if missing > 0 {
			return fmt.Errorf("%d not at the target yet", missing)
		}
		var dispatches, open int
		err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE state <> 'succeeded') FROM hookgate_dispatches`).Scan(&dispatches, &open)
		if err != nil {
			return err
		}
		if open > 0 || dispatches != len(ids) {
			return fmt.Errorf("%d dispatches, %d of them not succeeded; want %d, all succeeded", dispatches, open, len(ids))
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, agents := range s.got {
		if !keys[key] {
			t.Errorf("the target received %q, which no delivery sent so far has", key)
		} else if len(agents) != 1 {
			t.Errorf("%s reached the target %d times (by %v); want once", key, len(agents), agents)
		}
	}
}

// agents counts the forwards of ids the sink received, by User-Agent.
func (s *sink) agents(ids []string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	for _, id := range ids {
		for _, agent := range s.got[forward.IdempotencyKey("github", id, route)] {
			n[agent]++
		}
	}
	return n
}

// get returns the status of GET path on g.
func get(t *testing.T, g *faults.Gateway, path string) int {
	t.Helper()
	res, err := client.Get("http://" + g.Addr + path)
	if err != nil {
		t.Errorf("GET %s on %s: %v", path, g.Bin, err)
		return 0
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// metrics returns g's /metrics.
func metrics(t *testing.T, g *faults.Gateway) string {
	t.Helper()
	res, err := client.Get("http://" + g.Addr + "/metrics")
	if err != nil {
		t.Errorf("GET /metrics on %s: %v", g.Bin, err)
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// tail is a log's last 8 KiB.
func tail(s string) string { return s[max(0, len(s)-8<<10):] }
