package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/store"
)

// IdleTimeout is how long a session lives after its last request.
const IdleTimeout = 12 * time.Hour

// touchEvery is how stale a session's seen_at may get before a request writes
// it again: one write a minute per session, not one per page.
const touchEvery = time.Minute

// Cookie names. The session cookie's path is /admin, so it reaches the
// console and River UI and nothing else.
const (
	sessionCookie = "hookgate_session"
	loginCookie   = "hookgate_login"
)

// session is a signed-in browser.
type session struct {
	// csrf is the token every state-changing form of this session carries.
	csrf string
	// token is the personal token it signed in with (id, name, role); its
	// zero value for another's session.
	token store.Token
	// person and personRole are who signed in with OpenID Connect (named as
	// the audit log names them) and the role given then; empty for a
	// token's session.
	person, personRole string
}

// owner is whom a new session belongs to: a personal token (tokenID), a
// person (with role), or, when both are empty, the admin token.
type owner struct {
	tokenID      string
	person, role string
}

// errNoSession means the request carries no live session.
var errNoSession = errors.New("no session")

// Sessions are the console's sessions: of the admin token, of personal
// tokens, and of people signed in with OpenID Connect. They are kept in PostgreSQL, so that every gateway process behind
// a load balancer knows them and sign-out ends them everywhere. A session of
// the admin token belongs to its generation (see Record), not to the token's
// bytes: when the token changes, its sessions end for good, and turning it
// back does not revive them. A session of a personal token lives while the
// token does: revoked or expired, it opens nothing more on any gateway. A
// person's lives until sign-out or IdleTimeout, with the role given at
// sign-in.
type Sessions struct {
	pool  *pgxpool.Pool
	token []byte // the admin token's SHA-256

	mu         sync.Mutex
	generation int64 // this gateway's generation of the token; 0 until recorded
}

// NewSessions returns the sessions of token on pool. Call Record when the
// gateway starts.
func NewSessions(pool *pgxpool.Pool, token string) *Sessions {
	return &Sessions{pool: pool, token: digest(token)}
}

// Record records the token's generation, once per gateway: the generation
// recorded last when it is this token's, else a new one, which ends every
// session of the others. A gateway records it when it starts, so that a token
// in force for a while ends the sessions of the one before even if no one
// signs in with it. Sessions that are used before it is recorded record it
// then.
func (s *Sessions) Record(ctx context.Context) error {
	_, err := s.current(ctx)
	return err
}

func (s *Sessions) current(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.generation != 0 {
		return s.generation, nil
	}
	var gen int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// One gateway at a time: two starting together with a new token
		// share one generation.
		if err := store.LockAdminTokenGenerationsTx(ctx, tx); err != nil {
			return err
		}
		last, lastToken, found, err := store.LatestAdminTokenGeneration(ctx, tx)
		if err != nil {
			return err
		}
		if found && subtle.ConstantTimeCompare(lastToken, s.token) == 1 {
			gen = last
			return nil
		}
		gen, err = store.NewAdminTokenGenerationTx(ctx, tx, s.token)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("record the admin token's generation: %w", err)
	}
	s.generation = gen
	return gen, nil
}

// randomToken returns 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux (Go 1.24+ panics instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

func digest(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:]
}

// create stores a new session of o, and returns its id, for the cookie.
func (s *Sessions) create(ctx context.Context, o owner) (string, error) {
	gen, err := s.current(ctx)
	if err != nil {
		return "", err
	}
	id := randomToken()
	if err := store.InsertConsoleSession(ctx, s.pool, store.NewConsoleSession{IDSHA256: digest(id), CSRF: randomToken(),
		Generation: gen, TokenID: o.tokenID, Person: o.person, PersonRole: o.role}); err != nil {
		return "", err
	}
	// Now and then, sessions long idle go; the retention job removes the rest.
	_ = store.DeleteIdleConsoleSessions(ctx, s.pool, IdleTimeout)
	return id, nil
}

// get returns the request's live session, touching it when its last-seen
// time is older than touchEvery; errNoSession when there is none.
func (s *Sessions) get(ctx context.Context, r *http.Request) (session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" || len(c.Value) > 100 {
		return session{}, errNoSession
	}
	gen, err := s.current(ctx)
	if err != nil {
		return session{}, err
	}
	live, ok, err := store.ConsoleSessionOf(ctx, s.pool, store.ConsoleSessionParams{
		IDSHA256: digest(c.Value), Generation: gen, Idle: IdleTimeout, TouchEvery: touchEvery})
	if err != nil {
		return session{}, err
	}
	if !ok {
		return session{}, errNoSession
	}
	if live.Stale {
		if err := store.TouchConsoleSession(ctx, s.pool, digest(c.Value)); err != nil {
			return session{}, err
		}
	}
	return session{csrf: live.CSRF, token: live.Token, person: live.Person, personRole: live.PersonRole}, nil
}

// remove ends the request's session, if any.
func (s *Sessions) remove(ctx context.Context, r *http.Request) error {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	return store.DeleteConsoleSession(ctx, s.pool, digest(c.Value))
}

// cookie returns a console cookie: HttpOnly, SameSite=Strict, for /admin
// only, and Secure when the request came over TLS or the public URL is
// https. maxAge 0 makes a cookie that ends with the browser; -1 deletes it.
func (c *Console) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: "/admin", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || c.secure,
	}
}

// sameOrigin reports whether a request came from a page of this gateway: the
// browser's Sec-Fetch-Site says so, or its Origin is the public URL's (or,
// without one, names this host). A request with neither (an old browser, a
// script) is not trusted with a session.
func (c *Console) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if c.origin != "" {
		return originOf(u) == c.origin
	}
	return u.Host == r.Host
}

// originOf is u's origin as a browser writes it: scheme://host[:port], lower
// case, without the scheme's default port.
func originOf(u *url.URL) string {
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if scheme == "https" && port == "443" || scheme == "http" && port == "80" {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return scheme + "://" + host
}
