package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hookgate/hookgate/internal/providers"
)

// FuzzIngest throws random headers and bodies at the whole ingest handler, on
// a real database: it never panics, never answers 5xx while the database is
// up, always answers the contract's JSON, and never stores a receipt for a
// request without a valid signature. Each fuzzed request is sent together
// with valid deliveries, so that they share commits: whatever the fuzzed one
// holds, every valid one is accepted. Whatever its shape, a request costs
// memory in proportion to its bytes (deep arrays, a million tiny values). The
// seeds run in every go test.
func FuzzIngest(f *testing.F) {
	b := setup(f, setupOpts{committers: 1})
	var companions atomic.Int64
	f.Add(uint8(0), "application/json", "push", "d-1", uint8(0), "", []byte(`{"ref":"refs/heads/main","repository":{"id":1,"pushed_at":1}}`))
	f.Add(uint8(0), "application/x-www-form-urlencoded", "ping", "d-2", uint8(0), "", []byte(`payload=%7B%22zen%22%3A1%7D`))
	f.Add(uint8(0), "application/json", "pull_request", "d-3", uint8(1), "sha256=00", []byte(`{"action":"opened"}`))
	f.Add(uint8(0), "text/plain", "push", "d-4", uint8(2), "", []byte(`{}`))
	f.Add(uint8(0), "application/json", "", "", uint8(0), "", []byte(`{}`))
	f.Add(uint8(0), "application/json", "push", "d-5", uint8(0), "", []byte(`[1,2,3]`))
	f.Add(uint8(0), "application/json", "push", "d-6", uint8(0), "", []byte("\xff\xfe{"))
	f.Add(uint8(1), "application/json", "", "", uint8(0), "", []byte(`{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1"}},"created":1}`))
	f.Add(uint8(1), "application/json; charset=utf-8", "", "", uint8(1), "t=1,v1=zz,v0=00", []byte(`{"id":"evt_2","type":"x"}`))
	f.Add(uint8(1), "application/json", "", "", uint8(0), "", []byte(`{"id":5,"type":["x"]}`))
	f.Add(uint8(2), "application/json", "push", "d-7", uint8(0), "", []byte(`{}`))
	f.Add(uint8(0), "application/json", "push", "d-8", uint8(0), "", bytes.Repeat([]byte("a"), maxBody+1))
	f.Add(uint8(0), "application/json; charset=\"\xff\"", "push", "d-9", uint8(0), "", []byte(`{"ref":"refs/heads/main"}`))
	f.Add(uint8(1), "application/json; x=\"\x00\"", "", "", uint8(0), "", []byte(`{"id":"evt_9","type":"invoice.paid"}`))
	f.Add(uint8(0), "application/json", "push\xfe", "d-\xff", uint8(0), "", []byte(`{}`))
	// Shapes that cost a tree parser most: deep arrays, at and past the
	// depth limit, and a million tiny values.
	f.Add(uint8(0), "application/json", "push", "d-deep", uint8(0), "", []byte(`{"a":`+strings.Repeat("[", 299)+strings.Repeat("]", 299)+`}`))
	f.Add(uint8(0), "application/json", "push", "d-deeper", uint8(0), "", []byte(`{"a":`+strings.Repeat("[", 300)+strings.Repeat("]", 300)+`}`))
	f.Add(uint8(0), "application/json", "push", "d-many", uint8(0), "",
		[]byte(`{"ref":"refs/heads/main","repository":{"id":1,"pushed_at":1},"a":[`+strings.Repeat("0,", 3e4)+`0]}`))
	f.Add(uint8(1), "application/json", "", "", uint8(0), "",
		[]byte(`{"id":"evt_m","type":"invoice.paid","data":{"object":{"id":"in_m","lines":[`+strings.Repeat("{},", 2e4)+`{}]}},"created":1}`))

	// Every kind of source too, signed as its sender signs.
	kinds := providers.KindNames()
	for i, k := range kinds {
		c := testSources[k]
		body := providers.Kinds[k].Sample(c, fmt.Sprint("seed-", k), "thing.created", now)
		f.Add(uint8(3+i), "application/json", "thing.created", fmt.Sprint("seed-", k), uint8(0), "", body)
		f.Add(uint8(3+i), "application/json", "thing.created", fmt.Sprint("seed-", k), uint8(1), "v1,AAAA sha256=00 v0=00", body)
	}
	f.Add(uint8(3+slices.Index(kinds, "slack")), "application/json", "", "", uint8(0), "", []byte(`{"type":"url_verification","challenge":"c"}`))

	f.Fuzz(func(t *testing.T, provider uint8, contentType, event, id string, signMode uint8, sig string, body []byte) {
		paths := []string{"/webhooks/github", "/webhooks/stripe", "/webhooks/other"}
		for _, k := range kinds {
			paths = append(paths, "/webhooks/"+testSources[k].Name)
		}
		p := int(provider) % len(paths)
		req := httptest.NewRequest(http.MethodPost, paths[p], bytes.NewReader(body))
		valid := signMode%3 == 0
		switch {
		case valid && p != 2:
			// Signed as the sender signs; what the sender names is fuzzed.
			c := ghSource
			if p == 1 {
				c = stripeSource
			} else if p >= 3 {
				c = testSources[kinds[p-3]]
			}
			req = signedRequest(c, body, id, event, now)
		case signMode%3 == 1:
			for _, name := range []string{"X-Hub-Signature-256", "Stripe-Signature", "Webhook-Signature", "X-Shopify-Hmac-Sha256",
				"X-Slack-Signature", "X-Gitlab-Token", "X-Acme-Signature"} {
				req.Header.Set(name, sig)
			}
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", id)
		const fuzzed = "SELECT count(*) FROM hookgate_receipts WHERE scope <> 'companion'"
		before := b.count(t, fuzzed)
		var memBefore, memAfter runtime.MemStats
		runtime.ReadMemStats(&memBefore)
		rec := httptest.NewRecorder()
		var wg sync.WaitGroup
		wg.Go(func() { b.handler.ServeHTTP(rec, req) })
		for range 3 {
			id := fmt.Sprint("companion-", companions.Add(1))
			wg.Go(func() {
				companion := httptest.NewRecorder()
				b.handler.ServeHTTP(companion, githubRequest(ghReq{id: id, hook: "companion"}))
				if companion.Code != http.StatusAccepted {
					t.Errorf("a valid delivery committed beside the fuzzed one: %d %s", companion.Code, companion.Body)
				}
			})
		}
		wg.Wait()
		runtime.ReadMemStats(&memAfter)
		after := b.count(t, fuzzed)
		// The body is read, hashed and sent to the database: a few copies of
		// its bytes, never a cost per JSON value. The constant covers the
		// companions and the database round trips.
		if alloc := memAfter.TotalAlloc - memBefore.TotalAlloc; alloc > 8*uint64(len(body))+2<<20 {
			t.Errorf("a request of %d bytes allocated %d bytes", len(body), alloc)
		}

		if rec.Code >= 500 {
			t.Fatalf("%d while the database is up: %s", rec.Code, rec.Body)
		}
		var answer map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
			t.Fatalf("answer is not JSON: %q", rec.Body)
		}
		if rec.Code >= 400 && (answer["error"] == nil || answer["message"] == nil) {
			t.Fatalf("error answer without error and message: %s", rec.Body)
		}
		switch {
		case !valid && after != before:
			t.Fatalf("a receipt was stored for a request without a valid signature (%d)", rec.Code)
		case rec.Code == http.StatusAccepted && after != before+1:
			t.Fatalf("202 but %d receipts stored", after-before)
		case rec.Code != http.StatusAccepted && after != before:
			t.Fatalf("%d but a receipt was stored", rec.Code)
		}
	})
}
