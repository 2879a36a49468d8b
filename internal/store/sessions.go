package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The console's sessions (hookgate_console_sessions) and the generations of
// the admin token they belong to (hookgate_admin_token_generations). A
// session row is keyed by the SHA-256 of its cookie's id, never the id.

// LockAdminTokenGenerationsTx locks the admin token's generations until tx
// ends, against every other gateway recording one: two starting together with
// a new token share one generation.
func LockAdminTokenGenerationsTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `LOCK TABLE hookgate_admin_token_generations IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("lock admin token generations: %w", err)
	}
	return nil
}

// LatestAdminTokenGeneration returns the generation recorded last and its
// token's SHA-256; found is false when none has been recorded. Read it under
// LockAdminTokenGenerationsTx to decide whether to record a new one.
func LatestAdminTokenGeneration(ctx context.Context, db Querier) (id int64, tokenSHA256 []byte, found bool, err error) {
	err = db.QueryRow(ctx, `SELECT id, token_sha256 FROM hookgate_admin_token_generations ORDER BY id DESC LIMIT 1`).Scan(&id, &tokenSHA256)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("read admin token generation: %w", err)
	}
	return id, tokenSHA256, true, nil
}

// NewAdminTokenGenerationTx records a new generation of the admin token whose
// SHA-256 is tokenSHA256 and ends, in the same transaction, every session of
// the other generations: a token turned back does not revive them. The
// sessions of personal tokens and people stay. It returns the new generation.
func NewAdminTokenGenerationTx(ctx context.Context, tx pgx.Tx, tokenSHA256 []byte) (int64, error) {
	var gen int64
	if err := tx.QueryRow(ctx, `INSERT INTO hookgate_admin_token_generations (token_sha256) VALUES ($1) RETURNING id`, tokenSHA256).Scan(&gen); err != nil {
		return 0, fmt.Errorf("record admin token generation: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM hookgate_console_sessions WHERE token_id IS NULL AND person IS NULL AND generation IS DISTINCT FROM $1`, gen); err != nil {
		return 0, fmt.Errorf("end sessions of other generations: %w", err)
	}
	return gen, nil
}

// NewConsoleSession is a session to store: of the admin token's
// Generation, of the personal token TokenID, or of Person with PersonRole.
type NewConsoleSession struct {
	// IDSHA256 is the SHA-256 of its cookie's id; CSRF its forms' token.
	IDSHA256 []byte
	CSRF     string
	// Generation is the admin token's; used when TokenID and Person are
	// empty.
	Generation int64
	// TokenID is the personal token signed in with.
	TokenID string
	// Person names who signed in with OpenID Connect (as the audit log
	// does), and PersonRole is the role the identity provider gave.
	Person, PersonRole string
}

// InsertConsoleSession stores a new session.
func InsertConsoleSession(ctx context.Context, db Querier, n NewConsoleSession) error {
	var gen *int64
	var tok, person, role *string
	switch {
	case n.TokenID != "":
		tok = &n.TokenID
	case n.Person != "":
		person, role = &n.Person, &n.PersonRole
	default:
		gen = &n.Generation
	}
	if _, err := db.Exec(ctx, `INSERT INTO hookgate_console_sessions (id_sha256, csrf, generation, token_id, person, person_role)
		VALUES ($1, $2, $3, $4, $5, $6)`, n.IDSHA256, n.CSRF, gen, tok, person, role); err != nil {
		return fmt.Errorf("create console session: %w", err)
	}
	return nil
}

// DeleteIdleConsoleSessions removes the sessions not seen for idle.
func DeleteIdleConsoleSessions(ctx context.Context, db Querier, idle time.Duration) error {
	if _, err := db.Exec(ctx, `DELETE FROM hookgate_console_sessions WHERE seen_at < now() - make_interval(secs => $1)`,
		idle.Seconds()); err != nil {
		return fmt.Errorf("remove idle console sessions: %w", err)
	}
	return nil
}

// ConsoleSessionParams selects a live session.
type ConsoleSessionParams struct {
	// IDSHA256 is the SHA-256 of the session cookie's id.
	IDSHA256 []byte
	// Generation is the admin token's generation the session must belong to.
	Generation int64
	// Idle is how long since it was last seen a session ends.
	Idle time.Duration
	// TouchEvery is how long since it was last seen a session is stale.
	TouchEvery time.Duration
}

// ConsoleSession is a live session.
type ConsoleSession struct {
	// CSRF is the token every state-changing form of the session carries.
	CSRF string
	// Token is the personal token the session belongs to (id, name and
	// role filled); its zero value for another's session.
	Token Token
	// Person and PersonRole are the person the session belongs to and the
	// role given at sign-in; empty for another's session.
	Person, PersonRole string
	// Stale says that it was last seen longer ago than TouchEvery: touch it
	// (TouchConsoleSession).
	Stale bool
}

// ConsoleSessionOf returns the session p selects if it is live: seen within
// Idle, and a person's, of the admin token's generation, or of a personal
// token that is neither revoked nor expired (read now, so that a revocation
// ends its sessions on every gateway at once). found is false when there is
// none.
func ConsoleSessionOf(ctx context.Context, db Querier, p ConsoleSessionParams) (s ConsoleSession, found bool, err error) {
	var id, name, role, person, personRole *string
	err = db.QueryRow(ctx, `SELECT s.csrf, s.seen_at < now() - make_interval(secs => $3), t.id, t.name, t.role, s.person, s.person_role
		FROM hookgate_console_sessions s LEFT JOIN hookgate_tokens t ON t.id = s.token_id
		WHERE s.id_sha256 = $1 AND s.seen_at >= now() - make_interval(secs => $4)
		  AND (s.person IS NOT NULL
		       OR s.token_id IS NULL AND s.generation = $2
		       OR s.token_id IS NOT NULL AND t.revoked_at IS NULL AND t.expires_at > now())`,
		p.IDSHA256, p.Generation, p.TouchEvery.Seconds(), p.Idle.Seconds()).Scan(&s.CSRF, &s.Stale, &id, &name, &role, &person, &personRole)
	if id != nil {
		s.Token.ID, s.Token.Name, s.Token.Role = *id, *name, *role
	}
	if person != nil {
		s.Person, s.PersonRole = *person, *personRole
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ConsoleSession{}, false, nil
	}
	if err != nil {
		return ConsoleSession{}, false, fmt.Errorf("read console session: %w", err)
	}
	return s, true, nil
}

// TouchConsoleSession sets a session's last-seen time to now.
func TouchConsoleSession(ctx context.Context, db Querier, idSHA256 []byte) error {
	if _, err := db.Exec(ctx, `UPDATE hookgate_console_sessions SET seen_at = now() WHERE id_sha256 = $1`, idSHA256); err != nil {
		return fmt.Errorf("touch console session: %w", err)
	}
	return nil
}

// DeleteConsoleSession ends a session, if there is one.
func DeleteConsoleSession(ctx context.Context, db Querier, idSHA256 []byte) error {
	if _, err := db.Exec(ctx, `DELETE FROM hookgate_console_sessions WHERE id_sha256 = $1`, idSHA256); err != nil {
		return fmt.Errorf("end console session: %w", err)
	}
	return nil
}

// SetPersonSessionsRole gives every console session of person the role,
// the one their latest sign-in gave them.
func SetPersonSessionsRole(ctx context.Context, db Querier, person, role string) error {
	if _, err := db.Exec(ctx, `UPDATE hookgate_console_sessions SET person_role = $2 WHERE person = $1`, person, role); err != nil {
		return fmt.Errorf("set the role of a person's sessions: %w", err)
	}
	return nil
}
