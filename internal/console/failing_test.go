package console

import (
	"context"
	"fmt"
	"testing"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/deliveries"
)

// The list's failing routes are each discarded or retrying delivery's routes
// whose latest dispatch is so, by state, for the whole page at once: an
// earlier generation's failure, since replayed, is not one.
func TestFailingRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO hookgate_receipts (provider, scope, delivery_id, event, content_type, body, body_sha256, received_at, expires_at)
		SELECT 'github', '', id, 'push', 'application/json', '{}', sha256(id::bytea), now(), now() + interval '1 day'
		FROM unnest(ARRAY['d-1', 'd-2', 'd-3']) id;
		INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation, state, attempts, created_at, updated_at)
		VALUES ('github', 'd-1', 'b', 1, 'discarded', 1, now(), now()), ('github', 'd-1', 'a', 1, 'discarded', 1, now(), now()),
			('github', 'd-1', 'c', 1, 'discarded', 1, now(), now()), ('github', 'd-1', 'c', 2, 'retrying', 1, now(), now()),
			('github', 'd-1', 'e', 1, 'succeeded', 1, now(), now()),
			('github', 'd-2', 'a', 1, 'discarded', 1, now(), now()), ('github', 'd-2', 'a', 2, 'succeeded', 1, now(), now()),
			('github', 'd-3', 'a', 1, 'retrying', 1, now(), now())`)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := withFailingRoutes(ctx, pool, []deliveries.Item{
		{Provider: "github", DeliveryID: "d-1", State: "discarded"},
		{Provider: "github", DeliveryID: "d-2", State: "discarded"}, // as if read before its replay
		{Provider: "github", DeliveryID: "d-3", State: "retrying"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.DeliveryID] = fmt.Sprint(r.Failing)
	}
	want := map[string]string{"d-1": "[{discarded [a b]} {retrying [c]}]", "d-2": "[]", "d-3": "[{retrying [a]}]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("failing routes = %v, want %v", got, want)
	}
}
