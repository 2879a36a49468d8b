package yield

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A machine is full when more threads are ready to run than it has cores,
// as the kernel counts them in /proc/loadavg's fourth field; a count that
// cannot be read counts as full.
func TestMachineReadsTheKernelsRunnableTasks(t *testing.T) {
	loadavg := filepath.Join(t.TempDir(), "loadavg")
	machine := func(content string) *Machine {
		t.Helper()
		if err := os.WriteFile(loadavg, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(loadavg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		m := NewMachine()
		if m.f != nil {
			_ = m.f.Close()
		}
		m.cores, m.f, m.buf = 4, f, make([]byte, 128)
		return m
	}
	for _, c := range []struct {
		loadavg string
		full    bool
	}{
		{"0.20 0.18 0.12 1/80 11206\n", false},  // the reading thread alone
		{"3.95 2.10 1.00 3/412 11206\n", false}, // a core free
		{"7.10 6.00 5.00 9/412 11206\n", true},  // more ready than cores
		{"0.20 0.18 0.12 80 11206\n", true},     // no count: full
		{"garbage\n", true},
		{"0.20 0.18 0.12 0/80 11206\n", true}, // the reader itself is missing: not a count
	} {
		m := machine(c.loadavg)
		// The goroutines this test runs on are one running; none wait for
		// a thread, so the kernel's count decides (Full counts both).
		if got := m.Full(); got != c.full {
			n, ok := m.ready()
			t.Errorf("%q: Full = %v, want %v (ready %d, %v)", c.loadavg, got, c.full, n, ok)
		}
	}

	// Full reads at most once per readEvery and answers from its last
	// reading in between; after that it reads again.
	m := machine("0.20 0.18 0.12 1/80 11206\n")
	if m.Full() {
		t.Fatal("an idle count reads full")
	}
	if err := os.WriteFile(loadavg, []byte("7.10 6.00 5.00 9/412 11206\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * readEvery)
	if !m.Full() {
		t.Fatal("a count of 9 runnable threads on 4 cores, read after readEvery, is not full")
	}
}
