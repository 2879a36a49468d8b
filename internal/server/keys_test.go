package server_test

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/searchkeys"
	"github.com/hookgate/hookgate/internal/server"
)

// withKeys indexes Stripe's customer and invoice and GitHub's repository
// and pull request number.
func withKeys(t *testing.T) func(*server.Config) {
	t.Helper()
	keys, err := searchkeys.New(searchkeys.Paths{
		"stripe": {"customer": "data.object.customer", "invoice": "data.object.invoice"},
		"github": {"repo": "repository.full_name", "pr": "pull_request.number"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return func(c *server.Config) { c.Keys = keys }
}

// invoiceOf ingests a Stripe invoice event of a customer.
func (b *adminBundle) invoiceOf(t *testing.T, id, customer, invoice string) {
	t.Helper()
	b.ingest(t, stripeRequest(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","created":1767323045,"data":{"object":{"id":"in_%s","customer":%q,"invoice":%q}}}`,
		id, id, customer, invoice), now, stripeSecret))
}

// A search key (key=name:value) finds the deliveries whose payload held that
// value at the key's path when they were received: from an index, across
// the whole retention (no window), newest first, paged like the list;
// several keys must all match, and the list's filters and a search (q)
// narrow them.
func TestAdminSearchKeys(t *testing.T) {
	t.Parallel()
	b := setupAdminOn(t, dbtest.NewPool(t), adminToken, withKeys(t))
	b.invoiceOf(t, "evt_a", "cus_123", "in_1")
	b.invoiceOf(t, "evt_b", "cus_999", "in_2")
	b.ingest(t, githubRequest(ghReq{id: "g-1", event: "pull_request",
		body: []byte(`{"action":"opened","number":42,"pull_request":{"id":7,"number":42,"updated_at":"2026-01-01T00:00:00Z"},"repository":{"full_name":"acme/api"}}`)}))
	b.invoiceOf(t, "evt_c", "cus_123", "in_3")
	// A customer that is an object (expanded) is no value of the key.
	b.ingest(t, stripeRequest(`{"id":"evt_d","type":"invoice.paid","created":1767323045,"data":{"object":{"customer":{"id":"cus_123"}}}}`, now, stripeSecret))

	list := func(query string) listed {
		t.Helper()
		var l listed
		b.adminJSON(t, adminReq{path: "/admin/deliveries?" + query}, 200, &l)
		return l
	}
	for query, want := range map[string]string{
		"key=customer:cus_123":                              "evt_c,evt_a",
		"key=customer:cus_999":                              "evt_b",
		"key=customer:cus_nobody":                           "",
		"key=pr:42":                                         "g-1",
		"key=repo:acme/api":                                 "g-1",
		"key=customer:cus_123&key=invoice:in_3":             "evt_c",
		"key=customer:cus_123&key=invoice:in_2":             "",
		"key=customer:cus_123&key=customer:cus_123":         "evt_c,evt_a",
		"key=customer:cus_123&event=customer":               "",
		"key=customer:cus_123&provider=stripe&state=stored": "",
		"key=customer:cus_123&q=" + url.QueryEscape(`payload.data.object.id == "in_evt_a"`): "evt_a",
		// No window: a key spans the whole retention; a window narrows it.
		"key=customer:cus_123&until=2000-01-01T00:00:00Z": "",
	} {
		if got := strings.Join(list(query).ids(), ","); got != want {
			t.Errorf("%s: got %q, want %q", query, got, want)
		}
	}
	// Pages of one.
	page := list("key=customer:cus_123&limit=1")
	seen := page.ids()
	for page.NextCursor != nil {
		page = list("key=customer:cus_123&limit=1&cursor=" + *page.NextCursor)
		seen = append(seen, page.ids()...)
	}
	if got := strings.Join(seen, ","); got != "evt_c,evt_a" {
		t.Errorf("pages of one: %s", got)
	}

	// A key the configuration does not name, or that is no name:value, is
	// 400 naming the keys there are.
	for query, want := range map[string]string{
		"key=customr:cus_123": "customer, invoice, pr, repo",
		"key=cus_123":         "name:value",
		"key=customer:":       "1 to 255 bytes",
		"key=customer:a%00b":  "printable",
		"key=customer:1&key=customer:2&key=customer:3&key=customer:4&key=customer:5&key=customer:6&key=customer:7&key=customer:8&key=customer:9": "at most 8 keys",
	} {
		status, _, body := b.admin(t, adminReq{path: "/admin/deliveries?" + query})
		if status != 400 || !bytes.Contains(body, []byte(`"bad_request"`)) || !bytes.Contains(body, []byte(want)) {
			t.Errorf("%s: %d %s, want 400 naming %q", query, status, body, want)
		}
	}

	// Retention deletes an event's keys with its last receipt (once its
	// dispatches are done).
	ctx := context.Background()
	b.start(t)
	for _, route := range []string{"fwd", "audit"} {
		dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: "evt_a", Route: route, Generation: 1}, "succeeded")
	}
	if _, err := b.pool.Exec(ctx, `UPDATE hookgate_receipts SET expires_at = now() - interval '1 second' WHERE delivery_id = 'evt_a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.DeleteExpired(ctx, b.pool, retention.Policy{Retention: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, _ := b.pool.Query(ctx, `SELECT delivery_id || ' ' || name FROM hookgate_search_keys ORDER BY 1`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		left = append(left, s)
	}
	if rows.Err() != nil || slices.ContainsFunc(left, func(s string) bool { return strings.HasPrefix(s, "evt_a ") }) ||
		!slices.Contains(left, "evt_c customer") || !slices.Contains(left, "g-1 pr") {
		t.Errorf("search keys after evt_a expired: %q, %v", left, rows.Err())
	}
	if got := strings.Join(list("key=customer:cus_123").ids(), ","); got != "evt_c" {
		t.Errorf("after retention: %q", got)
	}

	// The console's deliveries page takes keys too, and replays what they
	// select, counted first.
	console := newBrowser(t, b.handler)
	console.signIn(adminToken)
	res, html := console.do("GET", "/admin/ui/deliveries?key=customer:cus_123", nil)
	link := regexp.MustCompile(`id="bulk-replay" href="([^"]+)"`).FindStringSubmatch(html)
	if res.StatusCode != 200 || !strings.Contains(html, "evt_c") || strings.Contains(html, "evt_b") || !strings.Contains(html, `id="key"`) ||
		!strings.Contains(html, `value="customer:cus_123"`) || link == nil {
		t.Fatalf("the console's key filter: %d\n%s", res.StatusCode, html)
	}
	res, html = console.do("GET", strings.ReplaceAll(link[1], "&amp;", "&"), nil)
	if res.StatusCode != 200 || !strings.Contains(html, `<strong id="matched">1</strong>`) || !strings.Contains(html, "key customer:cus_123") {
		t.Fatalf("the replay of a key, confirmed first (evt_c is left): %d\n%s", res.StatusCode, html)
	}
	res, html = console.do("GET", "/admin/ui/replay?q="+url.QueryEscape(`payload.data.object.invoice == "in_3"`)+"&since=1h", nil)
	if res.StatusCode != 200 || !strings.Contains(html, "The search is evaluated on") || !strings.Contains(html, "Replay what the search finds") {
		t.Fatalf("the replay of a search, confirmed first: %d\n%s", res.StatusCode, html)
	}

	// Without search keys configured, a key names what to configure.
	plain := setupAdmin(t, adminToken)
	status, _, body := plain.admin(t, adminReq{path: "/admin/deliveries?key=customer:cus_1"})
	if status != 400 || !bytes.Contains(body, []byte("search_keys")) {
		t.Errorf("a key without search keys: %d %s", status, body)
	}
}

// Bulk replay takes a search (q) and keys: it replays what they select,
// and with q tells how many deliveries the expression is evaluated on.
func TestBulkReplayBySearch(t *testing.T) {
	t.Parallel()
	b := setupAdminOn(t, dbtest.NewPool(t), adminToken, withKeys(t))
	b.start(t)
	b.invoiceOf(t, "evt_a", "cus_123", "in_1")
	b.invoiceOf(t, "evt_b", "cus_999", "in_2")
	b.invoiceOf(t, "evt_c", "cus_123", "in_3")
	for _, id := range []string{"evt_a", "evt_b", "evt_c"} {
		dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: id, Route: "fwd", Generation: 1}, "succeeded")
	}
	var res struct {
		ReplayID   string `json:"replay_id"`
		Deliveries int    `json:"deliveries"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/replays", body: `{"key":"customer:cus_123","force":true}`}, 202, &res)
	if res.Deliveries != 2 {
		t.Fatalf("replay by key = %+v, want 2 deliveries", res)
	}
	for _, id := range []string{"evt_a", "evt_c"} {
		dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: id, Route: "fwd", Generation: 2}, "succeeded")
	}
	// A search: its window's three deliveries are looked at, one replayed.
	window := fmt.Sprintf(`"since":%q,"until":%q`, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/replays",
		body: `{"q":"payload.data.object.customer == \"cus_999\"","provider":"stripe","force":true,` + window + `}`}, 202, &res)
	if res.Deliveries != 3 {
		t.Fatalf("replay by q = %+v, want the window's 3 deliveries to evaluate", res)
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: "evt_b", Route: "fwd", Generation: 2}, "succeeded")
	var one struct {
		State      string `json:"state"`
		Done       int    `json:"done"`
		Dispatches int    `json:"dispatches"`
	}
	dbtest.Eventually(t, 10*time.Second, "the search replay is done", func() error {
		b.adminJSON(t, adminReq{path: "/admin/replays/" + res.ReplayID}, 200, &one)
		if one.State != "done" || one.Done != 3 {
			return fmt.Errorf("%+v", one)
		}
		return nil
	})
	// evt_b's fwd and audit routes, nothing of evt_a's or evt_c's third generation.
	var third int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM hookgate_dispatches WHERE generation = 3`).Scan(&third); err != nil || third != 0 {
		t.Fatalf("a third generation: %d, %v", third, err)
	}
	for body, want := range map[string]string{
		`{"q":""}`:                 "q is empty",
		`{"q":"payload.x =="}`:     "line 1, column",
		`{"key":"customr:1"}`:      "not a configured search key",
		`{"key":["customer:1",2]}`: "name:value",
		`{"key":7}`:                "name:value",
	} {
		status, _, got := b.admin(t, adminReq{method: "POST", path: "/admin/replays", body: body})
		if status != 400 || !bytes.Contains(got, []byte(want)) || bytes.Count(got, []byte("bad request")) > 1 {
			t.Errorf("%s: %d %s, want 400 naming %q", body, status, got, want)
		}
	}
}

// A bulk retry (POST /admin/retries) attempts now the retrying dispatches
// of every delivery its filter, search or keys select, and says how many
// deliveries and dispatches; the others keep waiting.
func TestBulkRetry(t *testing.T) {
	t.Parallel()
	b := setupAdminAttempts(t, dbtest.NewPool(t), adminToken, 5, withKeys(t))
	b.answer.Store(503)
	b.retryAfter.Store(3600)
	b.ingest(t, githubRequest(ghReq{id: "g-1", body: []byte(`{"ref":"refs/heads/a","repository":{"id":1,"full_name":"acme/api","pushed_at":1767323045}}`)}))
	b.ingest(t, githubRequest(ghReq{id: "g-2", body: []byte(`{"ref":"refs/heads/b","repository":{"id":2,"full_name":"acme/web","pushed_at":1767323045}}`)}))
	b.ingest(t, githubRequest(ghReq{id: "g-3", body: []byte(`{"ref":"refs/heads/c","repository":{"id":3,"full_name":"acme/api","pushed_at":1767323045}}`)}))
	b.start(t)
	for _, id := range []string{"g-1", "g-2", "g-3"} {
		b.waitRetryingAnHour(t, id, "fwd", 1)
	}
	b.answer.Store(0)
	var res struct {
		Deliveries int     `json:"deliveries"`
		Retried    int     `json:"retried"`
		Partial    *bool   `json:"partial"`
		NextCursor *string `json:"next_cursor"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/retries", body: `{"key":"repo:acme/api","reason":"api is back"}`}, 202, &res)
	if res.Deliveries != 2 || res.Retried != 2 || res.Partial != nil {
		t.Fatalf("retry by key = %+v, want 2 deliveries, 2 dispatches", res)
	}
	for _, id := range []string{"g-1", "g-3"} {
		dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: id, Route: "fwd", Generation: 1}, "succeeded")
	}
	if j := b.job(t, "g-2", "fwd"); j.RowState != "retrying" || j.InSeconds < 3000 {
		t.Fatalf("g-2 was not selected and keeps waiting: %+v", j)
	}
	if got := b.auditActions(t); len(got) == 0 || got[0] != "retry api is back" {
		t.Fatalf("audit = %q", got)
	}
	// The console retries a search's, counted first.
	console := newBrowser(t, b.handler)
	console.signIn(adminToken)
	// The server's clock is fixed in these tests, the database's not: the
	// window is the database's.
	search := "q=" + url.QueryEscape(`payload.ref.endsWith("/b")`) + "&since=" + url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)) +
		"&until=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	page, html := console.do("GET", "/admin/ui/retry?"+search, nil)
	if page.StatusCode != 200 || !strings.Contains(html, `<strong id="matched">1</strong>`) {
		t.Fatalf("the console's retry, confirmed first: %d\n%s", page.StatusCode, html)
	}
	form := url.Values{"csrf": {csrfOf(t, html)}, "reason": {"web is back"}}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="(q|since|until)" value="([^"]*)">`).FindAllStringSubmatch(html, -1) {
		form.Set(m[1], htmlText(m[2]))
	}
	page, html = console.do("POST", "/admin/ui/retry", form)
	if page.StatusCode != 200 || !strings.Contains(html, `id="retried"`) || !strings.Contains(html, "<strong>1 delivery</strong>") ||
		!strings.Contains(html, "<strong>1 dispatch</strong>") {
		t.Fatalf("the console's retry: %d\n%s", page.StatusCode, html)
	}
	back := regexp.MustCompile(`href="([^"]+)" id="back"`).FindStringSubmatch(html)
	if back == nil {
		t.Fatalf("no way back: %s", html)
	}
	if u, err := url.Parse(htmlText(back[1])); err != nil || u.Path != "/admin/ui/deliveries" || u.Query().Get("q") != `payload.ref.endsWith("/b")` {
		t.Errorf("the way back keeps the filter: %s", back[1])
	}
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "g-2", Route: "fwd", Generation: 1}, "succeeded")
	// Nothing left retrying: nothing retried.
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/retries", body: `{}`}, 202, &res)
	if res.Deliveries != 0 || res.Retried != 0 {
		t.Fatalf("retry with nothing retrying = %+v", res)
	}
	status, _, body := b.admin(t, adminReq{method: "POST", path: "/admin/retries", body: `{"state":"discarded"}`})
	if status != 400 || !bytes.Contains(body, []byte("state is retrying")) {
		t.Fatalf("a retry of discarded deliveries: %d %s", status, body)
	}
}

// htmlText is an attribute's value as the browser reads it.
func htmlText(s string) string { return html.UnescapeString(s) }
