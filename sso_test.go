package hookgate_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/oidctest"
)

// With GATEWAY_OIDC_*, the console's sign-in offers single sign-on, which
// sends the browser to the issuer with the client id, PKCE and the public
// URL's callback as the redirect URI.
func TestTheConsoleOffersSingleSignOnWhenConfigured(t *testing.T) {
	const public = "https://hooks.example.com"
	p := oidctest.Start(t, public+"/admin/oidc/callback")
	g := runGateway(t, hookgate.Config{PublicURL: public, OIDCIssuer: p.Issuer, OIDCClientID: p.ClientID,
		OIDCClientSecret: hookgate.Secret(p.ClientSecret), OIDCRoles: "groups:hookgate-admins=admin"})
	base := "http://" + g.gw.Addr()
	res, err := http.Get(base + "/admin/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(page), `id="sso" href="/admin/oidc/login?next=%2fadmin%2f"`) {
		t.Fatalf("the sign-in page:\n%s", page)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = noFollow.Get(base + "/admin/oidc/login")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	loc, err := url.Parse(res.Header.Get("Location"))
	if err != nil || res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc.String(), p.Issuer+"/") {
		t.Fatalf("start = %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	q := loc.Query()
	if q.Get("client_id") != p.ClientID || q.Get("redirect_uri") != public+"/admin/oidc/callback" ||
		q.Get("code_challenge_method") != "S256" || q.Get("scope") != "openid email profile" {
		t.Errorf("the authorization request: %s", loc)
	}
}
