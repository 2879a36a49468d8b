package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// gateway healthcheck, as the image's HEALTHCHECK runs it: exit 0 when
// /readyz answers 200, else exit 1 with the reason on one line of stderr.
func TestHealthcheckCommand(t *testing.T) {
	bin := gatewayBinary(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.Write([]byte(`{"status":"ready"}`))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"unavailable","message":"the database does not answer"}`))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, tc := range []struct {
		name   string
		args   []string
		addr   string // GATEWAY_ADDR
		code   int
		stderr string
	}{
		{"ready on GATEWAY_ADDR's port", nil, ":" + port, 0, ""},
		{"ready at --url", []string{"--url", srv.URL + "/readyz"}, "", 0, ""},
		{"503", []string{"--url", srv.URL + "/down"}, "", 1, "answered 503 Service Unavailable: the database does not answer"},
		{"unreachable", nil, freeAddr(t), 1, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"healthcheck"}, tc.args...)...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GATEWAY_ADDR=" + tc.addr}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			_ = cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Errorf("exit %d; want %d (stderr %q)", code, tc.code, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if tc.stderr != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.stderr)) {
				t.Errorf("stderr %q; want one line containing %q", stderr.String(), tc.stderr)
			}
		})
	}
}
