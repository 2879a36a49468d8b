package dispatch_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
	"github.com/hookgate/hookgate/internal/metrics"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/routes"
	"github.com/hookgate/hookgate/internal/yield"
)

// workerEnv, when set, makes the test binary a dispatch worker process on that
// database instead of running tests: a second "gateway process" that a test can
// kill with SIGKILL.
const workerEnv = "HOOKGATE_TEST_WORKER_DB"

func TestMain(m *testing.M) {
	if url := os.Getenv(workerEnv); url != "" {
		if err := runWorkerProcess(url, os.Getenv("HOOKGATE_TEST_WORKER_ROUTES")); err != nil {
			fmt.Fprintln(os.Stderr, "worker process:", err)
			os.Exit(1)
		}
		return
	}
	dbtest.Main(m)
}

func runWorkerProcess(url, spec string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	handlers := handlers.Default(discard())
	rs, err := fanout.Parse(spec, handlers.Names(), fanout.Defaults{})
	if err != nil {
		return err
	}
	w := dispatch.NewWorker(pool, rs, &receipts.Store{Retention: 72 * time.Hour}, handlers, forward.New(nil, 10*time.Second, 4),
		routes.AdmitAll{}, yield.Never(), metrics.Discard(), discard())
	client, err := dispatch.NewClient(pool, dispatch.ClientConfig{Dispatch: w, Workers: 4, ForwardTimeout: 10 * time.Second, Logger: discard()})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	select {} // until killed
}
