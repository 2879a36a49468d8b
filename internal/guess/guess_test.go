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
	"sync/atomic"
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

// guess checks a token from remote, right or wrong, and reports Check's
// answer and whether the token was compared.
func guess(g *Guard, r *http.Request, right bool) (ok, compared bool) {
	ok = g.Check(r, func() bool {
		compared = true
		return right
	})
	return ok, compared
}

// guessAtOnce makes n wrong guesses at the same instant, each from its own
// connection, all at once.
func guessAtOnce(g *Guard, n int, remote func(i int) string) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { guess(g, request(remote(i)), false) })
	}
	wg.Wait()
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

var discard = slog.New(slog.DiscardHandler)

// A wrong guess is compared at once and waits the delay, half a second by
// default; the right token waits nothing.
func TestAWrongGuessWaitsTheDelay(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: discard}
	if ok, compared := guess(g, request("203.0.113.7:40000"), false); ok || !compared {
		t.Fatalf("a wrong guess: ok %v, compared %v", ok, compared)
	}
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500)}) {
		t.Fatalf("waits = %v, want [500ms]", w)
	}
	if ok, _ := guess(g, request("203.0.113.7:40001"), true); !ok {
		t.Fatal("the right token is refused")
	}
	if w := c.takeWaits(); len(w) != 0 {
		t.Fatalf("the right token waits %v", w)
	}
}

// One address's tries are bounded by its budget: five wrong guesses are
// compared at once, and each further check waits for its place, 2 s after
// the one before, before its token is compared. A check whose place would be
// more than 30 s away is answered at once, its token not compared. Another
// address is not held back by the first one's budget, and the budget refills
// with time.
func TestOneAddressDrawsOnItsBudget(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: discard}
	var want []time.Duration
	comparisons := 0
	for k := range 25 {
		if k < 5 {
			want = append(want, ms(500))
		} else if k < 20 {
			want = append(want, time.Duration(k-4)*2*time.Second, ms(500))
		}
		if _, compared := guess(g, request(fmt.Sprintf("203.0.113.7:%d", 40000+k)), false); compared {
			comparisons++
		}
	}
	c.mu.Lock()
	w := c.waits
	c.waits = nil
	c.mu.Unlock()
	if !slices.Equal(w, want) || comparisons != 20 {
		t.Fatalf("25 wrong guesses from one address: %d compared, waits\n%v, want 20 compared, waits\n%v", comparisons, w, want)
	}

	guess(g, request("198.51.100.1:40000"), false)
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500)}) {
		t.Fatalf("another address waits %v, want [500ms]", w)
	}
	// 20 places were taken (those past 30 s were not): the bucket is full
	// until 40 s from the start; 10 s later, 20 s of it remain beyond the
	// 10 s budget, and the next check's place is 2 s further.
	c.advance(10 * time.Second)
	guess(g, request("203.0.113.7:40100"), false)
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500), 22 * time.Second}) {
		t.Fatalf("10 s later the address waits %v, want [500ms 22s]", w)
	}
	c.advance(time.Minute)
	guess(g, request("203.0.113.7:40101"), false)
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500)}) {
		t.Fatalf("a minute later the address waits %v, want [500ms]", w)
	}
}

// Many addresses do not multiply a guesser's tries either: the failures of
// all addresses fill one budget, and an address that has guessed wrong waits
// for its place in it before its next token is compared. 60 addresses each
// guess wrong once, compared at once (a first guess does not wait for
// others' failures); their second guesses wait 2.2 s, then each 200 ms more
// than the one before.
func TestAddressesThatGuessedWrongShareOneBudget(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: discard}
	remote := func(i int) *http.Request { return request(fmt.Sprintf("10.0.%d.%d:40000", i/200, i%200)) }
	for i := range 60 {
		guess(g, remote(i), false)
	}
	if w := c.takeWaits(); len(w) != 60 || w[0] != ms(500) || w[59] != ms(500) {
		t.Fatalf("60 first wrong guesses from 60 addresses wait %v, want 500ms each", w)
	}
	for i := range 60 {
		guess(g, remote(i), false)
		want := []time.Duration{ms(500), 2*time.Second + time.Duration(i+1)*ms(200)}
		if w := c.takeWaits(); !slices.Equal(w, want) {
			t.Fatalf("address %d's second wrong guess waits %v, want %v", i, w, want)
		}
	}
}

// An address that has guessed nothing wrong is not held back by others'
// guesses: with one address's budget and the global budget spent, the right
// token from a clean address is compared at once, and so is a wrong one
// (which then waits the delay). An address that has guessed wrong once waits
// for the global budget even with the right token.
func TestACleanAddressDoesNotWaitForOthersGuesses(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: discard, Global: Budget{Burst: 3, Every: time.Minute}, MaxWait: time.Hour}
	for i := range 3 {
		guess(g, request(fmt.Sprintf("10.0.0.%d:40000", i)), false)
	}
	for range 20 {
		guess(g, request("203.0.113.7:40000"), false)
	}
	c.takeWaits()

	if ok, compared := guess(g, request("198.51.100.1:40000"), true); !ok || !compared {
		t.Fatalf("the right token from a clean address: ok %v, compared %v", ok, compared)
	}
	if w := c.takeWaits(); len(w) != 0 {
		t.Fatalf("the right token from a clean address waits %v", w)
	}
	if ok, compared := guess(g, request("198.51.100.2:40000"), false); ok || !compared {
		t.Fatalf("a wrong token from a clean address: ok %v, compared %v", ok, compared)
	}
	if w := c.takeWaits(); !slices.Equal(w, []time.Duration{ms(500)}) {
		t.Fatalf("a wrong token from a clean address waits %v, want [500ms]", w)
	}
	if ok, _ := guess(g, request("10.0.0.1:40001"), true); !ok {
		t.Fatal("the right token from an address that guessed wrong is refused")
	}
	if w := c.takeWaits(); len(w) != 1 || w[0] <= 0 {
		t.Fatalf("the right token from an address that guessed wrong waits %v, want one wait for the global budget", w)
	}
}

// The addresses of one IPv6 /64 share a budget; an IPv4 address written as
// IPv6 is that IPv4 address.
func TestAnIPv6NetworkSharesABudget(t *testing.T) {
	c := newFakeClock()
	g := &Guard{Clock: c, Logger: discard, PerAddress: Budget{Burst: 1, Every: time.Second}}
	for _, remote := range []string{"[2001:db8::1]:40000", "[2001:db8::2]:40000", "[2001:db8:0:1::1]:40000", "192.0.2.1:40000", "[::ffff:192.0.2.1]:40000"} {
		guess(g, request(remote), false)
	}
	want := []time.Duration{ms(500), time.Second, ms(500), ms(500), ms(500), time.Second, ms(500)}
	c.mu.Lock()
	got := c.waits
	c.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("waits = %v, want %v", got, want)
	}
}

// Guesses are logged at most a line a second: a line a second after the first
// guess it counts, with the count of wrong guesses, of checks answered
// without a comparison, and the addresses.
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
		Level     string   `json:"level"`
		Msg       string   `json:"msg"`
		Count     int      `json:"wrong_guesses"`
		Unchecked int      `json:"not_compared"`
		Remotes   []string `json:"remote_addrs"`
	}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", out.String(), err)
	}
	slices.Sort(line.Remotes)
	// Each address: 5 compared at once, 15 after waits of 2 s to 30 s, 30
	// answered at once without a comparison.
	if line.Level != "WARN" || line.Count != 40 || line.Unchecked != 60 || !slices.Equal(line.Remotes, []string{"203.0.113.7", "203.0.113.8"}) {
		t.Fatalf("line = %+v", line)
	}
	out.Reset()
	for range 3 {
		guess(g, request("198.51.100.1:40000"), false)
	}
	c.fire()
	if strings.Count(out.String(), "\n") != 1 || !strings.Contains(out.String(), `"wrong_guesses":3,"not_compared":0,"remote_addrs":["198.51.100.1"]`) ||
		len(c.afters) != 2 {
		t.Fatalf("the next line: %q, %d scheduled", out.String(), len(c.afters))
	}
	c.fire()
	if strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("a line without guesses: %q", out.String())
	}
}

// A wrong guess's wait ends with its request, and so does a wait for a place
// in a spent budget, whose token is then not compared.
func TestTheWaitEndsWithTheRequest(t *testing.T) {
	g := &Guard{Logger: discard, Delay: time.Hour, PerAddress: Budget{Burst: 1, Every: time.Hour}, MaxWait: 2 * time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	guess(g, request("203.0.113.7:40000").WithContext(ctx), false) // a test timeout if it waits
	if ok, compared := guess(g, request("203.0.113.7:40000").WithContext(ctx), true); ok || compared {
		t.Fatalf("a check whose request ended while it waited: ok %v, compared %v", ok, compared)
	}
}

// heldClock hands every Sleep to the test, which ends it by closing its
// release; its time moves only when told to.
type heldClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps chan held
}

// held is a Sleep of d under way.
type held struct {
	d       time.Duration
	release chan struct{}
}

func newHeldClock() *heldClock {
	return &heldClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), sleeps: make(chan held)}
}

func (c *heldClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *heldClock) Sleep(ctx context.Context, d time.Duration) {
	h := held{d: d, release: make(chan struct{})}
	select {
	case c.sleeps <- h:
	case <-ctx.Done():
		return
	}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
}

func (c *heldClock) AfterFunc(time.Duration, func()) {}

func (c *heldClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// pending is a check under way in its own goroutine.
type pending struct {
	result   chan bool
	compared atomic.Int32
}

func start(g *Guard, r *http.Request, right bool) *pending {
	p := &pending{result: make(chan bool, 1)}
	go func() {
		p.result <- g.Check(r, func() bool {
			p.compared.Add(1)
			return right
		})
	}()
	return p
}

// next is the next Sleep, which p must reach before it answers.
func (c *heldClock) next(t *testing.T, p *pending) held {
	t.Helper()
	select {
	case h := <-c.sleeps:
		return h
	case ok := <-p.result:
		t.Fatalf("the check answered %v without waiting", ok)
		return held{}
	}
}

// spend makes n wrong guesses from remote, one after another, each waiting
// its delay.
func spend(t *testing.T, g *Guard, c *heldClock, remote string, n int) {
	t.Helper()
	for range n {
		p := start(g, request(remote), false)
		h := c.next(t, p)
		if h.d != ms(500) || p.compared.Load() != 1 {
			t.Fatalf("a wrong guess within the budget: compared %d times, then waits %v; want once, then 500ms", p.compared.Load(), h.d)
		}
		close(h.release)
		<-p.result
	}
}

// Once an address has spent its budget, a check from it waits for its place
// before its token is compared, the right token's too: the answer comes no
// sooner for being right.
func TestAnAddressPastItsBudgetWaitsBeforeItsTokenIsCompared(t *testing.T) {
	c := newHeldClock()
	g := &Guard{Clock: c, Logger: discard}
	spend(t, g, c, "203.0.113.7:40000", 5)

	p := start(g, request("203.0.113.7:40001"), true)
	h := c.next(t, p)
	if h.d != 2*time.Second || p.compared.Load() != 0 {
		t.Fatalf("the right token past the budget: compared %d times, waiting %v; want waiting 2s uncompared", p.compared.Load(), h.d)
	}
	c.advance(2 * time.Second)
	close(h.release)
	if ok := <-p.result; !ok || p.compared.Load() != 1 {
		t.Fatalf("after its wait the right token: ok %v, compared %d times", ok, p.compared.Load())
	}

	p = start(g, request("203.0.113.7:40002"), false)
	h = c.next(t, p)
	if h.d != 2*time.Second || p.compared.Load() != 0 {
		t.Fatalf("a wrong token past the budget: compared %d times, waiting %v; want waiting 2s uncompared", p.compared.Load(), h.d)
	}
	c.advance(2 * time.Second)
	close(h.release)
	if h = c.next(t, p); h.d != ms(500) || p.compared.Load() != 1 {
		t.Fatalf("after its wait a wrong token: compared %d times, then waits %v; want once, then 500ms", p.compared.Load(), h.d)
	}
	close(h.release)
	if <-p.result {
		t.Fatal("a wrong token is let in")
	}
}

// A guesser that gives up while its check waits for its place has had
// nothing compared, whichever token it sent: stopping early teaches nothing.
func TestAGuesserThatGivesUpHasNothingCompared(t *testing.T) {
	for _, right := range []bool{false, true} {
		c := newHeldClock()
		g := &Guard{Clock: c, Logger: discard}
		spend(t, g, c, "203.0.113.7:40000", 5)
		ctx, cancel := context.WithCancel(context.Background())
		p := start(g, request("203.0.113.7:40001").WithContext(ctx), right)
		c.next(t, p)
		if n := p.compared.Load(); n != 0 {
			t.Fatalf("right %v: compared %d times before the wait ended", right, n)
		}
		cancel()
		if ok := <-p.result; ok || p.compared.Load() != 0 {
			t.Fatalf("right %v: a check given up: ok %v, compared %d times", right, ok, p.compared.Load())
		}
	}
}

// At most 16 checks of one address wait for their places; another is
// answered at once, as a wrong guess, its token not compared.
func TestWaitingChecksAreBounded(t *testing.T) {
	c := newHeldClock()
	g := &Guard{Clock: c, Logger: discard, PerAddress: Budget{Burst: 1, Every: time.Second}, MaxWait: time.Hour}
	spend(t, g, c, "203.0.113.7:40000", 1)
	var waiting []*pending
	var holds []held
	for k := 1; k <= 16; k++ {
		p := start(g, request("203.0.113.7:40001"), false)
		h := c.next(t, p)
		if h.d != time.Duration(k)*time.Second || p.compared.Load() != 0 {
			t.Fatalf("check %d: compared %d times, waiting %v; want waiting %ds uncompared", k, p.compared.Load(), h.d, k)
		}
		waiting, holds = append(waiting, p), append(holds, h)
	}
	p := start(g, request("203.0.113.7:40002"), true)
	select {
	case ok := <-p.result:
		if ok || p.compared.Load() != 0 {
			t.Fatalf("the 17th check: ok %v, compared %d times; want refused uncompared", ok, p.compared.Load())
		}
	case h := <-c.sleeps:
		t.Fatalf("the 17th check waits %v", h.d)
	}
	for i, p := range waiting {
		close(holds[i].release)
		close(c.next(t, p).release) // the delay of a wrong guess
		if <-p.result || p.compared.Load() != 1 {
			t.Fatalf("check %d after its wait: compared %d times", i+1, p.compared.Load())
		}
	}
}
