package faults

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the gateway binary of the module in dir (cmd/gateway) to out,
// as `make build` does (-trimpath), or fails the test with the compiler's
// output.
func Build(t testing.TB, dir, out string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/gateway")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the gateway in %s: %v\n%s", dir, err, b)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Gateway is one gateway process, `Bin serve`, that a test starts, stops
// and kills, as an operator or a crash would.
type Gateway struct {
	// Bin is the gateway binary.
	Bin string
	// Addr is GATEWAY_ADDR, host:port.
	Addr string
	// Env is the process's environment, GATEWAY_ADDR aside.
	Env []string
	// Log receives the process's stdout and stderr.
	Log io.Writer

	mu  sync.Mutex
	run *process // nil while not running
}

// process is one run of the binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit, once done is closed
}

// Start runs the gateway and returns once it answers /healthz (after its
// migrations), within 60 s; an error if it exits first.
func (g *Gateway) Start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	cmd := exec.Command(g.Bin, "serve")
	cmd.Env = append(slices.Clone(g.Env), "GATEWAY_ADDR="+g.Addr)
	cmd.Stdout, cmd.Stderr = g.Log, g.Log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start gateway: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	g.run = p
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.done:
			g.run = nil
			return fmt.Errorf("gateway %s exited before it served: %v", g.Addr, p.err)
		default:
		}
		res, err := http.Get("http://" + g.Addr + "/healthz")
		if err == nil {
			res.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %s did not come up", g.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Running reports whether the gateway was started and not stopped or
// killed since.
func (g *Gateway) Running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.run != nil
}

// Kill kills the gateway with SIGKILL and waits for it to exit.
func (g *Gateway) Kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.run != nil {
		_ = g.run.cmd.Process.Signal(syscall.SIGKILL)
		<-g.run.done
		g.run = nil
	}
}

// Stop sends the gateway SIGTERM and returns its exit once it has stopped:
// nil when it exited 0, as a gateway stopped softly does.
func (g *Gateway) Stop() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.run == nil {
		return nil
	}
	_ = g.run.cmd.Process.Signal(syscall.SIGTERM)
	<-g.run.done
	err := g.run.err
	g.run = nil
	return err
}
