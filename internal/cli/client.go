package cli

import (
	"bytes"
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

// DefaultURL is where the operator commands find the gateway when neither
// --url nor HOOKGATE_URL says.
const DefaultURL = "http://127.0.0.1:8080"

// URLVariable is the variable the operator commands find the gateway's API
// at (and gateway send its webhooks): a variable hookgate reads, though the
// gateway itself does not.
const URLVariable = "HOOKGATE_URL"

// connFlags are the flags every API command takes: where the gateway is,
// the token, and whether plain http to another host is allowed.
type connFlags struct {
	url, tokenFile *string
	insecure       *bool
}

func addConnFlags(fs *flag.FlagSet) connFlags {
	return connFlags{
		url:       fs.String("url", "", "the gateway's URL (default: HOOKGATE_URL, else "+DefaultURL+")"),
		tokenFile: fs.String("token-file", "", "read the token from this file (default: HOOKGATE_TOKEN, GATEWAY_ADMIN_TOKEN or GATEWAY_ADMIN_TOKEN_FILE)"),
		insecure:  fs.Bool("insecure", false, "allow sending the token over plain http:// to a host that is not loopback"),
	}
}

// client is the operator API of one gateway.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// client returns the API client the flags and the environment describe, or
// a usage error naming what is wrong.
func (f connFlags) client(env Env) (*client, error) {
	raw := *f.url
	if raw == "" {
		raw = env.getenv(URLVariable)
	}
	if raw == "" {
		raw = DefaultURL
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		// Not the value: a URL may carry a password.
		return nil, usageErr("HOOKGATE_URL or --url must be the gateway's http(s) URL without a user, query or fragment, such as %s", DefaultURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	token, err := f.token(env)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) && !*f.insecure {
		return nil, usageErr("refusing to send the admin token over plain http:// to %s: use https://, or --insecure if the network is private", u.Host)
	}
	return &client{base: u, token: token, http: keepOrigin(env.httpClient())}, nil
}

// errRedirect means the gateway's URL answered with a redirect to another
// scheme, host or port, which is not followed: the request carries the admin
// token (or, for send, a signature or a source's token).
var errRedirect = errors.New("refusing to follow a redirect to another scheme, host or port")

// keepOrigin returns c following redirects only within the first request's
// scheme, host and port (Go's own client would follow https:// to http:// on
// the same host with the Authorization header).
func keepOrigin(c *http.Client) *http.Client {
	kept := *c
	kept.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		first := via[0].URL
		if req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
			return fmt.Errorf("%w: from %s to %s", errRedirect, first.Redacted(), req.URL.Redacted())
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &kept
}

// reachError is the error of a request that got no answer of the gateway's:
// a redirect not followed (exit 1), or no connection (exit 3).
func reachError(where string, err error) error {
	if errors.Is(err, errRedirect) {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("%s: %w", where, unwrapURL(err))}
	}
	return &ExitError{Code: ExitUnreachable, Err: fmt.Errorf("%s cannot be reached: %w", where, unwrapURL(err))}
}

// TokenVariable is the variable the operator commands read a personal token
// from (hgt_...): a variable hookgate reads, though the gateway itself does
// not.
const TokenVariable = "HOOKGATE_TOKEN"

// token is the bearer token: --token-file, else HOOKGATE_TOKEN (a personal
// token), else GATEWAY_ADMIN_TOKEN, else the file GATEWAY_ADMIN_TOKEN_FILE
// names.
func (f connFlags) token(env Env) (string, error) {
	path := *f.tokenFile
	if path == "" {
		if t := strings.TrimSpace(env.getenv(TokenVariable)); t != "" {
			return t, nil
		}
		if t := env.getenv("GATEWAY_ADMIN_TOKEN"); t != "" {
			if env.getenv("GATEWAY_ADMIN_TOKEN_FILE") != "" {
				return "", usageErr("GATEWAY_ADMIN_TOKEN and GATEWAY_ADMIN_TOKEN_FILE are both set; set one")
			}
			return strings.TrimSpace(t), nil
		}
		path = env.getenv("GATEWAY_ADMIN_TOKEN_FILE")
	}
	if path == "" {
		return "", usageErr("no token: set HOOKGATE_TOKEN (a personal token), GATEWAY_ADMIN_TOKEN or GATEWAY_ADMIN_TOKEN_FILE, or pass --token-file")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		// The reason without the path: a token may have been pasted there.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", usageErr("the admin token's file cannot be read: %v", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", usageErr("the admin token's file is empty")
	}
	return t, nil
}

// loopback reports whether host is this machine: localhost or a loopback
// address.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apiError is the gateway's JSON error body.
type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// do sends one request to the operator API and decodes a 2xx answer's JSON
// into out (when not nil). Its errors carry the exit code: 3 when the gateway
// cannot be reached, 2 for a 400 (what was typed is wrong), 1 for any other
// answer, a 404 included, with the gateway's message.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	raw, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("the gateway's answer to %s %s is not the JSON expected: %w", method, path, err)}
	}
	return nil
}

// escape is the path of segments, each escaped: a delivery id may hold
// a slash or a question mark.
func escape(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// send is do without decoding: a 2xx answer's body as it came.
func (c *client) send(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	// path is escaped by its caller (escape); the base has no query.
	u, err := url.Parse(c.base.String() + path)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("%s: %w", path, err)}
	}
	u.RawQuery = query.Encode()
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, reachError("the gateway at "+c.base.Redacted(), err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return nil, &ExitError{Code: ExitUnreachable, Err: fmt.Errorf("the gateway at %s broke off its answer: %w", c.base.Redacted(), err)}
	}
	if len(raw) > maxAnswer {
		return nil, &ExitError{Code: ExitFailed, Err: fmt.Errorf("the gateway's answer to %s %s is larger than %d bytes", method, path, maxAnswer)}
	}
	if res.StatusCode >= 200 && res.StatusCode <= 299 {
		return raw, nil
	}
	var e apiError
	if json.Unmarshal(raw, &e) != nil || e.Error == "" {
		e = apiError{Error: http.StatusText(res.StatusCode), Message: "the answer is not the gateway's JSON error: is " + c.base.Redacted() + " a hookgate gateway?"}
	}
	code := ExitFailed
	if res.StatusCode == http.StatusBadRequest {
		code = ExitUsage
	}
	return nil, &ExitError{Code: code, Err: &answerError{Status: res.StatusCode, Code: e.Error, Message: e.Message, Body: raw}}
}

// maxAnswer bounds an answer the CLI reads (a delivery's body is at most
// GATEWAY_MAX_BODY_BYTES, 25 MiB by default).
const maxAnswer = 256 << 20

// answerError is a non-2xx answer of the gateway.
type answerError struct {
	Status  int
	Code    string
	Message string
	// Body is the answer as it came.
	Body []byte
}

func (e *answerError) Error() string {
	return fmt.Sprintf("the gateway answered %d %s: %s", e.Status, e.Code, e.Message)
}

// statusOf is the HTTP status of the gateway's answer err carries, or 0.
func statusOf(err error) int {
	var ae *answerError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// unwrapURL drops *url.Error's "Get "URL": " prefix, which would repeat
// the URL (with its path and query).
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// answer is an API answer as a command shows it: printed as it came with
// --json (printed is then true: the command is done), else decoded into v
// for the command's table.
func answer(env Env, raw json.RawMessage, asJSON bool, v any) (printed bool, err error) {
	if asJSON {
		return true, printJSON(env.Stdout, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, &ExitError{Code: ExitFailed, Err: fmt.Errorf("the gateway's answer is not the JSON expected: %w", err)}
	}
	return false, nil
}

// providerInfo is one provider as GET /admin/providers lists it.
type providerInfo struct {
	Name       string `json:"name"`
	Configured bool   `json:"configured"`
	Recovery   bool   `json:"recovery"`
}

// providers are the providers the gateway knows.
func (c *client) providers(ctx context.Context) ([]providerInfo, error) {
	var answer struct {
		Providers []providerInfo `json:"providers"`
	}
	err := c.do(ctx, http.MethodGet, "/admin/providers", nil, nil, &answer)
	return answer.Providers, err
}

// knownProvider is nil when the gateway knows name, else a usage error
// listing the providers it knows (or the error that kept it from saying).
func (c *client) knownProvider(ctx context.Context, name string) error {
	known, err := c.providers(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, p := range known {
		if p.Name == name {
			return nil
		}
		names = append(names, p.Name)
	}
	return usageErr("unknown provider %q (the gateway knows: %s)", name, strings.Join(names, ", "))
}

// routeNames are the names of the gateway's routes.
func (c *client) routeNames(ctx context.Context) ([]string, error) {
	var answer struct {
		Routes []struct {
			Name string `json:"name"`
		} `json:"routes"`
	}
	if err := c.do(ctx, http.MethodGet, "/admin/routes", nil, nil, &answer); err != nil {
		return nil, err
	}
	names := make([]string, len(answer.Routes))
	for i, r := range answer.Routes {
		names[i] = r.Name
	}
	return names, nil
}

// defaultTimeout bounds one API request, recovery's excepted.
const defaultTimeout = time.Minute
