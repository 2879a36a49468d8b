package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/hookgatetest"
)

const secret = "whsec_ledger_example"

// The service, built as its own program outside hookgate's module, on the
// private PostgreSQL hookgate starts: Stripe's subscription events, sent out
// of order and twice each, with the process killed (SIGKILL) halfway and
// started again, are each applied at most once, never older after newer for
// a subscription, and every subscription ends at its newest status.
func TestLedgerExactlyOnceAndInOrderAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the service")
	}
	dir, err := os.MkdirTemp("", "ledger-example-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// When the tests run as root, hookgate runs PostgreSQL as another user,
	// who must reach the data directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ledger")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			"GATEWAY_DATA_DIR=" + filepath.Join(dir, "data"),
			"GATEWAY_ADDR=" + addr,
			"STRIPE_WEBHOOK_SECRET=" + secret,
			"GATEWAY_ROUTES=ledger=stripe:customer.subscription.*>builtin:ledger",
		}
		logPath := filepath.Join(dir, "service.log")
		logs, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("the service's log:\n%s", b)
			}
		})
		waitReady(t, "http://"+addr+"/readyz", 2*time.Minute)
		return cmd
	}

	// 5 subscriptions, 8 updates each, in shuffled order.
	type event struct {
		id, sub, status string
		created         int64
	}
	var events []event
	newest := map[string]event{}
	for s := range 5 {
		for i := range 8 {
			e := event{id: fmt.Sprintf("evt_%d_%d", s, i), sub: fmt.Sprintf("sub_%d", s), status: fmt.Sprintf("status_%d", i),
				created: 1767225600 + int64(i)}
			events = append(events, e)
			newest[e.sub] = e
		}
	}
	rand.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	send := func(e event) int {
		body := fmt.Sprintf(`{"id":%q,"type":"customer.subscription.updated","created":%d,"data":{"object":{"id":%q,"status":%q}}}`,
			e.id, e.created, e.sub, e.status)
		return stripeSends(addr, body)
	}
	sendAll := func(es []event) map[int]int {
		codes := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, e := range es {
			wg.Go(func() {
				code := send(e)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
		}
		wg.Wait()
		return codes
	}

	cmd := start()
	half := len(events) / 2
	t.Logf("first half: %v", sendAll(events[:half]))
	t.Logf("first half again: %v", sendAll(events[:half]))
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	start()
	// Stripe retries what it has no 2xx for; here everything is sent again,
	// and what was stored answers duplicate.
	for _, es := range [][]event{events, events} {
		if codes := sendAll(es); codes[http.StatusAccepted]+codes[http.StatusOK] != len(es) {
			t.Fatalf("after the restart: %v, want every event 202 or 200", codes)
		}
	}

	// Every subscription reaches its newest status (a dispatch whose process
	// was killed is picked up again within a minute).
	var st State
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st = ledger(t, addr)
		done := true
		for sub, e := range newest {
			done = done && st.Subscriptions[sub] == e.status
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscriptions %v, want each at its newest status", st.Subscriptions)
		}
		time.Sleep(200 * time.Millisecond)
	}
	applied := map[string]int{}
	last := map[string]time.Time{}
	for _, e := range st.Effects {
		applied[e.EventID]++
		if applied[e.EventID] > 1 {
			t.Errorf("event %s applied %d times", e.EventID, applied[e.EventID])
		}
		if prev, ok := last[e.SubID]; ok && e.EventTime.Before(prev) {
			t.Errorf("%s: event %s (%s) applied after a newer one (%s)", e.SubID, e.EventID, e.EventTime, prev)
		}
		last[e.SubID] = e.EventTime
	}
	for sub, e := range newest {
		if applied[e.id] != 1 {
			t.Errorf("%s's newest event %s applied %d times, want 1", sub, e.id, applied[e.id])
		}
	}
	t.Logf("%d events, %d applied (the others superseded)", len(events), len(st.Effects))
}

func ledger(t *testing.T, addr string) State {
	t.Helper()
	res, err := http.Get("http://" + addr + "/ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var st State
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatalf("GET /ledger: %d: %v", res.StatusCode, err)
	}
	return st
}

// stripeSends posts body as Stripe does, signed, and returns the status
// (0 when the request failed).
func stripeSends(addr, body string) int {
	req, err := hookgatetest.StripeRequest(context.Background(), "http://"+addr+"/webhooks/stripe", secret, []byte(body))
	if err != nil {
		return 0
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if res, err := http.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %s", url, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
