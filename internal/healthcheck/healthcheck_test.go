package healthcheck

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The check passes on 200 only, and otherwise says why in one line.
func TestRun(t *testing.T) {
	t.Parallel()
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"status":"ready"}`))
	}))
	defer ready.Close()
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"unavailable","message":"the database does not answer or its schema is not current;\n see the gateway's log"}`))
	}))
	defer notReady.Close()
	redirect := httptest.NewServer(http.RedirectHandler(ready.URL+"/readyz", http.StatusFound))
	defer redirect.Close()
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer slow.Close()
	defer close(hang)

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string // "" when ready
	}{
		{"200", []string{"--url", ready.URL + "/readyz"}, ""},
		{"503", []string{"--url", notReady.URL + "/readyz"},
			"/readyz answered 503 Service Unavailable: the database does not answer or its schema is not current; see the gateway's log"},
		{"404", []string{"--url", ready.URL + "/nothing"}, "answered 404 Not Found: 404 page not found"},
		{"a redirect is not ready", []string{"--url", redirect.URL + "/readyz"}, "answered 302 Found"},
		{"unreachable", []string{"--url", "http://" + closedAddr(t) + "/readyz"}, "connection refused"},
		{"no answer in time", []string{"--url", slow.URL + "/readyz", "--timeout", "200ms"}, "no answer within 200ms"},
		{"not a URL", []string{"--url", "http://[::1"}, "--url"},
		{"an argument", []string{"now"}, "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			start := time.Now()
			err := Run(context.Background(), tc.args, &stdout, &stderr)
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("took %s", took)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("not ready: %v", err)
			case tc.wantErr == "":
				if !strings.HasPrefix(stdout.String(), "ready: ") {
					t.Errorf("stdout %q", stdout.String())
				}
			case err == nil:
				t.Fatalf("ready; want %q", tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n"):
				t.Errorf("error %q; want one line containing %q", err, tc.wantErr)
			}
		})
	}
}

// closedAddr is an address where nothing listens.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Without --url the check asks the gateway on its own host at GATEWAY_ADDR's port.
func TestReadyURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"":               "http://127.0.0.1:8080/readyz",
		":8080":          "http://127.0.0.1:8080/readyz",
		":9000":          "http://127.0.0.1:9000/readyz",
		"0.0.0.0:8081":   "http://127.0.0.1:8081/readyz",
		"[::]:8082":      "http://127.0.0.1:8082/readyz",
		"127.0.0.1:8083": "http://127.0.0.1:8083/readyz",
		"[::1]:8084":     "http://[::1]:8084/readyz",
		"gateway:8085":   "http://gateway:8085/readyz",
	} {
		if got, err := readyURL(addr); err != nil || got != want {
			t.Errorf("GATEWAY_ADDR=%q: %q, %v; want %q", addr, got, err, want)
		}
	}
	for _, addr := range []string{"8080", "localhost", "localhost:"} {
		if got, err := readyURL(addr); err == nil {
			t.Errorf("GATEWAY_ADDR=%q: %q; want an error", addr, got)
		}
	}
}

// GATEWAY_ADDR is read from the environment when --url is not given.
func TestRunReadsGatewayAddr(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.Write([]byte("ok"))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	t.Setenv("GATEWAY_ADDR", ":"+port)
	var stdout bytes.Buffer
	if err := Run(context.Background(), nil, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if want := "ready: http://127.0.0.1:" + port + "/readyz\n"; stdout.String() != want {
		t.Errorf("stdout %q; want %q", stdout.String(), want)
	}
}
