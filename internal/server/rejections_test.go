package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/proxies"
	"github.com/hookgate/hookgate/internal/rejections"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/verify"
)

// serve answers req with the bundle's handler.
func (b *adminBundle) serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return rec
}

// A rejected request is recorded whatever bytes its URL and headers hold:
// neither POST /webhooks/%FF (provider "\xff") nor a GitHub delivery id holding
// \xff keeps itself, or any rejection written with it, out of the log.
func TestRejectionsOfRequestsHoldingInvalidUTF8(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)

	unknown := httptest.NewRequest(http.MethodPost, "/webhooks/%FF", strings.NewReader("{}"))
	if rec := b.serve(unknown); rec.Code != http.StatusNotFound {
		t.Fatalf("POST /webhooks/%%FF = %d %s", rec.Code, rec.Body)
	}
	github := githubRequest(ghReq{id: "d-\xff", event: "push", body: []byte(`{"ref":"refs/heads/main","repository":{"id":5678}}`)})
	refused := b.serve(github)
	if refused.Code < 400 || refused.Code >= 500 {
		t.Fatalf("GitHub delivery id holding 0xFF = %d %s, want a 4xx", refused.Code, refused.Body)
	}

	if err := b.recorder.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/admin/rejections", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	rec := b.serve(req)
	var res struct {
		Rejections []rejections.Rejection `json:"rejections"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &res) != nil {
		t.Fatalf("GET /admin/rejections = %d %s", rec.Code, rec.Body)
	}
	if len(res.Rejections) != 2 {
		t.Fatalf("rejections = %+v, want both", res.Rejections)
	}
	newest, first := res.Rejections[0], res.Rejections[1]
	if first.Provider != "\uFFFD" || first.Reason != "provider_not_configured" {
		t.Errorf("the /webhooks/%%FF rejection = %+v", first)
	}
	if newest.Provider != "github" || newest.Status != refused.Code ||
		!strings.Contains(strings.Join(newest.HeaderNames, ","), "X-Github-Delivery") {
		t.Errorf("the GitHub rejection = %+v", newest)
	}
}

// Behind a trusted proxy, the rejections log names the client that
// X-Forwarded-For names; anyone else's X-Forwarded-For is ignored.
func TestRejectionsNameTheClientBehindATrustedProxy(t *testing.T) {
	t.Parallel()
	b := setupAdminOn(t, dbtest.NewPool(t), adminToken, func(c *server.Config) {
		var err error
		if c.TrustedProxies, err = proxies.Parse("10.0.0.0/8"); err != nil {
			t.Fatal(err)
		}
	})
	forged := func(peer, xff string) {
		req := githubRequest(ghReq{id: "xff-" + peer, signature: ptr("sha256=" + strings.Repeat("0", 64))})
		req.RemoteAddr = peer + ":41000"
		req.Header.Set("X-Forwarded-For", xff)
		if rec := b.serve(req); rec.Code != http.StatusUnauthorized {
			t.Fatalf("a bad signature from %s = %d", peer, rec.Code)
		}
	}
	forged("10.0.0.5", "203.0.113.7")     // through the proxy
	forged("198.51.100.9", "203.0.113.8") // straight, claiming another address
	if err := b.recorder.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/admin/rejections", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	rec := b.serve(req)
	var res struct {
		Rejections []rejections.Rejection `json:"rejections"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &res) != nil || len(res.Rejections) != 2 {
		t.Fatalf("GET /admin/rejections = %d %s", rec.Code, rec.Body)
	}
	if got := res.Rejections[1].RemoteAddr; got != "203.0.113.7" {
		t.Errorf("through the trusted proxy: remote address %q, want 203.0.113.7", got)
	}
	if got := res.Rejections[0].RemoteAddr; !strings.HasPrefix(got, "198.51.100.9:") {
		t.Errorf("straight from an untrusted peer: remote address %q, want the connection's", got)
	}
}

// A rejected ingest request is logged at WARN as "ingest rejected" with its
// provider, reason, remote address and count: the first of a (provider,
// reason) at once, with count 1; those after it within 10 s are counted, not
// logged one by one (ratelog's tests show the count's line). A name that is
// no provider's is logged as unknown, as the metrics name it.
func TestRejectedRequestsAreLoggedOncePerKind(t *testing.T) {
	t.Parallel()
	var log dbtest.Buffer
	h := server.New(server.Config{
		Logger:       slog.New(slog.NewJSONHandler(&log, nil)),
		Providers:    mustRegistry(t, providers.GitHub{Secrets: verify.Secrets{ghSecret}}),
		MaxBodyBytes: 1 << 10,
	})
	send := func(req *http.Request, want int) {
		t.Helper()
		req.RemoteAddr = "192.0.2.7:41000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Fatalf("%s: %d %s, want %d", req.URL, rec.Code, rec.Body, want)
		}
	}
	for i := range 5 {
		send(githubRequest(ghReq{id: fmt.Sprint("bad-", i), signature: ptr("sha256=" + strings.Repeat("0", 64))}), http.StatusUnauthorized)
	}
	send(httptest.NewRequest(http.MethodPost, "/webhooks/nosuch", strings.NewReader("{}")), http.StatusNotFound)
	send(httptest.NewRequest(http.MethodPost, "/webhooks/other", strings.NewReader("{}")), http.StatusNotFound)
	send(githubRequest(ghReq{id: "big", body: []byte(`{"pad":"` + strings.Repeat("x", 2<<10) + `"}`)}), http.StatusRequestEntityTooLarge)

	type line struct {
		Level, Msg, Provider, Reason string
		RemoteAddr                   string `json:"remote_addr"`
		Count                        int
	}
	var got []line
	for l := range strings.Lines(log.String()) {
		var ln line
		if err := json.Unmarshal([]byte(l), &ln); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		got = append(got, ln)
	}
	want := []line{
		{"WARN", "ingest rejected", "github", "invalid_signature", "192.0.2.7:41000", 1},
		{"WARN", "ingest rejected", "unknown", "provider_not_configured", "192.0.2.7:41000", 1},
		{"WARN", "ingest rejected", "github", "body_too_large", "192.0.2.7:41000", 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("logged:\n%s\nwant one line per (provider, reason): %v", log.String(), want)
	}
}
