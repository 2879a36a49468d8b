// Package guess makes guessing the admin token cost time. A token is
// compared only within failure budgets: one per remote address (an IPv6
// address's /64), and one of all addresses together, which holds back only
// the addresses that have guessed wrong lately (within an hour, by default).
// While its budgets have room, a check's token is compared at once; once one
// is spent, every further check from the address, with the right token or a
// wrong one, waits for its place in the budget before its token is compared,
// and a check that would wait too long (past 16 waiting, or 30 s by default)
// is answered as a wrong guess without a comparison. A caller that stops
// waiting early has had nothing compared, so it learns nothing, and many
// connections get no more comparisons than one. Every wrong guess also waits
// a fixed delay once compared. The right token from an address that has not
// guessed wrong lately never waits, whatever others guess. Guesses are logged
// at most once a second, counted, with the addresses they came from.
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

// Guard compares tokens within budgets of failures. The zero value is ready
// to use with the defaults below; one Guard is shared by everything that
// checks the admin token, so that each check draws on the same budgets.
type Guard struct {
	// Delay is what every wrong guess waits once compared. Defaults to
	// 500 ms.
	Delay time.Duration
	// PerAddress is the failure budget of one remote address (an IPv6
	// address's /64: one host commonly holds all of it). Defaults to 5 at
	// once, then one every 2 s.
	PerAddress Budget
	// Global is the failure budget of all addresses together; only an
	// address that has guessed wrong within Suspect waits for it. Defaults
	// to 50 at once, then one every 200 ms.
	Global Budget
	// Suspect is how long after its last wrong guess an address waits for
	// the global budget as well as its own. Defaults to an hour.
	Suspect time.Duration
	// MaxWait bounds how long a check waits for its budgets: a check whose
	// place is further away is answered as a wrong guess at once, its token
	// not compared, so that a flood neither pushes the budgets hours into
	// the future nor holds a goroutine for each of its requests. Defaults to
	// 30 s.
	MaxWait time.Duration
	// RemoteAddr names a request's remote address. Defaults to the
	// connection's host.
	RemoteAddr func(*http.Request) string
	// Logger gets the line about guesses. Defaults to slog.Default().
	Logger *slog.Logger
	// Clock defaults to the real one.
	Clock Clock

	mu        sync.Mutex
	addresses map[string]*address
	global    time.Time // the global bucket, by when it is empty again (GCRA's theoretical arrival time)
	pruned    time.Time
	count     int      // wrong guesses not yet logged
	unchecked int      // checks answered without a comparison, not yet logged
	from      []string // their first maxLogged addresses
	armed     bool     // a line is due
}

// address is what a Guard keeps of one address's budget.
type address struct {
	tat     time.Time // its bucket, by when it is empty again
	failed  time.Time // its last wrong guess
	waiting int       // its checks waiting for their place
}

// Bounds on what a Guard keeps: addresses with a live bucket (past it, an
// address not kept counts as suspect and draws on the global budget alone),
// checks of one address waiting for their place, and addresses in one log
// line.
const (
	maxAddresses = 10_000
	maxWaiting   = 16
	maxLogged    = 10
)

// Check reports whether r holds the token, as compare says, and charges a
// wrong guess to r's remote address. compare is called only when the
// address's budgets have room: at once while they do, else once the check's
// place in them comes (the place is taken, and charged as a failure, before
// the wait). A wrong guess then waits Delay. Check returns false without
// calling compare when r's context ends first, when the place is more than
// MaxWait away, or when 16 checks of the address wait already. compare runs
// under the Guard's lock: it must be quick and must not use the Guard.
//
// A check refused so is answered like a wrong token (401 unauthorized), not
// 429 too_many_requests: the contract answers 401 to every request that has
// not shown the token, and a refused one has not (its token was never
// compared); Check has no third answer to give.
func (g *Guard) Check(r *http.Request, compare func() bool) bool {
	ctx := r.Context()
	g.mu.Lock()
	g.defaults()
	addr := g.RemoteAddr(r)
	key := bucketKey(addr)
	now := g.Clock.Now()
	a := g.entry(key, now)
	wait, ok := g.place(key, a, now)
	switch {
	case !ok:
		g.note(addr, false)
		g.mu.Unlock()
		return false
	case wait == 0:
		right := compare()
		if !right {
			g.charge(key, a, now)
			g.note(addr, true)
		}
		g.mu.Unlock()
		return right || g.wrong(ctx)
	}
	g.mu.Unlock()
	g.Clock.Sleep(ctx, wait)
	g.mu.Lock()
	if a != nil {
		a.waiting--
	}
	if ctx.Err() != nil {
		g.note(addr, false)
		g.mu.Unlock()
		return false
	}
	right := compare()
	if !right {
		// Its place was charged as a failure when it was taken.
		if a != nil {
			a.failed = g.Clock.Now()
		}
		g.note(addr, true)
	}
	g.mu.Unlock()
	return right || g.wrong(ctx)
}

// wrong waits a wrong guess's delay, and reports false.
func (g *Guard) wrong(ctx context.Context) bool {
	g.Clock.Sleep(ctx, g.Delay)
	return false
}

func (g *Guard) defaults() {
	if g.addresses != nil {
		return
	}
	g.addresses = map[string]*address{}
	if g.Delay <= 0 {
		g.Delay = 500 * time.Millisecond
	}
	if g.PerAddress.Burst <= 0 || g.PerAddress.Every <= 0 {
		g.PerAddress = Budget{Burst: 5, Every: 2 * time.Second}
	}
	if g.Global.Burst <= 0 || g.Global.Every <= 0 {
		g.Global = Budget{Burst: 50, Every: 200 * time.Millisecond}
	}
	if g.Suspect <= 0 {
		g.Suspect = time.Hour
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

// entry is what the Guard keeps of an address: its entry, a new one (kept
// once charged) when it has none, or nil when no more can be kept.
func (g *Guard) entry(key string, now time.Time) *address {
	if a, ok := g.addresses[key]; ok {
		return a
	}
	if !g.room(now) {
		return nil
	}
	return &address{}
}

// place finds how long a check from an address waits before its token is
// compared: nothing while the address's budget has room and, if the address
// is suspect, the global budget too. Otherwise the check takes its place in
// both now, charged as a failure, so that those waiting are compared one per
// Every; ok is false when it may not wait.
func (g *Guard) place(key string, a *address, now time.Time) (wait time.Duration, ok bool) {
	suspect := a == nil || now.Before(a.failed.Add(g.Suspect))
	var tat, global time.Time
	if a != nil {
		tat, wait = g.PerAddress.take(a.tat, now)
	}
	if suspect {
		var w time.Duration
		global, w = g.Global.take(g.global, now)
		wait = max(wait, w)
	}
	switch {
	case wait == 0:
		return 0, true
	case wait > g.MaxWait, a != nil && a.waiting >= maxWaiting:
		return 0, false
	}
	if a != nil {
		a.tat = tat
		a.waiting++
		g.addresses[key] = a
	}
	if suspect {
		g.global = global
	}
	return wait, true
}

// charge counts a wrong guess compared at once: the address becomes suspect,
// and the failure fills its bucket and the global one (a bucket already
// MaxWait past full is not filled further).
func (g *Guard) charge(key string, a *address, now time.Time) {
	if a != nil {
		a.failed = now
		if tat, wait := g.PerAddress.take(a.tat, now); wait <= g.MaxWait {
			a.tat = tat
		}
		g.addresses[key] = a
	}
	if tat, wait := g.Global.take(g.global, now); wait <= g.MaxWait {
		g.global = tat
	}
}

// take charges one failure to a bucket that is empty again at tat, and
// returns the bucket's new state and how long the failure waits for room in
// it (GCRA: each failure fills the bucket by Every; up to Burst × Every of
// fill waits nothing).
func (b Budget) take(tat, now time.Time) (time.Time, time.Duration) {
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(b.Every)
	free := now.Add(time.Duration(b.Burst) * b.Every)
	return tat, max(tat.Sub(free), 0)
}

// room reports whether another address's entry may be kept, dropping those
// that are idle (empty buckets, not suspect, none waiting), at most once a
// second: each drop scans them all.
func (g *Guard) room(now time.Time) bool {
	if len(g.addresses) < maxAddresses {
		return true
	}
	if now.Sub(g.pruned) < time.Second {
		return false
	}
	g.pruned = now
	for key, a := range g.addresses {
		if !a.tat.After(now) && !now.Before(a.failed.Add(g.Suspect)) && a.waiting == 0 {
			delete(g.addresses, key)
		}
	}
	return len(g.addresses) < maxAddresses
}

// note counts a guess for the log, wrong or answered without a comparison,
// and arms the next line when none is due: a line comes a second after the
// first guess it counts, so lines are at least a second apart.
func (g *Guard) note(addr string, compared bool) {
	if compared {
		g.count++
	} else {
		g.unchecked++
	}
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
	count, unchecked, from := g.count, g.unchecked, g.from
	g.count, g.unchecked, g.from, g.armed = 0, 0, nil, false
	g.mu.Unlock()
	g.Logger.Warn("wrong admin token", "wrong_guesses", count, "not_compared", unchecked, "remote_addrs", from)
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
