package hookgate

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// A handler that ignores its context cannot hold the process: Run stops
// within its bounds (the soft stop, the jobs' cancellation and the pool's
// close, each bounded) and says why, instead of waiting for the handler.
func TestRunStopsDespiteAHandlerThatIgnoresItsContext(t *testing.T) {
	shutdownTimeout = 2 * time.Second
	t.Cleanup(func() { shutdownTimeout = 30 * time.Second })
	t.Setenv("DATABASE_URL", dbtest.URL(t))
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_stop")
	t.Setenv("GATEWAY_ADDR", "127.0.0.1:0")
	t.Setenv("GATEWAY_ROUTES", "stuck=stripe:*>builtin:stuck")
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	gw, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)),
		WithHandler("stuck", func(context.Context, pgx.Tx, Delivery) error {
			entered <- struct{}{}
			<-release // not ctx: the mistake under test
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	<-gw.Started()
	req, err := providers.NewRequest(ctx, providers.Stripe{Secrets: verify.Secrets{"whsec_stop"}}.Source(), "http://"+gw.Addr()+"/webhooks/stripe",
		[]byte(`{"id":"evt_stuck","type":"invoice.paid","created":1767225600,"data":{"object":{"id":"in_1"}}}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil || res.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery: %v %v", res, err)
	}
	res.Body.Close()
	<-entered
	cancel()
	// 2 s soft stop + 10 s for the cancelled jobs + 5 s for the pool, and slack.
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "did not return") {
			t.Fatalf("Run = %v, want an error saying a job did not return", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Run did not return while a handler ignored its context")
	}
}
