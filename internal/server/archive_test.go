package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/archive"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/server"
	"github.com/hookgate/hookgate/internal/store"
)

// With an archive, retention archives a day before it deletes any of it,
// and an operator lists the archived days, archives one now and brings one
// back, searchable and shown as it was.
func TestArchiveAndRestoreADay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := archive.Open("file://"+t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	b := setupAdminOn(t, dbtest.NewPool(t), adminToken, withKeys(t), func(c *server.Config) {
		c.Admin.Archive, c.Admin.Retention = s, 72*time.Hour
	})
	b.start(t)
	b.invoiceOf(t, "evt_a", "cus_123", "in_1")
	b.invoiceOf(t, "evt_b", "cus_999", "in_2")
	// A day with a dispatch in progress waits: every route's done first.
	for _, id := range []string{"evt_a", "evt_b"} {
		for _, route := range []string{"fwd", "audit"} {
			dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: id, Route: route, Generation: 1}, "succeeded")
		}
	}
	// Received on 2026-11-02, expired since.
	if _, err := b.pool.Exec(ctx, `
		WITH r AS (UPDATE hookgate_receipts SET received_at = '2026-11-02T10:00:00Z', expires_at = now() - interval '1 hour' RETURNING provider, delivery_id)
		UPDATE hookgate_search_keys k SET received_at = '2026-11-02T10:00:00Z' FROM r WHERE k.provider = r.provider AND k.delivery_id = r.delivery_id`); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Store *string             `json:"store"`
		Days  []store.ArchivedDay `json:"days"`
	}
	b.adminJSON(t, adminReq{path: "/admin/archive"}, 200, &list)
	if list.Store == nil || !strings.HasPrefix(*list.Store, "file://") || len(list.Days) != 0 {
		t.Fatalf("GET /admin/archive = %+v", list)
	}

	// Retention deletes nothing of a day the archive lacks; archived, it
	// deletes the day.
	policy := retention.Policy{Retention: 72 * time.Hour, Archive: s}
	if n, err := retention.DeleteExpired(ctx, b.pool, policy); err != nil || n != 0 {
		t.Fatalf("retention before the archive: %d, %v", n, err)
	}
	if err := retention.ArchiveDue(ctx, b.pool, s, discard(), nil); err != nil {
		t.Fatal(err)
	}
	if n, err := retention.DeleteExpired(ctx, b.pool, policy); err != nil || n != 2 {
		t.Fatalf("retention after the archive: %d, %v", n, err)
	}
	b.adminJSON(t, adminReq{path: "/admin/archive"}, 200, &list)
	if len(list.Days) != 1 || list.Days[0].Provider != "stripe" || list.Days[0].Count != 2 || list.Days[0].Date != "2026-11-02" {
		t.Fatalf("the archive = %+v", list.Days)
	}
	if got := b.keyList(t, "key=customer:cus_123"); got != "" {
		t.Fatalf("the day is gone, its keys with it: %q", got)
	}

	// Restored: found by its key, shown with its dispatches; restored again,
	// 409; a day never archived, 404.
	var restored struct {
		Day       string `json:"day"`
		Providers []struct {
			Provider   string `json:"provider"`
			Deliveries int    `json:"deliveries"`
		} `json:"providers"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/archive/2026-11-02/restore"}, 200, &restored)
	if restored.Day != "2026-11-02" || len(restored.Providers) != 1 || restored.Providers[0].Deliveries != 2 {
		t.Fatalf("restore = %+v", restored)
	}
	if got := b.keyList(t, "key=customer:cus_123"); got != "evt_a" {
		t.Fatalf("the restored day by its key: %q", got)
	}
	status, _, body := b.admin(t, adminReq{path: "/admin/deliveries/stripe/evt_a"})
	if status != 200 || !bytes.Contains(body, []byte(`"state":"succeeded"`)) {
		t.Fatalf("a restored delivery: %d %s", status, body)
	}
	for path, want := range map[string]string{
		"/admin/archive/2026-11-02/restore":                 "409 already_present",
		"/admin/archive/2026-11-03/restore":                 "404 not_found",
		"/admin/archive/2026-11-02/restore?provider=github": "404 not_found",
		"/admin/archive/yesterday":                          "400 bad_request",
		"/admin/archive/2026-11-30":                         "400 bad_request", // the server's today
	} {
		status, _, body := b.admin(t, adminReq{method: "POST", path: path})
		if got := statusCode(status, body); got != want {
			t.Errorf("POST %s: %s %s, want %s", path, got, body, want)
		}
	}
	// Replayed after its restore, the day is newer than its archive:
	// retention archives it again before it drops it, and the replay comes
	// back with it.
	var replayed struct {
		ReplayID string `json:"replay_id"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/deliveries/stripe/evt_a/replay", body: `{"force":true,"routes":["fwd"]}`}, 202, &replayed)
	dbtest.WaitDispatch(t, b.pool, dbtest.Dispatch{Provider: "stripe", DeliveryID: "evt_a", Route: "fwd", Generation: 2}, "succeeded")
	if _, err := b.pool.Exec(ctx, `UPDATE hookgate_receipts SET expires_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if n, err := retention.DeleteExpired(ctx, b.pool, policy); err != nil || n != 1 {
		t.Fatalf("retention of a day changed since its archive, before archiving it again: %d, %v (evt_b, unchanged, goes)", n, err)
	}
	if err := retention.ArchiveDue(ctx, b.pool, s, discard(), nil); err != nil {
		t.Fatal(err)
	}
	if n, err := retention.DeleteExpired(ctx, b.pool, policy); err != nil || n != 1 {
		t.Fatalf("retention once archived again: %d, %v", n, err)
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/archive/2026-11-02/restore"}, 200, &restored)
	status, _, body = b.admin(t, adminReq{path: "/admin/deliveries/stripe/evt_a"})
	if status != 200 || !bytes.Contains(body, []byte(`"generation":2`)) {
		t.Fatalf("the replay archived with its day: %d %s", status, body)
	}

	// Archived now, while present: written again, nothing deleted.
	var again struct {
		Providers []struct {
			Deliveries int `json:"deliveries"`
		} `json:"providers"`
	}
	b.adminJSON(t, adminReq{method: "POST", path: "/admin/archive/2026-11-02"}, 200, &again)
	if len(again.Providers) != 1 || again.Providers[0].Deliveries != 2 {
		t.Fatalf("archive now = %+v", again)
	}

	// A store that fails answers 502 archive_unavailable, saying why.
	gone, err := archive.Open("s3://archive/x", "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	down := setupAdminOn(t, b.pool, adminToken, func(c *server.Config) { c.Admin.Archive, c.Admin.Retention = gone, 72*time.Hour })
	status, _, body = down.admin(t, adminReq{method: "POST", path: "/admin/archive/2026-11-02"})
	if got := statusCode(status, body); got != "502 archive_unavailable" || !bytes.Contains(body, []byte("stripe/2026-11-02.ndjson.zst")) {
		t.Errorf("an unreachable store: %s %s", got, body)
	}

	// Without an archive, its POSTs are 409 not_configured.
	plain := setupAdmin(t, adminToken)
	status, _, body = plain.admin(t, adminReq{method: "POST", path: "/admin/archive/2026-11-02"})
	if got := statusCode(status, body); got != "409 not_configured" || !bytes.Contains(body, []byte("GATEWAY_ARCHIVE_URL")) {
		t.Errorf("no archive: %s %s", got, body)
	}
}

// keyList is the ids a list answers, comma-separated.
func (b *adminBundle) keyList(t *testing.T, query string) string {
	t.Helper()
	var l listed
	b.adminJSON(t, adminReq{path: "/admin/deliveries?" + query}, 200, &l)
	return strings.Join(l.ids(), ",")
}

// statusCode is an error answer's status and code, "409 already_present".
func statusCode(status int, body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return fmt.Sprintf("%d %s", status, e.Error)
}

// discard is a logger that writes nothing.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
