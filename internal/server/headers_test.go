package server_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/hookgate/hookgate/internal/providers"
)

// Only the headers that were verified are kept: a Standard Webhooks delivery
// signed with one header family (webhook-* or Svix's svix-*) and carrying the
// other family too is stored, and shown to filters, with the signed family
// alone.
func TestStandardWebhooksStoresOnlyTheVerifiedFamily(t *testing.T) {
	t.Parallel()
	c := testSources["standard-webhooks"]
	b := setup(t, setupOpts{routes: routesWithFilters(t, "both-families=src-standard-webhooks:*>builtin:log all=src-standard-webhooks:*>builtin:log",
		map[string]string{"both-families": `"webhook-timestamp" in headers && "svix-timestamp" in headers`})})
	ts := strconv.FormatInt(now.Unix(), 10)
	for _, tt := range []struct {
		id, signed, stray string // the families' prefixes
	}{
		{"sw-webhook", "webhook-", "svix-"},
		{"sw-svix", "svix-", "webhook-"},
	} {
		// Signed as the sender signs (webhook-*), then moved to the
		// family the test signs with.
		req := signedRequest(c, providers.Kinds[c.Kind].Sample(c, tt.id, "user.created", now), tt.id, "user.created", now)
		for _, name := range []string{"id", "timestamp", "signature"} {
			v := req.Header.Get("webhook-" + name)
			req.Header.Del("webhook-" + name)
			req.Header.Set(tt.signed+name, v)
		}
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
