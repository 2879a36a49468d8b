package hookgate_test

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// call sends an operator request with the admin token and returns the
// status and the body.
func (r *running) call(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+r.gw.Addr()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer admin-token")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// routesOf sends a Stripe invoice to g and returns how many dispatches it
// created.
func routesOf(t *testing.T, g *running, id string) int {
	t.Helper()
	status, body := sendStripe(t, g, invoice(id, "invoice.paid"))
	var answer struct{ Routes int }
	if status != http.StatusAccepted || json.Unmarshal([]byte(body), &answer) != nil {
		t.Fatalf("ingest %s: %d %s", id, status, body)
	}
	return answer.Routes
}

// within5s waits, up to 5 s, until a new delivery to g creates want
// dispatches.
func within5s(t *testing.T, g *running, want int) {
	t.Helper()
	var n atomic.Int64
	dbtest.Eventually(t, 5*time.Second, fmt.Sprintf("a delivery creates %d dispatches", want), func() error {
		if got := routesOf(t, g, fmt.Sprintf("live_%d_%d", time.Now().UnixNano(), n.Add(1))); got != want {
			return fmt.Errorf("it created %d", got)
		}
		return nil
	})
}

// With GATEWAY_ROUTES_FROM=database, a route put through one gateway's API
// is in force on another within 5 s, and forwards there; deleted through
// the other, it is gone from the first within 5 s. Each change is audited
// with the route before and after.
func TestLiveRoutesAreInForceOnEveryGatewayWithin5s(t *testing.T) {
	var got atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	t.Cleanup(target.Close)
	url := hookgate.Secret(dbtest.URL(t))
	a := runGateway(t, hookgate.Config{DatabaseURL: url, RoutesFrom: "database"})
	b := runGateway(t, hookgate.Config{DatabaseURL: url, RoutesFrom: "database"})

	status, body := a.call(t, "PUT", "/admin/routes/billing", `{"match":["stripe:invoice.*"],"target":"`+target.URL+`"}`)
	if status != http.StatusCreated || !strings.Contains(body, `"created":true`) || !strings.Contains(body, `"name":"billing"`) {
		t.Fatalf("PUT = %d %s", status, body)
	}
	within5s(t, b, 1)
	dbtest.Eventually(t, 10*time.Second, "the target gets a forward", func() error {
		if got.Load() == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})

	// Replaced: the audit log has it before and after.
	status, body = a.call(t, "PUT", "/admin/routes/billing", `{"match":["stripe:customer.*"],"target":"`+target.URL+`"}`)
	if status != http.StatusOK || !strings.Contains(body, `"created":false`) {
		t.Fatalf("PUT again = %d %s", status, body)
	}
	within5s(t, b, 0) // an invoice matches no more
	var log struct {
		Entries []struct {
			Action        string
			Route         *string
			Before, After json.RawMessage
		}
	}
	a.admin(t, "/admin/audit", &log)
	if len(log.Entries) < 2 || log.Entries[0].Action != "route_put" || !strings.Contains(string(log.Entries[0].Before), "stripe:invoice.*") ||
		!strings.Contains(string(log.Entries[0].After), "stripe:customer.*") || string(log.Entries[1].Before) != "null" {
		t.Errorf("the audit log: %+v", log.Entries)
	}

	status, body = b.call(t, "DELETE", "/admin/routes/billing", "")
	if status != http.StatusOK || !strings.Contains(body, "stripe:customer.*") {
		t.Fatalf("DELETE = %d %s", status, body)
	}
	if status, _ := b.call(t, "DELETE", "/admin/routes/billing", ""); status != http.StatusNotFound {
		t.Errorf("DELETE again = %d", status)
	}
	if status, body := a.call(t, "GET", "/admin/routes/billing", ""); status != http.StatusNotFound {
		// The deleting gateway follows at once; the other within 5 s.
		dbtest.Eventually(t, 5*time.Second, "the route is gone from the other gateway", func() error {
			if s, _ := a.call(t, "GET", "/admin/routes/billing", ""); s != http.StatusNotFound {
				return fmt.Errorf("GET = %d %s", s, body)
			}
			return nil
		})
	}
}

// A route given to the API is checked as the configuration file's are at
// start: 400 naming each key that is wrong, nothing stored; with the
// routes owned by the configuration (the default), PUT and DELETE are 409
// routes_from_config.
func TestLiveRoutesAreCheckedAsAtStart(t *testing.T) {
	g := runGateway(t, hookgate.Config{RoutesFrom: "database"})
	for body, want := range map[string]string{
		`{"match":["stripe:invoice.*"],"target":"ftp://x"}`:                            "key target",
		`{"match":[],"target":"http://127.0.0.1:1/x"}`:                                 "key match",
		`{"match":["stripe:invoice.*"],"target":"http://127.0.0.1:1/x","nope":1}`:      "nope",
		`{"match":["stripe:x"],"target":"http://127.0.0.1:1/x","filter":"payload.(("}`: "key filter",
		`{"match":["stripe:x"],"target":"builtin:nosuch"}`:                             "nosuch",
		`{"name":"other","match":["stripe:x"],"target":"http://127.0.0.1:1/x"}`:        "key name",
		`[1]`: "JSON object",
		// Every key of the wrong kind, unknown or given twice, at once.
		`{"match":"stripe:x","target":"http://127.0.0.1:1/x","concurrency":"8","nope":1,"other":2}`:    "key concurrency: must be a whole number; key match: must be a list of strings; key nope: not a key of a route",
		`{"match":["stripe:x",null],"target":"http://127.0.0.1:1/x"}`:                                  "key match: must be a list of strings",
		`{"match":["stripe:x"],"target":"http://127.0.0.1:1/x","match":["github:x"]}`:                  "key match: given twice",
		`{"match":["stripe:x"],"target":"http://127.0.0.1:1/x","circuit":{"failures":1,"failures":2}}`: "key circuit.failures: given twice",
		`{"match":["stripe"],"target":"http://127.0.0.1:1/x"}`:                                         "provider stripe or *",
	} {
		status, got := g.call(t, "PUT", "/admin/routes/r1", body)
		if status != http.StatusBadRequest || !strings.Contains(got, want) || !strings.Contains(got, `"error":"bad_request"`) {
			t.Errorf("PUT %s = %d %s, want 400 naming %q", body, status, got, want)
		}
	}
	if status, got := g.call(t, "GET", "/admin/routes/r1", ""); status != http.StatusNotFound {
		t.Errorf("a refused route was stored: %d %s", status, got)
	}
	for _, name := range []string{"a%00", "a%C3", "a%FF"} {
		if status, got := g.call(t, "DELETE", "/admin/routes/"+name, ""); status != http.StatusNotFound {
			t.Errorf("DELETE %s = %d %s", name, status, got)
		}
	}

	// Made by many at once, a route is made once and replaced after: one
	// 201, and each audit entry's before is the after of the one before it.
	var made atomic.Int64
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			status, _ := g.call(t, "PUT", "/admin/routes/raced", fmt.Sprintf(`{"match":["stripe:x"],"target":"http://127.0.0.1:1/r%d"}`, i))
			if status == http.StatusCreated {
				made.Add(1)
			}
		}()
	}
	for range 8 {
		<-done
	}
	if made.Load() != 1 {
		t.Errorf("%d PUTs made the route", made.Load())
	}
	var log struct {
		Entries []struct {
			Action        string
			Before, After json.RawMessage
		}
	}
	g.admin(t, "/admin/audit?limit=100", &log)
	var chain []struct{ Before, After string }
	for i := len(log.Entries) - 1; i >= 0; i-- {
		e := log.Entries[i]
		if e.Action == "route_put" {
			chain = append(chain, struct{ Before, After string }{string(e.Before), string(e.After)})
		}
	}
	if len(chain) != 8 || chain[0].Before != "null" {
		t.Fatalf("%d route_put entries: %v", len(chain), chain)
	}
	for i := 1; i < len(chain); i++ {
		if chain[i].Before != chain[i-1].After {
			t.Errorf("entry %d's before %s is not the after before it, %s", i, chain[i].Before, chain[i-1].After)
		}
	}
	_, stored := g.call(t, "GET", "/admin/audit?limit=1", "")
	if !strings.Contains(stored, `"after":`) {
		t.Errorf("the newest entry: %s", stored)
	}

	c := runGateway(t, hookgate.Config{})
	for _, method := range []string{"PUT", "DELETE"} {
		status, got := c.call(t, method, "/admin/routes/r1", `{"match":["stripe:x"],"target":"http://127.0.0.1:1/x"}`)
		if status != http.StatusConflict || !strings.Contains(got, `"error":"routes_from_config"`) {
			t.Errorf("%s with GATEWAY_ROUTES_FROM=config = %d %s", method, status, got)
		}
	}
}

// With GATEWAY_ROUTES_FROM=database, the configured routes seed an empty
// table once; a later start with other configured routes changes nothing.
func TestConfiguredRoutesSeedTheDatabaseOnce(t *testing.T) {
	url := hookgate.Secret(dbtest.URL(t))
	first := runGateway(t, hookgate.Config{DatabaseURL: url, RoutesFrom: "database",
		Routes: []hookgate.Route{{Name: "seeded", Match: []string{"stripe:invoice.*"}, Target: "http://127.0.0.1:1/x"}}})
	if status, body := first.call(t, "GET", "/admin/routes/seeded", ""); status != http.StatusOK {
		t.Fatalf("the seeded route = %d %s", status, body)
	}
	if _, err := first.stop(); err != nil {
		t.Fatal(err)
	}
	again := runGateway(t, hookgate.Config{DatabaseURL: url, RoutesFrom: "database",
		Routes: []hookgate.Route{{Name: "other", Match: []string{"stripe:invoice.*"}, Target: "http://127.0.0.1:1/x"}}})
	var list struct{ Routes []struct{ Name string } }
	again.admin(t, "/admin/routes", &list)
	if len(list.Routes) != 1 || list.Routes[0].Name != "seeded" {
		t.Errorf("after a second start: %+v", list.Routes)
	}
}

// Deleting a route leaves its dispatches already made to finish: a forward
// that failed is retried, and succeeds, after its route was deleted.
func TestADeletedRoutesDispatchesFinish(t *testing.T) {
	var got atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if got.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(target.Close)
	g := runGateway(t, hookgate.Config{RoutesFrom: "database"})
	if status, body := g.call(t, "PUT", "/admin/routes/billing", `{"match":["stripe:invoice.*"],"target":"`+target.URL+`"}`); status != http.StatusCreated {
		t.Fatalf("PUT = %d %s", status, body)
	}
	within5s(t, g, 1)
	dbtest.Eventually(t, 10*time.Second, "the first attempt fails", func() error {
		if got.Load() == 0 {
			return fmt.Errorf("no attempt yet")
		}
		return nil
	})
	if status, body := g.call(t, "DELETE", "/admin/routes/billing", ""); status != http.StatusOK {
		t.Fatalf("DELETE = %d %s", status, body)
	}
	within5s(t, g, 0)
	dbtest.Eventually(t, 30*time.Second, "the deleted route's dispatch is retried", func() error {
		if got.Load() < 2 {
			return fmt.Errorf("%d attempts", got.Load())
		}
		return nil
	})
}

// consoleOf signs in to g's console with the admin token and returns a
// client that keeps its session, and the CSRF token of its forms.
func consoleOf(t *testing.T, g *running) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "http://" + g.gw.Addr()
	page := func(res *http.Response, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	login := page(c.Get(base + "/admin/ui/login"))
	page(c.PostForm(base+"/admin/ui/login", url.Values{"csrf": {csrf.FindStringSubmatch(login)[1]}, "token": {"admin-token"}}))
	routesPage := page(c.Get(base + "/admin/ui/routes"))
	m := csrf.FindStringSubmatch(routesPage)
	if m == nil {
		t.Fatalf("not signed in:\n%s", routesPage)
	}
	return c, m[1]
}

// An admin edits the database's routes in the console: a filter that does
// not compile comes back in the editor, as typed, with its CEL error; a
// good route is saved, in force at once, audited, and can be deleted.
func TestTheConsoleEditsLiveRoutes(t *testing.T) {
	g := runGateway(t, hookgate.Config{RoutesFrom: "database"})
	c, csrf := consoleOf(t, g)
	base := "http://" + g.gw.Addr()
	post := func(path string, form url.Values) (int, string) {
		t.Helper()
		form.Set("csrf", csrf)
		res, err := c.PostForm(base+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	bad := `{"match":["stripe:invoice.*"],"target":"http://127.0.0.1:1/x","filter":"payload.data.object.amount_due >"}`
	status, page := post("/admin/ui/route-editor", url.Values{"name": {"billing"}, "spec": {bad}})
	if status != http.StatusBadRequest || !strings.Contains(page, "key filter") || !strings.Contains(page, html.EscapeString(bad)) {
		t.Fatalf("a filter that does not compile = %d:\n%s", status, page)
	}
	good := `{"match":["stripe:invoice.*"],"target":"http://127.0.0.1:1/x","filter":"payload.data.object.id != \"\""}`
	if status, page := post("/admin/ui/route-editor", url.Values{"name": {"billing"}, "spec": {good}}); status != http.StatusSeeOther {
		t.Fatalf("save = %d:\n%s", status, page)
	}
	if n := routesOf(t, g, "console_1"); n != 1 {
		t.Errorf("the saved route is not in force: %d dispatches", n)
	}
	res, err := c.Get(base + "/admin/ui/route-editor/billing")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "stripe:invoice.*") || !strings.Contains(string(b), "Delete billing") {
		t.Fatalf("the editor of billing = %d:\n%s", res.StatusCode, b)
	}
	if status, page := post("/admin/ui/route-editor/billing/delete", url.Values{}); status != http.StatusSeeOther {
		t.Fatalf("delete = %d:\n%s", status, page)
	}
	if n := routesOf(t, g, "console_2"); n != 0 {
		t.Errorf("the deleted route is in force: %d dispatches", n)
	}
	res, err = c.Get(base + "/admin/ui/audit")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), `<pre class="before">`) || !strings.Contains(string(b), "stripe:invoice.*") {
		t.Errorf("the console's audit log shows no route before and after:\n%s", b)
	}
	var log struct {
		Entries []struct{ Actor, Action string }
	}
	g.admin(t, "/admin/audit", &log)
	if len(log.Entries) < 2 || log.Entries[0].Action != "route_delete" || log.Entries[1].Action != "route_put" {
		t.Errorf("the audit log: %+v", log.Entries)
	}
}

// A target's credential never shows: not in the API's answers, nor in the
// audit log's before and after, which a viewer reads.
func TestALiveRoutesCredentialNeverShows(t *testing.T) {
	g := runGateway(t, hookgate.Config{RoutesFrom: "database"})
	const target = "https://hooks.internal.example/in?token=QLEAK"
	status, body := g.call(t, "PUT", "/admin/routes/secretive", `{"match":["stripe:invoice.*"],"target":"`+target+`"}`)
	if status != http.StatusCreated {
		t.Fatalf("PUT = %d %s", status, body)
	}
	_, deleted := g.call(t, "DELETE", "/admin/routes/secretive", "")
	_, audit := g.call(t, "GET", "/admin/audit", "")
	for what, text := range map[string]string{"PUT's answer": body, "DELETE's answer": deleted, "the audit log": audit} {
		if strings.Contains(text, "QLEAK") {
			t.Errorf("%s shows the credential: %s", what, text)
		}
		if !strings.Contains(text, "hooks.internal.example/in?token=") {
			t.Errorf("%s does not show the target without it: %s", what, text)
		}
	}
}
