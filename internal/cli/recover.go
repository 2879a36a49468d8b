package cli

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/ingest"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/receipts"
	"github.com/hookgate/hookgate/internal/recovery"
)

// recoverCmd runs recovery once: gateway recover github|stripe [--since T]
// [--dry-run] [--json].
func recoverCmd(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	since := fs.String("since", "", "list from this time (RFC 3339, or a duration ago such as 6h) instead of the checkpoint")
	dryRun := fs.Bool("dry-run", false, "list and compare; ask for and store nothing")
	asJSON := fs.Bool("json", false, "JSON output")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 || (rest[0] != "github" && rest[0] != "stripe") {
		return usageErr("usage: recover github|stripe [--since T] [--dry-run] [--json]")
	}
	opts := recovery.Options{DryRun: *dryRun, Actor: actor()}
	gh, st, err := recovery.FromConfig(env.Config)
	if err != nil {
		return usageErr("recover %s: %v", rest[0], err)
	}
	r := &recovery.Recoverer{GitHub: gh, Stripe: st, Lookback: env.Config.RecoveryLookback, Retention: env.Config.Retention}
	if *since != "" {
		now := env.Now()
		t, err := deliveries.ParseTime(*since, now)
		if err != nil {
			return usageErr("--since: %v", err)
		}
		if t.After(now) {
			return usageErr("--since: %s is in the future", t.Format(time.RFC3339))
		}
		if floor := r.Floor(now); t.Before(floor) {
			fmt.Fprintf(env.Stderr, "recover: --since reaches further back than GATEWAY_RECOVERY_LOOKBACK or GATEWAY_RETENTION allow; listing from %s\n",
				floor.UTC().Format(time.RFC3339))
		}
		opts.Since = &t
	}
	if !slices.Contains(r.Providers(), rest[0]) {
		_, err := r.Run(ctx, rest[0], opts)
		return usageErr("recover %s: %v", rest[0], err)
	}
	pool, enq, closeDB, err := openEnqueuer(ctx, env)
	if err != nil {
		return err
	}
	defer closeDB()
	r.Pool = pool
	r.Ingester = &ingest.Ingester{Pool: pool, Receipts: &receipts.Store{Retention: env.Config.Retention}, Enqueuer: enq}
	rep, err := r.Run(ctx, rest[0], opts)
	if *asJSON {
		if werr := writeJSON(env.Stdout, rep); werr != nil {
			return werr
		}
		return err
	}
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
		fmt.Fprintf(env.Stdout, "  %-9s  %s  (%s)\n", "skipped", shown(sk.DeliveryID), strings.Map(visible, sk.Reason))
	}
	return err
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
	if unicode.IsControl(r) {
		return -1
	}
	return r
}
