// Package healthcheck is `gateway healthcheck`: one GET of a running
// gateway's /readyz, for a container's HEALTHCHECK where the image has no
// curl (distroless). It succeeds on 200 and fails, with a one-line reason,
// on any other answer or none within its timeout.
package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Usage is the command's line in the gateway's usage.
const Usage = `  healthcheck [--url URL] [--timeout D]
            exit 0 when the gateway on GATEWAY_ADDR's port answers /readyz 200, else 1 (a container's HEALTHCHECK)
`

// DefaultTimeout bounds the whole check: below a HEALTHCHECK's own timeout,
// so that the reason is printed rather than the check killed.
const DefaultTimeout = 3 * time.Second

// defaultAddr is GATEWAY_ADDR's default (internal/config).
const defaultAddr = ":8080"

// Run checks the gateway's readiness. Its error is the one-line reason the
// gateway is not ready; stdout gets a line when it is.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "", "the URL to GET (default http://127.0.0.1:<GATEWAY_ADDR's port>/readyz)")
	timeout := fs.Duration("timeout", DefaultTimeout, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("healthcheck takes no arguments, got %q", fs.Arg(0))
	}
	if *target == "" {
		u, err := readyURL(os.Getenv("GATEWAY_ADDR"))
		if err != nil {
			return err
		}
		*target = u
	}
	if err := check(ctx, *target, *timeout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ready:", *target)
	return nil
}

// readyURL is the /readyz URL of a gateway listening on addr, reached from
// its own host: a wildcard or empty host (":8080", "0.0.0.0:8080",
// "[::]:8080") is reached on 127.0.0.1, a named one on itself.
func readyURL(addr string) (string, error) {
	if addr == "" {
		addr = defaultAddr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("GATEWAY_ADDR: not a host:port address; pass --url")
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: "/readyz"}).String(), nil
}

// client asks the gateway itself: never through a proxy the environment
// names (HTTP_PROXY in a container would send the check elsewhere), and a
// redirect is an answer, not ready.
var client = &http.Client{
	Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// check GETs target and says why it is not a 200.
func check(ctx context.Context, target string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	res, err := client.Do(req)
	if err != nil {
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: no answer within %s", target, timeout)
		}
		return fmt.Errorf("%s: %v", target, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return nil
	}
	return fmt.Errorf("%s answered %s%s", target, res.Status, reason(res.Body))
}

// reason is the answer's message (the gateway's JSON error's, or the body's
// text), on one short line.
func reason(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 1<<10))
	var e struct{ Message string }
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		b = []byte(e.Message)
	}
	msg := strings.Join(strings.Fields(string(b)), " ")
	if msg == "" {
		return ""
	}
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return ": " + msg
}
