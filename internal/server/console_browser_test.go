package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/hookgate/hookgate/internal/dbtest"
)

// screenshotDir is where the browser tests write a PNG of every page they
// visit, for a person to look at.
const screenshotDir = "testdata/screenshots"

// findChromium returns the path of a Chromium, or "" with none. A machine
// without one skips the browser tests (make test installs Debian's chromium
// first); with HOOKGATE_REQUIRE_BROWSER=1, as in CI, they fail instead.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on this machine: the console's browser tests need Debian's chromium (scripts/ensure-chromium installs it)"
	if os.Getenv("HOOKGATE_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// chrome is a headless Chromium on a console, at a phone's width or a
// desktop's.
type chrome struct {
	t     *testing.T
	ctx   context.Context
	base  string
	width int64
	shot  int

	mu       sync.Mutex
	requests []request // every request the browser made, in order
}

// request is one request the browser made and, once it came, its answer.
type request struct {
	id       network.RequestID
	method   string
	url      string
	kind     network.ResourceType
	postData bool // whether it had a body
	status   int64
}

func newChrome(t *testing.T, base string, width, height int64) *chrome {
	t.Helper()
	path := findChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(int(width), int(height)))
	// On a busy machine Chromium now and then dies as it starts ("chrome
	// failed to start", a crash report and no page): that is not what these
	// tests test, so a start is tried three times.
	var ctx context.Context
	for try := 1; ; try++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		cctx, cancel := chromedp.NewContext(actx)
		cctx, cancelTimeout := context.WithTimeout(cctx, 3*time.Minute)
		stop := func() { cancelTimeout(); cancel(); cancelAlloc() }
		err := chromedp.Do(cctx, chromedp.EmulateViewport(width, height))
		if err == nil {
			ctx = cctx
			t.Cleanup(stop)
			break
		}
		stop()
		if try == 3 {
			t.Fatalf("start chromium: %v", err)
		}
		t.Logf("start chromium, try %d: %v", try, err)
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &chrome{t: t, ctx: ctx, base: base, width: width}
	if err := chromedp.Listen(ctx, c.record); err != nil {
		t.Fatal(err)
	}
	return c
}

// record keeps the browser's requests and their answers' status. It runs in
// chromedp's event loop, so it only appends under the lock.
func (c *chrome) record(ev any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		if e.RedirectResponse != nil {
			c.answered(e.RequestID, e.RedirectResponse.Status)
		}
		c.requests = append(c.requests, request{id: e.RequestID, method: e.Request.Method, url: e.Request.URL,
			kind: e.Type, postData: e.Request.HasPostData})
	case *network.EventResponseReceived:
		c.answered(e.RequestID, e.Response.Status)
	}
}

// answered notes the status of the latest request with the id (a redirect
// keeps its request's id).
func (c *chrome) answered(id network.RequestID, status int64) {
	for i := len(c.requests) - 1; i >= 0; i-- {
		if c.requests[i].id == id && c.requests[i].status == 0 {
			c.requests[i].status = status
			return
		}
	}
}

// requested returns the requests made so far.
func (c *chrome) requested() []request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]request(nil), c.requests...)
}

func (c *chrome) run(steps ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	if err := chromedp.Do(c.ctx, steps...); err != nil {
		c.t.Fatal(err)
	}
}

// get runs one action that returns a value.
func get[T any](c *chrome, a chromedp.Action[T]) T {
	c.t.Helper()
	v, err := chromedp.Run(c.ctx, a)
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// text returns the visible text of the first element matching the CSS selector.
func (c *chrome) text(sel string) string {
	c.t.Helper()
	return get(c, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
}

// page checks what a person sees on the current page: it holds want, the
// page does not scroll sideways at this width, and a screenshot is written.
func (c *chrome) page(name string, want ...string) {
	c.t.Helper()
	body := c.text("body")
	for _, w := range want {
		if !strings.Contains(body, w) {
			c.t.Fatalf("page %s lacks %q; it shows:\n%s", name, w, body)
		}
	}
	scrollW := get(c, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	clientW := get(c, chromedp.Evaluate[int](`document.documentElement.clientWidth`))
	if scrollW > clientW {
		c.t.Fatalf("page %s scrolls sideways: %d px wide in a %d px window", name, scrollW, clientW)
	}
	// A table squeezed into the window breaks its headings a letter a line.
	narrowest := get(c, chromedp.Evaluate[int](`Math.min(1000, ...[...document.querySelectorAll('table.list th')].filter(e => e.textContent.trim() !== '').map(e => Math.round(e.getBoundingClientRect().width)))`))
	if narrowest < 40 {
		c.t.Fatalf("page %s squeezes a table column to %d px", name, narrowest)
	}
	png := get(c, chromedp.FullScreenshot(100)) // 100: PNG; anything less is JPEG
	c.shot++
	file := filepath.Join(screenshotDir, fmt.Sprintf("%s-%02d-%s.png", c.t.Name(), c.shot, name))
	if err := os.WriteFile(file, png, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// waitText waits until the body shows want (a page that refreshes itself).
func (c *chrome) waitText(want string) {
	c.t.Helper()
	var body string
	dbtest.Eventually(c.t, 30*time.Second, fmt.Sprintf("the page shows %q", want), func() error {
		body, _ = chromedp.Run(c.ctx, chromedp.Text(chromedp.CSS("body")))
		if !strings.Contains(body, want) {
			return fmt.Errorf("it shows:\n%s", body)
		}
		return nil
	})
}

func (c *chrome) signIn(token string) {
	c.t.Helper()
	c.run(chromedp.Navigate(c.base+"/admin/"), chromedp.WaitVisible(chromedp.ID(`#token`)),
		chromedp.SendKeys(chromedp.ID(`#token`), token), chromedp.Submit(chromedp.ID(`#token`)))
}

// The flows a person uses, in a real browser at a desktop's width: sign in
// (a wrong token refused), list and filter, open a delivery, replay a
// discarded route and see its new generation, a bulk replay's progress to
// its end, pause and resume a route, sign out.
func TestConsoleInABrowser(t *testing.T) {
	a := setupAdmin(t, adminToken)
	a.answer.Store(500) // every forward fails: fwd's single attempt is discarded
	a.ingest(t, githubRequest(ghReq{id: "gh-1"}))
	a.ingest(t, githubRequest(ghReq{id: "gh-2"}))
	a.ingest(t, stripeEvent("evt_1", "invoice.paid"))
	a.ingest(t, githubRequest(ghReq{id: "gh-issue", event: "issues",
		body: []byte(`{"action":"opened","issue":{"number":1,"title":"<script>alert(1)</script>"},"repository":{"id":5678}}`)}))
	a.start(t)
	for _, id := range []string{"gh-1", "gh-2", "evt_1"} {
		dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: id, Route: "fwd", Generation: 1}, "discarded")
	}
	a.answer.Store(0)
	srv := httptest.NewServer(a.handler)
	t.Cleanup(srv.Close)
	c := newChrome(t, srv.URL, 1280, 900)

	// Sign in: a wrong token is refused, the right one opens the overview.
	c.signIn("not-the-token")
	c.waitText("That is neither the admin token nor a live personal token.") // answered after the wrong guess's delay
	c.page("login-refused", "That is neither the admin token nor a live personal token.")
	c.run(chromedp.Clear(chromedp.ID(`#token`)))
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	c.page("overview", "Deliveries from github", "Deliveries from stripe", "Forward attempts, all routes", "dispatches waiting")
	c.run(chromedp.Navigate(srv.URL+"/admin/?range=day"), chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	c.page("overview-day", "per 15 minutes")

	// The list, filtered to one provider.
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/deliveries"), chromedp.WaitVisible(chromedp.ID(`#deliveries`)))
	c.page("deliveries", "gh-1", "gh-2", "evt_1", "discarded")
	c.run(chromedp.SetValue(chromedp.CSS(`select[name=provider]`), "stripe"), chromedp.Submit(chromedp.CSS(`select[name=provider]`)),
		chromedp.WaitVisible(chromedp.ID(`#deliveries`)))
	list := c.text("#deliveries")
	if !strings.Contains(list, "evt_1") || strings.Contains(list, "gh-1") {
		t.Fatalf("filtered to stripe, the list shows:\n%s", list)
	}
	c.page("deliveries-stripe", "evt_1")

	// A delivery: its markup shown as text, its discarded route replayed.
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/deliveries/github/gh-issue"), chromedp.WaitVisible(chromedp.ID(`#body`)))
	if body := c.text("#body"); !strings.Contains(body, `"title": "<script>alert(1)</script>"`) {
		t.Fatalf("the body shows:\n%s", body)
	}
	c.page("delivery-markup", "issues", "audit")
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/deliveries/github/gh-1"), chromedp.WaitVisible(chromedp.ID(`#body`)))
	c.page("delivery", "generation 1", "discarded", "attempt 1 failed", "500")
	c.run(chromedp.SendKeys(chromedp.CSS(`input[name=reason]`), "target fixed"),
		chromedp.Click(chromedp.CSS(`form.replay button`)), chromedp.WaitVisible(chromedp.ID(`#confirm`)))
	c.page("replay-confirm", "Replay github gh-1 to fwd", "Reason: target fixed")
	c.run(chromedp.Click(chromedp.ID(`#confirm`)), chromedp.WaitVisible(chromedp.ID(`#replayed`)))
	dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: "gh-1", Route: "fwd", Generation: 2}, "succeeded")
	c.run(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID(`#body`)))
	c.page("delivery-replayed", "generation 2", "succeeded")

	// A bulk replay of what is still discarded: the count first, then its progress until done.
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/deliveries?state=discarded"), chromedp.WaitVisible(chromedp.ID(`#bulk-replay`)),
		chromedp.Click(chromedp.ID(`#bulk-replay`)), chromedp.WaitVisible(chromedp.ID(`#matched`)))
	if n := c.text("#matched"); n != "2" {
		t.Fatalf("the bulk replay would replay %s deliveries, want 2 (gh-2 and evt_1)", n)
	}
	c.page("bulk-confirm", "state discarded")
	c.run(chromedp.Click(chromedp.ID(`#confirm`)), chromedp.WaitVisible(chromedp.ID(`#progress`)))
	c.waitText("done: 2 of 2 deliveries handled (100%)")
	c.page("bulk-progress", "2 dispatches created")
	dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: "gh-2", Route: "fwd", Generation: 2}, "succeeded")
	dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: "evt_1", Route: "fwd", Generation: 2}, "succeeded")

	// Pause and resume a route.
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/routes"), chromedp.WaitVisible(chromedp.ID(`#routes`)),
		chromedp.SendKeys(chromedp.CSS(`#route-fwd input[name=reason]`), "maintenance"),
		chromedp.Click(chromedp.CSS(`#route-fwd button`)), chromedp.WaitVisible(chromedp.CSS(`.notice`)))
	c.page("routes-paused", "Paused fwd.", "maintenance")
	if st := a.route(t, "fwd"); st.State != "paused" {
		t.Fatalf("after Pause, fwd is %s", st.State)
	}
	c.run(chromedp.Navigate(srv.URL+"/admin/"), chromedp.WaitVisible(chromedp.ID(`#paused-routes`)))
	if n := c.text("#paused-routes"); n != "1" {
		t.Fatalf("the overview shows %s paused routes", n)
	}
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/routes"), chromedp.WaitVisible(chromedp.ID(`#routes`)),
		chromedp.Click(chromedp.CSS(`#route-fwd button`)), chromedp.WaitVisible(chromedp.CSS(`.notice`)))
	c.page("routes-resumed", "Resumed fwd.")
	if st := a.route(t, "fwd"); st.State != "active" {
		t.Fatalf("after Resume, fwd is %s", st.State)
	}

	// The other pages, and River UI with the same session.
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/rejections"), chromedp.WaitVisible(chromedp.ID(`#rejections`)))
	c.page("rejections", "Nothing refused.")
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/audit"), chromedp.WaitVisible(chromedp.ID(`#audit`)))
	c.page("audit", "pause", "resume", "replay", "maintenance")
	c.run(chromedp.Navigate(srv.URL+"/admin/river/queues"), chromedp.WaitReady(chromedp.CSS(`body`)))
	c.waitText("Queues")

	// Sign out: the console asks for the token again.
	c.run(chromedp.Navigate(srv.URL+"/admin/"), chromedp.WaitVisible(chromedp.CSS(`.signout button`)),
		chromedp.Click(chromedp.CSS(`.signout button`)), chromedp.WaitVisible(chromedp.ID(`#token`)))
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/deliveries"), chromedp.WaitVisible(chromedp.ID(`#token`)))
	c.page("signed-out", "Your personal token")
}

// "Retry now" in a real browser, at a desktop's width and a phone's: a
// delivery whose forward waits an hour to retry (the target's Retry-After)
// is retried from its page, and a route's from the routes page; each
// succeeds at once, and the page says what was done. At a phone's width the
// route's Retry now button can be scrolled to.
func TestConsoleRetryNowInABrowser(t *testing.T) {
	a := retryingBundle(t)
	for _, id := range []string{"gh-1", "gh-2", "gh-3"} {
		a.ingest(t, push(id))
	}
	a.start(t)
	for _, id := range []string{"gh-1", "gh-2", "gh-3"} {
		a.waitRetryingAnHour(t, id, "fwd", 1)
	}
	a.answer.Store(0) // the target is back
	srv := httptest.NewServer(a.handler)
	t.Cleanup(srv.Close)

	phone := newChrome(t, srv.URL, 390, 844)
	phone.signIn(adminToken)
	phone.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	phone.run(chromedp.Navigate(srv.URL+"/admin/ui/routes"), chromedp.WaitVisible(chromedp.ID(`#routes`)))
	phone.page("routes-retrying-390", "3 retrying", "Retry now")
	phone.reachable(`#route-fwd form.retry-now button`)

	c := newChrome(t, srv.URL, 1280, 900)
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/deliveries/github/gh-1"), chromedp.WaitVisible(chromedp.ID(`#retry-now`)))
	c.page("delivery-retrying", "retrying", "attempt 1 failed", "503")
	c.run(chromedp.Click(chromedp.ID(`#retry-now`)), chromedp.WaitVisible(chromedp.ID(`#retried`)))
	c.page("delivery-retried", "Retrying 1 dispatch now")
	dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: "gh-1", Route: "fwd", Generation: 1}, "succeeded")

	c.run(chromedp.Navigate(srv.URL+"/admin/ui/routes"), chromedp.WaitVisible(chromedp.CSS(`#route-fwd form.retry-now button`)),
		chromedp.Click(chromedp.CSS(`#route-fwd form.retry-now button`)), chromedp.WaitVisible(chromedp.CSS(`.notice`)))
	c.page("routes-retried", "Retrying 2 dispatches of fwd now")
	for _, id := range []string{"gh-2", "gh-3"} {
		dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: id, Route: "fwd", Generation: 1}, "succeeded")
	}
	c.run(chromedp.Navigate(srv.URL+"/admin/ui/audit"), chromedp.WaitVisible(chromedp.ID(`#audit`)))
	c.page("audit-retries", "retry")
}

// At a phone's width (390 px) no page scrolls sideways: wide tables scroll
// inside their own box.
func TestConsoleAtPhoneWidth(t *testing.T) {
	a := setupAdmin(t, adminToken)
	a.ingest(t, githubRequest(ghReq{id: "a-rather-long-delivery-id-0123456789-0123456789-0123456789"}))
	a.start(t)
	srv := httptest.NewServer(a.handler)
	t.Cleanup(srv.Close)
	c := newChrome(t, srv.URL, 390, 844)
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	c.page("overview", "Deliveries from github")
	for _, p := range []struct{ path, name, wait string }{
		{"/admin/ui/deliveries", "deliveries", "#deliveries"},
		{"/admin/ui/deliveries/github/a-rather-long-delivery-id-0123456789-0123456789-0123456789", "delivery", "#body"},
		{"/admin/ui/routes", "routes", "#routes"},
		{"/admin/ui/rejections", "rejections", "#rejections"},
		{"/admin/ui/audit", "audit", "#audit"},
		{"/admin/ui/tokens", "tokens", "#tokens"},
	} {
		c.run(chromedp.Navigate(srv.URL+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait)))
		c.page(p.name)
	}
}

// A person signed in with a viewer's personal token, at a phone's width:
// the header says who they are and that they are a viewer, without pushing
// the page sideways; the routes and the delivery pages show everything but
// offer no button that changes anything, nor River UI.
func TestConsoleForAViewerInABrowser(t *testing.T) {
	a := setupAdmin(t, adminToken)
	a.ingest(t, githubRequest(ghReq{id: "gh-1"}))
	tok := a.makeToken(t, "", "Vera Viewer from the support desk", "viewer", "1h")
	srv := httptest.NewServer(a.handler)
	t.Cleanup(srv.Close)
	c := newChrome(t, srv.URL, 390, 844)
	c.signIn(tok.Token)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	if who := c.text("header .who"); who != "token:"+tok.ID+" (Vera Viewer from the support desk) · viewer" {
		t.Fatalf("the header says %q", who)
	}
	c.page("overview-viewer", "Vera Viewer from the support desk", "viewer")
	for _, p := range []struct{ path, name, wait string }{
		{"/admin/ui/routes", "routes-viewer", "#routes"},
		{"/admin/ui/deliveries/github/gh-1", "delivery-viewer", "#body"},
	} {
		c.run(chromedp.Navigate(srv.URL+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait)))
		c.page(p.name, "viewer")
		buttons := get(c, chromedp.Evaluate[int](`document.querySelectorAll('main form[method=post] button, header nav a[href^="/admin/river"]').length`))
		if buttons != 0 {
			t.Errorf("%s offers a viewer %d buttons or links that change something", p.path, buttons)
		}
	}
}

// Single sign-on in a real browser: from the console's sign-in page to the
// identity provider (another site: localhost, the gateway 127.0.0.1), its
// login form, and back, signed in with the role the person's groups map
// to; a person whose groups map to none is told so and signed in nowhere.
func TestConsoleSingleSignOnInABrowser(t *testing.T) {
	_, _, b := setupSSO(t)
	c := newChrome(t, b.srv.URL, 1280, 900)
	signInAt := func(username, password string) {
		c.run(chromedp.Navigate(b.srv.URL+"/admin/ui/routes"), chromedp.WaitVisible(chromedp.ID(`#sso`)),
			chromedp.Click(chromedp.ID(`#sso`)), chromedp.WaitVisible(chromedp.ID(`#username`)),
			chromedp.SendKeys(chromedp.ID(`#username`), username), chromedp.SendKeys(chromedp.ID(`#password`), password),
			chromedp.Click(chromedp.ID(`#submit`)))
	}
	c.run(chromedp.Navigate(b.srv.URL + "/admin/ui/login"))
	c.run(chromedp.WaitVisible(chromedp.ID(`#sso`)))
	c.page("sso-login", "Sign in with single sign-on")

	signInAt("nick", "pw-nick")
	c.waitText("hookgate gives you no role")
	c.page("sso-no-role", "hookgate gives you no role", "marketing")

	signInAt("ana", "pw-ana")
	c.run(chromedp.WaitVisible(chromedp.ID(`#routes`)))
	if who := c.text("header .who"); who != "oidc:ana@example.com · admin" {
		t.Fatalf("the header says %q", who)
	}
	c.page("sso-routes", "fwd", "Pause")

	// Ana makes herself a token for the CLI, and sees it once.
	c.run(chromedp.Navigate(b.srv.URL+"/admin/ui/tokens"), chromedp.WaitVisible(chromedp.ID(`#new-token`)),
		chromedp.SendKeys(chromedp.CSS(`#new-token input[name=name]`), "Ana's laptop"),
		chromedp.Click(chromedp.CSS(`#new-token button`)), chromedp.WaitVisible(chromedp.ID(`#token-secret`)))
	c.page("sso-token-made", "Copy the token now", "hgt_", "oidc:ana@example.com")
}

// history is a gateway with something on every console page: three
// deliveries whose forward was discarded, one replayed on its own and one by
// a bulk replay (gh-2's is still discarded), a delivery with a long id, a
// rejected request, a pause and resume of fwd, and hidden paused, each with a
// reason.
type history struct {
	a    *adminBundle
	srv  *httptest.Server
	bulk string // the bulk replay's id
}

func consoleHistory(t *testing.T) history {
	t.Helper()
	a := setupAdmin(t, adminToken)
	a.answer.Store(500) // every forward fails: fwd's single attempt is discarded
	a.ingest(t, githubRequest(ghReq{id: "gh-1"}))
	a.ingest(t, githubRequest(ghReq{id: "gh-2"}))
	a.ingest(t, stripeEvent("evt_1", "invoice.paid"))
	a.ingest(t, githubRequest(ghReq{id: "a-rather-long-delivery-id-0123456789-0123456789-0123456789", event: "issues",
		body: []byte(`{"action":"opened","issue":{"number":1},"repository":{"id":5678}}`)}))
	if rec := a.serve(githubRequest(ghReq{id: "forged", signature: ptr("sha256=00")})); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a forged delivery = %d %s", rec.Code, rec.Body)
	}
	if err := a.recorder.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.start(t)
	for _, id := range []string{"gh-1", "gh-2", "evt_1"} {
		dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: id, Route: "fwd", Generation: 1}, "discarded")
	}
	a.answer.Store(0)
	a.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `{"reason":"maintenance"}`}, 200, nil)
	a.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/resume", body: `{"reason":"done"}`}, 200, nil)
	a.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/hidden/pause", body: `{"reason":"never used"}`}, 200, nil)
	a.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/gh-1/replay", body: `{"reason":"target fixed"}`}, 202, nil)
	var bulk replayed
	a.adminJSON(t, adminReq{method: "POST", path: "/admin/replays", body: `{"provider":"stripe","state":"discarded","reason":"backfill"}`}, 202, &bulk)
	dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: "gh-1", Route: "fwd", Generation: 2}, "succeeded")
	dbtest.WaitDispatch(t, a.pool, dbtest.Dispatch{DeliveryID: "evt_1", Route: "fwd", Generation: 2}, "succeeded")
	dbtest.Eventually(t, 30*time.Second, "the bulk replay done", func() error {
		var state string
		if err := a.pool.QueryRow(context.Background(), "SELECT state FROM hookgate_replays WHERE replay_id = $1", bulk.ReplayID).Scan(&state); err != nil {
			return err
		}
		if state != "done" {
			return fmt.Errorf("it is %s", state)
		}
		return nil
	})
	srv := httptest.NewServer(a.handler)
	t.Cleanup(srv.Close)
	return history{a: a, srv: srv, bulk: bulk.ReplayID}
}

// consolePage is a page of the console, and what shows it has loaded.
type consolePage struct{ path, name, wait string }

// pages are the console's pages that the history fills.
func (h history) pages() []consolePage {
	return []consolePage{
		{"/admin/", "overview", "#backlog"},
		{"/admin/?range=day", "overview-day", "#backlog"},
		{"/admin/ui/deliveries", "deliveries", "#deliveries"},
		{"/admin/ui/deliveries/github/gh-2", "delivery", "#body"},
		{"/admin/ui/deliveries/github/a-rather-long-delivery-id-0123456789-0123456789-0123456789", "delivery-long-id", "#body"},
		{"/admin/ui/replay?state=discarded", "bulk-confirm", "#matched"},
		{"/admin/ui/replays/" + h.bulk, "bulk-progress", "#progress"},
		{"/admin/ui/routes", "routes", "#routes"},
		{"/admin/ui/rejections", "rejections", "#rejections"},
		{"/admin/ui/audit", "audit", "#audit"},
	}
}

// visit opens a page, waits for it, and checks it as page does.
func (c *chrome) visit(p consolePage, suffix string, want ...string) {
	c.t.Helper()
	c.run(chromedp.Navigate(c.base+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait)))
	c.page(p.name+suffix, want...)
}

// tablesJS measures every table of the page: for each row, the cells' edges
// against the columns of its header row (the thead's last row, or the first
// row of a table without one), taking colspan into account. It returns the
// tables it measured and what does not line up.
const tablesJS = `(() => {
	const out = {tables: [], problems: []};
	const near = (a, b) => Math.abs(a - b) <= 2;
	document.querySelectorAll('table').forEach((table, n) => {
		const name = table.id || (table.className + ' table ' + n);
		const rows = [...table.rows];
		const head = table.tHead ? table.tHead.rows[table.tHead.rows.length - 1] : rows[0];
		if (!head) { out.problems.push(name + ': no rows'); return; }
		const cols = [...head.cells].map(c => c.getBoundingClientRect());
		if ([...head.cells].some(c => c.colSpan !== 1)) out.problems.push(name + ': a header cell spans columns');
		let body = 0;
		rows.filter(r => r !== head && !(table.tHead && table.tHead.contains(r))).forEach((row, i) => {
			body++;
			const cells = [...row.cells];
			const span = cells.reduce((n, c) => n + c.colSpan, 0);
			if (span !== cols.length) {
				out.problems.push(name + ' row ' + (i + 1) + ': ' + span + ' cells for ' + cols.length + ' columns');
				return;
			}
			let col = 0;
			const box = row.getBoundingClientRect();
			cells.forEach(cell => {
				const r = cell.getBoundingClientRect();
				const first = cols[col], last = cols[col + cell.colSpan - 1];
				const what = name + ' row ' + (i + 1) + ' column ' + (col + 1) + ' (' + (head.cells[col].textContent.trim() || 'untitled') + ')';
				if (!near(r.left, first.left) || !near(r.right, last.right)) {
					out.problems.push(what + ': cell at ' + Math.round(r.left) + '..' + Math.round(r.right) +
						', its header at ' + Math.round(first.left) + '..' + Math.round(last.right));
				}
				if (!near(r.top, box.top) || !near(r.bottom, box.bottom)) {
					out.problems.push(what + ': cell at ' + Math.round(r.top) + '..' + Math.round(r.bottom) +
						' down the page, its row at ' + Math.round(box.top) + '..' + Math.round(box.bottom));
				}
				col += cell.colSpan;
			});
		});
		out.tables.push({name: name, rows: body});
	});
	return JSON.stringify(out);
})()`

// tablesLineUp checks that on the current page every body cell of every table
// sits under its column's header, edge for edge, and every row fills the
// header's columns; want names the tables (by id, or class and index) the
// page must show, each with a row at least.
func (c *chrome) tablesLineUp(page string, want ...string) {
	c.t.Helper()
	var got struct {
		Tables []struct {
			Name string
			Rows int
		}
		Problems []string
	}
	if err := json.Unmarshal([]byte(get(c, chromedp.Evaluate[string](tablesJS))), &got); err != nil {
		c.t.Fatal(err)
	}
	if len(got.Problems) > 0 {
		c.t.Errorf("at %d px, on page %s:\n%s", c.width, page, strings.Join(got.Problems, "\n"))
	}
	for _, name := range want {
		found := false
		for _, tb := range got.Tables {
			if tb.Name == name && tb.Rows > 0 {
				found = true
			}
		}
		if !found {
			c.t.Errorf("at %d px, page %s has no table %s with rows; it has %+v", c.width, page, name, got.Tables)
		}
	}
}

// reachable checks that a button can be seen at this width: scrolled into
// view (inside its table's box, which scrolls sideways), it lies inside the
// window and nothing covers it, and the page itself does not scroll sideways.
func (c *chrome) reachable(sel string) {
	c.t.Helper()
	var got struct {
		Left, Right, Width, ScrollWidth, ScrollX float64
		OnTop                                    bool
	}
	js := `(() => {
		const b = document.querySelector(` + "`" + sel + "`" + `);
		b.scrollIntoView({block: 'center', inline: 'nearest'});
		const r = b.getBoundingClientRect();
		const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
		return JSON.stringify({left: r.left, right: r.right, width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
			scrollX: window.scrollX, onTop: hit === b || b.contains(hit)});
	})()`
	if err := json.Unmarshal([]byte(get(c, chromedp.Evaluate[string](js))), &got); err != nil {
		c.t.Fatal(err)
	}
	if got.Left < 0 || got.Right > got.Width || !got.OnTop || got.ScrollWidth > got.Width || got.ScrollX != 0 {
		c.t.Errorf("at %d px, %s cannot be reached: %+v", c.width, sel, got)
	}
}

// Every table on every page lines up, at a desktop's width and a phone's:
// each cell's left and right edges are its column header's, every row has
// the header's columns, and every cell fills its row's height (none stacked
// under another). On a phone the
// page never scrolls sideways and the Pause button can be scrolled to inside
// the routes table.
func TestConsoleTablesLineUp(t *testing.T) {
	h := consoleHistory(t)
	tables := map[string][]string{
		"deliveries":       {"deliveries"},
		"delivery":         {"headers table 0"},
		"delivery-long-id": {"headers table 0"},
		"routes":           {"routes"},
		"rejections":       {"rejections"},
		"audit":            {"audit"},
	}
	for _, size := range []struct{ width, height int64 }{{1280, 900}, {390, 844}} {
		c := newChrome(t, h.srv.URL, size.width, size.height)
		c.signIn(adminToken)
		c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
		for _, p := range h.pages() {
			c.visit(p, fmt.Sprintf("-%d", size.width))
			c.tablesLineUp(p.name, tables[p.name]...)
		}
		c.run(chromedp.Navigate(h.srv.URL+"/admin/ui/routes"), chromedp.WaitVisible(chromedp.ID(`#routes`)))
		c.reachable(`#route-fwd button`)
	}
}

// pluralJS finds a count that disagrees with its noun: "1 attempts",
// "1 of 1 deliveries", "1 open circuits", or a hedge such as "attempt(s)".
var badPlural = regexp.MustCompile(`\b1 (?:of 1 )?(?:open |paused )?(?:attempts|deliveries|dispatches|routes|circuits|receipts|entries)\b|\w\(s\)`)

// Counts agree with their nouns on every page: "1 attempt", "2 attempts".
func TestConsolePluralsAgreeWithTheirCounts(t *testing.T) {
	h := consoleHistory(t)
	want := map[string][]string{
		"overview":      {"0 dispatches waiting", "0 open circuits", "1 paused route of 3"},
		"delivery":      {"generation 1 discarded, 1 attempt "},
		"bulk-confirm":  {"1 delivery matches it now", "Replay 1 delivery"},
		"bulk-progress": {"1 of 1 delivery handled (100%), 1 dispatch created"},
		"routes":        {"timeout 5s, 1 attempt "},
	}
	c := newChrome(t, h.srv.URL, 1280, 900)
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	for _, p := range h.pages() {
		c.visit(p, "")
		body := strings.Join(strings.Fields(c.text("body")), " ") + " " // the words as a person reads them
		for _, w := range want[p.name] {
			if !strings.Contains(body, w) {
				t.Errorf("page %s lacks %q; it shows:\n%s", p.name, w, body)
			}
		}
		if bad := badPlural.FindAllString(body, -1); bad != nil {
			t.Errorf("page %s shows %q", p.name, bad)
		}
	}
}

// rawTime is a time as a machine writes it (2026-12-02T05:32:10.532199Z, or
// 05:32:10Z); readableTime is how the console shows one.
var (
	rawTime      = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d|\d\d:\d\d:\d\d(\.\d+)?Z\b`)
	readableTime = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`)
)

// timesJS lists the page's <time> elements: what each shows and the
// milliseconds since the epoch of its datetime attribute and of what it shows.
const timesJS = `JSON.stringify([...document.querySelectorAll('time')].map(t => ({
	text: t.textContent.trim(), at: Date.parse(t.dateTime), shown: Date.parse(t.textContent.trim().replace(' UTC', 'Z').replace(' ', 'T'))})))`

// Every time the console prints reads as "2026-12-02 05:32:10 UTC", in a
// <time> whose datetime attribute is the same instant; none is printed as
// RFC 3339 (the bulk replay's filter was).
func TestConsoleShowsTimesReadably(t *testing.T) {
	h := consoleHistory(t)
	timed := map[string]bool{"overview": true, "deliveries": true, "delivery": true, "bulk-progress": true,
		"routes": true, "rejections": true, "audit": true}
	c := newChrome(t, h.srv.URL, 1280, 900)
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	for _, p := range h.pages() {
		c.visit(p, "")
		if raw := rawTime.FindAllString(c.text("body"), -1); raw != nil {
			t.Errorf("page %s shows raw times %q", p.name, raw)
		}
		var times []struct {
			Text      string
			At, Shown float64
		}
		if err := json.Unmarshal([]byte(get(c, chromedp.Evaluate[string](timesJS))), &times); err != nil {
			t.Fatal(err)
		}
		if timed[p.name] && len(times) == 0 {
			t.Errorf("page %s shows no <time>", p.name)
		}
		for _, tm := range times {
			if !readableTime.MatchString(tm.Text) || tm.At == 0 || tm.At-tm.Shown < 0 || tm.At-tm.Shown >= 1000 {
				t.Errorf("page %s shows %q for %v ms", p.name, tm.Text, tm.At)
			}
		}
	}
	// The bulk replay's filter names its times as people read them.
	c.visit(consolePage{"/admin/ui/replays/" + h.bulk, "bulk-progress", "#progress"}, "-filter")
	if got := c.text("main"); !regexp.MustCompile(`provider stripe, state discarded, until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`).MatchString(got) {
		t.Errorf("the bulk replay's page says:\n%s", got)
	}
}

// The console names its own icon, an SVG among its static files that its
// Content-Security-Policy allows, so a browser never asks for /favicon.ico (a
// 404); and no request a console page makes fails.
func TestConsoleHasAFavicon(t *testing.T) {
	h := consoleHistory(t)
	c := newChrome(t, h.srv.URL, 1280, 900)
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	for _, p := range h.pages() {
		c.visit(p, "")
		icon := get(c, chromedp.Evaluate[string](`(async () => {
			const link = document.querySelector('link[rel~=icon]');
			if (!link) return 'no icon link';
			const res = await fetch(link.href);
			const img = new Image();
			img.src = link.href;
			try { await img.decode(); } catch (e) { return 'the icon does not load as an image: ' + e; }
			return res.status + ' ' + res.headers.get('Content-Type') + ' ' + new URL(link.href).pathname;
		})()`, chromedp.EvalAwaitPromise))
		if icon != "200 image/svg+xml /admin/ui/static/favicon.svg" {
			t.Fatalf("page %s: its icon: %s", p.name, icon)
		}
	}
	for _, r := range c.requested() {
		if strings.HasSuffix(r.url, "/favicon.ico") || r.status >= 400 {
			t.Errorf("the browser asked for %s %s: %d", r.method, r.url, r.status)
		}
	}
}

// A reason given for a replay, a bulk replay or a pause travels in a POST
// body only: no request the browser makes, nor a redirect, carries it in
// its URL.
func TestConsoleKeepsReasonsOutOfURLs(t *testing.T) {
	h := consoleHistory(t)
	c := newChrome(t, h.srv.URL, 1280, 900)
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))

	c.visit(consolePage{"/admin/ui/deliveries/github/gh-2", "delivery", "#body"}, "")
	c.run(chromedp.SendKeys(chromedp.CSS(`form.replay input[name=reason]`), "secret one"),
		chromedp.Click(chromedp.CSS(`form.replay button`)), chromedp.WaitVisible(chromedp.ID(`#confirm`)))
	c.page("replay-confirm", "Replay github gh-2 to fwd", "Reason: secret one")
	c.run(chromedp.Click(chromedp.ID(`#confirm`)), chromedp.WaitVisible(chromedp.ID(`#replayed`)))
	dbtest.WaitDispatch(t, h.a.pool, dbtest.Dispatch{DeliveryID: "gh-2", Route: "fwd", Generation: 2}, "succeeded")

	c.visit(consolePage{"/admin/ui/replay?provider=stripe", "bulk-confirm", "#matched"}, "")
	c.run(chromedp.Click(chromedp.CSS(`input[name=force]`)), chromedp.SendKeys(chromedp.CSS(`input[name=reason]`), "secret two"),
		chromedp.Click(chromedp.ID(`#confirm`)), chromedp.WaitVisible(chromedp.ID(`#progress`)))
	c.waitText("done: 1 of 1 delivery handled")

	c.visit(consolePage{"/admin/ui/routes", "routes", "#routes"}, "")
	c.run(chromedp.SendKeys(chromedp.CSS(`#route-fwd input[name=reason]`), "secret three"),
		chromedp.Click(chromedp.CSS(`#route-fwd button`)), chromedp.WaitVisible(chromedp.CSS(`.notice`)))

	c.visit(consolePage{"/admin/ui/audit", "audit", "#audit"}, "", "secret one", "secret two", "secret three")
	var posts []string
	for _, r := range c.requested() {
		if strings.Contains(strings.ToLower(r.url), "secret") || strings.Contains(r.url, "reason") {
			t.Errorf("the browser sent a reason in a URL: %s %s", r.method, r.url)
		}
		if r.method == http.MethodPost {
			if !r.postData {
				t.Errorf("POST %s without a body", r.url)
			}
			posts = append(posts, strings.TrimPrefix(r.url, h.srv.URL))
		}
	}
	wantPosts := []string{"/admin/ui/login", "/admin/ui/deliveries/github/gh-2/replay/confirm", "/admin/ui/deliveries/github/gh-2/replay",
		"/admin/ui/replay", "/admin/ui/routes/fwd/pause"}
	if strings.Join(posts, " ") != strings.Join(wantPosts, " ") {
		t.Errorf("the browser posted to %q, want %q", posts, wantPosts)
	}
}

// The audit log says what a bulk replay selected, its filter and how many
// deliveries, where its cell was empty.
func TestConsoleAuditSaysWhatABulkReplaySelected(t *testing.T) {
	h := consoleHistory(t)
	c := newChrome(t, h.srv.URL, 1280, 900)
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	c.visit(consolePage{"/admin/ui/audit", "audit", "#audit"}, "")
	cells := get(c, chromedp.Evaluate[[]string](`[...document.querySelector('#audit a[href="/admin/ui/replays/`+h.bulk+`"]').closest('tr').cells].map(c => c.textContent.trim())`))
	want := regexp.MustCompile(`^provider stripe, state discarded, until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(1 delivery\)$`)
	if len(cells) != 5 || cells[2] != "replay" || !want.MatchString(cells[3]) || cells[4] != "backfill" {
		t.Fatalf("the bulk replay's row shows %q", cells)
	}
	// A replay of one delivery names it, as before.
	one := get(c, chromedp.Evaluate[string](`document.querySelector('#audit a[href="/admin/ui/deliveries/github/gh-1"]').closest('tr').cells[3].textContent.trim()`))
	if one != "github gh-1" {
		t.Fatalf("gh-1's replay's row shows %q", one)
	}
}

// The deliveries list names the routes that failed: a discarded delivery's
// state says which of its routes' latest dispatch is discarded (fwd, not
// audit, which succeeded).
func TestConsoleListNamesFailingRoutes(t *testing.T) {
	h := consoleHistory(t)
	c := newChrome(t, h.srv.URL, 1280, 900)
	c.signIn(adminToken)
	c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
	for _, path := range []string{"/admin/ui/deliveries", "/admin/ui/deliveries?state=discarded"} {
		c.visit(consolePage{path, "deliveries", "#deliveries"}, "")
		states := get(c, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll('#deliveries tbody tr')].map(r =>
			[r.cells[2].textContent.trim(), r.cells[4].textContent.trim().replace(/\s+/g, ' ')]))`))
		want := map[string]string{"gh-2": "discarded fwd", "gh-1": "succeeded", "evt_1": "succeeded",
			"a-rather-long-delivery-id-0123456789-0123456789-0123456789": "succeeded"}
		if path != "/admin/ui/deliveries" {
			want = map[string]string{"gh-2": "discarded fwd"}
		}
		if fmt.Sprint(states) != fmt.Sprint(want) {
			t.Errorf("%s shows states %q, want %q", path, states, want)
		}
	}
}

// chartsJS measures the overview's charts: each one's scale (its values and
// the heights of their labels' middles, in px down the page), and the bar
// with the most counted, its count (from its title) and the height of its
// top and bottom.
const chartsJS = `JSON.stringify([...document.querySelectorAll('figure.chart svg')].map(svg => {
	const mid = e => { const r = e.getBoundingClientRect(); return (r.top + r.bottom) / 2; };
	const ticks = [...svg.querySelectorAll('text.scale')].map(t => ({value: Number(t.textContent), y: mid(t)}));
	let tallest = {n: 0, top: 0, bottom: 0};
	svg.querySelectorAll('g').forEach(g => {
		const n = Number(g.querySelector('title').textContent.match(/UTC: (\d+)/)[1]);
		const segs = [...g.querySelectorAll('rect:not(.hover)')].map(r => r.getBoundingClientRect());
		if (n > tallest.n) tallest = {n: n, top: Math.min(...segs.map(r => r.top)), bottom: Math.max(...segs.map(r => r.bottom))};
	});
	const axis = svg.querySelector('line.axis').getBoundingClientRect();
	return {title: svg.getAttribute('aria-label'), ticks: ticks, tallest: tallest, axis: axis.top};
}))`

// The overview's charts have a scale: 0 and 3 to 5 round values (1, 2 or 5
// times a power of ten apart) up to at least the tallest bar, labels evenly
// spaced with 0 on the axis, and the tallest bar as high as the scale says.
func TestConsoleChartsHaveAScale(t *testing.T) {
	h := consoleHistory(t)
	for _, size := range []struct{ width, height int64 }{{1280, 900}, {390, 844}} {
		c := newChrome(t, h.srv.URL, size.width, size.height)
		c.signIn(adminToken)
		c.run(chromedp.WaitVisible(chromedp.ID(`#backlog`)))
		for _, p := range h.pages()[:2] {
			c.visit(p, fmt.Sprintf("-%d", size.width))
			var charts []struct {
				Title string
				Ticks []struct {
					Value int64
					Y     float64
				}
				Tallest struct {
					N           int64
					Top, Bottom float64
				}
				Axis float64
			}
			if err := json.Unmarshal([]byte(get(c, chromedp.Evaluate[string](chartsJS))), &charts); err != nil {
				t.Fatal(err)
			}
			counted := false
			for _, ch := range charts {
				what := fmt.Sprintf("at %d px, %s's %s", size.width, p.name, ch.Title)
				ticks := ch.Ticks
				if len(ticks) < 4 || len(ticks) > 6 || ticks[0].Value != 0 {
					t.Errorf("%s: scale %+v", what, ticks)
					continue
				}
				step, px := ticks[1].Value, ticks[0].Y-ticks[1].Y
				if !roundStep(step) || px < 12 {
					t.Errorf("%s: scale %+v", what, ticks)
				}
				for i, tk := range ticks {
					if tk.Value != int64(i)*step || math.Abs(ticks[0].Y-tk.Y-float64(i)*px) > 1.5 {
						t.Errorf("%s: scale %+v is not even", what, ticks)
						break
					}
				}
				top := ticks[len(ticks)-1].Value
				if math.Abs(ticks[0].Y-ch.Axis) > 3 || top < ch.Tallest.N {
					t.Errorf("%s: scale %+v against the axis at %v and a bar of %d", what, ticks, ch.Axis, ch.Tallest.N)
				}
				if ch.Tallest.N > 0 {
					counted = true
					want := ticks[0].Y - float64(ch.Tallest.N)/float64(step)*px
					if math.Abs(ch.Tallest.Top-want) > 3 || math.Abs(ch.Tallest.Bottom-ticks[0].Y) > 3 {
						t.Errorf("%s: a bar of %d spans %v..%v down the page, its scale says %v..%v",
							what, ch.Tallest.N, ch.Tallest.Top, ch.Tallest.Bottom, want, ticks[0].Y)
					}
				}
			}
			if len(charts) != 3 || !counted {
				t.Errorf("at %d px, %s has %d charts, bars in some: %v", size.width, p.name, len(charts), counted)
			}
		}
	}
}

// roundStep reports whether n is 1, 2 or 5 times a power of ten.
func roundStep(n int64) bool {
	for n >= 10 && n%10 == 0 {
		n /= 10
	}
	return n == 1 || n == 2 || n == 5
}
