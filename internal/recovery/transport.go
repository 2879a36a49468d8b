package recovery

// This file is what the provider API clients share beneath their own code:
// the API URL's check, the transports that keep a credential on its origin
// and an answer within its bounds, and a wait that ends with the run.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/fanout"
)

// checkAPIURL refuses an API URL that is not http(s), or that carries a user,
// a password, a query or a fragment (a client would send the first two and
// lose the others). The URL is shown without what may be a credential.
func checkAPIURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		// Not the value, even redacted: whatever was pasted there may be a secret.
		return errors.New("must be an http(s) URL without a user, password, query or fragment, such as https://api.example.com")
	}
	return nil
}

// origin is an API URL's scheme, host and port: the only place its
// credential is sent.
type origin struct{ scheme, host, port string }

func originOf(u *url.URL) origin {
	o := origin{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname()), port: u.Port()}
	if o.port == "" {
		switch o.scheme {
		case "https":
			o.port = "443"
		case "http":
			o.port = "80"
		}
	}
	return o
}

// followWithin is an http.Client's CheckRedirect: a redirect within o is
// followed (10 at most in a row), one anywhere else is refused with
// ErrRedirectRefused. An API client adds its credential in its transport,
// on every hop, so Go's own rule (which keeps Authorization for another port
// of the same host) would not keep it from another server.
func (o origin) followWithin(req *http.Request, via []*http.Request) error {
	if originOf(req.URL) != o {
		status := 0
		if req.Response != nil {
			status = req.Response.StatusCode
		}
		return fmt.Errorf("%w: the API answered %d, to %s", ErrRedirectRefused, status, fanout.RedactURL(req.URL.String()))
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// pinned is the innermost transport of every provider API client: it sends
// nothing to another scheme, host or port than the API URL's, whatever a
// client above it does with a redirect.
type pinned struct {
	origin origin
	next   http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (p pinned) RoundTrip(req *http.Request) (*http.Response, error) {
	if originOf(req.URL) != p.origin {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: refused to send a request to %s", ErrRedirectRefused, fanout.RedactURL(req.URL.String()))
	}
	return p.next.RoundTrip(req)
}

// Bounds on what a provider's API may make a run read: an answer's size, and
// how many deliveries or events one run lists from one source. A run that
// reaches one stops with an error; the next starts again from the checkpoint.
const (
	maxAnswerBytes = 32 << 20
	maxListed      = 100_000
)

// capped is a transport whose answers' bodies fail past maxAnswerBytes, so
// that an API answering without end cannot exhaust memory.
type capped struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (c capped) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(req)
	if err == nil {
		res.Body = &cappedBody{ReadCloser: res.Body, left: maxAnswerBytes}
	}
	return res, err
}

type cappedBody struct {
	io.ReadCloser
	left int64
}

// Read implements io.Reader, failing past the cap.
func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("the API's answer is larger than %d bytes", maxAnswerBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// sleep waits d, or until ctx ends (returning its error).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
