package receipts_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func insert(t *testing.T, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, s *receipts.Store, d providers.Delivery) (receipts.Outcome, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	out, err := s.InsertTx(ctx, tx, d)
	if err != nil {
		return out, err
	}
	return out, tx.Commit(ctx)
}

func TestInsertAndRead(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	s := &receipts.Store{Retention: 72 * time.Hour}
	eventTime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := providers.Delivery{
		Provider: "github", Scope: "7", DeliveryID: "g-1", Event: "pull_request.opened",
		Entity: "github:pull_request:1", EventTime: eventTime, ContentType: "application/json",
		Headers: map[string]string{"X-GitHub-Event": "pull_request"}, Body: []byte(`{"action":"opened","pad":"0123456789"}`),
	}
	if out, err := insert(t, pool, s, d); err != nil || out != receipts.New {
		t.Fatalf("first insert = %v, %v", out, err)
	}
	if out, err := insert(t, pool, s, d); err != nil || out != receipts.Duplicate {
		t.Fatalf("second insert = %v, %v", out, err)
	}
	other := d
	other.Body = []byte(`{"action":"closed"}`)
	if _, err := insert(t, pool, s, other); !errors.Is(err, receipts.ErrConflict) {
		t.Fatalf("other body = %v, want ErrConflict", err)
	}

	r, err := s.First(context.Background(), pool, "github", "g-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Body, d.Body) || r.Event != d.Event || r.Entity != d.Entity || !r.EventTime.Equal(eventTime) ||
		r.Scope != "7" || r.ContentType != d.ContentType || r.Headers["X-GitHub-Event"] != "pull_request" || len(r.BodySHA256) != 32 {
		t.Fatalf("read back %+v (body %q)", r, r.Body)
	}
	if got := r.ExpiresAt.Sub(r.ReceivedAt); got != 72*time.Hour {
		t.Fatalf("expires %s after receipt, want 72h", got)
	}
	if _, err := s.First(context.Background(), pool, "github", "nope"); !errors.Is(err, receipts.ErrNotFound) {
		t.Fatalf("missing = %v", err)
	}
}
