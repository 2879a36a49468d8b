package hookgatetest_test

import (
	"context"
	"errors"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/hookgatetest"
	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// The example reads its database from DATABASE_URL, as a service's test
// would: a new, empty database on the tests' private server.
func TestMain(m *testing.M) { dbtest.MainWithDatabase(m, "DATABASE_URL") }

// tx is a transaction on a database of the test's own, rolled back at its
// end, holding a table the handlers write.
func tx(t *testing.T) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.EmptyURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `CREATE TABLE effects (id text)`); err != nil {
		t.Fatal(err)
	}
	return tx
}

func effects(t *testing.T, tx pgx.Tx) int {
	t.Helper()
	var n int
	if err := tx.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// writeThen writes an effect, then ends as end says.
func writeThen(end func() error) hookgate.Handler {
	return func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, d.DeliveryID); err != nil {
			return err
		}
		return end()
	}
}

// What a dispatch records after an attempt, and which writes stay: a
// success keeps them; an error, a Discard or a panic rolls them back and
// leaves the transaction usable; an error on the route's last attempt
// discards the dispatch.
func TestWorkRecordsWhatADispatchWould(t *testing.T) {
	ctx := context.Background()
	d, err := hookgatetest.GitHub("ping", []byte(`{"zen":"Design for failure.","hook_id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("target database busy")
	for _, c := range []struct {
		name      string
		h         hookgate.Handler
		attempt   int
		max       int
		state     string
		errText   string
		writeKept bool
	}{
		{"success", writeThen(func() error { return nil }), 1, 0, hookgatetest.Succeeded, "", true},
		{"an error with attempts left", writeThen(func() error { return failed }), 1, 0, hookgatetest.Retrying, "target database busy", false},
		{"an error on the last attempt", writeThen(func() error { return failed }), 3, 3, hookgatetest.Discarded, "target database busy", false},
		{"Discard on the first attempt", writeThen(func() error { return hookgate.Discard(failed) }), 1, 0, hookgatetest.Discarded, "target database busy", false},
		{"a panic", writeThen(func() error { panic("nil map") }), 1, 0, hookgatetest.Retrying, "panic: nil map", false},
		// The transaction is the gateway's: the handler's Commit or Rollback
		// is refused and fails the attempt, whatever the handler returns.
		{"Commit", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			_ = writeThen(func() error { return nil })(ctx, tx, d)
			_ = tx.Commit(ctx)
			return nil
		}, 1, 0, hookgatetest.Retrying, "called Commit", false},
		{"Rollback", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			_ = tx.Rollback(ctx)
			return writeThen(func() error { return nil })(ctx, tx, d)
		}, 1, 0, hookgatetest.Retrying, "called Rollback", false},
		{"Commit on the last attempt", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			return writeThen(func() error { return tx.Commit(ctx) })(ctx, tx, d)
		}, 3, 3, hookgatetest.Discarded, "called Commit", false},
		{"a savepoint of its own", func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if err := writeThen(func() error { return nil })(ctx, sp, d); err != nil {
				return err
			}
			return sp.Commit(ctx)
		}, 1, 0, hookgatetest.Succeeded, "", true},
		// A handler that ends its goroutine (t.FailNow in a shared helper)
		// fails its attempt instead of leaving it running.
		{"runtime.Goexit", writeThen(func() error { runtime.Goexit(); return nil }), 1, 0, hookgatetest.Retrying, "runtime.Goexit", false},
		{"an error holding NUL and invalid UTF-8", writeThen(func() error { return errors.New("bad\x00 \xff answer") }), 1, 0, hookgatetest.Retrying, "bad \uFFFD answer", false},
		{"an error of 32 MiB", writeThen(func() error { return errors.New(strings.Repeat("x", 32<<20)) }), 1, 0, hookgatetest.Retrying, "...(truncated)", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx := tx(t)
			d.Attempt = c.attempt
			res := hookgatetest.Attempt{MaxAttempts: c.max}.Work(ctx, tx, c.h, d)
			if res.State != c.state || (c.errText == "") != (res.Err == nil) || (res.Err != nil && !strings.Contains(res.Err.Error(), c.errText)) {
				t.Errorf("%s, %v; want %s, %q", res.State, res.Err, c.state, c.errText)
			}
			if c.errText == "target database busy" && !errors.Is(res.Err, failed) {
				t.Errorf("errors.Is(%v, the handler's error) = false", res.Err)
			}
			if res.Err != nil && (len(res.Err.Error()) > 2048 || !utf8.ValidString(res.Err.Error()) || strings.Contains(res.Err.Error(), "\x00")) {
				t.Errorf("an error text the gateway could not store: %q", res.Err)
			}
			if n := effects(t, tx); (n == 1) != c.writeKept {
				t.Errorf("%d effects in the transaction after the attempt, want kept: %v", n, c.writeKept)
			}
		})
	}
}

// A delivery is read as the gateway reads it: GitHub's event with its action,
// the entity and time of Order, a form-encoded body's payload decoded; a
// signed request verified with its secret, a wrong signature refused.
func TestDeliveriesAreReadAsTheGatewayReadsThem(t *testing.T) {
	pr := `{"action":"opened","pull_request":{"id":1234,"updated_at":"2026-01-02T03:04:05Z"},"repository":{"id":1}}`
	d, err := hookgatetest.GitHub("pull_request", []byte(pr))
	if err != nil {
		t.Fatal(err)
	}
	if d.Provider != "github" || d.Event != "pull_request.opened" || d.Entity != "github:pull_request:1234" ||
		d.EventTime.Format("2006-01-02T15:04:05Z") != "2026-01-02T03:04:05Z" || !strings.HasPrefix(d.DeliveryID, "hookgatetest-") {
		t.Errorf("%+v", d)
	}
	other, _ := hookgatetest.GitHub("pull_request", []byte(pr))
	if other.DeliveryID == d.DeliveryID {
		t.Errorf("two deliveries share the id %s", d.DeliveryID)
	}

	// A form-encoded delivery, as GitHub signs it with its secret.
	form := "payload=" + url.QueryEscape(pr)
	req, err := providers.NewRequest(t.Context(), providers.GitHub{Secrets: verify.Secrets{"s3cret"}}.Source(), "http://gateway/webhooks/github",
		[]byte(form), "d-1", "pull_request", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h := req.Header
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	signed, err := hookgatetest.SignedGitHub("s3cret", h, []byte(form))
	if err != nil {
		t.Fatal(err)
	}
	var payload struct {
		PullRequest struct{ ID int } `json:"pull_request"`
	}
	if err := signed.Decode(&payload); err != nil || payload.PullRequest.ID != 1234 || string(signed.Body) != form {
		t.Errorf("form-encoded: %+v, %v, body %q", payload, err, signed.Body)
	}
	if _, err := hookgatetest.SignedGitHub("another secret", h, []byte(form)); err == nil {
		t.Error("a wrong signature was accepted")
	}
	if _, err := hookgatetest.Stripe([]byte(`{"type":"invoice.paid"}`)); err == nil {
		t.Error("a Stripe event without an id was accepted")
	}
}

// The requests for a running gateway are signed as the senders sign: each
// verifies with its secret, names its event and id, and carries the body as
// given; another secret does not verify.
func TestRequestsForARunningGateway(t *testing.T) {
	ctx := context.Background()
	body := []byte(`{"action":"opened","pull_request":{"id":7,"updated_at":"2026-11-30T11:00:00Z"}}`)
	req, err := hookgatetest.GitHubRequest(ctx, "http://127.0.0.1:8080/webhooks/github", "gh-secret", "pull_request", "d-42", body)
	if err != nil {
		t.Fatal(err)
	}
	d, err := hookgatetest.SignedGitHub("gh-secret", req.Header, body)
	if err != nil || d.DeliveryID != "d-42" || d.Event != "pull_request.opened" || req.URL.Path != "/webhooks/github" || req.Method != "POST" {
		t.Fatalf("GitHubRequest: %+v, %v", d, err)
	}
	if _, err := hookgatetest.SignedGitHub("another", req.Header, body); err == nil {
		t.Error("GitHubRequest verified with another secret")
	}
	event := []byte(`{"id":"evt_1","type":"invoice.paid","created":1764500000,"data":{"object":{"id":"in_1"}}}`)
	req, err = hookgatetest.StripeRequest(ctx, "http://127.0.0.1:8080/webhooks/stripe", "whsec_test", event)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := hookgatetest.SignedStripe("whsec_test", req.Header, event); err != nil || d.DeliveryID != "evt_1" || d.Event != "invoice.paid" {
		t.Fatalf("StripeRequest: %+v, %v", d, err)
	}
}

// Database gives each test a fresh database: hookgate's tables migrated in
// their own schema, the service's migration run as the gateway runs it (its
// table in public), and a pool on which a handler's transaction finds both.
func TestDatabaseIsFreshAndMigrated(t *testing.T) {
	migrate := func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pool.Exec(ctx, `CREATE TABLE ledger (id text PRIMARY KEY)`)
		return err
	}
	a, b := hookgatetest.Database(t, migrate), hookgatetest.Database(t, migrate)
	ctx := context.Background()
	var nameA, nameB, ledger, receipts string
	if err := a.QueryRow(ctx, `SELECT current_database(), to_regclass('ledger')::text, to_regclass('hookgate_receipts')::regclass::text`).Scan(&nameA, &ledger, &receipts); err != nil {
		t.Fatal(err)
	}
	_ = b.QueryRow(ctx, `SELECT current_database()`).Scan(&nameB)
	if nameA == nameB {
		t.Errorf("two calls share the database %s", nameA)
	}
	var ledgerSchema, receiptsSchema string
	if err := a.QueryRow(ctx, `SELECT (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'ledger'::regclass),
		(SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'hookgate_receipts'::regclass)`).Scan(&ledgerSchema, &receiptsSchema); err != nil {
		t.Fatal(err)
	}
	if ledgerSchema != "public" || receiptsSchema != "hookgate" {
		t.Errorf("the service's table in %s, hookgate's in %s; want public and hookgate", ledgerSchema, receiptsSchema)
	}
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	d, _ := hookgatetest.Stripe([]byte(`{"id":"evt_1","type":"invoice.paid","created":1767225600,"data":{"object":{"id":"in_1"}}}`))
	res := hookgatetest.Work(ctx, tx, func(ctx context.Context, tx pgx.Tx, d hookgate.Delivery) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ($1)`, d.DeliveryID)
		return err
	}, d)
	if res.State != hookgatetest.Succeeded {
		t.Errorf("a handler on the database's pool: %s %v", res.State, res.Err)
	}
}
