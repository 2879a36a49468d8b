package recovery

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/store"
)

// scope is the receipt scope the hook's deliveries are stored under: its id.
// The App's hook id is not in its configuration, so its deliveries are
// looked for under any scope ("" here).
func (h Hook) scope() string {
	if h.Kind == "app" {
		return ""
	}
	return strconv.FormatInt(h.ID, 10)
}

// listed is one GUID as a hook's delivery log shows it.
type listed struct {
	guid string
	id   int64     // the newest attempt's id, the one to redeliver
	at   time.Time // the first attempt's time
	ok   bool      // an attempt was answered 2xx
}

// recoverGitHub recovers each hook's deliveries in turn; a hook that fails
// leaves the others to recover, unless the run's context ended.
func (r *Recoverer) recoverGitHub(ctx context.Context, opts Options) (Report, error) {
	var api githubAPI = r.github
	rep := newReport("github", opts)
	var errs []error
	for _, h := range api.Hooks() {
		if err := r.recoverHook(ctx, api, h, opts, &rep); err != nil {
			errs = append(errs, fmt.Errorf("hook %s: %w", h, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return rep, errors.Join(errs...)
}

// recoverHook lists one hook's deliveries since its checkpoint and asks for
// those without a receipt.
func (r *Recoverer) recoverHook(ctx context.Context, api githubAPI, h Hook, opts Options, rep *Report) error {
	start := time.Now()
	source := "github:" + h.String()
	since, mayMove, err := r.window(ctx, source, start, opts)
	if err != nil {
		return err
	}
	hd, err := api.deliveries(ctx, h)
	if err != nil {
		return err
	}
	deliveries, err := r.listHook(ctx, hd, h, since, rep)
	if err != nil {
		return err
	}
	missing, err := r.missingGitHub(ctx, h, deliveries, start.Add(-r.minAge))
	if err != nil {
		return err
	}
	var guids []string
	for _, l := range missing {
		guids = append(guids, l.guid)
	}
	rep.Found = append(rep.Found, guids...)
	r.metrics.Recovery("github", "found", len(missing))
	if opts.DryRun {
		return r.explain(ctx, h, guids, rep)
	}

	checkpoint := start.Add(-overlap)
	var refused error
	for _, l := range missing {
		held, refusal, err := r.requestRedelivery(ctx, hd, h, l, opts.Actor, rep)
		if err != nil {
			return err
		}
		if held {
			checkpoint = earlier(checkpoint, l.at)
		}
		if refusal != nil {
			refused = errors.Join(refused, refusal)
		}
	}
	if mayMove {
		if err := r.saveCheckpoint(ctx, source, checkpoint); err != nil {
			return err
		}
	}
	return refused
}

// listHook reads a hook's delivery log back to since and returns each GUID
// in it once, newest first. The log is newest first, and a GUID appears in
// it once per attempt. A GUID no delivery could have is reported skipped.
func (r *Recoverer) listHook(ctx context.Context, hd hookDeliveries, h Hook, since time.Time, rep *Report) ([]*listed, error) {
	byGUID := map[string]*listed{}
	var order []*listed
	cursor := ""
	seenCursors := map[string]bool{}
	skipped := map[string]bool{}
	attempts := 0
	for {
		page, next, err := hd.list(ctx, cursor)
		if err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		older := false
		for _, d := range page {
			at := d.at
			if at.Before(since) {
				older = true
				continue
			}
			guid := d.guid
			if guid == "" || !providers.ValidID(guid) {
				if id := cutText(guid, 80); !skipped[id] {
					skipped[id] = true
					r.skip(ctx, rep, "github", id, fmt.Sprintf("GitHub listed delivery %d of hook %s with a GUID no delivery could have", d.id, h))
				}
				continue
			}
			l := byGUID[guid]
			if l == nil {
				l = &listed{guid: guid, id: d.id, at: at}
				byGUID[guid] = l
				order = append(order, l)
			}
			if at.Before(l.at) {
				l.at = at
			}
			if code := d.statusCode; code >= 200 && code < 300 {
				l.ok = true
			}
		}
		if older || next == "" {
			return order, nil
		}
		if attempts += len(page); attempts >= maxListed || seenCursors[next] {
			return nil, fmt.Errorf("list deliveries: GitHub's listing did not end (%d attempts listed); the next run starts again", attempts)
		}
		seenCursors[next] = true
		cursor = next
	}
}

// missingGitHub returns, in their order, the listed GUIDs to ask for: never
// answered 2xx, first sent before young (a younger one is still on its
// ordinary path), and with no receipt of the hook (of any hook, for the
// App's).
func (r *Recoverer) missingGitHub(ctx context.Context, h Hook, deliveries []*listed, young time.Time) ([]*listed, error) {
	// A GUID GitHub saw answered 2xx was stored: the gateway answers 2xx only
	// after its commit. No receipt then means retention removed it, and
	// asking again would repeat its side effects.
	var candidates []*listed
	var guids []string
	for _, l := range deliveries {
		if !l.ok && l.at.Before(young) {
			candidates = append(candidates, l)
			guids = append(guids, l.guid)
		}
	}
	if len(guids) == 0 {
		return nil, nil
	}
	stored, err := store.ReceivedIDs(ctx, r.pool, "github", h.scope(), guids)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, id := range stored {
		have[id] = true
	}
	var missing []*listed
	for _, l := range candidates {
		if !have[l.guid] {
			missing = append(missing, l)
		}
	}
	return missing, nil
}

// requestRedelivery asks GitHub to redeliver one missing delivery, unless it
// was asked for lately or MaxAttempts times already, and reports what it did.
// held says the run's checkpoint must stay at or before the delivery: it may
// still arrive, or be asked for again. refused is GitHub's refusal of this
// delivery, which leaves the others to ask for; err stops the run.
func (r *Recoverer) requestRedelivery(ctx context.Context, hd hookDeliveries, h Hook, l *listed, actor string, rep *Report) (held bool, refused, err error) {
	attempt, err := r.claim(ctx, h, l, actor)
	if err != nil {
		return false, nil, err
	}
	if attempt == 0 { // asked lately, or MaxAttempts times already
		held, err := r.waitOrGiveUp(ctx, h, l.guid, actor, rep)
		return held, nil, err
	}
	// Held from here until it arrives or is given up on, the last ask too:
	// the run that finds it never arrived must still list it.
	if err := hd.redeliver(ctx, l.id); err != nil {
		r.metrics.Recovery("github", "failed", 1)
		refused, err := r.redeliveryFailed(ctx, h, l.guid, actor, err, rep)
		return true, refused, err
	}
	rep.Requested = append(rep.Requested, l.guid)
	r.metrics.Recovery("github", "requested", 1)
	return true, nil, nil
}

// waitOrGiveUp reports a missing GUID claim did not ask for: one asked for
// lately is waited for; one asked for MaxAttempts times, the last long
// enough ago, is given up on (logged and counted once). held says the run's
// checkpoint must stay at or before it: it was asked for lately, or may be
// asked for again.
func (r *Recoverer) waitOrGiveUp(ctx context.Context, h Hook, guid, actor string, rep *Report) (held bool, err error) {
	n, lately, gaveUp, err := r.settle(ctx, h, guid, actor)
	if err != nil {
		return false, err
	}
	reason := fmt.Sprintf("asked for %d of %d times, the last less than %s ago; waiting for it to arrive", n, MaxAttempts, askAgainAfter)
	if !lately {
		reason = fmt.Sprintf("asked for %d times and it never arrived; not asked for again", n)
	}
	rep.Skipped = append(rep.Skipped, Skip{DeliveryID: guid, Reason: reason})
	if gaveUp {
		r.metrics.Recovery("github", "given_up", 1)
		r.logger.WarnContext(ctx, "recovery: GitHub was asked for a delivery 3 times and it never arrived",
			"hook", h.String(), "delivery_id", guid)
	}
	return lately || n < MaxAttempts, nil
}

// redeliveryFailed says what a failed redelivery request (reqErr) means. A
// rate limit or the run's end stops the run, the ask counted. A failure that
// is not GitHub's answer about this delivery (a redirect away from the API,
// an installation token GitHub would not give) is no ask: it is taken back,
// and the run stops where it is, its checkpoint unchanged. GitHub's refusal
// of this one (too old, gone, a token that may not write) is no ask either:
// it is taken back, reported skipped and returned as refused, and the others
// may pass.
func (r *Recoverer) redeliveryFailed(ctx context.Context, h Hook, guid, actor string, reqErr error, rep *Report) (refused, err error) {
	if errors.Is(reqErr, ErrRateLimited) || ctx.Err() != nil {
		return nil, reqErr
	}
	var na *notAsked
	if errors.Is(reqErr, ErrRedirectRefused) || errors.As(reqErr, &na) {
		if uerr := r.unclaim(ctx, h, guid, actor, reqErr); uerr != nil {
			return nil, errors.Join(reqErr, uerr)
		}
		return nil, fmt.Errorf("redeliver %s: %w", guid, reqErr)
	}
	// A refusal is no ask: it is not counted against the GUID's 3.
	r.logger.WarnContext(ctx, "recovery: GitHub refused a redelivery", "hook", h.String(), "delivery_id", guid, "error", reqErr)
	if uerr := r.unclaim(ctx, h, guid, actor, reqErr); uerr != nil {
		return nil, errors.Join(reqErr, uerr)
	}
	rep.Skipped = append(rep.Skipped, Skip{DeliveryID: guid, Reason: "GitHub refused the redelivery request (not counted as an ask): " + reqErr.Error()})
	return fmt.Errorf("redeliver %s: %w", guid, reqErr), nil
}

// requestScope is the hook's key among the stored requests.
func requestScope(h Hook) string {
	if h.Kind == "app" {
		return "app"
	}
	return h.scope()
}

// claim counts one more ask for a GUID and records it in the audit log, in
// one transaction, before GitHub is asked: so a GUID is asked for at most
// MaxAttempts times even across crashes, and two processes at once ask once
// (the row's lock makes the second wait, and then it finds the ask too
// recent). It returns the attempt's number, or 0 when the GUID was asked for
// lately or MaxAttempts times already.
func (r *Recoverer) claim(ctx context.Context, h Hook, l *listed, actor string) (int, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	attempt, err := store.ClaimRedeliveryTx(ctx, tx, store.RedeliveryClaim{Scope: requestScope(h), DeliveryID: l.guid,
		DeliveredAt: l.at, MaxAttempts: MaxAttempts, AskAgainAfter: askAgainAfter})
	if err != nil || attempt == 0 {
		return 0, err
	}
	reason := fmt.Sprintf("asked GitHub to redeliver it to hook %s (attempt %d of %d)", h, attempt, MaxAttempts)
	if err := recordAudit(ctx, tx, actor, "github", reason, l.guid); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	return attempt, nil
}

// explain says, for a dry run, which missing GUIDs a run would not ask for
// and why, reading the counts only.
func (r *Recoverer) explain(ctx context.Context, h Hook, missing []string, rep *Report) error {
	asks, err := store.RedeliveryAttempts(ctx, r.pool, requestScope(h), missing, askAgainAfter)
	if err != nil {
		return err
	}
	for _, a := range asks {
		switch {
		case a.Lately:
			rep.Skipped = append(rep.Skipped, Skip{DeliveryID: a.DeliveryID, Reason: fmt.Sprintf("asked for %d of %d times, the last less than %s ago; a run would wait for it", a.Attempts, MaxAttempts, askAgainAfter)})
		case a.Attempts >= MaxAttempts:
			rep.Skipped = append(rep.Skipped, Skip{DeliveryID: a.DeliveryID, Reason: fmt.Sprintf("asked for %d times and it never arrived; a run would not ask again", a.Attempts)})
		}
	}
	return nil
}

// unclaim takes back the ask claim counted for a GUID GitHub then refused,
// with an audit entry saying so, in one transaction.
func (r *Recoverer) unclaim(ctx context.Context, h Hook, guid, actor string, refusal error) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("unclaim: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := store.UnclaimRedeliveryTx(ctx, tx, requestScope(h), guid); err != nil {
		return err
	}
	reason := fmt.Sprintf("GitHub refused to redeliver it to hook %s (not counted as an ask): %s", h, cutText(refusal.Error(), 200))
	if err := recordAudit(ctx, tx, actor, "github", reason, guid); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("unclaim: %w", err)
	}
	return nil
}

// settle tells about a GUID claim did not ask for: how many times it was
// asked for, whether lately (less than askAgainAfter ago), and whether the
// gateway gave up on it just now (asked for MaxAttempts times, the last one
// long enough ago, and not given up on before: recorded with an audit entry,
// once).
func (r *Recoverer) settle(ctx context.Context, h Hook, guid, actor string) (n int, lately, gaveUp bool, err error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, false, false, fmt.Errorf("read attempts: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	st, err := store.SettleRedeliveryTx(ctx, tx, store.RedeliveryCheck{Scope: requestScope(h), DeliveryID: guid,
		MaxAttempts: MaxAttempts, AskAgainAfter: askAgainAfter})
	if err != nil {
		return 0, false, false, err
	}
	n, lately, gaveUp = st.Attempts, st.Lately, st.GaveUp
	if gaveUp {
		reason := fmt.Sprintf("gave up: asked GitHub %d times to redeliver it to hook %s, and it never arrived", MaxAttempts, h)
		if err := recordAudit(ctx, tx, actor, "github", reason, guid); err != nil {
			return 0, false, false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, false, fmt.Errorf("read attempts: %w", err)
	}
	return n, lately, gaveUp, nil
}

// cutText cuts s to at most n bytes, marking the cut.
func cutText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
