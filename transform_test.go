package hookgate_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// A route's transformation shapes what its target gets: the body it makes,
// signed over those bytes, its headers beside hookgate's own (which it
// cannot replace), its path after the target's; skip succeeds without a
// request; one that fails on a delivery fails the attempt, nothing sent,
// and is retried. The stored receipt is never changed. The test endpoint
// answers what would be sent, changing nothing.
func TestATransformationShapesTheForward(t *testing.T) {
	type request struct {
		path string
		head http.Header
		body string
	}
	var mu sync.Mutex
	var got []request
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, request{r.URL.Path, r.Header.Clone(), string(b)})
		mu.Unlock()
	}))
	t.Cleanup(target.Close)
	src := `payload.data.object.id == "in_fail" ? {"body": payload.data.object.missing} : {
	  "body": {"invoice": payload.data.object.id, "event": event},
	  "headers": {"X-Tenant": "acme", "X-Hookgate-Route": "forged", "Idempotency-Key": "forged"},
	  "path": "/invoices/" + payload.data.object.id,
	  "skip": payload.data.object.id == "in_skip"}`
	g := runGateway(t, hookgate.Config{ForwardSecrets: hookgate.SecretList{"fwd-secret"}, MaxAttempts: 2,
		Routes: []hookgate.Route{{Name: "billing", Match: []string{"stripe:invoice.*"}, Target: target.URL + "/hooks", Transform: src}}})

	for _, id := range []string{"t1", "skip", "fail"} {
		if status, body := sendStripe(t, g, invoice(id, "invoice.paid")); status != http.StatusAccepted {
			t.Fatalf("send %s: %d %s", id, status, body)
		}
	}
	state := func(id string) string {
		var show struct {
			Dispatches []struct {
				State     string
				LastError string `json:"last_error"`
			}
		}
		g.admin(t, "/admin/deliveries/stripe/evt_"+id, &show)
		if len(show.Dispatches) == 0 {
			return ""
		}
		return show.Dispatches[0].State + " " + show.Dispatches[0].LastError
	}
	dbtest.Eventually(t, 30*time.Second, "t1 and skip succeed, fail is discarded", func() error {
		a, b, c := state("t1"), state("skip"), state("fail")
		if !strings.HasPrefix(a, "succeeded") || !strings.HasPrefix(b, "succeeded") || !strings.HasPrefix(c, "discarded") {
			return fmt.Errorf("t1 %q, skip %q, fail %q", a, b, c)
		}
		return nil
	})
	if c := state("fail"); !strings.Contains(c, "transformation failed") || !strings.Contains(c, "no such key") {
		t.Errorf("the failed transformation's last error: %q", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("the target got %d requests; want t1's alone (skip sends none, fail's attempts fail before one)", len(got))
	}
	r := got[0]
	if r.path != "/hooks/invoices/in_t1" || r.body != `{"event":"invoice.paid","invoice":"in_t1"}` || r.head.Get("Content-Type") != "application/json" ||
		r.head.Get("X-Tenant") != "acme" || r.head.Get("X-Hookgate-Route") != "billing" || r.head.Get("Idempotency-Key") != "stripe:evt_t1:billing" {
		t.Errorf("the forward: %s %s %v", r.path, r.body, r.head)
	}
	wh, err := standardwebhooks.NewWebhookRaw([]byte("fwd-secret"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify([]byte(r.body), r.head); err != nil {
		t.Errorf("the signature over what was sent: %v", err)
	}

	// The receipt is as it came.
	res, err := http.NewRequest("GET", "http://"+g.gw.Addr()+"/admin/deliveries/stripe/evt_t1/body", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Header.Set("Authorization", "Bearer admin-token")
	stored, err := http.DefaultClient.Do(res)
	if err != nil {
		t.Fatal(err)
	}
	defer stored.Body.Close()
	if b, _ := io.ReadAll(stored.Body); string(b) != invoice("t1", "invoice.paid") {
		t.Errorf("the stored body: %s", b)
	}

	// The test endpoint: a stored delivery, a given one, a text being
	// written that fails, and one that does not compile.
	status, body := g.call(t, "POST", "/admin/routes/billing/transform", `{"provider":"stripe","delivery_id":"evt_t1"}`)
	var tried struct {
		Body    json.RawMessage
		Headers map[string]string
		Path    string
		Skip    bool
	}
	if status != http.StatusOK || json.Unmarshal([]byte(body), &tried) != nil || string(tried.Body) != `{"event":"invoice.paid","invoice":"in_t1"}` ||
		tried.Path != "/invoices/in_t1" || tried.Headers["X-Tenant"] != "acme" || len(tried.Headers) != 1 || tried.Skip {
		t.Errorf("trying a stored delivery: %d %s", status, body)
	}
	status, body = g.call(t, "POST", "/admin/routes/billing/transform", `{"provider":"stripe","event":"invoice.paid","payload":{"data":{"object":{"id":"in_skip"}}}}`)
	if status != http.StatusOK || !strings.Contains(body, `"skip":true`) {
		t.Errorf("trying a given delivery: %d %s", status, body)
	}
	status, body = g.call(t, "POST", "/admin/routes/billing/transform", `{"provider":"stripe","delivery_id":"evt_fail"}`)
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, `"error":"transform_failed"`) || !strings.Contains(body, `"position":null`) {
		t.Errorf("trying a delivery it fails on: %d %s", status, body)
	}
	status, body = g.call(t, "POST", "/admin/routes/billing/transform", `{"provider":"stripe","delivery_id":"evt_t1","transform":"{\n \"body\": nothere}"}`)
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, `"position":{"line":2,"column":10}`) {
		t.Errorf("trying a text that does not compile: %d %s", status, body)
	}
	for _, c := range []struct{ path, body string }{
		{"/admin/routes/nope/transform", `{"provider":"stripe","delivery_id":"evt_t1"}`},
		{"/admin/routes/billing/transform", `{"provider":"stripe","delivery_id":"evt_nope"}`},
	} {
		if status, body := g.call(t, "POST", c.path, c.body); status != http.StatusNotFound {
			t.Errorf("%s %s: %d %s; want 404", c.path, c.body, status, body)
		}
	}
	if status, body := g.call(t, "POST", "/admin/routes/billing/transform", `{"provider":"stripe"}`); status != http.StatusBadRequest {
		t.Errorf("no delivery: %d %s; want 400", status, body)
	}

	// The console's editor shows the route's transformation and what it
	// sends for a stored delivery; a text being written that does not
	// compile comes back with its line and column.
	c, csrf := consoleOf(t, g)
	base := "http://" + g.gw.Addr()
	read := func(res *http.Response, err error) (int, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	status, page := read(c.Get(base + "/admin/ui/transform?route=billing&provider=stripe&delivery_id=evt_t1"))
	if status != http.StatusOK || !strings.Contains(page, "/invoices/in_t1") ||
		!strings.Contains(page, `&#34;invoice&#34;: &#34;in_t1&#34;`) || !strings.Contains(page, "X-Tenant") {
		t.Errorf("the editor on a stored delivery: %d\n%s", status, page)
	}
	status, page = read(c.PostForm(base+"/admin/ui/transform", url.Values{"csrf": {csrf}, "route": {"billing"}, "provider": {"stripe"},
		"delivery_id": {"evt_t1"}, "transform": {"{\"body\": nothere}"}}))
	if status != http.StatusUnprocessableEntity || !strings.Contains(page, "Line 1, column 10") {
		t.Errorf("the editor with a text that does not compile: %d\n%s", status, page)
	}
	status, page = read(c.PostForm(base+"/admin/ui/transform", url.Values{"csrf": {csrf}, "route": {"billing"}, "provider": {"stripe"},
		"delivery_id": {"evt_t1"}, "transform": {`{"skip": true}`}}))
	if status != http.StatusOK || !strings.Contains(page, `id="skipped"`) {
		t.Errorf("the editor with skip: %d\n%s", status, page)
	}
}
