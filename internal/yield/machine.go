package yield

import (
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Machine tells whether the machine is full: more work ready to run than
// there are cores this process may use (runtime.GOMAXPROCS, which follows a
// container's CPU limit). The work counted is the threads ready to run,
// machine-wide on Linux (the kernel's count of runnable tasks in
// /proc/loadavg, the reading thread's included), so that a PostgreSQL server
// and a load tool on the same machine count as well as the gateway, plus the
// gateway's goroutines ready to run but waiting for one of its threads
// (runtime/metrics), which no kernel count sees. Where /proc cannot be read
// the gateway's running goroutines stand for the threads, which misses a
// PostgreSQL on the same machine.
//
// A reading is a few microseconds; Full reads at most once per
// millisecond and answers from the last reading in between.
type Machine struct {
	cores int
	f     *os.File
	buf   []byte
	sched []metrics.Sample // the gateway's goroutines running and runnable

	mu   sync.Mutex // one reading at a time
	at   atomic.Int64
	full atomic.Bool
}

// readEvery is how stale an answer of Full may be.
const readEvery = time.Millisecond

// NewMachine returns the Machine this process runs on.
func NewMachine() *Machine {
	m := &Machine{cores: runtime.GOMAXPROCS(0), sched: []metrics.Sample{
		{Name: "/sched/goroutines/running:goroutines"}, {Name: "/sched/goroutines/runnable:goroutines"}}}
	if f, err := os.Open("/proc/loadavg"); err == nil {
		m.f, m.buf = f, make([]byte, 128)
		if _, ok := runnableTasks(m.f, m.buf); !ok {
			_ = f.Close()
			m.f = nil
		}
	}
	return m
}

// Cores is the machine's capacity: the cores this process may use.
func (m *Machine) Cores() int { return m.cores }

// Full reports whether more work is ready to run than there are cores. A
// machine whose count cannot be read counts as full (forwarding then yields
// whenever deliveries wait).
func (m *Machine) Full() bool {
	now := time.Now().UnixNano()
	if now-m.at.Load() < int64(readEvery) || !m.mu.TryLock() {
		return m.full.Load()
	}
	defer m.mu.Unlock()
	n, ok := m.ready()
	m.full.Store(!ok || n > m.cores)
	m.at.Store(now)
	return m.full.Load()
}

// ready counts the work ready to run.
func (m *Machine) ready() (int, bool) {
	metrics.Read(m.sched)
	var goroutines [2]int
	for i, s := range m.sched {
		if s.Value.Kind() != metrics.KindUint64 {
			return 0, false
		}
		goroutines[i] = int(s.Value.Uint64())
	}
	running, runnable := goroutines[0], goroutines[1]
	if m.f == nil {
		return running + runnable, true
	}
	threads, ok := runnableTasks(m.f, m.buf)
	return threads + runnable, ok
}

// runnableTasks reads the kernel's count of runnable tasks from
// /proc/loadavg ("0.20 0.18 0.12 3/80 11206": the fourth field's first
// number), the reading thread's included.
func runnableTasks(f *os.File, buf []byte) (int, bool) {
	n, err := f.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return 0, false
	}
	fields := bytes.Fields(buf[:n])
	if len(fields) < 4 {
		return 0, false
	}
	running, _, found := bytes.Cut(fields[3], []byte("/"))
	if !found {
		return 0, false
	}
	r, err := strconv.Atoi(string(running))
	if err != nil || r < 1 {
		return 0, false
	}
	return r, true
}
