// Package guess makes guessing the admin token cost time. Every wrong guess
// waits before it is answered. Wrong guesses also draw on two failure
// budgets, one per remote address and one of all addresses together; once a
// budget is spent, each further wrong guess waits until the budget would
// have room for it, so a guesser that opens more connections gets its
// answers no sooner. The right token never waits: the token is checked
// first, and only a wrong one is made to wait for its answer. (So a caller
// that stops waiting early can tell a wrong guess by the missing prompt
// answer; the delay slows guessers that wait for theirs, and the log shows
// every guess.) Wrong guesses are logged at most once a second, counted,
// with the addresses they came from.
//
// The wait holds no database connection and no worker: it is a timer in the
// request's own goroutine, and it ends when the request's context does.
package guess

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Budget is a token bucket of failures: Burst wrong guesses at once, then
// one more every Every.
type Budget struct {
	Burst int
	Every time.Duration
}

// Clock is the time a Guard sees; tests give one of their own.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends.
	Sleep(ctx context.Context, d time.Duration)
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func())
}

// Guard charges wrong guesses. The zero value is ready to use with the
// defaults below; one Guard is shared by everything that checks the admin
// token, so that each check draws on the same budgets.
type Guard struct {
	// Delay is what every wrong guess waits. Defaults to 500 ms.
	Delay time.Duration
	// PerAddress is the failure budget of one remote address (an IPv6
	// address's /64: one host commonly holds all of it). Defaults to 5 at
	// once, then one every 2 s.
	PerAddress Budget
	// Global is the failure budget of all addresses together. Defaults to
	// 50 at once, then one every 200 ms.
	Global Budget
	// MaxWait bounds how much longer than Delay a wrong guess waits when a
	// budget is spent; failures past it are not counted, so that a flood
	// does not push the budgets hours into the future. Defaults to 30 s.
	MaxWait time.Duration
	// RemoteAddr names a request's remote address. Defaults to the
	// connection's host.
	RemoteAddr func(*http.Request) string
	// Logger gets the line about wrong guesses. Defaults to slog.Default().
	Logger *slog.Logger
	// Clock defaults to the real one.
	Clock Clock

	mu        sync.Mutex
	addresses map[string]time.Time // each address's bucket, by when it is empty again (GCRA's theoretical arrival time)
	global    time.Time            // the global bucket, likewise
	pruned    time.Time
	count     int      // wrong guesses not yet logged
	from      []string // their first maxLogged addresses
	armed     bool     // a line is due
}

// Bounds on what a Guard keeps: addresses with a live bucket (past it, a new
// address draws on the global budget alone) and addresses in one log line.
const (
	maxAddresses = 10_000
	maxLogged    = 10
)

// Wrong charges a wrong guess from r's remote address and waits its cost: the
// delay, and more while a budget is spent. It returns when the wait is over
// or r's context ends.
func (g *Guard) Wrong(r *http.Request) {
	g.mu.Lock()
	g.defaults()
	addr := g.RemoteAddr(r)
	now := g.Clock.Now()
	key := bucketKey(addr)
	tat, wait := g.PerAddress.take(g.addresses[key], now, g.MaxWait)
	if _, ok := g.addresses[key]; ok || g.room(now) {
		g.addresses[key] = tat
	}
	var globalWait time.Duration
	g.global, globalWait = g.Global.take(g.global, now, g.MaxWait)
	g.note(addr)
	g.mu.Unlock()
	g.Clock.Sleep(r.Context(), g.Delay+max(wait, globalWait))
}

func (g *Guard) defaults() {
	if g.addresses != nil {
		return
	}
	g.addresses = map[string]time.Time{}
	if g.Delay <= 0 {
		g.Delay = 500 * time.Millisecond
	}
	if g.PerAddress.Burst <= 0 || g.PerAddress.Every <= 0 {
		g.PerAddress = Budget{Burst: 5, Every: 2 * time.Second}
	}
	if g.Global.Burst <= 0 || g.Global.Every <= 0 {
		g.Global = Budget{Burst: 50, Every: 200 * time.Millisecond}
	}
	if g.MaxWait <= 0 {
		g.MaxWait = 30 * time.Second
	}
	if g.RemoteAddr == nil {
		g.RemoteAddr = connectionHost
	}
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
	if g.Clock == nil {
		g.Clock = realClock{}
	}
}

// take charges one failure to a bucket that is empty again at tat, and
// returns the bucket's new state and how long the failure waits beyond the
// budget (GCRA: each failure fills the bucket by Every; up to Burst × Every
// of fill waits nothing). A wait past limit is cut to it, and the failure
// not counted.
func (b Budget) take(tat, now time.Time, limit time.Duration) (time.Time, time.Duration) {
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(b.Every)
	free := now.Add(time.Duration(b.Burst) * b.Every)
	wait := tat.Sub(free)
	if wait > limit {
		return tat.Add(-b.Every), limit
	}
	return tat, max(wait, 0)
}

// room reports whether another address's bucket may be kept, dropping the
// buckets that are empty again (at most once a second: each drop scans them
// all).
func (g *Guard) room(now time.Time) bool {
	if len(g.addresses) < maxAddresses {
		return true
	}
	if now.Sub(g.pruned) < time.Second {
		return false
	}
	g.pruned = now
	for key, tat := range g.addresses {
		if !tat.After(now) {
			delete(g.addresses, key)
		}
	}
	return len(g.addresses) < maxAddresses
}

// note counts a wrong guess for the log, and arms the next line when none is
// due: a line comes a second after the first guess it counts, so lines are
// at least a second apart.
func (g *Guard) note(addr string) {
	g.count++
	if len(g.from) < maxLogged && !slices.Contains(g.from, addr) {
		g.from = append(g.from, addr)
	}
	if !g.armed {
		g.armed = true
		g.Clock.AfterFunc(time.Second, g.log)
	}
}

func (g *Guard) log() {
	g.mu.Lock()
	count, from := g.count, g.from
	g.count, g.from, g.armed = 0, nil, false
	g.mu.Unlock()
	g.Logger.Warn("wrong admin token", "wrong_guesses", count, "remote_addrs", from)
}

// connectionHost is the host of the connection's address.
func connectionHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// bucketKey is the budget an address draws on: itself, or for IPv6 its /64.
func bucketKey(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	if ip = ip.Unmap(); ip.Is4() {
		return ip.String()
	}
	prefix, _ := ip.WithZone("").Prefix(64)
	return prefix.String()
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (realClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }
