package hookgate

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The gateway's own paths always reach the gateway, whatever a service's
// pattern would match (a deep wildcard New cannot probe for); everything
// else reaches the service's handlers, or the gateway's 404.
func TestTheGatewaysPathsAlwaysReachTheGateway(t *testing.T) {
	handler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-By", name) })
	}
	g := &Gateway{opts: options{http: []mounted{
		{pattern: "/{a}/{b}/{c}/{d}/{e}/{f}/{g}", handler: handler("service")},
		{pattern: "/app/status", handler: handler("service")},
	}}}
	mux := g.mux(handler("gateway"))
	for path, want := range map[string]string{
		"/admin/a/b/c/d/e/f":    "gateway",
		"/webhooks/a/b/c/d/e/f": "gateway",
		"/x/a/b/c/d/e/f":        "service",
		"/app/status":           "service",
		"/adminx":               "gateway", // nothing of the service's matches: the gateway's 404
		"/healthz":              "gateway",
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if got := rec.Header().Get("X-By"); got != want {
			t.Errorf("GET %s went to the %s, want the %s", path, got, want)
		}
	}
}
