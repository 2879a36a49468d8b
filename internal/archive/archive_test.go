package archive_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hookgate/hookgate/internal/archive"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/searchkeys"
)

// day is the UTC day the tests archive.
var day = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// seed stores three GitHub deliveries received on day (one event received
// twice, by two hooks), each event with a succeeded dispatch and a search
// key; one GitHub delivery of the next day and one Stripe delivery of day.
func seed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		WITH r AS (
			INSERT INTO hookgate_receipts (provider, scope, delivery_id, event, entity, content_type, headers, body, body_sha256, received_at, expires_at)
			SELECT p, s, id, 'push', 'github:push:1', 'application/json', '{"X-GitHub-Event":"push"}', convert_to(b, 'UTF8'), sha256(convert_to(b, 'UTF8')), at, at + interval '30 days'
			FROM (VALUES
				('github', '7', 'g-1', '{"ref":"a","repository":{"full_name":"acme/api"}}', $1::timestamptz + interval '1 hour'),
				('github', '8', 'g-1', '{"ref":"a","repository":{"full_name":"acme/api"}}', $1 + interval '2 hours'),
				('github', '7', 'g-2', '{"ref":"b","repository":{"full_name":"acme/web"}}', $1 + interval '23 hours'),
				('github', '7', 'g-3', '{"ref":"c","repository":{"full_name":"acme/api"}}', $1 + interval '25 hours'),
				('stripe', '', 'evt_1', '{"id":"evt_1"}', $1 + interval '3 hours')) v(p, s, id, b, at)
			RETURNING provider, delivery_id, received_at)
		INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation, state, attempts, last_error)
		SELECT DISTINCT provider, delivery_id, 'fwd', 1, 'succeeded', 2, 'HTTP 503' FROM r`, day)
	if err != nil {
		t.Fatal(err)
	}
}

// dropDay deletes what retention would of the day's GitHub deliveries.
func dropDay(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		WITH gone AS (DELETE FROM hookgate_receipts WHERE provider = 'github' AND received_at >= $1 AND received_at < $1 + interval '1 day'
			RETURNING provider, delivery_id)
		DELETE FROM hookgate_dispatches d USING gone g WHERE d.provider = g.provider AND d.delivery_id = g.delivery_id`, day)
	if err != nil {
		t.Fatal(err)
	}
}

// stored is what the database holds of GitHub's day, as text to compare.
func stored(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(), `
		SELECT coalesce(string_agg(line, E'\n' ORDER BY line), '') FROM (
			SELECT concat_ws(' ', r.scope, r.delivery_id, r.event, r.entity, r.headers::text, encode(r.body, 'escape'),
				encode(r.body_sha256, 'hex'), r.received_at::text) AS line
			FROM hookgate_receipts r WHERE provider = 'github' AND received_at >= $1 AND received_at < $1 + interval '1 day'
			UNION ALL SELECT concat_ws(' ', 'dispatch', delivery_id, route, generation, state, attempts, last_error)
			FROM hookgate_dispatches WHERE delivery_id IN ('g-1', 'g-2')) x`, day).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An archived day is written, read back against its manifest and
// recorded; dropped and restored, it comes back as it was, its search keys
// read again; a day restored while present, or never archived, or whose
// object no longer matches its manifest, restores nothing.
func testArchive(t *testing.T, s archive.Store, corrupt func(key string)) {
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	seed(t, pool)
	before := stored(t, pool)
	keys, err := searchkeys.New(searchkeys.Paths{"github": {"repo": "repository.full_name"}})
	if err != nil {
		t.Fatal(err)
	}

	m, err := archive.Day(ctx, pool, s, "github", day)
	if err != nil || m.Count != 3 || len(m.SHA256) != 64 {
		t.Fatalf("Day = %+v, %v; want 3 receipts", m, err)
	}
	listed, err := s.List(ctx, "github/")
	if err != nil || strings.Join(listed, " ") != "github/2026-11-02.manifest.json github/2026-11-02.ndjson.zst" {
		t.Fatalf("the store holds %q, %v", listed, err)
	}
	var recorded int
	if err := pool.QueryRow(ctx, `SELECT count FROM hookgate_archive WHERE day = $1 AND provider = 'github'`, day).Scan(&recorded); err != nil || recorded != 3 {
		t.Fatalf("hookgate_archive: %d, %v", recorded, err)
	}
	if _, err := archive.Restore(ctx, pool, s, keys, []string{"github"}, day, 72*time.Hour); !errors.Is(err, archive.ErrAlreadyPresent) {
		t.Fatalf("a restore of a day still stored: %v", err)
	}

	dropDay(t, pool)
	n, err := archive.Restore(ctx, pool, s, keys, []string{"github"}, day, 72*time.Hour)
	if err != nil || len(n) != 1 || n[0] != 3 {
		t.Fatalf("Restore = %v, %v", n, err)
	}
	if after := stored(t, pool); after != before {
		t.Fatalf("restored:\n%s\nwant, as before:\n%s", after, before)
	}
	var found string
	if err := pool.QueryRow(ctx, `SELECT string_agg(delivery_id, ' ' ORDER BY delivery_id) FROM hookgate_search_keys
		WHERE name = 'repo' AND value = 'acme/api'`).Scan(&found); err != nil || found != "g-1" {
		t.Fatalf("the restored day's search keys: %q, %v", found, err)
	}

	if _, err := archive.Restore(ctx, pool, s, keys, []string{"github"}, day.AddDate(0, 0, -1), 72*time.Hour); !errors.Is(err, archive.ErrNoObject) {
		t.Fatalf("a day never archived: %v", err)
	}
	corrupt("github/2026-11-02.ndjson.zst")
	dropDay(t, pool)
	if n, err := archive.Restore(ctx, pool, s, keys, []string{"github"}, day, 72*time.Hour); !errors.Is(err, archive.ErrCorrupt) || n != nil {
		t.Fatalf("a changed object: %v, %v", n, err)
	}
	if got := stored(t, pool); got != "" {
		t.Fatalf("a failed restore stored:\n%s", got)
	}
}

func TestArchiveToADirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := archive.Open("file://"+dir, "")
	if err != nil {
		t.Fatal(err)
	}
	testArchive(t, s, func(key string) {
		name := filepath.Join(dir, filepath.FromSlash(key))
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 1
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	})
}

// The same against a real S3-compatible server (VersityGW, which
// scripts/ensure-s3 builds), reached as any S3 store is.
func TestArchiveToS3(t *testing.T) {
	endpoint := startS3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "hookgate")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "hookgate-secret")
	t.Setenv("AWS_REGION", "us-east-1")
	client, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4("hookgate", "hookgate-secret", ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.MakeBucket(context.Background(), "archive", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := archive.Open("s3://archive/hookgate", "http://"+endpoint)
	if err != nil {
		t.Fatal(err)
	}
	testArchive(t, s, func(key string) {
		_, err := client.PutObject(context.Background(), "archive", "hookgate/"+key, bytes.NewReader([]byte("not what was archived")), 21, minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// startS3 starts VersityGW on a directory of the test's and returns its
// address. Without it the test is skipped, except in CI (CI set).
func startS3(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		bin = filepath.Join(strings.TrimSpace(string(gopath)), "bin", "versitygw")
		if _, serr := os.Stat(bin); serr != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("versitygw not found: scripts/ensure-s3 builds it (make test runs it)")
			}
			t.Skip("versitygw not found: scripts/ensure-s3 builds it")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--port", addr, "--access", "hookgate", "--secret", "hookgate-secret", "posix", t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	t.Fatalf("versitygw did not listen on %s: %s", addr, out.String())
	return ""
}
