package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Recovery's tables: a checkpoint (hookgate_recovery_checkpoints) is where
// the next recovery run of one source (a GitHub hook, or Stripe's events)
// starts listing; a request (hookgate_recovery_requests) is one GitHub
// delivery asked for again, its row the claim that counts the asks, ever,
// across processes and restarts. GitHub is the only provider asked to
// redeliver, so the requests' statements are GitHub's.

// RecoveryCheckpoint returns where source's next recovery run starts
// listing: the zero time when it has no checkpoint yet.
func RecoveryCheckpoint(ctx context.Context, db Querier, source string) (time.Time, error) {
	var cp time.Time
	err := db.QueryRow(ctx, `SELECT checkpoint FROM hookgate_recovery_checkpoints WHERE source = $1`, source).Scan(&cp)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("read checkpoint of %s: %w", source, err)
	}
	return cp, nil
}

// SaveRecoveryCheckpoint moves source's checkpoint to at; it never moves it
// back.
func SaveRecoveryCheckpoint(ctx context.Context, db Querier, source string, at time.Time) error {
	_, err := db.Exec(ctx, `INSERT INTO hookgate_recovery_checkpoints (source, checkpoint) VALUES ($1, $2)
		ON CONFLICT (source) DO UPDATE SET checkpoint = greatest(hookgate_recovery_checkpoints.checkpoint, excluded.checkpoint), updated_at = now()`,
		source, at)
	if err != nil {
		return fmt.Errorf("save checkpoint of %s: %w", source, err)
	}
	return nil
}

// ReceivedIDs returns which of ids have a receipt of provider, each once:
// of scope, or of any scope when scope is empty.
func ReceivedIDs(ctx context.Context, db Querier, provider, scope string, ids []string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT delivery_id FROM hookgate_receipts
		WHERE provider = $1 AND ($2 = '' OR scope = $2) AND delivery_id = ANY($3)`, provider, scope, ids)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	received, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	return received, nil
}

// RedeliveryClaim is one more ask for a GitHub delivery.
type RedeliveryClaim struct {
	// Scope is the hook's key among the requests; DeliveryID the delivery's
	// GUID.
	Scope, DeliveryID string
	// DeliveredAt is the delivery's first attempt's time, by which old
	// requests are pruned.
	DeliveredAt time.Time
	// MaxAttempts is how many asks a GUID gets, ever; AskAgainAfter how long
	// after an ask the next may be made.
	MaxAttempts   int
	AskAgainAfter time.Duration
}

// ClaimRedeliveryTx counts one more ask for c's GUID, in tx: the first ask
// makes its row, a later one adds one to its count. It returns the ask's
// number, or 0 (and writes nothing) when the GUID was asked for less than
// AskAgainAfter ago or MaxAttempts times already. The row's lock makes a
// second claim of the same GUID wait for tx, and then find the ask too
// recent.
func ClaimRedeliveryTx(ctx context.Context, tx pgx.Tx, c RedeliveryClaim) (int, error) {
	var attempt int
	err := tx.QueryRow(ctx, `INSERT INTO hookgate_recovery_requests AS q (provider, scope, delivery_id, attempts, delivered_at)
		VALUES ('github', $1, $2, 1, $3)
		ON CONFLICT (provider, scope, delivery_id) DO UPDATE SET attempts = q.attempts + 1, asked_at = now()
		WHERE q.attempts < $4 AND q.asked_at < now() - make_interval(secs => $5)
		RETURNING attempts`, c.Scope, c.DeliveryID, c.DeliveredAt, c.MaxAttempts, c.AskAgainAfter.Seconds()).Scan(&attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	return attempt, nil
}

// UnclaimRedeliveryTx takes back the last ask counted for the GitHub
// delivery deliveryID of scope, in tx: the first ask's row goes; a later
// ask's count goes down by one.
func UnclaimRedeliveryTx(ctx context.Context, tx pgx.Tx, scope, deliveryID string) error {
	_, err := tx.Exec(ctx, `DELETE FROM hookgate_recovery_requests
		WHERE provider = 'github' AND scope = $1 AND delivery_id = $2 AND attempts = 1`, scope, deliveryID)
	if err == nil {
		_, err = tx.Exec(ctx, `UPDATE hookgate_recovery_requests SET attempts = attempts - 1
			WHERE provider = 'github' AND scope = $1 AND delivery_id = $2 AND attempts > 1`, scope, deliveryID)
	}
	if err != nil {
		return fmt.Errorf("unclaim: %w", err)
	}
	return nil
}

// RedeliveryCheck names a GitHub delivery whose asks are read, and the
// policy they are read by (as in RedeliveryClaim).
type RedeliveryCheck struct {
	Scope, DeliveryID string
	MaxAttempts       int
	AskAgainAfter     time.Duration
}

// RedeliveryState is what the asks for one GitHub delivery come to.
type RedeliveryState struct {
	// Attempts is how many times it was asked for; 0 when never.
	Attempts int
	// Lately says the last ask was less than AskAgainAfter ago.
	Lately bool
	// GaveUp says it was given up on just now (see SettleRedeliveryTx).
	GaveUp bool
}

// SettleRedeliveryTx reads the asks for c's GUID, in tx, and gives up on it
// when it was asked for MaxAttempts times, the last AskAgainAfter ago or
// more, and not given up on before: its given_up_at is set then, so that it
// is given up on once. A GUID never asked for reads as the zero state.
func SettleRedeliveryTx(ctx context.Context, tx pgx.Tx, c RedeliveryCheck) (RedeliveryState, error) {
	var s RedeliveryState
	err := tx.QueryRow(ctx, `WITH given_up AS (
			UPDATE hookgate_recovery_requests SET given_up_at = now()
			WHERE provider = 'github' AND scope = $1 AND delivery_id = $2 AND attempts >= $3
				AND asked_at < now() - make_interval(secs => $4) AND given_up_at IS NULL
			RETURNING 1)
		SELECT attempts, asked_at >= now() - make_interval(secs => $4), EXISTS (SELECT FROM given_up)
		FROM hookgate_recovery_requests WHERE provider = 'github' AND scope = $1 AND delivery_id = $2`,
		c.Scope, c.DeliveryID, c.MaxAttempts, c.AskAgainAfter.Seconds()).Scan(&s.Attempts, &s.Lately, &s.GaveUp)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return RedeliveryState{}, fmt.Errorf("read attempts: %w", err)
	}
	return s, nil
}

// RedeliveryAsks is one GitHub delivery's asks as RedeliveryAttempts reads
// them.
type RedeliveryAsks struct {
	DeliveryID string
	// Attempts is how many times it was asked for.
	Attempts int
	// Lately says the last ask was less than askAgainAfter ago.
	Lately bool
}

// RedeliveryAttempts returns the asks of those of the GitHub deliveries ids
// of scope that were asked for, changing nothing.
func RedeliveryAttempts(ctx context.Context, db Querier, scope string, ids []string, askAgainAfter time.Duration) ([]RedeliveryAsks, error) {
	rows, err := db.Query(ctx, `SELECT delivery_id, attempts, asked_at >= now() - make_interval(secs => $3)
		FROM hookgate_recovery_requests WHERE provider = 'github' AND scope = $1 AND delivery_id = ANY($2)`,
		scope, ids, askAgainAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	asks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RedeliveryAsks, error) {
		var a RedeliveryAsks
		err := row.Scan(&a.DeliveryID, &a.Attempts, &a.Lately)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	return asks, nil
}

// PruneRedeliveryRequests deletes the requests of deliveries first sent
// more than keep ago.
func PruneRedeliveryRequests(ctx context.Context, db Querier, keep time.Duration) error {
	_, err := db.Exec(ctx, `DELETE FROM hookgate_recovery_requests WHERE delivered_at < now() - make_interval(secs => $1)`, keep.Seconds())
	if err != nil {
		return fmt.Errorf("prune recovery requests: %w", err)
	}
	return nil
}
