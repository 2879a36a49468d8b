package guess

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock stands still unless told to move, records every wait asked of
// it without waiting, and runs what is scheduled only when told to.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	waits  []time.Duration
	afters []time.Duration
	due    []func()
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.afters = append(c.afters, d)
	c.due = append(c.due, f)
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fire runs what is scheduled.
func (c *fakeClock) fire() {
	c.mu.Lock()
	due := c.due
	c.due = nil
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// takeWaits returns the waits asked for so far, shortest first, and forgets them.
func (c *fakeClock) takeWaits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waits
	c.waits = nil
	slices.Sort(w)
	return w
}

func request(remote string) *http.Request {
	r := httptest.NewRequest("GET", "/admin/deliveries", nil)
	r.RemoteAddr = remote
	return r
}

// guessAtOnce makes n wrong guesses at the same instant, each from its own
// connection, all at once.
func guessAtOnce(g *Guard, n int, remote func(i int) string) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { g.Wrong(request(remote(i))) })
	}
	wg.Wait()
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// A wrong guess waits the delay, half a second by default.
func TestAWrongGuessWaitsTheDelay(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: slog.New(slog.DiscardHandler)}
	g.Wrong(request("203.0.113.7:40000"))
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500)}) {
		t.Fatalf("waits = %v, want [500ms]", w)
	}
}

// Many connections from one address do not multiply its tries: five wrong
// guesses at once wait only the delay, and each one past the budget waits two
// seconds more than the one before, up to 30 s more. Another address is not
// held back by the first one's budget, and the budget refills with time.
func TestOneAddressDrawsOnItsBudget(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: slog.New(slog.DiscardHandler)}
	guessAtOnce(g, 25, func(i int) string { return fmt.Sprintf("203.0.113.7:%d", 40000+i) })
	var want []time.Duration
	for k := range 25 {
		want = append(want, ms(500)+min(time.Duration(max(k-4, 0))*2*time.Second, 30*time.Second))
	}
	if w := c.takeWaits(); !slices.Equal(w, want) {
		t.Fatalf("25 wrong guesses at once from one address wait\n%v, want\n%v", w, want)
	}

	g.Wrong(request("198.51.100.1:40000"))
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500)}) {
		t.Fatalf("another address waits %v, want [500ms]", w)
	}
	// 20 failures were counted (those past 30 s more were not): the bucket
	// is full until 40 s from the start; 10 s later, 20 s of it remain
	// beyond the 10 s budget, and the next failure adds 2 s.
	c.advance(10 * time.Second)
	g.Wrong(request("203.0.113.7:40100"))
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500) + 22*time.Second}) {
		t.Fatalf("10 s later the address waits %v, want [22.5s]", w)
	}
	c.advance(time.Minute)
	g.Wrong(request("203.0.113.7:40101"))
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500)}) {
		t.Fatalf("a minute later the address waits %v, want [500ms]", w)
	}
}

// Many addresses do not multiply a guesser's tries either: past 50 wrong
// guesses at once, from anywhere, each waits 200 ms more than the one before.
func TestAllAddressesDrawOnOneBudget(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: slog.New(slog.DiscardHandler)}
	guessAtOnce(g, 60, func(i int) string { return fmt.Sprintf("10.0.%d.%d:40000", i/200, i%200) })
	var want []time.Duration
	for k := range 60 {
		want = append(want, ms(500)+time.Duration(max(k-49, 0))*ms(200))
	}
	if w := c.takeWaits(); !slices.Equal(w, want) {
		t.Fatalf("60 wrong guesses from 60 addresses wait\n%v, want\n%v", w, want)
	}
}

// The addresses of one IPv6 /64 share a budget; an IPv4 address written as
// IPv6 is that IPv4 address.
func TestAnIPv6NetworkSharesABudget(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: slog.New(slog.DiscardHandler), PerAddress: Budget{Burst: 1, Every: time.Second}}
	for _, remote := range []string{"[2001:db8::1]:40000", "[2001:db8::2]:40000", "[2001:db8:0:1::1]:40000", "192.0.2.1:40000", "[::ffff:192.0.2.1]:40000"} {
		g.Wrong(request(remote))
	}
	want := []time.Duration{ms(500), ms(1500), ms(500), ms(500), ms(1500)}
	c.mu.Lock()
	got := c.waits
	c.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("waits = %v, want %v", got, want)
	}
}

// Wrong guesses are logged at most a line a second: a line a second after the
// first guess it counts, with the count and the addresses.
func TestWrongGuessesAreLoggedALineASecond(t *testing.T) {
	c := newFakeClock()
	var out bytes.Buffer
	g := &Guard{Clock: c, Logger: slog.New(slog.NewJSONHandler(&out, nil))}
	guessAtOnce(g, 100, func(i int) string { return fmt.Sprintf("203.0.113.%d:40000", 7+i%2) })
	if out.Len() != 0 || !slices.Equal(c.afters, []time.Duration{time.Second}) {
		t.Fatalf("after 100 guesses: log %q, lines scheduled after %v; want none yet, one after 1s", out.String(), c.afters)
	}
	c.fire()
	var line struct {
		Level   string   `json:"level"`
		Msg     string   `json:"msg"`
		Count   int      `json:"wrong_guesses"`
		Remotes []string `json:"remote_addrs"`
	}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", out.String(), err)
	}
	slices.Sort(line.Remotes)
	if line.Level != "WARN" || line.Count != 100 || !slices.Equal(line.Remotes, []string{"203.0.113.7", "203.0.113.8"}) {
		t.Fatalf("line = %+v", line)
	}
	out.Reset()
	for range 3 {
		g.Wrong(request("198.51.100.1:40000"))
	}
	c.fire()
	if strings.Count(out.String(), "\n") != 1 || !strings.Contains(out.String(), `"wrong_guesses":3,"remote_addrs":["198.51.100.1"]`) ||
		len(c.afters) != 2 {
		t.Fatalf("the next line: %q, %d scheduled", out.String(), len(c.afters))
	}
	c.fire()
	if strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("a line without guesses: %q", out.String())
	}
}

// A wrong guess's wait ends with its request.
func TestTheWaitEndsWithTheRequest(t *testing.T) {
	g := &Guard{Logger: slog.New(slog.DiscardHandler), Delay: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.Wrong(request("203.0.113.7:40000").WithContext(ctx)) // a test timeout if it waits
}
