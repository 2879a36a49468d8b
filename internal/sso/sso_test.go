package sso_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/oidctest"
	"github.com/hookgate/hookgate/internal/sso"
)

const callback = "https://hooks.example.com" + sso.CallbackPath

// people are the provider's: Ana is an admin and in support, Sam in
// support only, Nick in no group hookgate maps.
var people = []oidctest.User{
	{Username: "ana", Password: "pw-ana", Email: "ana@example.com", Name: "Ana", Groups: []string{"support", "hookgate-admins"}},
	{Username: "sam", Password: "pw-sam", Email: "sam@example.com", Name: "Sam", Groups: []string{"support"}},
	{Username: "nick", Password: "pw-nick", Email: "nick@example.com", Name: "Nick", Groups: []string{"marketing"}},
	// Someone who says they are Ana, with an address the provider has not
	// verified.
	{Username: "mallory", Password: "pw-mallory", Email: "ana@example.com", Name: "Ana", Groups: []string{"support"}, Unverified: true},
}

// setup starts a provider and the gateway's sign-in with it; transport,
// when set, stands between the gateway and the provider.
func setup(t *testing.T, transport http.RoundTripper) (*oidctest.Provider, *sso.SSO, *http.Client) {
	t.Helper()
	p := oidctest.Start(t, callback, people...)
	s := sso.New(sso.Config{Issuer: p.Issuer, ClientID: p.ClientID, ClientSecret: p.ClientSecret, RedirectURL: callback,
		Scopes: []string{"email", "profile"},
		Roles: []sso.Rule{{Claim: oidctest.GroupsClaim, Value: "hookgate-admins", Role: access.Admin},
			{Claim: oidctest.GroupsClaim, Value: "support", Role: access.Viewer}},
		HTTPClient: &http.Client{Transport: transport, Timeout: 10 * time.Second}})
	jar, _ := cookiejar.New(nil)
	return p, s, &http.Client{Jar: jar} // the person's browser
}

// signIn starts a sign-in, signs in at the provider as username, and
// returns the callback's query and the attempt the browser kept.
func signIn(t *testing.T, p *oidctest.Provider, s *sso.SSO, browser *http.Client, username, password string) (url.Values, sso.Attempt) {
	t.Helper()
	authURL, a, err := s.Start(context.Background(), "/admin/ui/routes")
	if err != nil {
		t.Fatal(err)
	}
	back := p.SignIn(t, browser, authURL, username, password)
	if back.Scheme+"://"+back.Host+back.Path != callback {
		t.Fatalf("the provider sent the browser to %s", back)
	}
	return back.Query(), a
}

// A person signs in through the provider, with the authorization code,
// PKCE, state and nonce, and is who the verified ID token says, with the
// highest role their groups map to.
func TestAPersonSignsInWithTheirRole(t *testing.T) {
	p, s, browser := setup(t, nil)
	authURL, _, err := s.Start(context.Background(), "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(authURL)
	for _, param := range []string{"state", "nonce", "code_challenge"} {
		if u.Query().Get(param) == "" {
			t.Errorf("the authorization request has no %s: %s", param, authURL)
		}
	}
	if u.Query().Get("code_challenge_method") != "S256" || u.Query().Get("redirect_uri") != callback {
		t.Errorf("the authorization request: %s", authURL)
	}

	for _, c := range []struct {
		user, password string
		want           sso.Person
	}{
		{"ana", "pw-ana", sso.Person{Email: "ana@example.com", Name: "Ana", Role: access.Admin}},
		{"sam", "pw-sam", sso.Person{Email: "sam@example.com", Name: "Sam", Role: access.Viewer}},
	} {
		q, a := signIn(t, p, s, browser, c.user, c.password)
		got, err := s.Finish(context.Background(), q, a)
		if err != nil {
			t.Fatalf("%s: %v", c.user, err)
		}
		if got.Subject == "" || got.Email != c.want.Email || got.Name != c.want.Name || got.Role != c.want.Role {
			t.Errorf("%s signed in as %+v", c.user, got)
		}
		if want := "oidc:" + c.want.Email; got.Actor() != want {
			t.Errorf("actor %q, want %q", got.Actor(), want)
		}
		// The code is spent: the same callback again is refused.
		if _, err := s.Finish(context.Background(), q, a); !errors.Is(err, sso.ErrToken) {
			t.Errorf("%s's code used twice: %v", c.user, err)
		}
	}
}

// What a sign-in refuses: a callback of another browser's sign-in (a wrong
// state, or none kept), one too old, a provider's error, a PKCE verifier
// other than the one the code was asked with, and a person whose groups map
// to no role.
func TestASignInIsRefused(t *testing.T) {
	p, s, browser := setup(t, nil)
	ctx := context.Background()

	q, a := signIn(t, p, s, browser, "ana", "pw-ana")
	other := a
	other.State = "another-sign-in"
	if _, err := s.Finish(ctx, q, other); !errors.Is(err, sso.ErrState) {
		t.Errorf("a wrong state: %v", err)
	}
	if _, err := s.Finish(ctx, q, sso.Attempt{}); !errors.Is(err, sso.ErrState) {
		t.Errorf("no attempt kept: %v", err)
	}
	old := a
	old.Started = time.Now().Add(-sso.AttemptLife - time.Minute).Unix()
	if _, err := s.Finish(ctx, q, old); !errors.Is(err, sso.ErrState) {
		t.Errorf("an attempt too old: %v", err)
	}
	stolen := a
	stolen.Verifier = "a-verifier-the-code-was-not-asked-with-0123456789abcdef"
	if _, err := s.Finish(ctx, q, stolen); !errors.Is(err, sso.ErrToken) {
		t.Errorf("another PKCE verifier: %v", err)
	}

	// The provider's error code is told, nothing else of a link anyone
	// could write.
	denied := url.Values{"state": {a.State}, "error": {"access_denied"}, "error_description": {"call +1 555 0100 to unlock"}}
	if _, err := s.Finish(ctx, denied, a); !errors.Is(err, sso.ErrDenied) || err.Error() != "the identity provider refused: access_denied" {
		t.Errorf("the provider's error: %v", err)
	}
	denied.Set("error", "Your account is locked: call +1 555 0100")
	if _, err := s.Finish(ctx, denied, a); !errors.Is(err, sso.ErrDenied) || err.Error() != "the identity provider refused: an error" {
		t.Errorf("an error that is no code: %v", err)
	}

	q, a = signIn(t, p, s, browser, "nick", "pw-nick")
	_, err := s.Finish(ctx, q, a)
	if !errors.Is(err, sso.ErrNoRole) || !strings.Contains(err.Error(), "no rule of GATEWAY_OIDC_ROLES matches oidc:nick@example.com (groups: marketing)") {
		t.Errorf("an unmapped person: %v", err)
	}
}

// An ID token that the issuer did not sign (a forger's key), though it
// names the issuer, the client and the nonce, signs no one in.
func TestAForgedIDTokenIsRefused(t *testing.T) {
	var nonce string
	forge := roundTrip(func(req *http.Request) (*http.Response, error) {
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil || !strings.HasSuffix(req.URL.Path, "/oauth/token") {
			return res, err
		}
		var body map[string]any
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if err := json.Unmarshal(raw, &body); err != nil {
			return nil, err
		}
		iss := "http://" + req.URL.Host
		body["id_token"] = oidctest.Forge(t, map[string]any{"iss": iss, "aud": "hookgate", "sub": "mallory", "nonce": nonce,
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), oidctest.GroupsClaim: []string{"hookgate-admins"}})
		raw, _ = json.Marshal(body)
		res.Body = io.NopCloser(bytes.NewReader(raw))
		res.ContentLength = int64(len(raw))
		res.Header.Del("Content-Length")
		return res, nil
	})
	p, s, browser := setup(t, forge)
	q, a := signIn(t, p, s, browser, "sam", "pw-sam")
	nonce = a.Nonce
	got, err := s.Finish(context.Background(), q, a)
	if !errors.Is(err, sso.ErrToken) || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("a forged ID token: %+v, %v", got, err)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The rules: CLAIM:VALUE=ROLE and *=ROLE; a claim named by a URL keeps its
// colon; a role that is none, an entry without = or without a claim, and
// one that matches what another does are errors naming the entry.
func TestParseRoles(t *testing.T) {
	got, err := sso.ParseRoles("groups:hookgate-admins=admin, groups:sre = operator,https://example.com/roles:team:support=viewer,*=viewer")
	want := []sso.Rule{{Claim: "groups", Value: "hookgate-admins", Role: access.Admin}, {Claim: "groups", Value: "sre", Role: access.Operator},
		{Claim: "https://example.com/roles", Value: "team:support", Role: access.Viewer}, {Role: access.Viewer}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("%+v, %v", got, err)
	}
	for in, want := range map[string]string{
		"groups:a=owner":                 "entry 1: the role must be viewer, operator or admin",
		"groups:a=SECRET,b,c:d=admin":    "entry 1: the role must be viewer, operator or admin; entry 2 is not CLAIM:VALUE=ROLE or *=ROLE",
		"groups:a=admin,b":               "entry 2 is not CLAIM:VALUE=ROLE or *=ROLE",
		"a=admin":                        "entry 1 is not CLAIM:VALUE=ROLE or *=ROLE",
		":a=admin":                       "entry 1 is not CLAIM:VALUE=ROLE or *=ROLE",
		"groups:=admin":                  "entry 1 is not CLAIM:VALUE=ROLE or *=ROLE",
		"groups:a=admin,groups:a=viewer": "entry 2 matches what an entry before it matches",
		"*=viewer,*=admin":               "entry 2 matches what an entry before it matches",
	} {
		if _, err := sso.ParseRoles(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// Everyone the provider signs in gets the role of a *= rule, and the
// highest of those that match.
func TestAStarRuleGivesEveryoneARole(t *testing.T) {
	p := oidctest.Start(t, callback, people...)
	s := sso.New(sso.Config{Issuer: p.Issuer, ClientID: p.ClientID, ClientSecret: p.ClientSecret, RedirectURL: callback,
		Roles: []sso.Rule{{Role: access.Viewer}, {Claim: oidctest.GroupsClaim, Value: "hookgate-admins", Role: access.Admin}}})
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	for user, want := range map[string]access.Role{"nick": access.Viewer, "ana": access.Admin} {
		q, a := signIn(t, p, s, browser, user, "pw-"+user)
		got, err := s.Finish(context.Background(), q, a)
		if err != nil || got.Role != want {
			t.Errorf("%s: %+v, %v", user, got, err)
		}
	}
}

// An email the provider has not verified names no one: the person is named
// by their subject, and is not Ana however their address reads.
func TestAnUnverifiedEmailNamesNoOne(t *testing.T) {
	p, s, browser := setup(t, nil)
	q, a := signIn(t, p, s, browser, "mallory", "pw-mallory")
	got, err := s.Finish(context.Background(), q, a)
	if err != nil {
		t.Fatal(err)
	}
	if got.Email != "" || got.Actor() != "oidc:"+got.Subject || got.Subject == "" {
		t.Errorf("an unverified address signed in as %+v (%s)", got, got.Actor())
	}
}
