package server_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// Only the headers that were verified are kept: a Standard Webhooks delivery
// signed with one header family (webhook-* or Svix's svix-*) and carrying the
// other family too is stored, and shown to filters, with the signed family
// alone.
func TestStandardWebhooksStoresOnlyTheVerifiedFamily(t *testing.T) {
	t.Parallel()
	c := testSources["standard-webhooks"]
	b := setup(t, setupOpts{routes: filterRoutes(t, `
routes:
  - name: both-families
    match: ["src-standard-webhooks:*"]
    filter: '"webhook-timestamp" in headers && "svix-timestamp" in headers'
    target: builtin:log
  - name: all
    match: ["src-standard-webhooks:*"]
    target: builtin:log
`)})
	ts := strconv.FormatInt(now.Unix(), 10)
	for _, tt := range []struct {
		id, signed, stray string // the families' prefixes
	}{
		{"sw-webhook", "webhook-", "svix-"},
		{"sw-svix", "svix-", "webhook-"},
	} {
		body := providers.Kinds[c.Kind].Sample(c, tt.id, "user.created", now)
		sig, err := verify.SignStandard(c.Secrets[0], tt.id, now, body)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/webhooks/"+c.Name, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(tt.signed+"id", tt.id)
		req.Header.Set(tt.signed+"timestamp", ts)
		req.Header.Set(tt.signed+"signature", sig)
		if tt.stray == "svix-" {
			// A stray webhook-id would make webhook-* the family checked.
			req.Header.Set(tt.stray+"id", "spoofed-svix")
		}
		req.Header.Set(tt.stray+"timestamp", ts)
		req.Header.Set(tt.stray+"signature", "v1,c3Bvb2ZlZA==")
		res := b.do(t, req)
		if res.status != http.StatusAccepted || res.body["routes"] != 1.0 {
			t.Fatalf("%s: %d %v, want 202 taken by route all alone", tt.id, res.status, res.body)
		}
		var kept map[string]string
		if err := b.pool.QueryRow(context.Background(), `SELECT headers FROM hookgate_receipts WHERE provider = $1 AND delivery_id = $2`,
			c.Name, tt.id).Scan(&kept); err != nil {
			t.Fatal(err)
		}
		if len(kept) != 2 || kept[tt.signed+"id"] != tt.id || kept[tt.signed+"timestamp"] != ts {
			t.Errorf("%s: stored headers %v, want only %sid and %stimestamp", tt.id, kept, tt.signed, tt.signed)
		}
	}
}
