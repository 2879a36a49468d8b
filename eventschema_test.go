package hookgate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/hookgatetest"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// invoiceSchema wants an invoice event's object to name its customer.
const invoiceSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["data"],
  "properties": {"data": {"type": "object", "required": ["object"],
    "properties": {"object": {"type": "object", "required": ["customer"],
      "properties": {"customer": {"type": "string", "pattern": "^cus_"}}}}}}
}`

// sendStripe sends a signed Stripe event to g and returns the answer's
// status and body.
func sendStripe(t *testing.T, g *running, body string) (int, string) {
	t.Helper()
	req, err := hookgatetest.StripeRequest(context.Background(), "http://"+g.gw.Addr()+"/webhooks/stripe", stripeSecret, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// A delivery whose payload fails its event's schema is stored and
// acknowledged as usual, but dispatched to no route: its state is invalid,
// its show says which schema, where and why, and a metric counts it. A
// forced replay checks it again: while it still fails it creates nothing
// and says why; once the schema is fixed it dispatches it, and the
// delivery is invalid no more.
func TestAnInvalidDeliveryIsStoredAndDispatchedOnceItsSchemaIsFixed(t *testing.T) {
	var got atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	t.Cleanup(target.Close)
	schema := filepath.Join(t.TempDir(), "invoice.json")
	if err := os.WriteFile(schema, []byte(invoiceSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	url := hookgate.Secret(dbtest.URL(t))
	cfg := hookgate.Config{DatabaseURL: url, Schemas: map[string]string{"stripe:invoice.*": schema},
		Routes: []hookgate.Route{{Name: "billing", Match: []string{"stripe:invoice.*"}, Target: target.URL}}}
	a := runGateway(t, cfg)

	status, body := sendStripe(t, a, `{"id":"evt_bad","type":"invoice.paid","created":1767225600,"data":{"object":{"id":"in_1","customer":"acct_9"}}}`)
	if status != http.StatusAccepted || !strings.Contains(body, `"status":"accepted"`) || !strings.Contains(body, `"routes":0`) {
		t.Fatalf("an invalid delivery: %d %s; want 202 accepted, routes 0", status, body)
	}
	if status, body := sendStripe(t, a, `{"id":"evt_good","type":"invoice.paid","created":1767225600,"data":{"object":{"id":"in_2","customer":"cus_1"}}}`); status != http.StatusAccepted || !strings.Contains(body, `"routes":1`) {
		t.Fatalf("a valid delivery: %d %s; want routes 1", status, body)
	}
	// Events no schema names are not checked.
	if status, body := sendStripe(t, a, `{"id":"evt_other","type":"customer.created","created":1767225600,"data":{"object":{}}}`); status != http.StatusAccepted || !strings.Contains(body, `"routes":0`) {
		t.Fatalf("an event without a schema: %d %s", status, body)
	}

	var show struct {
		Dispatches  []json.RawMessage
		SchemaError *struct{ Schema, Path, Rule, Message string } `json:"schema_error"`
	}
	a.admin(t, "/admin/deliveries/stripe/evt_bad", &show)
	if e := show.SchemaError; e == nil || e.Schema != "stripe:invoice.*" || e.Path != "/data/object/customer" || e.Rule != "pattern" || len(show.Dispatches) != 0 {
		t.Fatalf("its show: %+v, %d dispatches; want the pattern of /data/object/customer, none", e, len(show.Dispatches))
	}
	a.admin(t, "/admin/deliveries/stripe/evt_good", &show)
	if show.SchemaError != nil {
		t.Errorf("a valid delivery's schema_error: %+v; want null", show.SchemaError)
	}
	var list struct {
		Deliveries []struct {
			DeliveryID string `json:"delivery_id"`
			State      string
		}
	}
	a.admin(t, "/admin/deliveries?state=invalid", &list)
	if len(list.Deliveries) != 1 || list.Deliveries[0].DeliveryID != "evt_bad" || list.Deliveries[0].State != "invalid" {
		t.Fatalf("state=invalid: %+v; want evt_bad alone", list.Deliveries)
	}
	a.admin(t, "/admin/deliveries?state=stored", &list)
	if len(list.Deliveries) != 1 || list.Deliveries[0].DeliveryID != "evt_other" {
		t.Errorf("state=stored: %+v; want evt_other alone (an invalid delivery is not stored)", list.Deliveries)
	}
	if m := metricsOf(t, a); !strings.Contains(m, `hookgate_deliveries_invalid_total{provider="stripe"} 1`) {
		t.Errorf("the metric hookgate_deliveries_invalid_total{provider=\"stripe\"} is not 1")
	}

	// Still invalid: a forced replay creates nothing, and says why.
	status, body = a.call(t, "POST", "/admin/deliveries/stripe/evt_bad/replay", `{"force":true}`)
	if status != http.StatusAccepted || !strings.Contains(body, `"dispatches":[]`) || !strings.Contains(body, "fails its schema stripe:invoice.*") {
		t.Fatalf("a forced replay while invalid: %d %s", status, body)
	}

	// The schema fixed (any account id will do), and the gateway restarted
	// on it: a forced replay dispatches the delivery.
	if _, err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(schema, []byte(strings.Replace(invoiceSchema, `"^cus_"`, `"^(cus|acct)_"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	b := runGateway(t, cfg)
	status, body = b.call(t, "POST", "/admin/deliveries/stripe/evt_bad/replay", `{"force":true}`)
	if status != http.StatusAccepted || !strings.Contains(body, `"route":"billing"`) {
		t.Fatalf("a forced replay once fixed: %d %s", status, body)
	}
	b.admin(t, "/admin/deliveries/stripe/evt_bad", &show)
	if show.SchemaError != nil || len(show.Dispatches) != 1 {
		t.Errorf("once replayed: schema_error %+v, %d dispatches; want null, one", show.SchemaError, len(show.Dispatches))
	}
	b.admin(t, "/admin/deliveries?state=invalid", &list)
	if len(list.Deliveries) != 0 {
		t.Errorf("state=invalid once replayed: %+v; want none", list.Deliveries)
	}
	dbtest.Eventually(t, 10*time.Second, "the target gets both deliveries", func() error {
		if n := got.Load(); n < 2 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
}

// A schema file that does not compile, or is not there, stops the gateway
// at start, naming the pattern, the file and the error.
func TestABadSchemaFileStopsTheGatewayAtStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"type": "objekt"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(dir, "notjson.json")
	if err := os.WriteFile(notJSON, []byte(`{"type": `), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := hookgate.New(hookgate.Config{DatabaseURL: "postgres://unused", Schemas: map[string]string{
		"stripe:invoice.*": bad, "stripe:customer.*": notJSON, "github:push": filepath.Join(dir, "missing.json"),
		"nobody:push": bad,
	}, StripeSecrets: hookgate.SecretList{stripeSecret}})
	if err == nil {
		t.Fatal("New took schemas that cannot be used")
	}
	for _, want := range []string{`"stripe:invoice.*": ` + bad, `"stripe:customer.*": ` + notJSON, `"github:push": ` + filepath.Join(dir, "missing.json") + ": no such file", `"nobody:push"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
