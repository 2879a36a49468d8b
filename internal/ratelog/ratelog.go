// Package ratelog bounds how often a kind of event is written to the log: the
// first event of a kind is reported at once, and those after it are counted
// and reported together on one line, no sooner than an interval after the
// kind's previous line and at most an interval after the first one counted.
// A flood of rejected requests writes a line per kind per interval, never
// one per request.
package ratelog

import (
	"sync"
	"time"
)

// Clock is the time a Limiter reads and waits on: System, or a test's.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f, in a goroutine of its own, once d has passed.
	AfterFunc(d time.Duration, f func())
}

// System is the system's clock.
var System Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time                      { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

// Limiter reports events of kinds K, each with what its line shows of the
// newest event counted (a V), through its report function. The kinds must
// be few (a provider and a reason, say): each is remembered for the
// Limiter's life.
type Limiter[K comparable, V any] struct {
	every  time.Duration
	clock  Clock
	report func(kind K, newest V, count int)

	mu    sync.Mutex
	kinds map[K]*kindState[V]
}

// kindState is one kind's: when its last line was reported, and what has
// been counted since.
type kindState[V any] struct {
	reported time.Time
	count    int
	newest   V
}

// New returns a Limiter that calls report at most once per every for each
// kind: with count 1 for an event reported at once, else with the number of
// events counted since the kind's previous line and the newest of them.
// report is called without the Limiter's lock held, from Note's goroutine or
// from clock's.
func New[K comparable, V any](every time.Duration, clock Clock, report func(kind K, newest V, count int)) *Limiter[K, V] {
	return &Limiter[K, V]{every: every, clock: clock, report: report, kinds: map[K]*kindState[V]{}}
}

// Note records an event of kind k. It is reported at once when nothing of
// its kind waits to be reported and the kind's previous line is at least the
// interval old; else it is counted, and the count is reported when the
// interval since that line has passed.
func (l *Limiter[K, V]) Note(k K, v V) {
	now := l.clock.Now()
	l.mu.Lock()
	s := l.kinds[k]
	if s == nil {
		s = &kindState[V]{}
		l.kinds[k] = s
	}
	if s.count == 0 && (s.reported.IsZero() || now.Sub(s.reported) >= l.every) {
		s.reported = now
		l.mu.Unlock()
		l.report(k, v, 1)
		return
	}
	s.count++
	s.newest = v
	if s.count == 1 {
		// The first counted since the last line: the line that reports it
		// is due an interval after that one, which is sooner than an
		// interval after this event.
		l.clock.AfterFunc(s.reported.Add(l.every).Sub(now), func() { l.flush(k) })
	}
	l.mu.Unlock()
}

// flush reports what k has counted.
func (l *Limiter[K, V]) flush(k K) {
	l.mu.Lock()
	s := l.kinds[k]
	count, newest := s.count, s.newest
	var zero V
	s.count, s.newest, s.reported = 0, zero, l.clock.Now()
	l.mu.Unlock()
	if count > 0 {
		l.report(k, newest, count)
	}
}
