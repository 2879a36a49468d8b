package pgembed_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/pgembed"
)

// The private server starts, keeps its data across a stop and a start, and
// stops cleanly.
func TestStartStopKeepsData(t *testing.T) {
	dir, err := os.MkdirTemp("", "hookgate-pgembed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()

	query := func(setup, sql string) string {
		srv, err := pgembed.Start(ctx, pgembed.Options{Dir: dir})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		conn, err := pgx.Connect(ctx, srv.URL())
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		if setup != "" {
			if _, err := conn.Exec(ctx, setup); err != nil {
				t.Fatalf("exec: %v", err)
			}
		}
		var out string
		if err := conn.QueryRow(ctx, sql).Scan(&out); err != nil {
			t.Fatalf("query: %v", err)
		}
		conn.Close(ctx)
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := srv.Stop(stopCtx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		return out
	}

	if got := query("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')", "SELECT current_database()"); got != "hookgate" {
		t.Fatalf("database = %q", got)
	}
	if got := query("", "SELECT v FROM kept"); got != "hello" {
		t.Fatalf("after restart got %q", got)
	}
}
