package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/server"
)

// adminActor is how the logs name the admin token.
var adminActor = server.Actor(adminToken)

// tokenJSON is a personal token as the API answers it.
type tokenJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Token      string     `json:"token"`
	CreatedBy  string     `json:"created_by"`
	ExpiresAt  time.Time  `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	RevokedBy  *string    `json:"revoked_by"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// makeToken makes a personal token with the given maker's bearer token ("" is
// the admin token).
func (b *adminBundle) makeToken(t *testing.T, maker, name, role, expiresIn string) tokenJSON {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"name": name, "role": role, "expires_in": expiresIn})
	status, header, got := b.admin(t, adminReq{method: "POST", path: "/admin/tokens", body: string(body), token: maker})
	if status != 201 {
		t.Fatalf("make %s token %q: %d %s", role, name, status, got)
	}
	if header.Get("Cache-Control") != "no-store" {
		t.Errorf("a new token's answer may be cached: Cache-Control %q", header.Get("Cache-Control"))
	}
	var tok tokenJSON
	if err := json.Unmarshal(got, &tok); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Token, "hgt_") || len(tok.Token) < 40 || tok.ID == "" || tok.Role != role || tok.Name != name {
		t.Fatalf("made %s", got)
	}
	return tok
}

// Each role does what it may and is refused, 403 forbidden, what it may not;
// every audit entry names the token that acted.
func TestPersonalTokensActWithinTheirRole(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	b.start(t)
	b.ingest(t, stripeEvent("evt_roles_1", "invoice.paid"))

	viewer := b.makeToken(t, "", "support desk", "viewer", "1h")
	operator := b.makeToken(t, "", "deploy bot", "operator", "")
	if d := time.Until(viewer.ExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("viewer token expires in %s, asked for 1h", d)
	}
	if d := time.Until(operator.ExpiresAt); d < 29*24*time.Hour || d > 31*24*time.Hour {
		t.Errorf("a token asked without expires_in expires in %s, want the default 30 days", d)
	}

	for _, tt := range []struct {
		token        string
		method, path string
		body         string
		want         int
	}{
		{viewer.Token, "GET", "/admin/deliveries", "", 200},
		{viewer.Token, "GET", "/admin/deliveries/stripe/evt_roles_1", "", 200},
		{viewer.Token, "GET", "/admin/routes", "", 200},
		{viewer.Token, "GET", "/admin/audit", "", 200},
		{viewer.Token, "POST", "/admin/deliveries/stripe/evt_roles_1/replay", `{"force":true}`, 403},
		{viewer.Token, "POST", "/admin/replays", `{"provider":"stripe"}`, 403},
		{viewer.Token, "POST", "/admin/routes/fwd/pause", "", 403},
		{viewer.Token, "GET", "/admin/river/", "", 403},
		{viewer.Token, "GET", "/admin/tokens", "", 403},
		{operator.Token, "POST", "/admin/routes/fwd/pause", `{"reason":"deploy"}`, 200},
		{operator.Token, "POST", "/admin/routes/fwd/resume", "", 200},
		{operator.Token, "POST", "/admin/deliveries/stripe/evt_roles_1/replay", `{"routes":["audit"],"force":true}`, 202},
		{operator.Token, "GET", "/admin/tokens", "", 403},
		{operator.Token, "POST", "/admin/tokens", `{"name":"mine","role":"viewer"}`, 403},
		{operator.Token, "DELETE", "/admin/tokens/" + viewer.ID, "", 403},
	} {
		status, _, body := b.admin(t, adminReq{method: tt.method, path: tt.path, body: tt.body, token: tt.token})
		if status != tt.want {
			t.Errorf("%s %s as %s: %d %s, want %d", tt.method, tt.path, tt.token[:8], status, body, tt.want)
			continue
		}
		if status == 403 && (!bytes.Contains(body, []byte(`"error":"forbidden"`)) || !bytes.Contains(body, []byte("role"))) {
			t.Errorf("%s %s: 403 body %s does not say which role it needs", tt.method, tt.path, body)
		}
	}

	var a auditJSON
	b.adminJSON(t, adminReq{path: "/admin/audit"}, 200, &a)
	want := map[string]string{ // action: actor
		"pause":        "token:" + operator.ID + " (deploy bot)",
		"resume":       "token:" + operator.ID + " (deploy bot)",
		"replay":       "token:" + operator.ID + " (deploy bot)",
		"token_create": adminActor,
	}
	for _, e := range a.Entries {
		if actor, ok := want[e.Action]; ok {
			if e.Actor != actor {
				t.Errorf("%s by %q, want %q", e.Action, e.Actor, actor)
			}
			delete(want, e.Action)
		}
	}
	if len(want) > 0 {
		t.Errorf("the audit log lacks %v: %+v", want, a.Entries)
	}
}

// A token is told once: listed, it never shows; stored, it is only its
// SHA-256.
func TestPersonalTokensAreToldOnce(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	tok := b.makeToken(t, "", "ci", "viewer", "720h")
	b.admin(t, adminReq{path: "/admin/deliveries", token: tok.Token})

	status, _, body := b.admin(t, adminReq{path: "/admin/tokens"})
	if status != 200 || bytes.Contains(body, []byte(tok.Token)) || bytes.Contains(body, []byte(`"token"`)) {
		t.Fatalf("the list shows the token: %d %s", status, body)
	}
	var l struct{ Tokens []tokenJSON }
	if err := json.Unmarshal(body, &l); err != nil || len(l.Tokens) != 1 || l.Tokens[0].ID != tok.ID ||
		l.Tokens[0].CreatedBy != adminActor || l.Tokens[0].LastUsedAt == nil {
		t.Fatalf("list %s: %v", body, err)
	}
	sum := sha256.Sum256([]byte(tok.Token))
	if n := b.count(t, "SELECT count(*) FROM hookgate_tokens WHERE token_sha256 = '\\x"+hex.EncodeToString(sum[:])+"'"); n != 1 {
		t.Fatalf("%d tokens stored by the token's SHA-256", n)
	}
	if n := b.count(t, "SELECT count(*) FROM hookgate_tokens t WHERE t::text LIKE '%"+tok.Token[4:20]+"%'"); n != 0 {
		t.Fatal("the token itself is stored")
	}
	// Idempotency-Key is not honoured: a kept answer would keep the token.
	if n := b.count(t, "SELECT count(*) FROM hookgate_idempotency"); n != 0 {
		t.Fatalf("%d idempotency records", n)
	}
}

// A revoked token is refused at once, by every gateway on the database; so
// is an expired one, a forged one and one changed by a character.
func TestPersonalTokensRevokedExpiredForged(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	other := setupAdminOn(t, b.pool, adminToken) // a second gateway
	tok := b.makeToken(t, "", "laptop", "operator", "")
	for _, g := range []*adminBundle{b, other} {
		if status, _, body := g.admin(t, adminReq{path: "/admin/deliveries", token: tok.Token}); status != 200 {
			t.Fatalf("before revoking: %d %s", status, body)
		}
	}

	var revoked tokenJSON
	b.adminJSON(t, adminReq{method: "DELETE", path: "/admin/tokens/" + tok.ID}, 200, &revoked)
	if revoked.RevokedAt == nil || revoked.RevokedBy == nil || *revoked.RevokedBy != adminActor || revoked.Token != "" {
		t.Fatalf("revoked %+v", revoked)
	}
	for _, g := range []*adminBundle{b, other} {
		status, _, body := g.admin(t, adminReq{path: "/admin/deliveries", token: tok.Token})
		if status != 401 || !bytes.Contains(body, []byte(`"error":"unauthorized"`)) {
			t.Fatalf("a revoked token: %d %s", status, body)
		}
	}
	// Revoking again changes nothing and records nothing.
	var again tokenJSON
	b.adminJSON(t, adminReq{method: "DELETE", path: "/admin/tokens/" + tok.ID}, 200, &again)
	if !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Fatalf("revoked again at %s, first at %s", again.RevokedAt, revoked.RevokedAt)
	}
	if n := b.count(t, "SELECT count(*) FROM hookgate_audit WHERE action = 'token_revoke' AND reason = '"+tok.ID+" \"laptop\"'"); n != 1 {
		t.Fatalf("%d audit entries of the revocation", n)
	}
	for _, id := range []string{"tok_nosuchtoken", "tok%00x", "tok%FFx", "TOK_" + tok.ID[4:], "tok_a%2Fb"} {
		b.adminJSON(t, adminReq{method: "DELETE", path: "/admin/tokens/" + id}, 404, nil)
	}
	// An id percent-escaped names the token all the same.
	escaped := tokenEscaped(b.makeToken(t, "", "escaped", "viewer", ""))
	b.adminJSON(t, adminReq{method: "DELETE", path: "/admin/tokens/" + escaped}, 200, nil)

	expired := b.makeToken(t, "", "expired", "viewer", "")
	if _, err := b.pool.Exec(context.Background(), "UPDATE hookgate_tokens SET expires_at = now() - interval '1 second' WHERE id = $1", expired.ID); err != nil {
		t.Fatal(err)
	}
	live := b.makeToken(t, "", "live", "viewer", "")
	last := "a"
	if strings.HasSuffix(live.Token, "a") {
		last = "b"
	}
	changed := live.Token[:len(live.Token)-1] + last
	for name, token := range map[string]string{
		"expired":               expired.Token,
		"forged":                "hgt_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"changed by one":        changed,
		"the prefix alone":      "hgt_",
		"the admin's, and more": adminToken + "x",
	} {
		if status, _, body := b.admin(t, adminReq{path: "/admin/deliveries", token: token}); status != 401 {
			t.Errorf("%s token: %d %s", name, status, body)
		}
	}
}

// What a token asked for must be: named, of a known role, no longer lived
// than a year, and no higher than its maker's role.
func TestPersonalTokensRequestsRefused(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	for _, body := range []string{
		``,
		`{"name":"x"}`,
		`{"name":"x","role":"root"}`,
		`{"role":"viewer"}`,
		`{"name":"  ","role":"viewer"}`,
		`{"name":"tab\there","role":"viewer"}`,
		`{"name":"` + strings.Repeat("n", 101) + `","role":"viewer"}`,
		`{"name":"x","role":"viewer","expires_in":"-1h"}`,
		`{"name":"x","role":"viewer","expires_in":"forever"}`,
		`{"name":"x","role":"viewer","expires_in":"9000h"}`,
		`{"name":"x","role":"viewer","expires_in":"1ns"}`,
		`{"name":"x","role":"viewer","expires_in":"59s"}`,
		`{"name":" x","role":"viewer"}`,
		`{"name":"\ud800","role":"viewer"}`, // a lone surrogate, which JSON decodes to U+FFFD
		`{"name":"x\ufffd","role":"viewer"}`,
		`{"name":"x","role":"viewer","owner":"me"}`,
		`{"name":"x","role":3}`,
	} {
		status, _, got := b.admin(t, adminReq{method: "POST", path: "/admin/tokens", body: body})
		if status != 400 || !bytes.Contains(got, []byte(`"error":"bad_request"`)) {
			t.Errorf("%s: %d %s", body, status, got)
		}
	}
	if n := b.count(t, "SELECT count(*) FROM hookgate_tokens"); n != 0 {
		t.Fatalf("%d tokens made of bad requests", n)
	}
	// An admin's personal token makes tokens up to admin; it never makes
	// one above the role it has (none is above admin; a viewer makes none).
	admin := b.makeToken(t, "", "admin person", "admin", "")
	b.makeToken(t, admin.Token, "made by a token", "operator", "")
}

// Each operation of the OpenAPI document needs the role its
// x-hookgate-role names: a token of the role below gets 403, one of that
// role does not.
func TestOpenAPIRolesAreTheRoutersRoles(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, adminToken)
	_, _, body := b.admin(t, adminReq{path: "/admin/openapi.json"})
	var doc struct {
		Paths map[string]map[string]struct {
			Role string `json:"x-hookgate-role"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, role := range []string{"viewer", "operator", "admin"} {
		tokens[role] = b.makeToken(t, "", role, role, "").Token
	}
	below := map[string]string{"operator": "viewer", "admin": "operator"}
	n := 0
	for path, ops := range doc.Paths {
		path = pathParam.ReplaceAllString(path, "x")
		for method, op := range ops {
			method = strings.ToUpper(method)
			if tokens[op.Role] == "" {
				t.Errorf("%s %s: x-hookgate-role %q", method, path, op.Role)
				continue
			}
			if status, _, got := b.admin(t, adminReq{method: method, path: path, token: tokens[op.Role]}); status == 403 || status == 401 {
				t.Errorf("%s %s as %s: %d %s", method, path, op.Role, status, got)
			}
			if lower := below[op.Role]; lower != "" {
				if status, _, got := b.admin(t, adminReq{method: method, path: path, token: tokens[lower]}); status != 403 {
					t.Errorf("%s %s as %s: %d %s, want 403", method, path, lower, status, got)
				}
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("%d operations", n)
	}
}

// tokenEscaped is the token's id with its first letter percent-escaped.
func tokenEscaped(t tokenJSON) string { return fmt.Sprintf("%%%02x", t.ID[0]) + t.ID[1:] }
