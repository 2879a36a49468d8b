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

	"github.com/hookgate/hookgate/internal/store"
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

	key := store.IdempotencyKey{Scope: k.Scope, Operation: k.Operation, Key: k.Key}
	if k.Key != "" {
		locked, err := store.TryLockIdempotencyKeyTx(ctx, tx, key)
		if err != nil {
			return Response{}, false, err
		}
		if !locked {
			return Response{}, false, ErrInFlight
		}
		stored, found, err := store.CompletedIdempotencyRecord(ctx, tx, key)
		switch {
		case err != nil:
			return Response{}, false, err
		case found && !bytes.Equal(stored.RequestHash, hash):
			return Response{}, false, ErrKeyReused
		case found:
			return Response{Status: stored.Status, Body: stored.Body}, true, nil
		}
	}

	resp, err = work(ctx, tx)
	if err != nil {
		return Response{}, false, err
	}
	if k.Key != "" && resp.Status >= 200 && resp.Status < 300 {
		rec := store.IdempotencyRecord{RequestHash: hash, Status: resp.Status, Body: resp.Body}
		if err := store.StoreIdempotencyRecordTx(ctx, tx, key, rec, TTL); err != nil {
			return Response{}, false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Response{}, false, fmt.Errorf("commit: %w", err)
	}
	return resp, false, nil
}
