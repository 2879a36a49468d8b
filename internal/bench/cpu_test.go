package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
)

// The CPU a process spends shows in its reading, and the figure per delivery
// divides the two processes' time by the deliveries.
func TestReadCPUFollowsTheProcess(t *testing.T) {
	before := readCPU(os.Getpid(), 0)
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	after := readCPU(os.Getpid(), 0)
	if spent := after.gateway - before.gateway; spent < 100*time.Millisecond {
		t.Fatalf("300 ms of spinning read as %s of CPU", spent)
	}
	s, ok := procStat(os.Getpid())
	if !ok || s.ppid != os.Getppid() || s.comm == "" {
		t.Fatalf("procStat of this process: %+v, %v", s, ok)
	}
	got := cpuPerDelivery(cpuTimes{postmaster: 7}, cpuTimes{gateway: 2 * time.Second, postgres: 3 * time.Second, postmaster: 7}, 1000)
	if !strings.Contains(got, "gateway 2.00 ms + PostgreSQL 3.00 ms = 5.00 ms per delivery") {
		t.Fatalf("cpuPerDelivery = %s", got)
	}
	got = cpuPerDelivery(cpuTimes{}, cpuTimes{gateway: 2 * time.Second}, 1000)
	if !strings.Contains(got, "gateway 2.00 ms per delivery") || !strings.Contains(got, "PostgreSQL not counted") {
		t.Fatalf("cpuPerDelivery without a server = %s", got)
	}
}

// Only the gateway's own server counts: its postmaster and the postmaster's
// children, not another process named postgres (another server on the
// machine, a test's).
func TestReadCPUCountsOnlyTheGatewaysServer(t *testing.T) {
	dir := t.TempDir()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// Two processes named postgres: a "postmaster" (a shell) with a spinning
	// child, and a spinning stranger.
	pm := filepath.Join(dir, "postgres")
	b, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pm, b, 0o755); err != nil {
		t.Fatal(err)
	}
	spin := "while :; do :; done"
	parent := exec.Command(pm, "-c", "("+spin+") & echo $!; wait")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stranger := exec.Command(pm, "-c", spin)
	for _, c := range []*exec.Cmd{parent, stranger} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _, _ = c.Process.Wait() })
	}
	var child int
	if _, err := fmt.Fscan(out, &child); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	// Until the child and the stranger have each spent 50 ms of CPU, so
	// that counting the stranger would show.
	spent := func(pid int) time.Duration { s, _ := procStat(pid); return s.utime + s.stime }
	dbtest.Eventually(t, 10*time.Second, "the spinning processes spend 50 ms each", func() error {
		if c, s := spent(child), spent(stranger.Process.Pid); c < 50*time.Millisecond || s < 50*time.Millisecond {
			return fmt.Errorf("child %s, stranger %s", c, s)
		}
		return nil
	})
	got := readCPU(0, parent.Process.Pid)
	c, ok := procStat(child)
	p, ok2 := procStat(parent.Process.Pid)
	if !ok || !ok2 || got.postmaster != parent.Process.Pid {
		t.Fatalf("readCPU found %+v; child %v, parent %v", got, ok, ok2)
	}
	// Read a moment apart, the child's time may have grown by a tick or two.
	own := c.utime + c.stime + p.utime + p.stime
	if got.postgres < 50*time.Millisecond || got.postgres > own+40*time.Millisecond {
		t.Fatalf("counted %s for the server; its processes have spent %s (the stranger must not count)", got.postgres, own)
	}
	if none := readCPU(0, os.Getpid()); none.postmaster != 0 || none.postgres != 0 {
		t.Fatalf("a process not named postgres read as a server: %+v", none)
	}
}
