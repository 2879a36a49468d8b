package ratelog_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/ratelog"
)

// clock is a test's clock: time moves only when the test says, and what
// waits on it runs as it passes.
type clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []timer
}

type timer struct {
	at time.Time
	f  func()
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) AfterFunc(d time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = append(c.timers, timer{c.now.Add(d), f})
}

// advance moves the clock on by d, running each timer due on the way at its
// time.
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		i := -1 // the earliest due
		for j, t := range c.timers {
			if !t.at.After(end) && (i < 0 || t.at.Before(c.timers[i].at)) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		t := c.timers[i]
		c.timers = slices.Delete(c.timers, i, i+1)
		c.now = t.at
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// line is one report: when, of what, and how many.
type line struct {
	at     time.Duration // since the test's start
	kind   string
	newest string
	count  int
}

func (l line) String() string { return fmt.Sprintf("%s %s %s x%d", l.at, l.kind, l.newest, l.count) }

// setup returns a Limiter of 10 s on a test clock, and the lines it has
// reported so far.
func setup(t *testing.T) (*ratelog.Limiter[string, string], *clock, func() []line) {
	t.Helper()
	c := newClock()
	start := c.Now()
	var mu sync.Mutex
	var lines []line
	l := ratelog.New(10*time.Second, c, func(kind, newest string, count int) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, line{c.Now().Sub(start), kind, newest, count})
	})
	return l, c, func() []line {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

// The first event of a kind is reported at once with count 1; those within
// 10 s of that line are counted, and reported on one line 10 s after it,
// with the newest one's detail. Another kind has its own lines.
func TestFirstAtOnceThenCountedEveryInterval(t *testing.T) {
	t.Parallel()
	l, c, lines := setup(t)
	l.Note("stripe/invalid_signature", "10.0.0.1")
	if got := lines(); len(got) != 1 || got[0] != (line{0, "stripe/invalid_signature", "10.0.0.1", 1}) {
		t.Fatalf("after the first event: %v, want one line at once with count 1", got)
	}
	for i, addr := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		c.advance(time.Second + time.Duration(i)*time.Second)
		l.Note("stripe/invalid_signature", addr)
	}
	l.Note("github/body_too_large", "10.0.0.9") // at 6 s
	c.advance(3900 * time.Millisecond)          // 9.9 s
	if got := lines(); len(got) != 2 || got[1] != (line{6 * time.Second, "github/body_too_large", "10.0.0.9", 1}) {
		t.Fatalf("at 9.9 s: %v; want the first line and another kind's first, nothing counted reported yet", got)
	}
	c.advance(100 * time.Millisecond) // 10 s
	if got := lines(); len(got) != 3 || got[2] != (line{10 * time.Second, "stripe/invalid_signature", "10.0.0.4", 3}) {
		t.Fatalf("at 10 s: %v; want the three counted on one line with the newest address", got)
	}

	// One more event 2 s after that line waits for 10 s after it.
	c.advance(2 * time.Second)
	l.Note("stripe/invalid_signature", "10.0.0.5")
	c.advance(7 * time.Second) // 19 s
	if got := lines(); len(got) != 3 {
		t.Fatalf("at 19 s: %v; want nothing new before 10 s after the previous line", got)
	}
	c.advance(time.Second) // 20 s
	if got := lines(); len(got) != 4 || got[3] != (line{20 * time.Second, "stripe/invalid_signature", "10.0.0.5", 1}) {
		t.Fatalf("at 20 s: %v", got)
	}

	// Quiet for longer than the interval: the next one is reported at once.
	c.advance(15 * time.Second) // 35 s
	l.Note("stripe/invalid_signature", "10.0.0.6")
	if got := lines(); len(got) != 5 || got[4] != (line{35 * time.Second, "stripe/invalid_signature", "10.0.0.6", 1}) {
		t.Fatalf("at 35 s: %v", got)
	}
	// Nothing counted, nothing more reported.
	c.advance(time.Minute)
	if got := lines(); len(got) != 5 {
		t.Fatalf("a minute later, with nothing counted: %v", got)
	}
}

// A flood (a thousand events a second for a minute, from several
// goroutines at once) writes one line per 10 s: the first event at once,
// then a line every 10 s, each counting what came since the one before (so
// at most 10 s after the first event it counts), and the lines' counts add
// up to every event.
func TestAFloodWritesALinePerInterval(t *testing.T) {
	t.Parallel()
	l, c, lines := setup(t)
	const perTick, ticks = 100, 600 // every 100 ms for a minute
	var wg sync.WaitGroup
	for range ticks {
		for g := range 4 {
			wg.Go(func() {
				for i := range perTick / 4 {
					l.Note("github/invalid_signature", fmt.Sprintf("10.0.%d.%d", g, i))
				}
			})
		}
		wg.Wait()
		c.advance(100 * time.Millisecond)
	}
	c.advance(time.Minute)

	got := lines()
	total := 0
	for i, ln := range got {
		total += ln.count
		if want := time.Duration(i) * 10 * time.Second; ln.at != want {
			t.Errorf("line %d at %s, want %s", i, ln.at, want)
		}
	}
	if total != perTick*ticks {
		t.Errorf("the lines count %d events, want %d", total, perTick*ticks)
	}
	// At 0 s, 10 s, ... 60 s (what came in the last 10 s of the flood).
	if len(got) != 7 || got[0].count != 1 {
		t.Errorf("%d lines for a minute's flood, want 7, the first with count 1: %v", len(got), got)
	}
}
