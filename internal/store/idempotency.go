package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The records of idempotent operator requests (hookgate_idempotency): one per
// (scope, operation, key), holding the request's hash and its answer, written
// in the transaction of the request's own writes.

// IdempotencyKey identifies a record: who may reuse the key (Scope), the
// endpoint (Operation) and the client's Idempotency-Key (Key).
type IdempotencyKey struct {
	Scope, Operation, Key string
}

// TryLockIdempotencyKeyTx takes a transaction-scoped advisory lock on the key,
// without waiting; locked is false when another transaction holds it. A
// request in flight holds this lock rather than a committed "pending" row: a
// request that fails, or a process that dies, frees the key at once.
func TryLockIdempotencyKeyTx(ctx context.Context, tx pgx.Tx, k IdempotencyKey) (locked bool, err error) {
	err = tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))",
		"idempotency|"+k.Scope+"|"+k.Operation+"|"+k.Key).Scan(&locked)
	if err != nil {
		return false, fmt.Errorf("lock key: %w", err)
	}
	return locked, nil
}

// IdempotencyRecord is the kept answer to the first request with a key.
type IdempotencyRecord struct {
	// RequestHash is the request's hash, to compare a retry's with.
	RequestHash []byte
	Status      int
	Body        []byte
}

// CompletedIdempotencyRecord returns the key's completed record that has not
// expired; found is false when there is none.
func CompletedIdempotencyRecord(ctx context.Context, db Querier, k IdempotencyKey) (rec IdempotencyRecord, found bool, err error) {
	err = db.QueryRow(ctx, `
		SELECT request_hash, response_status, response_body FROM hookgate_idempotency
		WHERE scope = $1 AND operation = $2 AND key = $3 AND expires_at > now() AND state = 'completed'`,
		k.Scope, k.Operation, k.Key).Scan(&rec.RequestHash, &rec.Status, &rec.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return IdempotencyRecord{}, false, nil
	}
	if err != nil {
		return IdempotencyRecord{}, false, fmt.Errorf("read key: %w", err)
	}
	return rec, true, nil
}

// StoreIdempotencyRecordTx keeps rec as the key's completed record for ttl,
// in tx, the transaction of the request's writes: so an answer is kept
// exactly when its work is. An expired record of the key is replaced.
func StoreIdempotencyRecordTx(ctx context.Context, tx pgx.Tx, k IdempotencyKey, rec IdempotencyRecord, ttl time.Duration) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO hookgate_idempotency (scope, operation, key, request_hash, state, response_status, response_body, expires_at)
		VALUES ($1, $2, $3, $4, 'completed', $5, $6, now() + make_interval(secs => $7))
		ON CONFLICT (scope, operation, key) DO UPDATE SET
			request_hash = excluded.request_hash, state = excluded.state, response_status = excluded.response_status,
			response_body = excluded.response_body, created_at = now(), expires_at = excluded.expires_at`,
		k.Scope, k.Operation, k.Key, rec.RequestHash, rec.Status, rec.Body, ttl.Seconds())
	if err != nil {
		return fmt.Errorf("store key: %w", err)
	}
	return nil
}
