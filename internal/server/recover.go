package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/audit"
	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/recovery"
)

// Recoverer runs recovery from the providers' APIs on demand, with the
// gateway's own configuration; *recovery.Recoverer is one.
type Recoverer interface {
	// Run recovers one provider's deliveries; recovery.ErrNotConfigured
	// when that provider's recovery has no credentials.
	Run(ctx context.Context, provider string, opts recovery.Options) (recovery.Report, error)
	// Floor is the earliest time a run lists from.
	Floor(now time.Time) time.Time
	// Providers are the providers whose recovery is configured.
	Providers() []string
}

// RecoveryBound is how long one recovery on demand may take: a periodic run's
// own bound, long enough for the providers' rate-limit waits. The request's
// write deadline is moved to it, past the server's 60 s.
const RecoveryBound = 15 * time.Minute

// errRecoveryFailed is a run that failed after it started: the provider's
// API refused or broke off.
var errRecoveryFailed = errors.New("recovery failed")

// recoverRequest is the body of POST /admin/recover/{provider}; both fields
// optional.
type recoverRequest struct {
	Since  string `json:"since"`
	DryRun bool   `json:"dry_run"`
}

func (req *recoverRequest) validate() error { return nil }

// handleRecover runs recovery for the provider in the path and answers its
// report: 200 when the run completed, 502 recovery_failed (with what it did
// before failing) when the provider's API failed it, 409 not_configured when
// that provider's recovery is not set up.
func (s *server) handleRecover(w http.ResponseWriter, r *http.Request) {
	provider := chi.URLParam(r, "provider")
	if provider != "github" && provider != "stripe" {
		writeError(w, r, s.Logger, fmt.Errorf("%w: recovery is for github or stripe", errNotFound))
		return
	}
	var req recoverRequest
	if _, err := readAdminBody(w, r, &req); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	opts := recovery.Options{DryRun: req.DryRun, Actor: actor(r)}
	if req.Since != "" {
		now := time.Now()
		t, err := deliveries.ParseTime(req.Since, now)
		switch {
		case err != nil:
			writeError(w, r, s.Logger, fmt.Errorf("%w: since: %w", errBadRequest, err))
			return
		case t.After(now):
			writeError(w, r, s.Logger, fmt.Errorf("%w: since is in the future", errBadRequest))
			return
		}
		opts.Since = &t
	}
	if s.Admin.Recoverer == nil {
		writeError(w, r, s.Logger, fmt.Errorf("%w: recovery is not set up", recovery.ErrNotConfigured))
		return
	}
	// The run's own bound, not the server's: rate-limit waits take minutes.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(RecoveryBound + time.Minute))
	ctx, cancel := context.WithTimeout(r.Context(), RecoveryBound)
	defer cancel()
	rep, err := s.Admin.Recoverer.Run(ctx, provider, opts)
	if !errors.Is(err, recovery.ErrNotConfigured) {
		s.auditRecover(r.Context(), opts, rep, err)
	}
	switch {
	case errors.Is(err, recovery.ErrNotConfigured):
		writeError(w, r, s.Logger, err)
	case err != nil:
		// The run is counted and logged by the recoverer; the operator sees
		// why, and what it did before it failed.
		writeJSON(w, http.StatusBadGateway, struct {
			errorBody
			Report recovery.Report `json:"report"`
		}{errorBody{Error: "recovery_failed", Message: fmt.Sprintf("%v: %v", errRecoveryFailed, err)}, rep})
	default:
		writeJSON(w, http.StatusOK, recoverAnswer{Report: rep, ListedFrom: listedFrom(s.Admin.Recoverer, opts)})
	}
}

// auditRecover records a recovery run on demand in the audit log: who ran
// it and what it found, asked for and stored (each redelivery request and
// stored event has an entry of its own, by the recoverer). A failure to
// record is logged: the run has happened.
func (s *server) auditRecover(ctx context.Context, opts recovery.Options, rep recovery.Report, runErr error) {
	if s.Admin.Pool == nil {
		return
	}
	what := fmt.Sprintf("on demand: %d missing, %d asked for again, %d stored, %d skipped", len(rep.Found), len(rep.Requested), len(rep.Stored), len(rep.Skipped))
	if rep.DryRun {
		what += " (dry run)"
	}
	if runErr != nil {
		what += "; failed"
	}
	ctx = context.WithoutCancel(ctx) // recorded even if the operator went away
	err := pgx.BeginFunc(ctx, s.Admin.Pool, func(tx pgx.Tx) error {
		return audit.Record(ctx, tx, audit.NewEntry{Actor: opts.Actor, Action: audit.Recover, Provider: rep.Provider, Reason: what})
	})
	if err != nil {
		s.Logger.ErrorContext(ctx, "audit of a recovery on demand", "error", err)
	}
}

// recoverAnswer is a run's report, and where it listed from when since
// reached further back than the lookback or the retention allow.
type recoverAnswer struct {
	recovery.Report
	ListedFrom *time.Time `json:"listed_from,omitempty"`
}

// listedFrom is the earliest time a run lists from, when opts.Since asked
// for earlier; nil otherwise.
func listedFrom(r Recoverer, opts recovery.Options) *time.Time {
	if opts.Since == nil {
		return nil
	}
	if floor := r.Floor(time.Now()); opts.Since.Before(floor) {
		return &floor
	}
	return nil
}

// providerView is one provider as GET /admin/providers lists it.
type providerView struct {
	Name string `json:"name"`
	// Configured: its secret is set, so /webhooks/<name> takes deliveries.
	Configured bool `json:"configured"`
	// Recovery: recovery from its API is set up (github and stripe only).
	Recovery bool `json:"recovery"`
}

// handleListProviders lists the providers the gateway knows (the names
// operator filters and commands take), each with whether it is configured
// and whether its recovery is.
func (s *server) handleListProviders(w http.ResponseWriter, r *http.Request) {
	configured := map[string]bool{}
	for _, p := range s.Providers.Providers() {
		configured[p.Name()] = true
	}
	recovering := map[string]bool{}
	if s.Admin.Recoverer != nil {
		for _, name := range s.Admin.Recoverer.Providers() {
			recovering[name] = true
		}
	}
	views := []providerView{}
	for _, name := range s.Providers.Names() {
		views = append(views, providerView{Name: name, Configured: configured[name], Recovery: recovering[name]})
	}
	writeJSON(w, http.StatusOK, map[string]any{"providers": views})
}
