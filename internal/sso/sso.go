// Package sso signs people in to the console with OpenID Connect: the
// authorization code flow with PKCE, a state and a nonce, the ID token
// verified against the issuer's keys (go-oidc), and the person's role read
// from the ID token's claims through the configured rules. A person no rule
// gives a role is refused. The issuer's discovery document
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
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/hookgate/hookgate/internal/access"
)

// The sign-in's paths. CallbackPath is where the identity provider sends
// people back, under the gateway's public URL: the redirect URI to
// register with it. LoginPath starts a sign-in (?next= a console path).
const (
	LoginPath    = "/admin/oidc/login"
	CallbackPath = "/admin/oidc/callback"
)

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
	// ErrNoRole means a verified person no rule gives a role.
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
	// Roles are the rules that give people roles (ParseRoles); a person
	// several rules match gets the highest role.
	Roles []Rule
	// HTTPClient reaches the provider; nil: one with a 10 s timeout.
	HTTPClient *http.Client
}

// Person is who signed in.
type Person struct {
	// Subject is the ID token's sub, unique at the issuer.
	Subject string
	// Email is the ID token's email claim, when it has one that the
	// provider does not say is unverified (email_verified false).
	Email string
	// Name is the ID token's name (or preferred_username), when it has one.
	Name string
	// Role is the highest role the rules give the person.
	Role access.Role
}

// Actor names a person in the audit and replay logs: oidc:<email>, or
// oidc:<sub> when the ID token has no email.
func (p Person) Actor() string {
	if p.Email != "" {
		return "oidc:" + p.Email
	}
	return "oidc:" + p.Subject
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
		// Only the code, and only one of OAuth's form: anyone can write a
		// callback link, and its text would show on the gateway's page.
		if !errorCode.MatchString(e) {
			e = "an error"
		}
		return Person{}, fmt.Errorf("%w: %s", ErrDenied, e)
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
// role the rules give.
func (s *SSO) person(sub string, claims map[string]any) (Person, error) {
	str := func(name string) string { v, _ := claims[name].(string); return clip(v) }
	p := Person{Subject: clip(sub), Email: str("email"), Name: str("name")}
	if verified, said := claims["email_verified"].(bool); said && !verified {
		// An address the provider has not verified could be anyone's: the
		// person is named by the subject instead, and owns no one else's
		// tokens through it.
		p.Email = ""
	}
	if p.Name == "" {
		p.Name = str("preferred_username")
	}
	var seen []string // the values of the claims the rules read, for the refusal
	for _, r := range s.cfg.Roles {
		values := claimValues(claims[r.Claim])
		if r.Claim == "" || slices.Contains(values, r.Value) {
			p.Role = max(p.Role, r.Role)
		}
		if r.Claim != "" && !slices.ContainsFunc(seen, func(v string) bool { return strings.HasPrefix(v, r.Claim+": ") }) {
			seen = append(seen, r.Claim+": "+clip(strings.Join(values, ", ")))
		}
	}
	if p.Role == 0 {
		return Person{}, fmt.Errorf("%w: no rule of GATEWAY_OIDC_ROLES matches %s (%s)", ErrNoRole, p.Actor(), strings.Join(seen, "; "))
	}
	return p, nil
}

// claimValues is a claim's value as strings: a string, or the strings of a
// list.
func claimValues(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var values []string
		for _, x := range v {
			if s, ok := x.(string); ok {
				values = append(values, s)
			}
		}
		return values
	}
	return nil
}

// errorCode is what an OAuth error code looks like (access_denied).
var errorCode = regexp.MustCompile(`^[a-z_]{1,40}$`)

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

// Rule gives Role to people whose ID token's Claim holds Value (a string
// equal to it, or a list holding it); a rule without a claim (*) gives it
// to everyone the provider signs in.
type Rule struct {
	Claim, Value string
	Role         access.Role
}

// ParseRoles reads GATEWAY_OIDC_ROLES: CLAIM:VALUE=ROLE rules,
// comma-separated, and *=ROLE for everyone
// (groups:hookgate-admins=admin,groups:sre=operator,*=viewer). The claim is
// what comes before the first colon, or, for a claim named by a URL
// (https://example.com/roles:sre=operator), before the first colon after
// its host.
func ParseRoles(s string) ([]Rule, error) {
	var rules []Rule
	var problems []string // every entry's, never its text: told back in logs
	const form = "is not CLAIM:VALUE=ROLE or *=ROLE"
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		eq := strings.LastIndex(entry, "=")
		if eq < 0 {
			problems = append(problems, fmt.Sprintf("entry %d %s", i+1, form))
			continue
		}
		role, err := access.ParseRole(strings.TrimSpace(entry[eq+1:]))
		if err != nil {
			problems = append(problems, fmt.Sprintf("entry %d: the role must be viewer, operator or admin", i+1))
			continue
		}
		r := Rule{Role: role}
		if match := strings.TrimSpace(entry[:eq]); match != "*" {
			from := 0
			if scheme := strings.Index(match, "://"); scheme >= 0 && (strings.HasPrefix(match, "https://") || strings.HasPrefix(match, "http://")) {
				from = scheme + len("://")
			}
			colon := strings.Index(match[from:], ":")
			if colon < 0 || colon == 0 && from == 0 || from+colon+1 == len(match) {
				problems = append(problems, fmt.Sprintf("entry %d %s", i+1, form))
				continue
			}
			r.Claim, r.Value = match[:from+colon], match[from+colon+1:]
		}
		if slices.ContainsFunc(rules, func(o Rule) bool { return o.Claim == r.Claim && o.Value == r.Value }) {
			problems = append(problems, fmt.Sprintf("entry %d matches what an entry before it matches", i+1))
			continue
		}
		rules = append(rules, r)
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return rules, nil
}
