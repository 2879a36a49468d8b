package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
)

// tokenInfo is a personal token as the API answers it; Token only when made.
type tokenInfo struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Token      string     `json:"token"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// tokensCmd lists personal tokens (tokens list), makes one (tokens create
// NAME --role R [--expires-in D]) or revokes one (tokens revoke ID), through
// the gateway: an admin's commands.
func tokensCmd(ctx context.Context, env Env, args []string) error {
	const usage = "tokens list | tokens create NAME --role viewer|operator|admin [--expires-in D] | tokens revoke ID"
	if len(args) == 0 {
		return usageErr("usage: %s", usage)
	}
	fs := flag.NewFlagSet("tokens "+args[0], flag.ContinueOnError)
	conn := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	var role, expiresIn *string
	if args[0] == "create" {
		role = fs.String("role", "", "what the token may do: viewer, operator or admin")
		expiresIn = fs.String("expires-in", "", "the token's life, such as 720h (default 720h, at most 8784h)")
	}
	rest, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	var method, path string
	var body any
	switch {
	case args[0] == "list" && len(rest) == 0:
		method, path = http.MethodGet, "/admin/tokens"
	case args[0] == "create" && len(rest) == 1:
		if *role == "" {
			return usageErr("tokens create: --role viewer, operator or admin is required")
		}
		if !providers.Printable(rest[0]) {
			return usageErr("tokens create: NAME must be printable text")
		}
		method, path = http.MethodPost, "/admin/tokens"
		body = map[string]string{"name": rest[0], "role": *role, "expires_in": *expiresIn}
	case args[0] == "revoke" && len(rest) == 1:
		method, path = http.MethodDelete, escape("admin", "tokens", rest[0])
	default:
		return usageErr("usage: %s", usage)
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.do(ctx, method, path, nil, body, &raw); err != nil {
		return err
	}
	switch args[0] {
	case "list":
		var list struct {
			Tokens []tokenInfo `json:"tokens"`
		}
		if printed, err := answer(env, raw, *asJSON, &list); printed || err != nil {
			return err
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tEXPIRES_AT\tLAST_USED_AT\tREVOKED_AT")
		for _, t := range list.Tokens {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, printable(t.Name), t.Role, t.ExpiresAt.UTC().Format(time.RFC3339),
				timeOrDash(t.LastUsedAt), timeOrDash(t.RevokedAt))
		}
		return tw.Flush()
	case "create":
		var t tokenInfo
		if printed, err := answer(env, raw, *asJSON, &t); printed || err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "%s\n", t.Token)
		fmt.Fprintf(env.Stderr, "made %s %q, role %s, expires %s: the token above is shown this once; keep it in HOOKGATE_TOKEN\n",
			t.ID, printable(t.Name), t.Role, t.ExpiresAt.UTC().Format(time.RFC3339))
		return nil
	}
	var t tokenInfo
	if printed, err := answer(env, raw, *asJSON, &t); printed || err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "revoked %s %q at %s\n", t.ID, printable(t.Name), timeOrDash(t.RevokedAt))
	return nil
}

// timeOrDash is t in RFC 3339, UTC, or - when there is none.
func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
