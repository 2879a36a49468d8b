// Package oidctest runs a real OpenID Connect provider for tests: zitadel's
// OpenID provider (github.com/zitadel/oidc/v3's op package, with its example
// storage) and a login page on a local port, with the people a test names, each with a
// password and the groups its ID token claims. It is used by tests only.
package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// GroupsClaim is the ID token's claim that holds a person's groups.
const GroupsClaim = "groups"

// User is a person the provider knows.
type User struct {
	Username, Password, Email, Name string
	// Groups are claimed in the ID token's GroupsClaim.
	Groups []string
	// Unverified makes the ID token say email_verified false.
	Unverified bool
}

// Provider is a running identity provider.
type Provider struct {
	// Issuer is its issuer URL (http://localhost:PORT).
	Issuer string
	// ClientID and ClientSecret are the client registered for the test,
	// whose one redirect URI is the one Start was given.
	ClientID, ClientSecret string
}

// Start runs a provider until the test ends, knowing users, with one
// client (basic authentication, PKCE allowed) that may redirect to
// redirectURI only.
func Start(t testing.TB, redirectURI string, users ...User) *Provider {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// localhost, not 127.0.0.1: to a browser, the provider is another site
	// than a gateway on 127.0.0.1, as in production.
	p := &Provider{Issuer: "http://localhost:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), ClientID: "hookgate", ClientSecret: "hookgate-test-secret"}
	people := userStore{byID: map[string]*storage.User{}, groups: map[string][]string{}}
	for i, u := range users {
		id := "user-" + string(rune('a'+i))
		people.byID[id] = &storage.User{ID: id, Username: u.Username, Password: u.Password, Email: u.Email, EmailVerified: !u.Unverified,
			FirstName: u.Name, PreferredLanguage: language.English}
		people.groups[id] = u.Groups
	}
	st := &withGroups{Storage: storage.NewStorageWithClients(people, map[string]*storage.Client{
		p.ClientID: storage.WebClient(p.ClientID, p.ClientSecret, redirectURI),
	}), people: people}
	provider, err := op.NewProvider(&op.Config{CryptoKey: sha256.Sum256([]byte("oidctest")), CodeMethodS256: true, AuthMethodPost: true,
		SupportedUILocales: []language.Tag{language.English}}, st, op.StaticIssuer(p.Issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: p.routes(provider, st)}}
	srv.Start()
	t.Cleanup(srv.Close)
	return p
}

// routes are the provider's endpoints and its login page (the path the
// example storage's clients send people to), which checks a person's
// password and goes on with the authorization request.
func (p *Provider) routes(provider *op.Provider, st *withGroups) http.Handler {
	mux := http.NewServeMux()
	interceptor := op.NewIssuerInterceptor(provider.IssuerFromRequest)
	callback := op.AuthCallbackURL(provider)
	mux.HandleFunc("GET /login/username", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = loginPage.Execute(w, r.URL.Query().Get("authRequestID"))
	})
	mux.HandleFunc("POST /login/username", interceptor.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.FormValue("id")
		if err := st.CheckUsernamePassword(r.FormValue("username"), r.FormValue("password"), id); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, callback(r.Context(), id), http.StatusFound)
	}))
	mux.Handle("/", provider)
	return mux
}

// loginPage is the provider's sign-in form.
var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<title>Test identity provider</title>
<form method="post" action="/login/username">
<input type="hidden" name="id" value="{{.}}">
<label>Username <input id="username" name="username"></label>
<label>Password <input id="password" name="password" type="password"></label>
<button type="submit" id="submit">Sign in</button>
</form>`))

// userStore is the provider's people.
type userStore struct {
	byID   map[string]*storage.User
	groups map[string][]string
}

func (u userStore) GetUserByID(id string) *storage.User { return u.byID[id] }
func (u userStore) GetUserByUsername(name string) *storage.User {
	for _, user := range u.byID {
		if user.Username == name {
			return user
		}
	}
	return nil
}
func (u userStore) ExampleClientID() string { return "service" }

// withGroups claims, in each ID token, the person's email, name and groups.
type withGroups struct {
	*storage.Storage
	people userStore
}

// SetUserinfoFromRequest implements op.CanSetUserinfoFromRequest: what an
// ID token claims.
func (s *withGroups) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	if u := s.people.GetUserByID(req.GetSubject()); u != nil {
		info.Email, info.EmailVerified, info.Name = u.Email, oidc.Bool(u.EmailVerified), u.FirstName
		info.AppendClaims(GroupsClaim, s.people.groups[u.ID])
		if !u.EmailVerified {
			info.AppendClaims("email_verified", false) // the field's own false is left out
		}
	}
	return nil
}

var loginForm = regexp.MustCompile(`name="id" value="([^"]+)"`)

// SignIn does in client what a browser does from authURL (the gateway's
// redirect to the provider) on: the provider's login page, signed in as
// username with password, and its redirects until one leaves the provider.
// It returns that redirect's URL: the gateway's callback, with a code and
// the state (or an error).
func (p *Provider) SignIn(t testing.TB, client *http.Client, authURL, username, password string) *url.URL {
	t.Helper()
	noFollow := *client
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	next, err := url.Parse(authURL)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if !strings.HasPrefix(next.String(), p.Issuer) {
			return next
		}
		res, err := noFollow.Get(next.String())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK && strings.Contains(next.Path, "/login/username") {
			m := loginForm.FindSubmatch(body)
			if m == nil {
				t.Fatalf("the provider's login page has no form: %s", body)
			}
			res, err = noFollow.PostForm(p.Issuer+"/login/username", url.Values{"id": {string(m[1])}, "username": {username}, "password": {password}})
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(res.Body)
			res.Body.Close()
		}
		loc, err := res.Location()
		if err != nil {
			t.Fatalf("the provider answered %s %d without a redirect: %s", next, res.StatusCode, body)
		}
		next = loc
	}
	t.Fatal("the provider redirected more than 10 times")
	return nil
}

// Forge returns an ID token with claims, signed by a key of its own that
// the provider never published: what a forger holding no key of the
// issuer's would send.
func Forge(t testing.TB, claims map[string]any) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "key1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
