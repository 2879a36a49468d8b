package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/ingest"
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
	if *since != "" {
		t, err := deliveries.ParseTime(*since, env.Now())
		if err != nil {
			return usageErr("--since: %v", err)
		}
		opts.Since = &t
	}
	gh, st, err := recovery.FromConfig(env.Config)
	if err != nil {
		return err
	}
	pool, enq, closeDB, err := openEnqueuer(ctx, env)
	if err != nil {
		return err
	}
	defer closeDB()
	r := &recovery.Recoverer{
		Pool: pool, GitHub: gh, Stripe: st,
		Ingester: &ingest.Ingester{Pool: pool, Receipts: &receipts.Store{Retention: env.Config.Retention}, Enqueuer: enq},
		Lookback: env.Config.RecoveryLookback, Retention: env.Config.Retention,
	}
	rep, err := r.Run(ctx, rest[0], opts)
	if errors.Is(err, recovery.ErrNotConfigured) {
		return usageErr("recover %s: %v", rest[0], err)
	}
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
	fmt.Fprintf(env.Stdout, "recover %s%s: %d missing, %d asked for again, %d stored\n",
		rep.Provider, mode, len(rep.Found), len(rep.Requested), len(rep.Stored))
	for _, l := range []struct {
		what string
		ids  []string
	}{{"missing", rep.Found}, {"asked for", rep.Requested}, {"stored", rep.Stored}} {
		for _, id := range l.ids {
			fmt.Fprintf(env.Stdout, "  %-9s  %s\n", l.what, id)
		}
	}
	return err
}
