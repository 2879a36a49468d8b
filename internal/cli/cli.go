// Package cli is the operator's command line, a client of a running
// gateway's operator API: list, show and fetch deliveries, replay them or
// retry them now, list, pause, resume and retry routes, read the audit log,
// run recovery from the providers' APIs and the archive, and make, list and
// revoke personal tokens. It finds the gateway at HOOKGATE_URL (or --url) and
// sends a personal token (HOOKGATE_TOKEN) or the admin token
// (GATEWAY_ADMIN_TOKEN, its _FILE variant), or --token-file's;
// it never opens, starts or migrates a database, so it works the same from
// any directory, machine or container and sees the gateway's own routes and
// sources. send is the exception: it signs a sample delivery locally with the
// provider's secret, as the provider would, and posts it to the gateway.
//
// Output is a table for people, or the API's JSON with --json for scripts.
// Exit codes: 0 done; 1 the gateway refused or failed (a 404 included);
// 2 usage; 3 the gateway could not be reached.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
)

// Exit codes.
const (
	// ExitFailed: the gateway refused or failed the request (a 404
	// included), or send's delivery was not accepted.
	ExitFailed = 1
	// ExitUsage: the command line or the environment is wrong.
	ExitUsage = 2
	// ExitUnreachable: the gateway could not be reached.
	ExitUnreachable = 3
)

// ExitError carries a command's exit code.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

func usageErr(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// Env is what the commands need from the program.
type Env struct {
	// Getenv reads the environment (HOOKGATE_URL, HOOKGATE_TOKEN, GATEWAY_ADMIN_TOKEN,
	// GATEWAY_ADMIN_TOKEN_FILE); nil: os.Getenv.
	Getenv func(string) string
	// HTTP is the client for the operator API; nil: one with a minute's
	// timeout per request (recover's excepted).
	HTTP   *http.Client
	Stdout io.Writer
	Stderr io.Writer
	// Stdin is where a command reads a person's answer to a question it
	// asks on a terminal (replay --force without --route); nil: none.
	Stdin io.Reader
	// Terminal says a person is at a terminal to answer (Stdin and Stderr
	// are one); false: a command that would ask does nothing, and names the
	// flag that confirms instead.
	Terminal bool
	// Providers and Addr are for send alone: the secrets it signs with (the
	// gateway's configuration, read locally) and GATEWAY_ADDR.
	Providers *providers.Registry
	Addr      string
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
}

func (env Env) getenv(name string) string {
	if env.Getenv == nil {
		return os.Getenv(name)
	}
	return env.Getenv(name)
}

func (env Env) httpClient() *http.Client {
	if env.HTTP != nil {
		return env.HTTP
	}
	return &http.Client{Timeout: defaultTimeout}
}

// Commands are the operator commands Run takes; send among them.
var Commands = []string{"deliveries", "replay", "retry", "routes", "audit", "recover", "archive", "tokens", "listen", "send"}

// Usage describes the operator commands.
const Usage = `  deliveries list [--provider P] [--event E] [--state S] [--since T] [--until T] [--where EXPR] [--key NAME=VALUE]... [--limit N] [--cursor C] [--json]
  deliveries show PROVIDER ID [--json]
  deliveries body PROVIDER ID
  deliveries export [--provider P] [--event E] [--state S] [--since T] [--until T] [--where EXPR] [--key NAME=VALUE]... > FILE.ndjson
  replay PROVIDER ID [--route R]... [--force [--yes]] [--reason TEXT] [--json]
  replay [--provider P] [--event E] [--state S] [--since T] [--until T] [--where EXPR] [--key NAME=VALUE]... [--force [--yes]] [--reason TEXT] [--json]
  retry PROVIDER ID [--route R]... [--reason TEXT] [--json]
  retry [--provider P] [--event E] [--since T] [--until T] [--where EXPR] [--key NAME=VALUE]... [--reason TEXT] [--json]
  routes list [--json]
  routes pause NAME [--reason TEXT] [--json]
  routes resume NAME [--reason TEXT] [--json]
  routes retry NAME [--reason TEXT] [--json]
  audit [--limit N] [--cursor C] [--json]
  recover github|stripe [--since T] [--dry-run] [--json]
  archive list [--json]
  archive run DAY [--json]
  archive restore DAY [--provider P] [--json]
  tokens list [--json]
  tokens create NAME --role viewer|operator|admin [--expires-in D] [--json]
  tokens revoke ID [--json]
  listen ROUTE --forward-to URL [--from T]
  send PROVIDER --event E [--file F] [--url URL] [--insecure] [--json]
  send --file FILE.ndjson [--url URL] [--insecure] [--json]

  The operator commands talk to a running gateway's operator API: HOOKGATE_URL
  (default http://127.0.0.1:8080) or --url, with the token from --token-file, HOOKGATE_TOKEN
  (a personal token), GATEWAY_ADMIN_TOKEN or GATEWAY_ADMIN_TOKEN_FILE; plain http:// only to this machine
  unless --insecure. send signs locally with the provider's secret and posts to
  --url, HOOKGATE_URL, or GATEWAY_ADDR on this machine.
  T is an RFC 3339 time or a duration ago (24h). C is the next_cursor a listing printed (the next page).
  replay --force without --route re-dispatches every matching route: it asks first on a terminal,
  and elsewhere replays nothing (exit 2) unless --yes.
  --where is a search (a CEL expression over provider, event, headers and payload); --key a search key's
  value (the configuration file's search_keys).
  retry and routes retry attempt retrying dispatches now, within their routes' limits and circuits.
  listen posts each dispatch of a listen route to a local URL, signed with HOOKGATE_LISTEN_SECRET when set,
  and answers the gateway with its status; it reconnects by itself until interrupted. --from first replays
  the route's stored deliveries since T. deliveries export writes one JSON object per line; send --file
  posts each line of such a file, signed with its provider's secret, keeping its delivery id and headers.
  Exit codes: 0 done, 1 the gateway refused or failed (a 404 included), 2 usage, 3 the gateway could not be reached.
`

// Run runs an operator command: args[0] is one of Commands.
func Run(ctx context.Context, env Env, args []string) error {
	if env.Now == nil {
		env.Now = time.Now
	}
	switch args[0] {
	case "deliveries":
		if len(args) < 2 {
			return usageErr("deliveries: list, show, body or export?")
		}
		switch args[1] {
		case "list":
			return list(ctx, env, args[2:])
		case "show":
			return show(ctx, env, args[2:])
		case "body":
			return body(ctx, env, args[2:])
		case "export":
			return export(ctx, env, args[2:])
		}
		return usageErr("deliveries: unknown command %q", args[1])
	case "replay":
		return replayCmd(ctx, env, args[1:])
	case "retry":
		return retryCmd(ctx, env, args[1:])
	case "send":
		return send(ctx, env, args[1:])
	case "listen":
		return listenCmd(ctx, env, args[1:])
	case "routes":
		return routesCmd(ctx, env, args[1:])
	case "audit":
		return auditCmd(ctx, env, args[1:])
	case "recover":
		return recoverCmd(ctx, env, args[1:])
	case "archive":
		return archiveCmd(ctx, env, args[1:])
	case "tokens":
		return tokensCmd(ctx, env, args[1:])
	}
	return usageErr("unknown command %q", args[0])
}

// parse parses flags, allowing them before and after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			var flags strings.Builder
			fs.SetOutput(&flags)
			fs.PrintDefaults()
			return nil, usageErr("%s takes:\n%s", fs.Name(), strings.TrimRight(flags.String(), "\n"))
		} else if err != nil {
			return nil, usageErr("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSON prints an API answer as it came, indented.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	return writeJSON(w, v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable is text a provider or operator wrote, as a terminal may print it.
func printable(s string) string {
	return strings.Map(visible, s)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
