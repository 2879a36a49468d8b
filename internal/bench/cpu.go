package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/store"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times:
// 100 on every Linux this tool runs on.
const clockTicks = 100

// cpuTimes is the CPU time the gateway and the PostgreSQL it uses have
// spent so far, read from /proc.
type cpuTimes struct {
	gateway, postgres time.Duration
	postmaster        int // the server whose processes were read; 0: none found
}

// readCPU reads the CPU time of the gateway (pid; 0: not read) and of the
// PostgreSQL server whose postmaster is postmaster (0: not read): the
// postmaster's own time and that of the backends it has reaped, so that a
// connection closed during the run still counts, and each of its processes
// alive now. Other PostgreSQL servers on the machine are not counted.
func readCPU(pid, postmaster int) cpuTimes {
	var t cpuTimes
	if pid != 0 {
		if s, ok := procStat(pid); ok {
			t.gateway = s.utime + s.stime
		}
	}
	if postmaster == 0 {
		return t
	}
	pm, ok := procStat(postmaster)
	if !ok || pm.comm != "postgres" {
		return t
	}
	t.postmaster = postmaster
	t.postgres = pm.utime + pm.stime + pm.cutime + pm.cstime
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if s, ok := procStat(n); ok && s.ppid == postmaster {
			t.postgres += s.utime + s.stime
		}
	}
	return t
}

// postmasterOf returns the process id of the postmaster of the PostgreSQL
// server behind pool when it runs on this machine (the parent of its
// checkpointer), or 0.
func postmasterOf(ctx context.Context, pool *pgxpool.Pool) int {
	checkpointer, err := store.CheckpointerPID(ctx, pool)
	if err != nil {
		return 0
	}
	s, ok := procStat(checkpointer)
	if !ok || s.comm != "postgres" {
		return 0
	}
	if pm, ok := procStat(s.ppid); !ok || pm.comm != "postgres" {
		return 0
	}
	return s.ppid
}

// stat is what readCPU takes from /proc/<pid>/stat.
type stat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime time.Duration
}

// procStat reads /proc/<pid>/stat: comm is in parentheses and may hold
// spaces, so the fields are counted after its closing one.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, false
	}
	open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
	if open < 0 || end < open {
		return stat{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	// After comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return stat{}, false
	}
	ticks := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / clockTicks
	}
	ppid, _ := strconv.Atoi(f[1])
	return stat{comm: string(b[open+1 : end]), ppid: ppid, utime: ticks(11), stime: ticks(12), cutime: ticks(13), cstime: ticks(14)}, true
}

// cpuPerDelivery says what a run cost per delivery, from two readings.
func cpuPerDelivery(before, after cpuTimes, deliveries int) string {
	if deliveries == 0 {
		return "no delivery accepted"
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(deliveries) }
	g, p := after.gateway-before.gateway, after.postgres-before.postgres
	if after.postmaster == 0 || after.postmaster != before.postmaster {
		return fmt.Sprintf("gateway %.2f ms per delivery (%.1f s of CPU for %d deliveries); its PostgreSQL not counted: not found on this machine",
			per(g), g.Seconds(), deliveries)
	}
	return fmt.Sprintf("gateway %.2f ms + PostgreSQL %.2f ms = %.2f ms per delivery (%.1f s of CPU for %d deliveries)",
		per(g), per(p), per(g+p), (g + p).Seconds(), deliveries)
}

// operatorAPI is the gateway's operator API, for pausing and resuming its
// routes.
type operatorAPI struct {
	base, token string
}

// setRoutes pauses or resumes (action) each route.
func (a *operatorAPI) setRoutes(ctx context.Context, names []string, action string) error {
	client := &http.Client{Timeout: 30 * time.Second}
	for _, name := range names {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/admin/routes/"+url.PathEscape(name)+"/"+action,
			strings.NewReader(`{"reason":"gateway bench --compare-paused"}`))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("bench: %s route %s: %w", action, name, err)
		}
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("bench: %s route %s: the gateway answered %d %s", action, name, res.StatusCode, body)
		}
	}
	return nil
}
