package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookgate/hookgate/internal/archive"
	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/store"
)

// errArchiveNotConfigured means an archive request to a gateway without
// GATEWAY_ARCHIVE_URL.
var errArchiveNotConfigured = errors.New("no archive is configured: set GATEWAY_ARCHIVE_URL")

// archiveList is the answer to GET /admin/archive.
type archiveList struct {
	// Store names the archive (never its credentials); null without one.
	Store *string             `json:"store"`
	Days  []store.ArchivedDay `json:"days"`
}

// handleArchive lists the archived days, newest first.
func (s *server) handleArchive(w http.ResponseWriter, r *http.Request) {
	days, err := store.ArchivedDays(r.Context(), s.Admin.Pool)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	res := archiveList{Days: days}
	if days == nil {
		res.Days = []store.ArchivedDay{}
	}
	if s.Admin.Archive != nil {
		name := s.Admin.Archive.String()
		res.Store = &name
	}
	writeJSON(w, http.StatusOK, res)
}

// archivedProvider is one provider's part of an archived or restored day.
type archivedProvider struct {
	Provider   string `json:"provider"`
	Deliveries int    `json:"deliveries"`
	SHA256     string `json:"sha256,omitempty"`
}

// archiveDayResponse is what an archive or a restore of a day did.
type archiveDayResponse struct {
	Day       string             `json:"day"`
	Providers []archivedProvider `json:"providers"`
}

// archiveDay reads the request's day, past (a day still being received
// cannot be archived whole), with an archive configured.
func (s *server) archiveDay(r *http.Request) (time.Time, error) {
	if s.Admin.Archive == nil {
		return time.Time{}, errArchiveNotConfigured
	}
	day, err := archive.ParseDay(chi.URLParam(r, "day"))
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if !day.AddDate(0, 0, 1).Before(s.Now()) {
		return time.Time{}, fmt.Errorf("%w: %s is not over yet: a day is archived once it has ended", errBadRequest, day.Format(time.DateOnly))
	}
	return day, nil
}

// handleArchiveDay archives a day now, every provider's deliveries of it,
// without deleting them (retention deletes what it has archived, in its
// time).
func (s *server) handleArchiveDay(w http.ResponseWriter, r *http.Request) {
	day, err := s.archiveDay(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	ps, err := store.DayProviders(r.Context(), s.Admin.Pool, day)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	res := archiveDayResponse{Day: day.Format(time.DateOnly), Providers: []archivedProvider{}}
	for _, p := range ps {
		m, err := archive.Day(r.Context(), s.Admin.Pool, s.Admin.Archive, p, day)
		if err != nil {
			writeError(w, r, s.Logger, fmt.Errorf("archive %s of %s: %w", p, res.Day, err))
			return
		}
		res.Providers = append(res.Providers, archivedProvider{Provider: p, Deliveries: m.Count, SHA256: m.SHA256})
	}
	writeJSON(w, http.StatusOK, res)
}

// handleRestoreDay brings an archived day back (?provider= for one
// provider's): 409 already_present while any of it is stored, 404 for a day
// never archived.
func (s *server) handleRestoreDay(w http.ResponseWriter, r *http.Request) {
	day, err := s.archiveDay(r)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	days, err := store.ArchivedDaysOn(r.Context(), s.Admin.Pool, day)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	want := r.URL.Query().Get("provider")
	if !providers.ValidID(want) {
		writeError(w, r, s.Logger, fmt.Errorf("%w: provider must be a provider's name", errBadRequest))
		return
	}
	var ps []string
	for _, d := range days {
		if want == "" || d.Provider == want {
			ps = append(ps, d.Provider)
		}
	}
	if len(ps) == 0 {
		writeError(w, r, s.Logger, fmt.Errorf("%w: the archive holds no deliveries of %s%s", errNotFound, day.Format(time.DateOnly), ofProvider(want)))
		return
	}
	counts, err := archive.Restore(r.Context(), s.Admin.Pool, s.Admin.Archive, s.Keys, ps, day, s.Admin.Retention)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	res := archiveDayResponse{Day: day.Format(time.DateOnly), Providers: []archivedProvider{}}
	for i, p := range ps {
		res.Providers = append(res.Providers, archivedProvider{Provider: p, Deliveries: counts[i]})
	}
	writeJSON(w, http.StatusOK, res)
}

// ofProvider is " of provider p" for a message, or "".
func ofProvider(p string) string {
	if p == "" {
		return ""
	}
	return fmt.Sprintf(" of provider %q", p)
}
