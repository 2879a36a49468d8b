// Package access is who may do what at the operator endpoints: the roles
// (viewer, operator, admin), the identity a request acts as, and personal
// API tokens, made and revoked by an admin and stored only as their SHA-256.
// GATEWAY_ADMIN_TOKEN stays the break-glass admin. Package server decides
// which role each endpoint needs.
package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/store"
)

// Role is what an identity may do; each role may do all that the ones
// before it may.
type Role int

// The roles, in order.
const (
	// Viewer reads deliveries, bodies, routes, rejections, the audit log.
	Viewer Role = iota + 1
	// Operator also replays, retries, pauses and resumes routes, runs
	// recovery and the archive.
	Operator
	// Admin also manages personal tokens.
	Admin
)

// Roles are the roles, in order.
var Roles = []Role{Viewer, Operator, Admin}

// String is the role's name, as written in JSON and the configuration.
func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Operator:
		return "operator"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// Allows reports whether r may do what needs the role need.
func (r Role) Allows(need Role) bool { return r >= need }

// ErrBadRole means a role name that is none of Roles.
var ErrBadRole = errors.New("no such role")

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if s == r.String() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w: %q (viewer, operator or admin)", ErrBadRole, s)
}

// Identity is who a request acts as.
type Identity struct {
	// Actor names it in the audit and replay logs: token:<digest> for the
	// admin token, token:<id> (<name>) for a personal token.
	Actor string
	// Role caps what it may do.
	Role Role
	// TokenID is the personal token's id; empty for the admin token and a
	// console session.
	TokenID string
	// Person is the person (oidc:<email>) it acts for: one signed in to the
	// console, or whose token it is; empty for the admin token and tokens
	// an admin made.
	Person string
	// Session says that it acts through a console session (a browser), not
	// a bearer token.
	Session bool
}

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityOf returns the identity ctx carries, if any.
func IdentityOf(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// TokenPrefix starts every personal token, so that one is told from the
// admin token (and found by secret scanners) at a glance.
const TokenPrefix = "hgt_"

// IsPersonalToken reports whether s has the form of a personal token.
func IsPersonalToken(s string) bool { return strings.HasPrefix(s, TokenPrefix) }

// Limits on a token as asked for.
const (
	// DefaultExpiresIn is a token's life when the request names none.
	DefaultExpiresIn = 30 * 24 * time.Hour
	// MaxExpiresIn is the longest life a token may have.
	MaxExpiresIn = 366 * 24 * time.Hour
	// MinExpiresIn is the shortest life a token may have.
	MinExpiresIn = time.Minute
	// MaxNameLen bounds a token's name, in characters.
	MaxNameLen = 100
)

// Errors of Create and Revoke.
var (
	// ErrBadToken means a token asked for with a bad name, role or life.
	ErrBadToken = errors.New("bad token request")
	// ErrNotFound means no token has the id.
	ErrNotFound = errors.New("no such token")
	// ErrUnknown means a bearer token that is no live personal token:
	// never made, revoked or expired.
	ErrUnknown = errors.New("unknown token")
	// ErrForbidden means tokens another may not make, see or revoke: only
	// an admin manages everyone's; a person signed in to the console,
	// their own.
	ErrForbidden = errors.New("forbidden")
)

// MayManageTokens reports why id may manage no tokens at all
// (ErrForbidden), or nil when it may manage some: everyone's or its own.
func MayManageTokens(id Identity) error {
	_, err := managesOwn(id)
	return err
}

// managesOwn reports whether id manages tokens of its own only (a person
// in the console who is no admin), and ErrForbidden when it may manage
// none.
func managesOwn(id Identity) (bool, error) {
	switch {
	case id.Role.Allows(Admin):
		return false, nil
	case id.Session && id.Person != "":
		return true, nil
	}
	return false, fmt.Errorf("%w: tokens are managed by an admin, or by a person for themself from the console; %s has the %s role",
		ErrForbidden, id.Actor, id.Role)
}

// Request is a token asked for.
type Request struct {
	// Name tells the token apart in lists and logs: 1 to 100 printable
	// characters.
	Name string
	// Role caps what the token may do; at most the maker's role.
	Role Role
	// ExpiresIn is the token's life: DefaultExpiresIn when zero, at most
	// MaxExpiresIn.
	ExpiresIn time.Duration
}

// Check reports what is wrong with q when made by a maker of role maker.
func (q *Request) Check(maker Role) error {
	n := utf8.RuneCountInString(q.Name)
	switch {
	case strings.TrimSpace(q.Name) == "" || n > MaxNameLen || !utf8.ValidString(q.Name) || strings.IndexFunc(q.Name, notPrintable) >= 0:
		return fmt.Errorf("%w: name: 1 to %d printable characters", ErrBadToken, MaxNameLen)
	case strings.TrimSpace(q.Name) != q.Name:
		return fmt.Errorf("%w: name: no space before or after it", ErrBadToken)
	case q.Role == 0:
		return fmt.Errorf("%w: role: viewer, operator or admin is required", ErrBadToken)
	case !maker.Allows(q.Role):
		// Beyond the maker's role: refused as any request beyond a role is.
		return fmt.Errorf("%w: role: %s is above the maker's own role (%s)", ErrForbidden, q.Role, maker)
	case q.ExpiresIn != 0 && (q.ExpiresIn < MinExpiresIn || q.ExpiresIn > MaxExpiresIn):
		return fmt.Errorf("%w: expires_in: a duration from %s to %s", ErrBadToken, MinExpiresIn, MaxExpiresIn)
	}
	return nil
}

// notPrintable reports a rune a name may not hold: one that does not print,
// or U+FFFD, which is what bytes that were no text (or a lone surrogate in
// JSON) decode to.
func notPrintable(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }

// SameSecret compares two secrets in constant time, of their digests, so
// that neither's length leaks; an empty one is never the same.
func SameSecret(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return a != "" && b != "" && subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// Made is a token just made: the only time the token itself is told.
type Made struct {
	store.Token
	// Secret is the token itself, shown once.
	Secret string `json:"token"`
}

// Create makes a token as asked by maker, with its audit entry, in one
// transaction. An admin makes tokens for anyone; a person signed in to the
// console (maker.Session), for themself, up to their own role. A person's
// token acts for them (its Person).
func Create(ctx context.Context, pool *pgxpool.Pool, maker Identity, q Request) (Made, error) {
	if _, err := managesOwn(maker); err != nil {
		return Made{}, err
	}
	if err := q.Check(maker.Role); err != nil {
		return Made{}, err
	}
	if q.ExpiresIn == 0 {
		q.ExpiresIn = DefaultExpiresIn
	}
	secret := TokenPrefix + random(32)
	sum := sha256.Sum256([]byte(secret))
	nt := store.NewToken{ID: "tok_" + random(10), Name: q.Name, Role: q.Role.String(), CreatedBy: maker.Actor,
		SHA256: sum[:], ExpiresIn: q.ExpiresIn}
	if maker.Session {
		nt.Person = maker.Person
	}
	var made Made
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		t, err := store.InsertTokenTx(ctx, tx, nt)
		if err != nil {
			return err
		}
		made = Made{Token: t, Secret: secret}
		return audit.Record(ctx, tx, audit.NewEntry{Actor: maker.Actor, Action: audit.TokenCreate,
			Reason: fmt.Sprintf("%s: role %s, expires %s", described(t), t.Role, t.ExpiresAt.UTC().Format(time.RFC3339))})
	})
	if err != nil {
		return Made{}, fmt.Errorf("create token: %w", err)
	}
	return made, nil
}

// SignedIn caps the tokens of a person who has just signed in at the role
// the sign-in gave them: a token acts for its person, never above their
// role as of their latest sign-in. It returns how many tokens it lowered.
func SignedIn(ctx context.Context, db store.Querier, person string, role Role) (int64, error) {
	return store.CapPersonTokens(ctx, db, person, role.String())
}

// List returns the tokens by may see, newest first, never the tokens
// themselves: an admin, every token; a person in the console, theirs.
func List(ctx context.Context, db store.Querier, by Identity) ([]store.Token, error) {
	own, err := managesOwn(by)
	if err != nil {
		return nil, err
	}
	toks, err := store.Tokens(ctx, db)
	if err != nil || !own {
		return toks, err
	}
	return slices.DeleteFunc(toks, func(t store.Token) bool { return t.Person == nil || *t.Person != by.Person }), nil
}

// Revoke revokes the token id at once, with an audit entry; revoking a
// revoked token changes nothing and answers it as it is. A person in the
// console revokes their own tokens only: another's is not found.
func Revoke(ctx context.Context, pool *pgxpool.Pool, by Identity, id string) (store.Token, error) {
	own, err := managesOwn(by)
	if err != nil {
		return store.Token{}, err
	}
	if !idRE.MatchString(id) {
		return store.Token{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	var t store.Token
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if own {
			person, err := store.TokenPersonTx(ctx, tx, id)
			if err != nil {
				return err
			}
			if person != by.Person {
				return store.ErrNoToken
			}
		}
		var now bool
		var err error
		if t, now, err = store.RevokeTokenTx(ctx, tx, id, by.Actor); err != nil || !now {
			return err
		}
		return audit.Record(ctx, tx, audit.NewEntry{Actor: by.Actor, Action: audit.TokenRevoke, Reason: described(t)})
	})
	if errors.Is(err, store.ErrNoToken) {
		return store.Token{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return store.Token{}, fmt.Errorf("revoke token: %w", err)
	}
	return t, nil
}

// Authenticate returns the identity of a personal token, read from the
// database on every call, so that a revoked one fails on every gateway
// from the next request on; ErrUnknown when it is no live token.
func Authenticate(ctx context.Context, db store.Querier, secret string) (Identity, error) {
	sum := sha256.Sum256([]byte(secret))
	t, err := store.LiveTokenBySHA256(ctx, db, sum[:])
	if errors.Is(err, store.ErrNoToken) {
		return Identity{}, ErrUnknown
	}
	if err != nil {
		return Identity{}, err
	}
	role, err := ParseRole(t.Role)
	if err != nil {
		return Identity{}, fmt.Errorf("token %s: %w", t.ID, err)
	}
	id := Identity{Actor: ActorOf(t), Role: role, TokenID: t.ID}
	if t.Person != nil {
		id.Person = *t.Person
	}
	return id, nil
}

// idRE is what a token's id looks like ("tok_" and random's alphabet):
// anything else names none, and is never sent to the database.
var idRE = regexp.MustCompile(`^tok_[a-z2-7]{1,64}$`)

// described names a token in an audit entry's reason: its id and its name
// quoted, so that a name cannot pass for more of the entry.
func described(t store.Token) string { return fmt.Sprintf("%s %q", t.ID, t.Name) }

// ActorOf is how the logs name a personal token: token:<id> (<name>).
func ActorOf(t store.Token) string { return fmt.Sprintf("token:%s (%s)", t.ID, t.Name) }

// random returns n bytes of crypto/rand as lower-case base32 without
// padding.
func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}
