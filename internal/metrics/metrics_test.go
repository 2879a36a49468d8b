package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/version"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, b)
	}
	return string(b)
}

// What the alerts and the dashboard read is there from the start, at zero,
// for the providers, routes and recovery the gateway knows; the label values
// are the ones the code that counts them uses.
func TestDeclarePresentsSeriesAtZero(t *testing.T) {
	t.Parallel()
	m := metrics.New(dbtest.NewPool(t))
	m.Declare(metrics.Known{Providers: []string{"github"}, Routes: []string{"ci"}, Recovery: []string{"stripe"}})
	text := scrape(t, m)
	want := []string{
		`hookgate_ingest_ack_seconds_count{provider="github"} 0`,
		`hookgate_receipt_to_success_seconds_count{route="ci"} 0`,
		`hookgate_filter_failures_total{route="ci"} 0`,
		`hookgate_recovery_runs_total{provider="stripe",result="ok"} 0`,
		`hookgate_recovery_runs_total{provider="stripe",result="failed"} 0`,
		`hookgate_recovery_total{outcome="found",provider="stripe"} 0`,
		`hookgate_recovery_total{outcome="failed",provider="stripe"} 0`,
		`hookgate_dispatch_oldest_unfinished_seconds{route="ci"} 0`,
		`hookgate_queue_depth{state="available"} 0`,
	}
	// The contract's error codes of a 503 to a sender, and of a signature
	// that is not the provider's secret's.
	for _, outcome := range []string{string(ingest.Accepted), string(ingest.Duplicate), "unavailable", "overloaded", "invalid_signature"} {
		want = append(want, `hookgate_ingest_requests_total{outcome="`+outcome+`",provider="github"} 0`)
	}
	for _, state := range []string{dispatch.Succeeded, dispatch.Superseded, dispatch.Discarded} {
		want = append(want, `hookgate_dispatches_total{route="ci",state="`+state+`"} 0`)
	}
	for _, err := range []error{nil, &forward.Error{Status: 404}, &forward.Error{Status: 503}, &forward.Error{Timeout: true}, errors.New("connection refused")} {
		want = append(want, `hookgate_forward_attempts_total{outcome="`+forward.Outcome(err)+`",route="ci"} 0`)
	}
	for _, w := range want {
		if !strings.Contains(text, w+"\n") {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	if strings.Contains(text, `provider="stripe",outcome=`) || strings.Contains(text, `hookgate_ingest_requests_total{outcome="accepted",provider="stripe"}`) {
		t.Errorf("a recovery provider is taken for an ingest provider")
	}
}

// A gateway that declares nothing exports only what happened, as before;
// and Discard's metrics take what is recorded, for no one.
func TestDeclareNothing(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	m.Declare(metrics.Known{})
	if text := scrape(t, m); strings.Contains(text, "hookgate_ingest_requests_total") || strings.Contains(text, "hookgate_dispatch_oldest_unfinished_seconds") {
		t.Errorf("series without any event or label:\n%s", text)
	}
	none := metrics.Discard()
	none.Declare(metrics.Known{Routes: []string{"ci"}})
	none.FilterFailed("ci")
}

// Every gateway's /metrics names its release and commit, from its first
// scrape, whatever else it declares.
func TestBuildInfo(t *testing.T) {
	t.Parallel()
	v := version.Get()
	want := `hookgate_build_info{commit="` + v.Commit + `",version="` + version.Number + `"} 1` + "\n"
	for _, m := range []*metrics.Metrics{metrics.New(nil), metrics.Discard()} {
		if text := scrape(t, m); strings.Count(text, "hookgate_build_info{") != 1 || !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A declared route with a dispatch waiting shows that dispatch's age, once.
func TestDeclaredRouteWithAWaitingDispatch(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO river_job (kind, args, state, queue, max_attempts, priority, created_at, scheduled_at)
		VALUES ($1, '{"route":"ci"}', 'available', 'default', 25, 1, now() - interval '90 seconds', now())`, dispatch.Kind); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(pool)
	m.Declare(metrics.Known{Routes: []string{"ci", "idle"}})
	text := scrape(t, m)
	if n := strings.Count(text, `hookgate_dispatch_oldest_unfinished_seconds{route="ci"}`); n != 1 {
		t.Fatalf("ci's age appears %d times:\n%s", n, text)
	}
	if strings.Contains(text, `hookgate_dispatch_oldest_unfinished_seconds{route="ci"} 0`+"\n") ||
		!strings.Contains(text, `hookgate_dispatch_oldest_unfinished_seconds{route="idle"} 0`+"\n") {
		t.Errorf("want ci's age above 0 and idle's 0:\n%s", text)
	}
}
