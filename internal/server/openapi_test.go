package server_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/dbtest"
)

// openAPIDoc is the part of an OpenAPI document the test reads.
type openAPIDoc struct {
	OpenAPI    string                                  `json:"openapi"`
	Paths      map[string]map[string]openAPIOp         `json:"paths"`
	Components struct{ Schemas map[string]jsonSchema } `json:"components"`
}

type openAPIOp struct {
	Responses map[string]struct {
		Content map[string]struct {
			Schema jsonSchema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

type jsonSchema struct {
	Ref        string                `json:"$ref"`
	Type       any                   `json:"type"` // a string or a list of them
	Required   []string              `json:"required"`
	Properties map[string]jsonSchema `json:"properties"`
	Items      *jsonSchema           `json:"items"`
	Enum       []any                 `json:"enum"`
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// The OpenAPI document served at /admin/openapi.json names exactly the
// operator API's routes, each with its methods, and what the handlers answer
// fits the schemas it gives.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	status, header, body := b.admin(t, adminReq{path: "/admin/openapi.json"})
	if status != 200 || header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /admin/openapi.json = %d %s", status, header.Get("Content-Type"))
	}
	if status, _, _ := b.admin(t, adminReq{path: "/admin/openapi.json", token: "-"}); status != http.StatusUnauthorized {
		t.Fatalf("without the token = %d", status)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(body, &doc); err != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("not an OpenAPI 3.1 document (%v): %.200s", err, body)
	}

	// Every JSON API route is documented, and every documented one is routed.
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+pathParam.ReplaceAllString(path, "{}")] = true
		}
	}
	routed := map[string]bool{}
	err := chi.Walk(b.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(strings.ReplaceAll(route, "/*/", "/"), "/")
		switch {
		case !strings.HasPrefix(route, "/admin/"), strings.HasPrefix(route, "/admin/ui/"), strings.HasPrefix(route, "/admin/river"):
			return nil // the console's pages and River UI are for browsers, not the API
		}
		routed[method+" "+pathParam.ReplaceAllString(route, "{}")] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range routed {
		if !documented[r] {
			t.Errorf("%s is routed but not in the OpenAPI document", r)
		}
	}
	for r := range documented {
		if !routed[r] {
			t.Errorf("%s is documented but not routed", r)
		}
	}

	// What the handlers answer fits the documented schemas.
	b.ingest(t, githubRequest(ghReq{id: "oa-1"}))
	b.start(t)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{DeliveryID: "oa-1", Route: "fwd", Generation: 1}, "succeeded")
	var replay struct {
		ReplayID string `json:"replay_id"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/github/oa-1/replay", body: `{"force":true,"routes":["fwd"]}`}, 202, &replay)
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/routes/fwd/pause", body: `{"reason":"openapi"}`}, 200, nil)
	for _, c := range []struct {
		method, path, docPath, body string
		status                      string
	}{
		{"GET", "/admin/deliveries", "/admin/deliveries", "", "200"},
		{"GET", "/admin/deliveries/github/oa-1", "/admin/deliveries/{provider}/{delivery_id}", "", "200"},
		{"GET", "/admin/deliveries/github/nope", "/admin/deliveries/{provider}/{delivery_id}", "", "404"},
		{"GET", "/admin/deliveries?state=bogus", "/admin/deliveries", "", "400"},
		{"POST", "/admin/deliveries/github/oa-1/replay", "/admin/deliveries/{provider}/{delivery_id}/replay", `{}`, "202"},
		{"POST", "/admin/replays", "/admin/replays", `{"provider":"github"}`, "202"},
		{"GET", "/admin/replays", "/admin/replays", "", "200"},
		{"GET", "/admin/replays/" + replay.ReplayID, "/admin/replays/{replay_id}", "", "200"},
		{"GET", "/admin/rejections", "/admin/rejections", "", "200"},
		{"GET", "/admin/routes", "/admin/routes", "", "200"},
		{"GET", "/admin/routes/fwd", "/admin/routes/{name}", "", "200"},
		{"POST", "/admin/deliveries/github/oa-1/retry", "/admin/deliveries/{provider}/{delivery_id}/retry", `{"routes":["fwd"]}`, "200"},
		{"POST", "/admin/deliveries/github/oa-1/retry", "/admin/deliveries/{provider}/{delivery_id}/retry", `{"routes":["nope"]}`, "400"},
		{"POST", "/admin/deliveries/github/nope/retry", "/admin/deliveries/{provider}/{delivery_id}/retry", "", "404"},
		{"POST", "/admin/routes/fwd/retry", "/admin/routes/{name}/retry", "", "409"},
		{"POST", "/admin/routes/fwd/resume", "/admin/routes/{name}/resume", "", "200"},
		{"POST", "/admin/routes/fwd/retry", "/admin/routes/{name}/retry", `{"reason":"x"}`, "200"},
		{"POST", "/admin/routes/nope/retry", "/admin/routes/{name}/retry", "", "404"},
		{"POST", "/admin/routes/fwd/pause", "/admin/routes/{name}/pause", `{"reason":"x"}`, "200"},
		{"GET", "/admin/audit?limit=1", "/admin/audit", "", "200"},
		{"GET", "/admin/providers", "/admin/providers", "", "200"},
		{"POST", "/admin/recover/stripe", "/admin/recover/{provider}", `{"dry_run":true}`, "409"},
		{"POST", "/admin/recover/stripe", "/admin/recover/{provider}", `{"since":"soon"}`, "400"},
		{"POST", "/admin/recover/gitlab", "/admin/recover/{provider}", "", "404"},
	} {
		status, _, body := b.admin(t, adminReq{method: c.method, path: c.path, body: c.body})
		if strconv.Itoa(status) != c.status {
			t.Fatalf("%s %s = %d %s, want %s", c.method, c.path, status, body, c.status)
		}
		op, ok := doc.Paths[c.docPath][strings.ToLower(c.method)]
		if !ok {
			t.Fatalf("%s %s is not documented", c.method, c.docPath)
		}
		res, ok := op.Responses[c.status]
		if !ok {
			t.Fatalf("%s %s answers %s, which the document does not list", c.method, c.docPath, c.status)
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if err := fits(doc, res.Content["application/json"].Schema, v, "$"); err != "" {
			t.Errorf("%s %s: %s\n%s", c.method, c.path, err, body)
		}
	}
}

// fits checks v against a schema's types, required properties and enums, and
// returns what does not fit, or "".
func fits(doc openAPIDoc, s jsonSchema, v any, at string) string {
	if s.Ref != "" {
		return fits(doc, doc.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")], v, at)
	}
	var types []string
	switch t := s.Type.(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, x.(string))
		}
	}
	got := "null"
	switch x := v.(type) {
	case map[string]any:
		got = "object"
	case []any:
		got = "array"
	case string:
		got = "string"
	case bool:
		got = "boolean"
	case float64:
		got = "number"
		if x == float64(int64(x)) && slices.Contains(types, "integer") {
			got = "integer"
		}
	}
	if len(types) > 0 && !slices.Contains(types, got) {
		return at + " is " + got + ", want " + strings.Join(types, " or ")
	}
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, v) {
		return at + " is not one of the enum"
	}
	switch x := v.(type) {
	case map[string]any:
		for _, name := range s.Required {
			if _, ok := x[name]; !ok {
				return at + " lacks " + name
			}
		}
		for name, ps := range s.Properties {
			if pv, ok := x[name]; ok {
				if err := fits(doc, ps, pv, at+"."+name); err != "" {
					return err
				}
			}
		}
	case []any:
		if s.Items != nil {
			for _, item := range x {
				if err := fits(doc, *s.Items, item, at+"[]"); err != "" {
					return err
				}
			}
		}
	}
	return ""
}
