package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The CPU a process spends shows in its reading, and the figure per delivery
// divides the two processes' time by the deliveries.
func TestReadCPUFollowsTheProcess(t *testing.T) {
	before := readCPU(os.Getpid())
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	after := readCPU(os.Getpid())
	if spent := after.gateway - before.gateway; spent < 100*time.Millisecond {
		t.Fatalf("300 ms of spinning read as %s of CPU", spent)
	}
	s, ok := procStat(os.Getpid())
	if !ok || s.ppid != os.Getppid() || s.comm == "" {
		t.Fatalf("procStat of this process: %+v, %v", s, ok)
	}
	got := cpuPerDelivery(cpuTimes{}, cpuTimes{gateway: 2 * time.Second, postgres: 3 * time.Second}, 1000)
	if !strings.Contains(got, "gateway 2.00 ms + PostgreSQL 3.00 ms = 5.00 ms per delivery") {
		t.Fatalf("cpuPerDelivery = %s", got)
	}
}
