package pgembed_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/pgembed"
)

// The private server starts, keeps its data across a stop and a start, and
// stops cleanly; Running finds it while it runs and not after. The space in
// its directory must survive PostgreSQL's settings and pgx's URL.
func TestStartStopKeepsData(t *testing.T) {
	dir := filepath.Join(dbtest.SharedDir(t, "hookgate-pgembed-"), "data dir")
	ctx := context.Background()

	query := func(setup, sql string) string {
		srv, err := pgembed.Start(ctx, pgembed.Options{Dir: dir})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		if got, ok := pgembed.Running(ctx, dir, ""); !ok || got != srv.URL() {
			t.Errorf("Running = %q, %v; want %q, true", got, ok, srv.URL())
		}
		if got := socketDirOf(t, srv.URL()); got != filepath.Join(dir, "socket") {
			t.Errorf("socket dir = %q, want %q", got, filepath.Join(dir, "socket"))
		}
		conn, err := pgx.Connect(ctx, srv.URL())
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		if setup != "" {
			if _, err := conn.Exec(ctx, setup); err != nil {
				t.Fatalf("exec: %v", err)
			}
		}
		var out string
		if err := conn.QueryRow(ctx, sql).Scan(&out); err != nil {
			t.Fatalf("query: %v", err)
		}
		conn.Close(ctx)
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := srv.Stop(stopCtx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if got, ok := pgembed.Running(ctx, dir, ""); ok {
			t.Errorf("Running after Stop = %q, true", got)
		}
		return out
	}

	if got := query("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')", "SELECT current_database()"); got != "hookgate" {
		t.Fatalf("database = %q", got)
	}
	if got := query("", "SELECT v FROM kept"); got != "hello" {
		t.Fatalf("after restart got %q", got)
	}
}

// A data directory too deep for a socket path gets a private socket directory
// under os.TempDir instead, which Stop removes.
func TestLongDirUsesTempSocketDir(t *testing.T) {
	dir := filepath.Join(dbtest.SharedDir(t, "hookgate-pgembed-"), strings.Repeat("d", 100))
	ctx := context.Background()
	srv, err := pgembed.Start(ctx, pgembed.Options{Dir: dir})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Stop(context.Background())
		}
	})
	socketDir := socketDirOf(t, srv.URL())
	if strings.HasPrefix(socketDir, dir) || !strings.HasPrefix(socketDir, os.TempDir()) {
		t.Errorf("socket dir %s: want one under %s", socketDir, os.TempDir())
	}
	assertPrivate(t, socketDir, serverUID(t, dir))
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	conn.Close(ctx)
	if got, ok := pgembed.Running(ctx, dir, ""); !ok || got != srv.URL() {
		t.Errorf("Running = %q, %v; want %q, true", got, ok, srv.URL())
	}
	stopped = true
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(socketDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir %s after Stop: %v, want it removed", socketDir, err)
	}
}

// Environment of the probe process run by TestOtherUserCannotConnect.
const (
	probePortEnv      = "HOOKGATE_PGEMBED_PROBE_PORT"
	probeSocketDirEnv = "HOOKGATE_PGEMBED_PROBE_SOCKET_DIR"
	// probeLoggedIn is the probe's exit code when any login succeeded.
	probeLoggedIn = 3
)

// Another local user can log in to the private server neither through its
// socket nor over TCP. The old server (TCP on 127.0.0.1, trust) let any local
// user in as superuser: the probe's TCP login would succeed and fail this test.
func TestOtherUserCannotConnect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a probe as another user (CI runs as root)")
	}
	ctx := context.Background()
	dir := filepath.Join(dbtest.SharedDir(t, "hookgate-pgembed-"), "pg")
	// A port nothing listens on, so that a TCP login by the probe could only
	// reach this server, had it a TCP listener.
	port := freeTCPPort(t)
	srv, err := pgembed.Start(ctx, pgembed.Options{Dir: dir, Port: port})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })

	// Root can log in: the probe's refusal is not a broken server.
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatalf("root cannot connect: %v", err)
	}
	var listen string
	if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen); err != nil {
		t.Fatalf("show listen_addresses: %v", err)
	}
	conn.Close(ctx)
	if listen != "" {
		t.Errorf("listen_addresses = %q, want none", listen)
	}

	uid := serverUID(t, dir)
	if uid == 0 {
		t.Fatal("the server runs as root")
	}
	socketDir := socketDirOf(t, srv.URL())
	if socketDir != "" {
		assertPrivate(t, socketDir, uid)
	} else {
		t.Errorf("URL %s names no socket directory", srv.URL())
	}
	assertPrivate(t, filepath.Join(dir, "pgdata"), uid)

	probeUID, probeGID := otherUser(t, uid)
	out, code := runProbe(t, probeUID, probeGID, socketDir, port)
	ran := regexp.MustCompile(`(?m)^probe: running as uid (\d+)$`).FindStringSubmatch(out)
	switch {
	case ran == nil:
		t.Fatalf("probe could not start (exit %d):\n%s", code, out)
	case ran[1] != strconv.Itoa(int(probeUID)):
		t.Fatalf("probe ran as uid %s, want %d:\n%s", ran[1], probeUID, out)
	case code == probeLoggedIn:
		t.Fatalf("uid %d logged in to the private server:\n%s", probeUID, out)
	case code != 0 || !strings.Contains(out, "probe: every login refused"):
		t.Fatalf("probe did not finish (exit %d):\n%s", code, out)
	}
	t.Logf("probe as uid %d:\n%s", probeUID, out)
}

// TestProbeHelper is the probe TestOtherUserCannotConnect runs as another
// user: it tries to log in to the server through its socket and over TCP,
// prints every outcome, and exits probeLoggedIn when any login succeeded.
func TestProbeHelper(t *testing.T) {
	portText := os.Getenv(probePortEnv)
	if portText == "" {
		t.Skip("run by TestOtherUserCannotConnect as another user")
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("probe port: %v", err)
	}
	fmt.Printf("probe: running as uid %d\n", os.Getuid())
	if os.Getuid() == 0 {
		t.Fatal("probe: running as root proves nothing")
	}
	var targets []string
	for _, u := range []string{"hookgate", "postgres"} {
		if dir := os.Getenv(probeSocketDirEnv); dir != "" {
			host := strings.ReplaceAll(url.QueryEscape(dir), "+", "%20")
			targets = append(targets, fmt.Sprintf("postgres://%s@/postgres?host=%s&port=%d&sslmode=disable&connect_timeout=5", u, host, port))
		}
		for _, host := range []string{"127.0.0.1", "[::1]"} {
			targets = append(targets, fmt.Sprintf("postgres://%s@%s:%d/postgres?sslmode=disable&connect_timeout=5", u, host, port))
		}
	}
	in := 0
	for _, target := range targets {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := pgx.Connect(ctx, target)
		if err == nil {
			in++
			fmt.Printf("probe: %s: LOGGED IN\n", target)
			conn.Close(ctx)
		} else {
			fmt.Printf("probe: %s: refused: %v\n", target, err)
		}
		cancel()
	}
	if in > 0 {
		fmt.Printf("probe: %d of %d logins succeeded\n", in, len(targets))
		os.Exit(probeLoggedIn)
	}
	fmt.Println("probe: every login refused")
}

// runProbe runs TestProbeHelper as uid:gid and returns its output and exit
// code. The test binary sits in a directory only root may enter, so a copy
// in a directory anyone may enter is run.
func runProbe(t *testing.T, uid, gid uint32, socketDir string, port int) (string, int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("probe could not start: %v", err)
	}
	probeDir := dbtest.SharedDir(t, "hookgate-pgembed-")
	bin := filepath.Join(probeDir, "probe.test")
	if err := copyFile(bin, self, 0o755); err != nil {
		t.Fatalf("probe could not start: copy test binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestProbeHelper$", "-test.count=1", "-test.timeout=90s")
	cmd.Dir = probeDir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		probePortEnv + "=" + strconv.Itoa(port),
		probeSocketDirEnv + "=" + socketDir,
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Groups left empty drops root's supplementary groups too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	if err := cmd.Start(); err != nil {
		t.Fatalf("probe could not start as uid %d: %v", uid, err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("probe: %v\n%s", err, out.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// otherUser returns a user that is neither root nor the server's: nobody, or
// uid 65000 when the server itself runs as nobody.
func otherUser(t *testing.T, serverUID int) (uint32, uint32) {
	t.Helper()
	if u, err := user.Lookup("nobody"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if uid != serverUID && uid != 0 {
			return uint32(uid), uint32(gid)
		}
	}
	return 65000, 65000
}

// serverUID returns the uid the server in dir runs as: the owner of the
// postmaster.pid it wrote.
func serverUID(t *testing.T, dir string) int {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, "pgdata", "postmaster.pid"))
	if err != nil {
		t.Fatalf("server uid: %v", err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// socketDirOf returns the socket directory a server URL names, if any.
func socketDirOf(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("server URL: %v", err)
	}
	return u.Query().Get("host")
}

// assertPrivate checks that path is a directory only uid may enter.
func assertPrivate(t *testing.T, path string, uid int) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want a directory with mode 0700", path, fi.Mode())
	}
	if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != uid {
		t.Errorf("%s: owned by uid %d, want the server's uid %d", path, owner, uid)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func copyFile(dst, src string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// A data directory's server belongs to one process at a time: a second Start
// while the first runs is ErrInUse, saying how gateways share a database,
// and never touches the first's server; once it stops, the directory is free.
func TestADataDirectoryHasOneOwner(t *testing.T) {
	dir := filepath.Join(dbtest.SharedDir(t, "hookgate-pgembed-"), "data")
	ctx := context.Background()
	first, err := pgembed.Start(ctx, pgembed.Options{Dir: dir})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	_, err = pgembed.Start(ctx, pgembed.Options{Dir: dir})
	if !errors.Is(err, pgembed.ErrInUse) || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("second start: %v, want ErrInUse naming DATABASE_URL", err)
	}
	conn, err := pgx.Connect(ctx, first.URL())
	if err != nil {
		t.Fatalf("the first server after the refused start: %v", err)
	}
	conn.Close(ctx)
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := pgembed.Start(ctx, pgembed.Options{Dir: dir})
	if err != nil {
		t.Fatalf("start after the first stopped: %v", err)
	}
	_ = again.Stop(ctx)
}
