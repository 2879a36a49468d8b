package cli_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/cli"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// elsewhere is a plain http:// server that counts the requests it gets.
func elsewhere(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		got.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"routes":[]}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

// redirecting is an https:// server that sends every request to to (a path
// beginning with "/" stays on it), with status 307, which keeps the method
// and the body.
func redirecting(t *testing.T, to string) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("moved") == "1" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"routes":[]}`)
			return
		}
		http.Redirect(w, r, to+r.URL.Path+"?moved=1", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func env(srv *httptest.Server, vars map[string]string) cli.Env {
	reg, _ := providers.NewRegistry(providers.GitHub{Secrets: verify.Secrets{"gh-secret"}})
	return cli.Env{
		Getenv: func(name string) string { return vars[name] },
		HTTP:   srv.Client(), Stdout: io.Discard, Stderr: io.Discard, Providers: reg,
	}
}

// A redirect from the gateway's https:// URL to plain http:// (another port
// of the same host here) is not followed with the token: the command exits 1
// naming the redirect, and the other server gets nothing. The same for send,
// whose request carries a signature. A redirect within the gateway's own
// scheme, host and port is followed.
func TestNoRedirectAwayFromTheGatewaysOrigin(t *testing.T) {
	plain, got := elsewhere(t)
	tls := redirecting(t, plain.URL)
	vars := map[string]string{"HOOKGATE_URL": tls.URL, "GATEWAY_ADMIN_TOKEN": "admin-token"}
	for _, args := range [][]string{
		{"routes", "list"},
		{"send", "github", "--event", "ping", "--url", tls.URL},
	} {
		err := cli.Run(context.Background(), env(tls, vars), args)
		var exit *cli.ExitError
		if !errors.As(err, &exit) || exit.Code != cli.ExitFailed || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), plain.URL) {
			t.Errorf("%v: %v, want exit 1 naming the redirect to %s", args, err, plain.URL)
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the plain http:// server got %d requests", n)
	}

	same := redirecting(t, "") // to its own origin
	if err := cli.Run(context.Background(), env(same, map[string]string{"HOOKGATE_URL": same.URL, "GATEWAY_ADMIN_TOKEN": "admin-token"}),
		[]string{"routes", "list"}); err != nil {
		t.Errorf("a redirect within the gateway's origin: %v", err)
	}
}

// send obeys the loopback rule of every command: plain http:// to a host
// that is not loopback is refused (exit 2) unless --insecure.
func TestSendRefusesPlainHTTPAwayFromLoopback(t *testing.T) {
	plain, _ := elsewhere(t)
	err := cli.Run(context.Background(), env(plain, nil), []string{"send", "github", "--event", "ping", "--url", "http://hooks.example.com:8080"})
	var exit *cli.ExitError
	if !errors.As(err, &exit) || exit.Code != cli.ExitUsage || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("send over plain http to another host: %v, want exit 2 naming --insecure", err)
	}
	// --insecure lets it go (nothing answers there: exit 3, not 2).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = cli.Run(ctx, env(plain, nil), []string{"send", "github", "--event", "ping", "--insecure", "--url", "http://hooks.invalid:1"})
	if exit = nil; errors.As(err, &exit) && exit.Code == cli.ExitUsage {
		t.Errorf("send --insecure: %v, want it sent", err)
	}
	// Loopback needs no flag.
	if err := cli.Run(context.Background(), env(plain, nil), []string{"send", "github", "--event", "ping", "--url", plain.URL}); err != nil {
		t.Errorf("send to loopback: %v", err)
	}
}
