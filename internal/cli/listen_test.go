package cli_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/cli"
)

// gateway listen reconnects by itself when its stream ends, resuming after
// the last event it got (Last-Event-ID), and answers each dispatch with the
// local target's status.
func TestListenReconnectsAndResumes(t *testing.T) {
	var mu sync.Mutex
	var connects []string
	answers := map[string]string{}
	event := func(id, dispatch, delivery string) string {
		body := base64.StdEncoding.EncodeToString([]byte(`{"id":"` + delivery + `"}`))
		return fmt.Sprintf("id: %s\ndata: {\"dispatch_id\":%q,\"route\":\"dev\",\"provider\":\"stripe\",\"delivery_id\":%q,\"event\":\"invoice.paid\",\"generation\":1,\"attempt\":1,\"headers\":{},\"content_type\":\"application/json\",\"body_base64\":%q}\n\n",
			id, dispatch, delivery, body)
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/admin/listen/dev":
			mu.Lock()
			connects = append(connects, r.Header.Get("Last-Event-ID"))
			n := len(connects)
			mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			switch n {
			case 1: // one event, then the stream ends
				_, _ = io.WriteString(w, event("s0123456789abcdef-1", "7", "evt_1"))
			case 2:
				_, _ = io.WriteString(w, event("s0123456789abcdef-2", "8", "evt_2"))
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}
		case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/admin/listen/dev/"):
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			answers[strings.TrimPrefix(r.URL.Path, "/admin/listen/dev/")] = string(b)
			mu.Unlock()
			_, _ = io.WriteString(w, `{}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(gw.Close)
	laptop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("X-Hookgate-Delivery"), "evt_2") {
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	t.Cleanup(laptop.Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vars := map[string]string{cli.URLVariable: gw.URL, cli.TokenVariable: "t"}
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(ctx, cli.Env{Getenv: func(k string) string { return vars[k] }, Stdout: io.Discard, Stderr: io.Discard}, []string{"listen", "dev", "--forward-to", laptop.URL})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(answers)
		mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("listen: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(connects) != 2 || connects[0] != "" || connects[1] != "s0123456789abcdef-1" {
		t.Errorf("connections' Last-Event-ID: %q; want none, then the first event's id", connects)
	}
	if answers["7"] != `{"status":200}` || answers["8"] != `{"status":418}` {
		t.Errorf("answers: %v", answers)
	}
}
