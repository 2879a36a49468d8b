// Package rejections keeps the newest 1,000 rejected ingest requests for
// operators: when, which provider, the status and reason, the remote address
// and the header names. Never a body, a header value or a secret.
//
// Requests are recorded in memory and written at most once a second, in one
// statement, into a ring of 1,000 rows: a flood of bad requests costs one small
// transaction a second and never grows the database.
package rejections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/store"
)

// Keep is how many rejections are kept.
const Keep = 1000

// Rejection is one rejected ingest request (store.Rejection).
type Rejection = store.Rejection

// Bounds on what one rejection keeps, in bytes and names. A rejected request
// is anyone's, so nothing it carries is kept unbounded.
const (
	maxProvider   = 32
	maxReason     = 64
	maxRemoteAddr = 64
	maxHeaderName = 64
	maxHeaders    = 100
)

// FromRequest describes a rejected request: its header names only. Its text
// is as the request sent it; Record makes it valid and bounded.
func FromRequest(r *http.Request, provider string, status int, reason string, at time.Time) Rejection {
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	return Rejection{At: at, Provider: provider, Status: status, Reason: reason, RemoteAddr: r.RemoteAddr, HeaderNames: names}
}

// clean returns the rejection with every string valid, printable and bounded
// UTF-8. The text comes from the request (the URL's provider, header names)
// and PostgreSQL refuses NUL and invalid UTF-8: one such string would
// otherwise fail the write of every rejection buffered with it.
func clean(rej Rejection) Rejection {
	rej.Provider = cleanText(rej.Provider, maxProvider)
	rej.Reason = cleanText(rej.Reason, maxReason)
	rej.RemoteAddr = cleanText(rej.RemoteAddr, maxRemoteAddr)
	names := rej.HeaderNames[:min(len(rej.HeaderNames), maxHeaders)]
	rej.HeaderNames = make([]string, len(names))
	for i, name := range names {
		rej.HeaderNames[i] = cleanText(name, maxHeaderName)
	}
	return rej
}

// cleanText returns s as valid UTF-8 with each invalid sequence and control
// character replaced by U+FFFD, cut to at most limit bytes at a rune boundary.
func cleanText(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, string(utf8.RuneError)))
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Recorder buffers rejections and writes them to the ring.
type Recorder struct {
	// Pool is the database.
	Pool *pgxpool.Pool
	// Logger reports failed writes.
	Logger *slog.Logger

	mu      sync.Mutex
	pending []Rejection
}

// Record buffers a rejection, its text made valid and bounded; only the newest
// Keep are buffered. It never blocks on the database.
func (r *Recorder) Record(rej Rejection) {
	if r == nil {
		return
	}
	rej = clean(rej)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) >= Keep {
		r.pending = r.pending[1:]
	}
	r.pending = append(r.pending, rej)
}

// Run writes buffered rejections every interval until ctx ends, then once more.
func (r *Recorder) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			r.flushLogged(fctx)
			return
		case <-t.C:
			r.flushLogged(ctx)
		}
	}
}

func (r *Recorder) flushLogged(ctx context.Context) {
	if err := r.Flush(ctx); err != nil {
		r.Logger.WarnContext(ctx, "write rejections", "error", err)
	}
}

// Flush writes the buffered rejections into the ring, in one statement. When
// that fails it writes them one at a time, so that a rejection that cannot be
// stored costs only itself; those are dropped and counted in the error. A
// write that cannot start drops them all: this is a diagnostic log, not a
// record anyone relies on.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	batch := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	batchErr := store.InsertRejections(ctx, r.Pool, batch, Keep)
	if batchErr == nil {
		return nil
	}
	dropped, err := r.insertEach(ctx, batch)
	if err != nil {
		return fmt.Errorf("write rejections: dropped all %d: %w", len(batch), errors.Join(batchErr, err))
	}
	if dropped > 0 {
		return fmt.Errorf("write rejections: dropped %d of %d: %w", dropped, len(batch), batchErr)
	}
	return nil
}

// insertEach writes the rejections one at a time, each under its own
// savepoint of one transaction, and returns how many could not be written.
func (r *Recorder) insertEach(ctx context.Context, batch []Rejection) (dropped int, err error) {
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, rej := range batch {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return 0, fmt.Errorf("savepoint: %w", err)
		}
		if store.InsertRejections(ctx, sp, []Rejection{rej}, Keep) != nil {
			dropped++
			if err := sp.Rollback(ctx); err != nil {
				return 0, fmt.Errorf("roll back to savepoint: %w", err)
			}
			continue
		}
		if err := sp.Commit(ctx); err != nil {
			return 0, fmt.Errorf("release savepoint: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return dropped, nil
}

// List returns the kept rejections, newest first.
func List(ctx context.Context, db store.Querier) ([]Rejection, error) {
	return store.Rejections(ctx, db)
}
