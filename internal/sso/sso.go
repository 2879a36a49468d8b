// Package sso signs people in to the console with OpenID Connect: the
// authorization code flow with PKCE, a state and a nonce, the ID token
// verified against the issuer's keys (go-oidc), and the person's role read
// from a claim of the ID token through the configured mapping. A person
// whose claim maps to no role is refused. The issuer's discovery document
// is read when the first person signs in, not at start, so that a gateway
// starts (and takes webhooks) while the identity provider is down.
package sso

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/hookgate/hookgate/internal/access"
)

// CallbackPath is where the identity provider sends people back, under the
// gateway's public URL: the redirect URI to register with it.
const CallbackPath = "/admin/ui/sso/callback"

// Errors of Finish, for the console to answer.
var (
	// ErrState means a callback that does not belong to a sign-in this
	// browser started: no state cookie, another state, or one too old.
	ErrState = errors.New("sign-in not started here")
	// ErrDenied means the identity provider answered with an error (the
	// person cancelled, or may not use the client).
	ErrDenied = errors.New("the identity provider refused")
	// ErrToken means the code could not be exchanged or the ID token does
	// not verify: issuer, audience, signature, expiry or nonce.
	ErrToken = errors.New("the identity provider's answer does not verify")
	// ErrNoRole means a verified person whose claim maps to no role.
	ErrNoRole = errors.New("no role")
	// ErrUnavailable means the identity provider could not be reached.
	ErrUnavailable = errors.New("the identity provider is unavailable")
)

// Config is how the gateway signs people in.
type Config struct {
	// Issuer is the identity provider's issuer URL (its discovery document
	// is Issuer + /.well-known/openid-configuration).
	Issuer string
	// ClientID and ClientSecret are the gateway's client at the provider;
	// without a secret it is a public client (PKCE alone).
	ClientID, ClientSecret string
	// RedirectURL is the gateway's public URL + CallbackPath.
	RedirectURL string
	// Scopes are asked for; openid is added when missing.
	Scopes []string
	// RolesClaim names the ID token's claim whose value (a string or a
	// list of strings) the roles map.
	RolesClaim string
	// Roles maps the claim's values to roles; a person with several gets
	// the highest.
	Roles map[string]access.Role
	// HTTPClient reaches the provider; nil: one with a 10 s timeout.
	HTTPClient *http.Client
}

// Person is who signed in.
type Person struct {
	// Subject is the ID token's sub, unique at the issuer.
	Subject string
	// Email is the ID token's email claim, when it has one.
	Email string
	// Name is the ID token's name (or preferred_username), when it has one.
	Name string
	// Role is the highest role the person's claim maps to.
	Role access.Role
}

// Actor names a person in the audit and replay logs: person:<email> (or
// person:<sub>), then the name in brackets when there is one.
func (p Person) Actor() string {
	id := p.Email
	if id == "" {
		id = p.Subject
	}
	if p.Name == "" {
		return "person:" + id
	}
	return fmt.Sprintf("person:%s (%s)", id, p.Name)
}

// SSO signs people in with one identity provider.
type SSO struct {
	cfg Config

	mu       sync.Mutex
	provider *oidc.Provider // nil until discovered
}

// New returns the sign-in of cfg; nothing is fetched yet.
func New(cfg Config) *SSO {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if !slices.Contains(cfg.Scopes, oidc.ScopeOpenID) {
		cfg.Scopes = append([]string{oidc.ScopeOpenID}, cfg.Scopes...)
	}
	return &SSO{cfg: cfg}
}

// discover returns the provider, reading its discovery document the first
// time it is needed (and again after a failure).
func (s *SSO) discover(ctx context.Context) (*oidc.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.provider != nil {
		return s.provider, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, s.cfg.HTTPClient), s.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: discovery: %w", ErrUnavailable, err)
	}
	s.provider = p
	return p, nil
}

func (s *SSO) oauth2(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: s.cfg.RedirectURL, Scopes: s.cfg.Scopes}
}

// Attempt is a sign-in in progress: what the browser keeps (in a cookie)
// between Start and Finish.
type Attempt struct {
	State, Nonce, Verifier, Next string
	// Started is when it began (Unix seconds): an attempt older than
	// AttemptLife is refused.
	Started int64
}

// AttemptLife is how long a person has to come back from the provider.
const AttemptLife = 10 * time.Minute

// Start begins a sign-in that comes back to next: it returns the provider's
// authorization URL to send the browser to, and the attempt to keep.
func (s *SSO) Start(ctx context.Context, next string) (authURL string, a Attempt, err error) {
	p, err := s.discover(ctx)
	if err != nil {
		return "", Attempt{}, err
	}
	a = Attempt{State: random(), Nonce: random(), Verifier: oauth2.GenerateVerifier(), Next: next, Started: time.Now().Unix()}
	return s.oauth2(p).AuthCodeURL(a.State, oidc.Nonce(a.Nonce), oauth2.S256ChallengeOption(a.Verifier)), a, nil
}

// Finish completes the sign-in the callback's query answers, for the attempt
// the browser kept: the state must be the attempt's, the code is exchanged
// with its PKCE verifier, and the ID token must verify (issuer, audience,
// signature, expiry) and carry its nonce.
func (s *SSO) Finish(ctx context.Context, query url.Values, a Attempt) (Person, error) {
	if a.State == "" || subtle.ConstantTimeCompare([]byte(query.Get("state")), []byte(a.State)) != 1 ||
		time.Since(time.Unix(a.Started, 0)) > AttemptLife {
		return Person{}, ErrState
	}
	if e := query.Get("error"); e != "" {
		return Person{}, fmt.Errorf("%w: %s", ErrDenied, clip(e+" "+query.Get("error_description")))
	}
	code := query.Get("code")
	if code == "" {
		return Person{}, fmt.Errorf("%w: no code", ErrToken)
	}
	p, err := s.discover(ctx)
	if err != nil {
		return Person{}, err
	}
	ctx = oidc.ClientContext(ctx, s.cfg.HTTPClient)
	tok, err := s.oauth2(p).Exchange(ctx, code, oauth2.VerifierOption(a.Verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return Person{}, fmt.Errorf("%w: the code: %s", ErrToken, clip(re.ErrorCode+" "+re.ErrorDescription))
		}
		return Person{}, fmt.Errorf("%w: the token endpoint: %w", ErrUnavailable, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Person{}, fmt.Errorf("%w: no id_token", ErrToken)
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: s.cfg.ClientID}).Verify(ctx, raw)
	if err != nil {
		return Person{}, fmt.Errorf("%w: %w", ErrToken, err)
	}
	if idt.Nonce != a.Nonce {
		return Person{}, fmt.Errorf("%w: another sign-in's nonce", ErrToken)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return Person{}, fmt.Errorf("%w: its claims: %w", ErrToken, err)
	}
	return s.person(idt.Subject, claims)
}

// person reads who signed in from the ID token's claims, with the highest
// role its roles claim maps to.
func (s *SSO) person(sub string, claims map[string]any) (Person, error) {
	str := func(name string) string { v, _ := claims[name].(string); return clip(v) }
	p := Person{Subject: clip(sub), Email: str("email"), Name: str("name")}
	if p.Name == "" {
		p.Name = str("preferred_username")
	}
	var values []string
	switch v := claims[s.cfg.RolesClaim].(type) {
	case string:
		values = []string{v}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				values = append(values, s)
			}
		}
	}
	for _, v := range values {
		if r, ok := s.cfg.Roles[v]; ok && r > p.Role {
			p.Role = r
		}
	}
	if p.Role == 0 {
		return Person{}, fmt.Errorf("%w: %s's %s claim (%s) maps to no role", ErrNoRole, p.Actor(), s.cfg.RolesClaim,
			clip(strings.Join(values, ", ")))
	}
	return p, nil
}

// clip keeps what a provider sends, which ends up in pages and logs, short
// and printable.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return strings.TrimSpace(s)
}

// random returns 32 random bytes, base64url.
func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseRoles reads GATEWAY_OIDC_ROLES: value=role pairs, comma-separated
// (hookgate-admins=admin,sre=operator,support=viewer).
func ParseRoles(s string) (map[string]access.Role, error) {
	roles := map[string]access.Role{}
	for i, pair := range strings.Split(s, ",") {
		value, name, ok := strings.Cut(strings.TrimSpace(pair), "=")
		value = strings.TrimSpace(value)
		if !ok || value == "" {
			return nil, fmt.Errorf("entry %d is not VALUE=ROLE", i+1)
		}
		role, err := access.ParseRole(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		if _, dup := roles[value]; dup {
			return nil, fmt.Errorf("entry %d maps a value mapped before", i+1)
		}
		roles[value] = role
	}
	return roles, nil
}
