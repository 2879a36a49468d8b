package store

import (
	"context"
	"fmt"
)

// The server's own state, read by the load tool (gateway bench) to measure
// the database beside the gateway.

// CheckpointerPID returns the process id of the server's checkpointer.
func CheckpointerPID(ctx context.Context, db Querier) (int, error) {
	var pid int
	if err := db.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'`).Scan(&pid); err != nil {
		return 0, fmt.Errorf("find checkpointer: %w", err)
	}
	return pid, nil
}

// CommitWALMessage commits a transaction of one WAL record of its own: its
// commit waits for the disk's flush (a transaction id alone does not), so
// its time is the flush time.
func CommitWALMessage(ctx context.Context, db Querier) error {
	if _, err := db.Exec(ctx, "SELECT pg_logical_emit_message(true, 'hookgate-bench', '')"); err != nil {
		return fmt.Errorf("commit a WAL message: %w", err)
	}
	return nil
}
