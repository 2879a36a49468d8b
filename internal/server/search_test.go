package server_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/server"
)

// searched is a search's answer: a list page and whether it stopped at its
// time budget.
type searched struct {
	listed
	Partial *bool `json:"partial"`
	Failed  *int  `json:"failed"`
}

// A search (q) is a CEL expression over provider, event, headers and payload,
// evaluated on each delivery of its window: it finds deliveries by what they
// carry, newest first, and pages like the list.
func TestAdminSearchDeliveries(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	invoice := func(id, customer string) {
		b.ingest(t, stripeRequest(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","created":1767323045,"data":{"object":{"id":"in_%s","customer":%q}}}`,
			id, id, customer), now, stripeSecret))
	}
	invoice("evt_a", "cus_123")
	invoice("evt_b", "cus_999")
	b.ingest(t, githubRequest(ghReq{id: "g-1", event: "pull_request",
		body: []byte(`{"action":"opened","number":42,"pull_request":{"id":7,"updated_at":"2026-01-01T00:00:00Z"},"repository":{"full_name":"acme/api"}}`)}))
	invoice("evt_c", "cus_123")
	b.ingest(t, stripeEvent("evt_d", "customer.created"))

	// The receipts are stamped with the database's clock; the server's is
	// fixed in these tests, so every search names its window.
	window := "&since=" + url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)) +
		"&until=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	search := func(q, more string) searched {
		t.Helper()
		var s searched
		b.adminJSON(t, adminReq{path: "/admin/deliveries?q=" + url.QueryEscape(q) + window + more}, 200, &s)
		return s
	}
	for q, want := range map[string]string{
		`payload.data.object.customer == "cus_123"`:                                            "evt_c,evt_a",
		`has(payload.data.object.customer) && payload.data.object.customer.startsWith("cus_")`: "evt_c,evt_b,evt_a",
		`provider == "github" && payload.number == 42`:                                         "g-1",
		`headers["x-github-event"] == "pull_request"`:                                          "g-1",
		`event == "customer.created"`:                                                          "evt_d",
		`payload.repository.full_name == "acme/api" && event == "push"`:                        "",
	} {
		s := search(q, "")
		if got := strings.Join(s.ids(), ","); got != want {
			t.Errorf("q=%s: got %q, want %q", q, got, want)
		}
		if s.Partial == nil || *s.Partial || s.NextCursor != nil {
			t.Errorf("q=%s: partial %v, next %v: a search that looked at every delivery", q, s.Partial, s.NextCursor)
		}
	}
	// A delivery the expression fails on is no match, and counted: the
	// pull request and customer.created have no data.object.customer.
	if s := search(`payload.data.object.customer == "cus_123"`, ""); s.Failed == nil || *s.Failed != 2 {
		t.Errorf("failed = %v, want 2 (g-1 and evt_d lack the field)", s.Failed)
	}
	if s := search(`provider == "stripe"`, ""); s.Failed == nil || *s.Failed != 0 {
		t.Errorf("failed = %v for an expression that fails on nothing", s.Failed)
	}

	// The list's other filters narrow a search.
	if got := strings.Join(search(`payload.data.object.customer == "cus_123"`, "&provider=github").ids(), ","); got != "" {
		t.Errorf("q and provider=github: %q", got)
	}

	// Pages of one continue the search where the last one stopped.
	var seen []string
	page := search(`provider == "stripe"`, "&limit=1")
	seen = append(seen, page.ids()...)
	for page.NextCursor != nil {
		page = search(`provider == "stripe"`, "&limit=1&cursor="+*page.NextCursor)
		seen = append(seen, page.ids()...)
	}
	if got := strings.Join(seen, ","); got != "evt_d,evt_c,evt_b,evt_a" {
		t.Errorf("pages of one: %s", got)
	}

	// Mistakes are 400, naming what is wrong.
	for q, want := range map[string]string{
		`payload.data.object.customer ==`:               "line 1, column",
		"provider == \"github\" &&\n  payload.number >": "line 2, column",
		`payload.data`: "not bool",
		`nope == 1`:    "undeclared reference",
	} {
		status, _, body := b.admin(t, adminReq{path: "/admin/deliveries?q=" + url.QueryEscape(q) + window})
		if status != 400 || !bytes.Contains(body, []byte(`"bad_request"`)) || !bytes.Contains(body, []byte(want)) {
			t.Errorf("q=%q: %d %s, want 400 naming %q", q, status, body, want)
		}
	}
	status, _, body := b.admin(t, adminReq{path: "/admin/deliveries?q=true&since=2026-01-01T00:00:00Z&until=2026-02-15T00:00:00Z"})
	if status != 400 || !bytes.Contains(body, []byte("31 days")) {
		t.Errorf("a 45-day window: %d %s", status, body)
	}

	// The console's deliveries page searches too, its mistakes shown on
	// the page; a search offers its bulk replay.
	console := newBrowser(t, b.handler)
	console.signIn(adminToken)
	res, html := console.do("GET", "/admin/ui/deliveries?q="+url.QueryEscape(`payload.data.object.customer == "cus_123"`)+window, nil)
	if res.StatusCode != 200 || !strings.Contains(html, "evt_c") || !strings.Contains(html, "evt_a") || strings.Contains(html, "evt_b") ||
		!strings.Contains(html, `id="search"`) || !strings.Contains(html, `id="bulk-replay"`) || !strings.Contains(html, `id="search-failed"`) {
		t.Errorf("the console's search: %d\n%s", res.StatusCode, html)
	}
	res, html = console.do("GET", "/admin/ui/deliveries?q="+url.QueryEscape(`payload.data.object.customer ==`)+window, nil)
	if res.StatusCode != 400 || !strings.Contains(html, "line 1, column") || !strings.Contains(html, `id="search"`) {
		t.Errorf("the console's search with a mistake: %d\n%s", res.StatusCode, html)
	}
	res, html = console.do("GET", "/admin/ui/deliveries?q=&provider=stripe", nil)
	if res.StatusCode != 200 || !strings.Contains(html, "evt_d") || !strings.Contains(html, `id="bulk-replay"`) {
		t.Errorf("the console's list with an empty search box: %d\n%s", res.StatusCode, html)
	}
}

// A search that reaches its time budget answers what it found, partial,
// with a cursor that continues where it stopped; followed to the end, the
// cursors find every match once.
func TestAdminSearchStopsAtItsBudgetAndContinues(t *testing.T) {
	t.Parallel()
	b := setupAdminOn(t, dbtest.NewPool(t), adminToken, func(c *server.Config) { c.Admin.SearchBudget = time.Nanosecond })
	for i := range 7 {
		customer := "cus_other"
		if i%2 == 0 {
			customer = "cus_123"
		}
		b.ingest(t, stripeRequest(fmt.Sprintf(`{"id":"evt_%d","type":"invoice.paid","created":1767323045,"data":{"object":{"customer":%q}}}`,
			i, customer), now, stripeSecret))
	}
	window := "&since=" + url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)) +
		"&until=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	q := "/admin/deliveries?q=" + url.QueryEscape(`payload.data.object.customer == "cus_123"`) + window
	var found []string
	partials := 0
	var page searched
	b.adminJSON(t, adminReq{path: q}, 200, &page)
	for calls := 1; ; calls++ {
		found = append(found, page.ids()...)
		if page.Partial == nil {
			t.Fatal("a search's answer without partial")
		}
		if *page.Partial {
			partials++
			if page.NextCursor == nil {
				t.Fatal("a partial answer without a cursor to continue")
			}
		}
		if page.NextCursor == nil {
			break
		}
		if calls > 20 {
			t.Fatalf("the search did not end after %d calls: found %v", calls, found)
		}
		cursor := *page.NextCursor
		page = searched{}
		b.adminJSON(t, adminReq{path: q + "&cursor=" + cursor}, 200, &page)
	}
	if got := strings.Join(found, ","); got != "evt_6,evt_4,evt_2,evt_0" {
		t.Fatalf("found %s", got)
	}
	if partials < 6 {
		t.Fatalf("%d partial answers for 7 deliveries with a budget of 1 ns: each should look at one", partials)
	}
}

// A search's cursor keeps its window: a window given as a duration ago (or
// by default) is not recomputed on the next call, which would lose what lay
// at its old end. A cursor is not trusted: a window it carries is checked
// again.
func TestAdminSearchCursorKeepsItsWindow(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().Add(time.Minute).UnixNano())
	at := func() time.Time { return time.Unix(0, clock.Load()) }
	b := setupAdminOn(t, dbtest.NewPool(t), adminToken, func(c *server.Config) { c.Now = at })
	for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
		b.ingest(t, stripeRequest(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","created":1767323045,"data":{"object":{"customer":"cus_1"}}}`, id), at(), stripeSecret))
	}
	q := "/admin/deliveries?q=" + url.QueryEscape(`payload.data.object.customer == "cus_1"`) + "&since=120s&limit=1"
	var page searched
	b.adminJSON(t, adminReq{path: q}, 200, &page)
	found := page.ids()
	clock.Add(int64(2 * time.Hour)) // "120s ago" is now past every delivery
	for page.NextCursor != nil {
		cursor := *page.NextCursor
		page = searched{}
		b.adminJSON(t, adminReq{path: q + "&cursor=" + cursor}, 200, &page)
		found = append(found, page.ids()...)
	}
	if got := strings.Join(found, ","); got != "evt_3,evt_2,evt_1" {
		t.Fatalf("followed with the clock moved on: %s, want evt_3,evt_2,evt_1", got)
	}

	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"t":"2021-01-01T00:00:00Z","p":"stripe","d":"evt_1","s":"2020-01-01T00:00:00Z","u":"2021-01-01T00:00:00Z"}`))
	status, _, body := b.admin(t, adminReq{path: q + "&cursor=" + forged})
	if status != 400 || !bytes.Contains(body, []byte("31 days")) {
		t.Fatalf("a cursor carrying a year's window: %d %s", status, body)
	}
	for _, bad := range []string{"q=", "q=%20", "q=true&q=false"} {
		status, _, body := b.admin(t, adminReq{path: "/admin/deliveries?" + bad})
		if status != 400 || !bytes.Contains(body, []byte(`"bad_request"`)) {
			t.Errorf("%s: %d %s", bad, status, body)
		}
	}
	deep := strings.Repeat("(", 300) + "true" + strings.Repeat(")", 300)
	status, _, body = b.admin(t, adminReq{path: "/admin/deliveries?q=" + url.QueryEscape(deep)})
	if status != 400 || bytes.Contains(body, []byte("-1:0")) || !bytes.Contains(body, []byte("as a whole")) {
		t.Errorf("a q nested past CEL's limit: %d %s", status, body)
	}
}
