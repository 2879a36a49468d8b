package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/guess"
	"github.com/hookgate/hookgate/internal/server"
)

// stillClock is a clock that does not move: it records the waits asked of
// it without waiting, and runs a scheduled log line only when told to.
type stillClock struct {
	mu    sync.Mutex
	waits []time.Duration
	due   []func()
}

func (c *stillClock) Now() time.Time { return now }

func (c *stillClock) Sleep(_ context.Context, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
}

func (c *stillClock) AfterFunc(_ time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.due = append(c.due, f)
}

// take returns the waits asked for since the last call, shortest first.
func (c *stillClock) take() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waits
	c.waits = nil
	slices.Sort(w)
	return w
}

func (c *stillClock) fire() {
	c.mu.Lock()
	due := c.due
	c.due = nil
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// A wrong bearer token waits the delay of a wrong sign-in, and both draw on
// one failure budget per remote address: many connections at once do not get
// many answers at once. The right token waits only from an address past its
// budget, and then before it is compared; a request that presents no token
// never waits. Wrong guesses are logged, counted, with the address.
func TestWrongTokensCostTheDelay(t *testing.T) {
	t.Parallel()
	clock := &stillClock{}
	var log bytes.Buffer
	a := setupAdminOn(t, dbtest.NewPool(t), adminToken, func(c *server.Config) {
		c.Admin.Guesses = &guess.Guard{Clock: clock, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	})
	half := 500 * time.Millisecond
	for _, tt := range []struct {
		req   adminReq
		want  int
		waits []time.Duration
	}{
		{adminReq{path: "/admin/deliveries"}, 200, nil},
		{adminReq{path: "/admin/deliveries", token: "-"}, 401, nil},
		{adminReq{path: "/admin/deliveries", token: "operator-token-12"}, 401, []time.Duration{half}},
		{adminReq{path: "/admin/river/", token: "operator-token-12"}, 401, []time.Duration{half}},
		{adminReq{path: "/admin/river/"}, 200, nil},
	} {
		status, _, _ := a.admin(t, tt.req)
		if got := clock.take(); status != tt.want || !slices.Equal(got, tt.waits) {
			t.Fatalf("%s with token %q = %d, waits %v; want %d, waits %v", tt.req.path, tt.req.token, status, got, tt.want, tt.waits)
		}
	}

	// A wrong sign-in costs the same, from the same budget.
	b := newBrowser(t, a.handler)
	_, form := b.do("GET", "/admin/ui/login", nil)
	if res, _ := b.do("POST", "/admin/ui/login", url.Values{"csrf": {csrfOf(t, form)}, "token": {"wrong"}}); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong sign-in = %d", res.StatusCode)
	}
	if got := clock.take(); !slices.Equal(got, []time.Duration{half}) {
		t.Fatalf("a wrong sign-in waits %v", got)
	}

	// The browser's address has spent one of its five failures: of ten wrong
	// tokens it sends at once, four are compared at once and answered after
	// the delay, and each other one is compared 2 s after the one before,
	// then answered after the delay.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", b.srv.URL+"/admin/deliveries", nil)
			req.Header.Set("Authorization", "Bearer guess")
			res, err := b.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("a wrong token = %d", res.StatusCode)
			}
		})
	}
	wg.Wait()
	want := []time.Duration{half, half, half, half, half, half, half, half, half, half}
	for k := 1; k <= 6; k++ {
		want = append(want, time.Duration(k)*2*time.Second)
	}
	if got := clock.take(); !slices.Equal(got, want) {
		t.Fatalf("10 wrong tokens at once wait\n%v, want\n%v", got, want)
	}
	// With its budget spent, the address's right token waits its place too.
	if res, _ := b.do("GET", "/admin/deliveries", nil, "Authorization", "Bearer "+adminToken); res.StatusCode != 200 ||
		!slices.Equal(clock.take(), []time.Duration{14 * time.Second}) {
		t.Fatalf("the right token with the budget spent = %d, or it did not wait 14 s", res.StatusCode)
	}

	clock.fire()
	if lines := strings.Count(log.String(), "\n"); lines != 1 || !strings.Contains(log.String(), "level=WARN msg=\"wrong admin token\" wrong_guesses=13") ||
		!strings.Contains(log.String(), "192.0.2.1") || !strings.Contains(log.String(), "127.0.0.1") {
		t.Fatalf("log = %q", log.String())
	}
}

// Behind a TLS-terminating proxy, GATEWAY_PUBLIC_URL makes the console's
// cookies Secure though the request came in plain, and the origin a request
// of the console's own pages must come from is the public URL's, not the
// host the proxy asked for.
func TestConsoleBehindATLSProxy(t *testing.T) {
	t.Parallel()
	a := setupAdminOn(t, dbtest.NewPool(t), adminToken, func(c *server.Config) { c.Admin.PublicURL = "https://Hooks.Example.com:443/" })
	b := newBrowser(t, a.handler)
	jar := &plainJar{} // the proxy's side is plain http: a browser's jar would keep Secure cookies to itself
	b.client.Jar = jar
	csrf := b.signIn(adminToken)
	var names []string
	for _, c := range jar.seen {
		if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Fatalf("cookie %+v", c)
		}
		names = append(names, c.Name)
	}
	if !slices.Contains(names, "hookgate_login") || !slices.Contains(names, "hookgate_session") {
		t.Fatalf("cookies set: %v", names)
	}

	// River UI's own forms carry no CSRF token: the browser's Origin stands in.
	for _, tt := range []struct {
		origin string
		ok     bool
	}{
		{"https://hooks.example.com", true},
		{b.srv.URL, false}, // the host the proxy asked for
		{"http://hooks.example.com", false},
		{"https://evil.example", false},
	} {
		res, _ := b.do("POST", "/admin/river/api/queues/default/pause", url.Values{}, "Origin", tt.origin)
		if (res.StatusCode != http.StatusUnauthorized) != tt.ok {
			t.Errorf("River UI POST from %s = %d", tt.origin, res.StatusCode)
		}
	}
	// The console's forms still need their CSRF token.
	if res, _ := b.do("POST", "/admin/ui/routes/fwd/pause", url.Values{"csrf": {csrf}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause = %d", res.StatusCode)
	}
}

// plainJar keeps every cookie by name and sends all of them, Secure or not;
// seen is every cookie it was given.
type plainJar struct {
	mu   sync.Mutex
	set  map[string]*http.Cookie
	seen []*http.Cookie
}

func (j *plainJar) SetCookies(_ *url.URL, cookies []*http.Cookie) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.set == nil {
		j.set = map[string]*http.Cookie{}
	}
	j.seen = append(j.seen, cookies...)
	for _, c := range cookies {
		if c.MaxAge < 0 {
			delete(j.set, c.Name)
		} else {
			j.set[c.Name] = c
		}
	}
}

func (j *plainJar) Cookies(*url.URL) []*http.Cookie {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*http.Cookie
	for _, c := range j.set {
		out = append(out, &http.Cookie{Name: c.Name, Value: c.Value})
	}
	return out
}

var _ http.CookieJar = (*plainJar)(nil)
