package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The personal API tokens (hookgate_tokens): a token is stored as its
// SHA-256 only.

// ErrNoToken means no token matched.
var ErrNoToken = errors.New("token not found")

// Token is a personal API token as stored, without the token itself.
type Token struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Person     *string    `json:"person"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	RevokedBy  *string    `json:"revoked_by"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// tokenColumns are Token's columns, in its order.
const tokenColumns = `id, name, role, person, created_by, created_at, expires_at, revoked_at, revoked_by, last_used_at`

// NewToken is a token to insert.
type NewToken struct {
	ID, Name, Role, Person, CreatedBy string
	SHA256                            []byte
	ExpiresIn                         time.Duration
}

// InsertTokenTx inserts a token that expires ExpiresIn after now, and
// returns it as stored.
func InsertTokenTx(ctx context.Context, tx pgx.Tx, t NewToken) (Token, error) {
	rows, err := tx.Query(ctx, `INSERT INTO hookgate_tokens (id, name, role, person, token_sha256, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
		RETURNING `+tokenColumns,
		t.ID, t.Name, t.Role, nullIfEmpty(t.Person), t.SHA256, t.CreatedBy, t.ExpiresIn.Seconds())
	if err != nil {
		return Token{}, fmt.Errorf("insert token: %w", err)
	}
	tok, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Token])
	if err != nil {
		return Token{}, fmt.Errorf("insert token: %w", err)
	}
	return tok, nil
}

// LiveTokenBySHA256 returns the token whose SHA-256 is sum, unless it is
// revoked or expired (ErrNoToken), and notes its use when the last one
// noted is a minute old or more.
func LiveTokenBySHA256(ctx context.Context, db Querier, sum []byte) (Token, error) {
	rows, err := db.Query(ctx, `
		WITH live AS (
			SELECT `+tokenColumns+` FROM hookgate_tokens
			WHERE token_sha256 = $1 AND revoked_at IS NULL AND expires_at > now()),
		used AS (
			UPDATE hookgate_tokens t SET last_used_at = now() FROM live
			WHERE t.id = live.id AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute'))
		SELECT * FROM live`, sum)
	if err != nil {
		return Token{}, fmt.Errorf("read token: %w", err)
	}
	tok, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Token])
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, ErrNoToken
	}
	if err != nil {
		return Token{}, fmt.Errorf("read token: %w", err)
	}
	return tok, nil
}

// Tokens returns every token, revoked and expired ones included, newest
// first.
func Tokens(ctx context.Context, db Querier) ([]Token, error) {
	rows, err := db.Query(ctx, `SELECT `+tokenColumns+` FROM hookgate_tokens ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	toks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Token])
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return toks, nil
}

// RevokeTokenTx revokes the token id, unless it is revoked already, and
// returns it with whether this call revoked it; ErrNoToken when there is
// none.
func RevokeTokenTx(ctx context.Context, tx pgx.Tx, id, by string) (Token, bool, error) {
	rows, err := tx.Query(ctx, `
		WITH revoked AS (
			UPDATE hookgate_tokens SET revoked_at = now(), revoked_by = $2
			WHERE id = $1 AND revoked_at IS NULL
			RETURNING `+tokenColumns+`)
		SELECT *, true FROM revoked
		UNION ALL
		SELECT `+tokenColumns+`, false FROM hookgate_tokens WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM revoked)`, id, by)
	if err != nil {
		return Token{}, false, fmt.Errorf("revoke token: %w", err)
	}
	type result struct {
		Token
		Now bool
	}
	res, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (result, error) {
		var r result
		t := &r.Token
		err := row.Scan(&t.ID, &t.Name, &t.Role, &t.Person, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt,
			&t.RevokedBy, &t.LastUsedAt, &r.Now)
		return r, err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, false, ErrNoToken
	}
	if err != nil {
		return Token{}, false, fmt.Errorf("revoke token: %w", err)
	}
	return res.Token, res.Now, nil
}

// TokenPersonTx returns the person the token id acts for ("" for none), and
// locks its row until tx ends; ErrNoToken when no token has the id.
func TokenPersonTx(ctx context.Context, tx pgx.Tx, id string) (string, error) {
	var person *string
	err := tx.QueryRow(ctx, `SELECT person FROM hookgate_tokens WHERE id = $1 FOR UPDATE`, id).Scan(&person)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNoToken
	}
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	if person == nil {
		return "", nil
	}
	return *person, nil
}

// CapPersonTokens lowers to role (viewer, operator or admin) the role of
// every live token of person whose role is above it, and returns how many
// it lowered.
func CapPersonTokens(ctx context.Context, db Querier, person, role string) (int64, error) {
	const rank = `CASE %s WHEN 'viewer' THEN 1 WHEN 'operator' THEN 2 WHEN 'admin' THEN 3 END`
	tag, err := db.Exec(ctx, `UPDATE hookgate_tokens SET role = $2
		WHERE person = $1 AND revoked_at IS NULL AND `+fmt.Sprintf(rank, "role")+` > `+fmt.Sprintf(rank, "$2::text"), person, role)
	if err != nil {
		return 0, fmt.Errorf("cap tokens: %w", err)
	}
	return tag.RowsAffected(), nil
}
