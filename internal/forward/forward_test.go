package forward_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/fanout"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/handlers"
)

// newTarget is a local forward target that answers from a script.
func newTarget(t testing.TB, answer func(r *http.Request) (int, map[string]string)) *httptest.Server {
	t.Helper()
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server see the client hang up (and end
		// r's context) while the answer is held back.
		_, _ = io.ReadAll(r.Body)
		status, header := answer(r)
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(tg.Close)
	return tg
}

// A target URL's userinfo and query values never reach an error, and so
// never the dispatch's last_error or the log.
func TestForwardErrorsRedactTheTargetURL(t *testing.T) {
	t.Parallel()
	redirect := newTarget(t, func(*http.Request) (int, map[string]string) {
		return http.StatusFound, map[string]string{"Location": "http://other:pw3@example.invalid/x?sig=secret3"}
	})
	f := forward.New("", 2*time.Second, 1)
	d := handlers.Delivery{Provider: "github", DeliveryID: "d-1", Route: "r", Body: []byte(`{}`), ContentType: "application/json"}
	for _, target := range []string{
		"http://user:pw1@127.0.0.1:1/hook?token=secret1&b=2", // refused connection
		"http://user:pw2@[::1%25zz]:1/?token=secret2",        // not a URL a request can be made of
		redirect.URL + "/?token=secret3",                     // a redirect that is not followed
	} {
		err := f.Forward(context.Background(), target, d)
		if err == nil {
			t.Fatalf("%s: no error", target)
		}
		for _, secret := range []string{"pw1", "pw2", "pw3", "secret1", "secret2", "secret3"} {
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error shows %q: %v", secret, err)
			}
		}
		t.Logf("%v", err)
	}
	if got := fanout.RedactURL("https://u:p@h.example/p?token=t&x=1#frag"); got != "https://h.example/p?token=&x=" {
		t.Fatalf("RedactURL = %q", got)
	}
}

// Each forward attempt's outcome has a name for metrics, by what the target
// did.
func TestForwardAttemptOutcomes(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	tg := newTarget(t, func(r *http.Request) (int, map[string]string) {
		switch r.URL.Path {
		case "/busy":
			return 503, nil
		case "/gone":
			return 404, nil
		case "/hang":
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
		return 200, nil
	})
	f := forward.New("", 300*time.Millisecond, 1)
	d := handlers.Delivery{Provider: "github", DeliveryID: "d-1", Route: "r", Body: []byte(`{}`), ContentType: "application/json"}
	for target, want := range map[string]string{
		tg.URL + "/ok": "succeeded", tg.URL + "/busy": "status_5xx", tg.URL + "/gone": "status_4xx",
		tg.URL + "/hang": "timeout", "http://127.0.0.1:1/": "connection",
	} {
		if got := forward.Outcome(f.Forward(context.Background(), target, d)); got != want {
			t.Errorf("%s: %s, want %s", target, got, want)
		}
	}
}
