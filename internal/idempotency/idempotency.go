// Package idempotency makes mutating operator requests safe to retry: the same
// Idempotency-Key with the same request returns the first answer and does
// nothing more; with another request it is refused; while the first is still
// being answered, a second is told so.
//
// One record per (scope, operation, key) holds the request's hash and the
// answer. The record and the request's own writes commit in one transaction,
// so an answer is kept exactly when its work is. A request in flight holds a
// transaction-scoped advisory lock on its key rather than a committed
// "pending" row: a request that fails, or a process that dies, frees the key
// at once, and only 2xx answers are ever kept.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors returned by Do.
var (
	// ErrKeyReused means the key was first used for a different request.
	ErrKeyReused = errors.New("idempotency key reused with a different request")
	// ErrInFlight means the first request with the key has not been answered yet.
	ErrInFlight = errors.New("a request with this idempotency key is in flight")
	// ErrBadBody means the body is not JSON, so it cannot be compared.
	ErrBadBody = errors.New("request body is not valid JSON")
	// ErrBadKey means the key is too long or not printable text.
	ErrBadKey = errors.New("bad idempotency key")
)

// TTL is how long a key is kept from its first use.
const TTL = 24 * time.Hour

// MaxKeyLen bounds a key.
const MaxKeyLen = 255

// CheckKey returns ErrBadKey unless key is at most MaxKeyLen bytes of valid
// UTF-8 without control characters. A key is stored and locked on as text,
// which PostgreSQL refuses to hold NUL or invalid UTF-8; a header can carry
// both, and that is the client's mistake, not the server's.
func CheckKey(key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: Idempotency-Key is longer than %d bytes", ErrBadKey, MaxKeyLen)
	}
	if !utf8.ValidString(key) || strings.ContainsFunc(key, unicode.IsControl) {
		return fmt.Errorf("%w: Idempotency-Key must be printable UTF-8 text", ErrBadKey)
	}
	return nil
}

// Key identifies a record.
type Key struct {
	// Scope is who may reuse the key: the operator's token identity.
	Scope string
	// Operation is the endpoint.
	Operation string
	// Key is the client's Idempotency-Key; empty means no key.
	Key string
}

// Response is an answer that can be given again.
type Response struct {
	Status int
	Body   []byte
}

// RequestHash is the SHA-256 of the request's path as received and its body's
// canonical JSON (keys sorted, no insignificant space). An empty body counts
// as {}.
func RequestHash(path string, body []byte) ([]byte, error) {
	canonical, err := Canonical(body)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte(path))
	h.Write([]byte{'\n'})
	h.Write(canonical)
	return h.Sum(nil), nil
}

// Canonical returns body's canonical JSON; an empty body is {}.
func Canonical(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, ErrBadBody
	}
	// encoding/json writes map keys sorted.
	out, err := json.Marshal(v)
	if err != nil {
		return nil, ErrBadBody
	}
	return out, nil
}

// Do runs work in one transaction. A key CheckKey refuses is ErrBadKey.
// Without a key it just commits work's result. With a key: a key in use by
// another request in flight is ErrInFlight; a kept record with another hash
// is ErrKeyReused; a kept record with the same hash is returned (replayed
// true) and work does not run; otherwise work runs, and a 2xx answer is
// stored with the work's writes.
func Do(ctx context.Context, pool *pgxpool.Pool, k Key, hash []byte,
	work func(ctx context.Context, tx pgx.Tx) (Response, error),
) (resp Response, replayed bool, err error) {
	if err := CheckKey(k.Key); err != nil {
		return Response{}, false, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return Response{}, false, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	if k.Key != "" {
		var locked bool
		err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))",
			"idempotency|"+k.Scope+"|"+k.Operation+"|"+k.Key).Scan(&locked)
		if err != nil {
			return Response{}, false, fmt.Errorf("lock key: %w", err)
		}
		if !locked {
			return Response{}, false, ErrInFlight
		}
		var stored Response
		var storedHash []byte
		err = tx.QueryRow(ctx, `
			SELECT request_hash, response_status, response_body FROM hookgate_idempotency
			WHERE scope = $1 AND operation = $2 AND key = $3 AND expires_at > now() AND state = 'completed'`,
			k.Scope, k.Operation, k.Key).Scan(&storedHash, &stored.Status, &stored.Body)
		switch {
		case err == nil && !bytes.Equal(storedHash, hash):
			return Response{}, false, ErrKeyReused
		case err == nil:
			return stored, true, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return Response{}, false, fmt.Errorf("read key: %w", err)
		}
	}

	resp, err = work(ctx, tx)
	if err != nil {
		return Response{}, false, err
	}
	if k.Key != "" && resp.Status >= 200 && resp.Status < 300 {
		// An expired record of the key is replaced.
		_, err := tx.Exec(ctx, `
			INSERT INTO hookgate_idempotency (scope, operation, key, request_hash, state, response_status, response_body, expires_at)
			VALUES ($1, $2, $3, $4, 'completed', $5, $6, now() + make_interval(secs => $7))
			ON CONFLICT (scope, operation, key) DO UPDATE SET
				request_hash = excluded.request_hash, state = excluded.state, response_status = excluded.response_status,
				response_body = excluded.response_body, created_at = now(), expires_at = excluded.expires_at`,
			k.Scope, k.Operation, k.Key, hash, resp.Status, resp.Body, TTL.Seconds())
		if err != nil {
			return Response{}, false, fmt.Errorf("store key: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Response{}, false, fmt.Errorf("commit: %w", err)
	}
	return resp, false, nil
}
