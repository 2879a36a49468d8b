package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/recovery"
)

// recoverTimeout bounds a recovery on demand: the gateway's own bound for a
// run (rate-limit waits take minutes), and a minute more for the answer.
const recoverTimeout = 16 * time.Minute

// recoverCmd runs recovery once, in the gateway, with its configuration:
// gateway recover github|stripe [--since T] [--dry-run] [--json].
func recoverCmd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	conn := addConnFlags(fs)
	since := fs.String("since", "", "list from this time (RFC 3339, or a duration ago such as 6h) instead of the checkpoint")
	dryRun := fs.Bool("dry-run", false, "list and compare; ask for and store nothing")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 || (rest[0] != "github" && rest[0] != "stripe") {
		return usageErr("usage: recover github|stripe [--since T] [--dry-run] [--json]")
	}
	if *since != "" {
		// Checked here too, so that a typo is a usage error before the
		// gateway is asked; the gateway checks it again.
		now := env.Now()
		t, err := deliveries.ParseTime(*since, now)
		if err != nil {
			return usageErr("--since: %v", err)
		}
		if t.After(now) {
			return usageErr("--since: %s is in the future", t.Format(time.RFC3339))
		}
	}
	c, err := conn.client(env)
	if err != nil {
		return err
	}
	long := *c.http
	long.Timeout = recoverTimeout
	c.http = &long
	raw, err := c.send(ctx, http.MethodPost, escape("admin", "recover", rest[0]), nil, map[string]any{"since": *since, "dry_run": *dryRun})
	var ae *answerError
	if errors.As(err, &ae) && ae.Code == "recovery_failed" {
		// The provider's API failed the run: the gateway answers 502 with
		// what the run did before it failed, in "report".
		var failed struct {
			Report json.RawMessage `json:"report"`
		}
		if json.Unmarshal(ae.Body, &failed) == nil && failed.Report != nil {
			raw = failed.Report
		}
	} else if err != nil {
		return err
	}
	if *asJSON {
		if perr := printJSON(env.Stdout, raw); perr != nil {
			return perr
		}
		return err
	}
	var report struct {
		recovery.Report
		ListedFrom *time.Time `json:"listed_from"`
	}
	if jerr := json.Unmarshal(raw, &report); jerr != nil {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("the gateway's recovery report is not the JSON expected: %w", jerr)}
	}
	if report.ListedFrom != nil {
		fmt.Fprintf(env.Stderr, "recover: --since reaches further back than GATEWAY_RECOVERY_LOOKBACK or GATEWAY_RETENTION allow; listed from %s\n",
			report.ListedFrom.UTC().Format(time.RFC3339))
	}
	printReport(env, report.Report)
	return err
}

// printReport prints what a run found, asked for, stored and skipped.
func printReport(env Env, rep recovery.Report) {
	mode := ""
	if rep.DryRun {
		mode = " (dry run: nothing asked for or stored)"
	}
	fmt.Fprintf(env.Stdout, "recover %s%s: %d missing, %d asked for again, %d stored, %d skipped\n",
		rep.Provider, mode, len(rep.Found), len(rep.Requested), len(rep.Stored), len(rep.Skipped))
	for _, l := range []struct {
		what string
		ids  []string
	}{{"missing", rep.Found}, {"asked for", rep.Requested}, {"stored", rep.Stored}} {
		for _, id := range l.ids {
			fmt.Fprintf(env.Stdout, "  %-9s  %s\n", l.what, shown(id))
		}
	}
	for _, sk := range rep.Skipped {
		fmt.Fprintf(env.Stdout, "  %-9s  %s  (%s)\n", "skipped", shown(sk.DeliveryID), printable(sk.Reason))
	}
}

// shown is an id from a provider's API as a terminal may print it: quoted
// and escaped when it is not printable text (an id a provider lists is not
// checked before it is reported).
func shown(id string) string {
	if id == "" || !providers.Printable(id) {
		return strconv.Quote(id)
	}
	return id
}

// visible drops what a terminal would act on from text a provider sent.
func visible(r rune) rune {
	if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
		// Control characters, and format ones: a bidirectional override
		// (U+202E) in a target's answer would reorder the line it is on.
		return -1
	}
	return r
}
