package hookgate_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate"
	"github.com/hookgate/hookgate/internal/dbtest"
)

// sse is one open stream of a listen route, its events in a channel.
type sse struct {
	events chan sseEvent
	close  func()
}

type sseEvent struct {
	ID   string
	Data struct {
		DispatchID string `json:"dispatch_id"`
		DeliveryID string `json:"delivery_id"`
		Event      string
		Attempt    int
		Headers    map[string]string
		BodyBase64 string `json:"body_base64"`
		Path       string
	}
}

// listen opens a stream of route on g, resuming after lastID when given.
func listen(t *testing.T, g *running, route, lastID string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+g.gw.Addr()+"/admin/listen/"+route, nil)
	req.Header.Set("Authorization", "Bearer admin-token")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("listen: %s %s", res.Status, res.Header.Get("Content-Type"))
	}
	s := &sse{events: make(chan sseEvent, 16), close: func() { cancel(); res.Body.Close() }}
	t.Cleanup(s.close)
	go func() {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.Data)
			case line == "" && ev.ID != "":
				s.events <- ev
				ev = sseEvent{}
			}
		}
	}()
	return s
}

// next returns the stream's next event, failing after 10 s.
func (s *sse) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return sseEvent{}
}

// none fails if the stream gets an event within d.
func (s *sse) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case ev := <-s.events:
		t.Fatalf("an event came: %+v", ev)
	case <-time.After(d):
	}
}

// dispatchState is the state of a delivery's only dispatch.
func dispatchState(t *testing.T, g *running, id string) string {
	t.Helper()
	var show struct{ Dispatches []struct{ State string } }
	g.admin(t, "/admin/deliveries/stripe/evt_"+id, &show)
	if len(show.Dispatches) != 1 {
		return fmt.Sprintf("%d dispatches", len(show.Dispatches))
	}
	return show.Dispatches[0].State
}

func eventually(t *testing.T, g *running, id, want string) {
	t.Helper()
	dbtest.Eventually(t, 15*time.Second, id+" "+want, func() error {
		if got := dispatchState(t, g, id); got != want {
			return fmt.Errorf("it is %s", got)
		}
		return nil
	})
}

// A listen route's dispatches wait, pending, while no listener is
// connected; a stream gets each with its body and headers, and the
// listener's answer decides it (2xx succeeds, a 4xx discards, as a target's
// would); an answer that is not awaited is 409 and changes nothing. A
// dispatch sent on a stream that closes before its answer goes back to
// pending for the next listener, its next attempt; a stream that resumes
// with Last-Event-ID takes back what it had seen, without a second copy.
func TestAListenRoutesDispatchesGoToItsListeners(t *testing.T) {
	g := runGateway(t, hookgate.Config{Routes: []hookgate.Route{
		{Name: "dev", Match: []string{"stripe:invoice.*"}, Target: "listen", Timeout: 5 * time.Second},
		{Name: "web", Match: []string{"stripe:customer.*"}, Target: "http://127.0.0.1:9/x"},
		{Name: "shaped", Match: []string{"stripe:charge.*"}, Target: "listen", Transform: `{"path": "/charges", "headers": {"X-Shaped": "yes"}, "body": {"id": payload.id}}`},
	}})
	if status, body := sendStripe(t, g, invoice("l1", "invoice.paid")); status != http.StatusAccepted || !strings.Contains(body, `"routes":1`) {
		t.Fatalf("send: %d %s", status, body)
	}
	time.Sleep(time.Second)
	if got := dispatchState(t, g, "l1"); got != "pending" {
		t.Fatalf("with no listener the dispatch is %s; want pending", got)
	}

	s := listen(t, g, "dev", "")
	ev := s.next(t)
	body, _ := base64.StdEncoding.DecodeString(ev.Data.BodyBase64)
	if ev.Data.DeliveryID != "evt_l1" || ev.Data.Event != "invoice.paid" || string(body) != invoice("l1", "invoice.paid") || ev.Data.Attempt != 1 || ev.Data.DispatchID == "" {
		t.Fatalf("the event: %+v, body %s", ev, body)
	}
	answer := func(id string, status int) (int, string) {
		return g.call(t, "POST", "/admin/listen/dev/"+id, fmt.Sprintf(`{"status":%d}`, status))
	}
	if status, body := answer(ev.Data.DispatchID, 200); status != http.StatusOK {
		t.Fatalf("the answer: %d %s", status, body)
	}
	eventually(t, g, "l1", "succeeded")
	if status, body := answer(ev.Data.DispatchID, 200); status != http.StatusConflict || !strings.Contains(body, `"error":"not_awaited"`) {
		t.Errorf("a second answer: %d %s; want 409 not_awaited", status, body)
	}

	// The stream closes before the answer: the dispatch goes back to
	// pending, and the next listener gets it as its next attempt.
	sendStripe(t, g, invoice("l2", "invoice.paid"))
	ev = s.next(t)
	if ev.Data.DeliveryID != "evt_l2" {
		t.Fatalf("the second event: %+v", ev)
	}
	s.close()
	eventually(t, g, "l2", "pending")
	if status, _ := answer(ev.Data.DispatchID, 200); status != http.StatusConflict {
		t.Errorf("an answer for an offer taken back: %d; want 409", status)
	}
	s2 := listen(t, g, "dev", "")
	again := s2.next(t)
	if again.Data.DeliveryID != "evt_l2" || again.Data.Attempt != 2 || again.Data.DispatchID != ev.Data.DispatchID {
		t.Fatalf("the next listener's event: %+v; want evt_l2's second attempt", again)
	}
	if status, body := answer(again.Data.DispatchID, 404); status != http.StatusOK {
		t.Fatalf("answer 404: %d %s", status, body)
	}
	eventually(t, g, "l2", "discarded")

	// Resumed: what the listener had seen is not sent again, and its answer
	// is taken.
	sendStripe(t, g, invoice("l3", "invoice.paid"))
	ev = s2.next(t)
	s2.close()
	s3 := listen(t, g, "dev", ev.ID)
	if status, body := answer(ev.Data.DispatchID, 204); status != http.StatusOK {
		t.Fatalf("the resumed stream's answer: %d %s", status, body)
	}
	eventually(t, g, "l3", "succeeded")
	s3.none(t, time.Second)

	// A transformation shapes what a listener gets, as a forward.
	sendStripe(t, g, `{"id":"evt_c1","type":"charge.succeeded","created":1767225600,"data":{"object":{"id":"ch_1"}}}`)
	shaped := listen(t, g, "shaped", "").next(t)
	body, _ = base64.StdEncoding.DecodeString(shaped.Data.BodyBase64)
	if shaped.Data.Path != "/charges" || shaped.Data.Headers["X-Shaped"] != "yes" || string(body) != `{"id":"evt_c1"}` {
		t.Errorf("a transformed event: %+v, body %s", shaped.Data, body)
	}

	// A gateway keeps 64 streams open at most (two are open here).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := 0
	for ; opened < 70; opened++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+g.gw.Addr()+"/admin/listen/dev", nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			if res.StatusCode != http.StatusTooManyRequests {
				t.Errorf("stream %d: %s; want 429 too_many_streams", opened+3, res.Status)
			}
			res.Body.Close()
			break
		}
		defer res.Body.Close()
	}
	if opened != 64-2 {
		t.Errorf("%d more streams opened beside the two open; want 62", opened)
	}
	cancel()

	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/admin/listen/web", "", http.StatusBadRequest},
		{"GET", "/admin/listen/nope", "", http.StatusNotFound},
		{"POST", "/admin/listen/dev/12345678", `{"status":200}`, http.StatusConflict},
		{"POST", "/admin/listen/dev/x", `{"status":200}`, http.StatusConflict},
		{"POST", "/admin/listen/dev/1", `{}`, http.StatusBadRequest},
		{"POST", "/admin/listen/dev/1", `{"status":99}`, http.StatusBadRequest},
	} {
		if status, body := g.call(t, c.method, c.path, c.body); status != c.want {
			t.Errorf("%s %s %s: %d %s; want %d", c.method, c.path, c.body, status, body, c.want)
		}
	}
}
