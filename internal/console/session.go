package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
}

// errNoSession means the request carries no live session.
var errNoSession = errors.New("no session")

// sessions keeps the console's sessions in PostgreSQL, so that every gateway
// process behind a load balancer knows them and sign-out ends them
// everywhere.
type sessions struct {
	pool  *pgxpool.Pool
	actor string // the current admin token's actor; others' sessions are dead
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

// create stores a new session and returns its id, for the cookie.
func (s *sessions) create(ctx context.Context) (string, error) {
	id := randomToken()
	if _, err := s.pool.Exec(ctx, `INSERT INTO hookgate_console_sessions (id_sha256, csrf, actor) VALUES ($1, $2, $3)`,
		digest(id), randomToken(), s.actor); err != nil {
		return "", fmt.Errorf("create console session: %w", err)
	}
	// Now and then, sessions long idle go; the retention job removes the rest.
	_, _ = s.pool.Exec(ctx, `DELETE FROM hookgate_console_sessions WHERE seen_at < now() - make_interval(secs => $1)`,
		IdleTimeout.Seconds())
	return id, nil
}

// get returns the request's live session, touching it when its last-seen
// time is older than touchEvery; errNoSession when there is none.
func (s *sessions) get(ctx context.Context, r *http.Request) (session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" || len(c.Value) > 100 {
		return session{}, errNoSession
	}
	var sess session
	var stale bool
	err = s.pool.QueryRow(ctx, `SELECT csrf, seen_at < now() - make_interval(secs => $3)
		FROM hookgate_console_sessions
		WHERE id_sha256 = $1 AND actor = $2 AND seen_at >= now() - make_interval(secs => $4)`,
		digest(c.Value), s.actor, touchEvery.Seconds(), IdleTimeout.Seconds()).Scan(&sess.csrf, &stale)
	if errors.Is(err, pgx.ErrNoRows) {
		return session{}, errNoSession
	}
	if err != nil {
		return session{}, fmt.Errorf("read console session: %w", err)
	}
	if stale {
		if _, err := s.pool.Exec(ctx, `UPDATE hookgate_console_sessions SET seen_at = now() WHERE id_sha256 = $1`, digest(c.Value)); err != nil {
			return session{}, fmt.Errorf("touch console session: %w", err)
		}
	}
	return sess, nil
}

// remove ends the request's session, if any.
func (s *sessions) remove(ctx context.Context, r *http.Request) error {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM hookgate_console_sessions WHERE id_sha256 = $1`, digest(c.Value)); err != nil {
		return fmt.Errorf("end console session: %w", err)
	}
	return nil
}

// sameToken compares two tokens in constant time (of their digests, so that
// the length does not leak either).
func sameToken(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return a != "" && subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// cookie returns a console cookie: HttpOnly, SameSite=Strict, for /admin
// only, and Secure when the request came over TLS. maxAge 0 makes a cookie
// that ends with the browser; -1 deletes it.
func cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: "/admin", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
}

// sameOrigin reports whether a request came from a page of this gateway: the
// browser's Sec-Fetch-Site says so, or its Origin names this host. A request
// with neither (an old browser, a script) is not trusted with a session.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}
