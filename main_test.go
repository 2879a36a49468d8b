package hookgate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/hookgatetest"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// The examples read their database from DATABASE_URL, as a service does:
// here a new, empty database on the tests' private server.
func TestMain(m *testing.M) { dbtest.MainWithDatabase(m, "DATABASE_URL") }

const stripeSecret = "whsec_example"

// quiet drops the gateway's logs, which would mix with the examples' output.
var quiet = slog.New(slog.DiscardHandler)

// stripeSends posts event to the gateway as Stripe does, signed with
// stripeSecret, and returns the answer's status code and status.
func stripeSends(addr, event string) string {
	req, err := hookgatetest.StripeRequest(context.Background(), "http://"+addr+"/webhooks/stripe", stripeSecret, []byte(event))
	if err != nil {
		return err.Error()
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer res.Body.Close()
	var answer struct{ Status, Message string }
	_ = json.NewDecoder(res.Body).Decode(&answer)
	return fmt.Sprint(res.StatusCode, " ", answer.Status, answer.Message)
}

// waitUntil waits up to 20 s for the query's one boolean to be true:
// dispatches run in the background, shortly after the 202.
func waitUntil(pool *pgxpool.Pool, query string) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var ok bool
		if err := pool.QueryRow(context.Background(), query).Scan(&ok); err == nil && ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("timed out waiting for:", query)
}
