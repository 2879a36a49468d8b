// Package notify sends operators' events to people and systems: the
// configuration file's notifications, each a Slack incoming webhook or a
// webhook signed with Standard Webhooks (GATEWAY_FORWARD_SECRET), each
// taking the events it names. An event is handed over without blocking
// (ingest and dispatch never wait for it), becomes a River job per
// notification that wants it, and is sent at most once per (event, route or
// provider) per 10 minutes across every gateway on the database; a send
// that fails is retried by River, counted and logged.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/errtext"
)

// The events a notification may take.
const (
	// CircuitOpened: a route's circuit opened (its target failed its
	// circuit's number of times in a row).
	CircuitOpened = "route.circuit_opened"
	// RouteFailing: a route's last FailingAfter attempts all failed.
	RouteFailing = "route.failing"
	// DispatchDiscarded: a dispatch was discarded (its attempts spent, or
	// refused for good).
	DispatchDiscarded = "dispatch.discarded"
	// SignatureFailures: deliveries refused 401 invalid_signature.
	SignatureFailures = "ingest.signature_failures"
	// RecoveryFailed: a provider's recovery run failed.
	RecoveryFailed = "recovery.failed"
	// ArchiveFailed: a day could not be archived (it is kept).
	ArchiveFailed = "archive.failed"
)

// Types are the events, in the order the documentation lists them.
var Types = []string{CircuitOpened, RouteFailing, DispatchDiscarded, SignatureFailures, RecoveryFailed, ArchiveFailed}

// FailingAfter is how many failed attempts in a row make a route failing.
const FailingAfter = 5

// Every is the least time between two sends of one event of one route (or
// provider) to one notification.
const Every = 10 * time.Minute

// The kinds of notification.
const (
	// Slack posts {"text": ...} to a Slack incoming webhook.
	Slack = "slack"
	// Webhook posts the event as JSON, signed with Standard Webhooks.
	Webhook = "webhook"
)

// Notification is one of the configuration file's notifications.
type Notification struct {
	// Name tells it apart in logs, metrics and River's jobs.
	Name string
	// Kind is Slack or Webhook.
	Kind string
	// URL is where it is sent (from url, or the variable url_env names).
	URL string
	// Events are the events it takes, of Types.
	Events []string
}

// Wants reports whether n takes events of type typ.
func (n Notification) Wants(typ string) bool { return slices.Contains(n.Events, typ) }

// ErrBad means a notification that cannot be used.
var ErrBad = errors.New("bad notification")

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// CheckName reports what is wrong with a notification's name.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: name: 1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit", ErrBad)
	}
	return nil
}

// Check reports what is wrong with n, one error per mistake; signed says
// whether GATEWAY_FORWARD_SECRET is set (a webhook notification needs it).
func (n Notification) Check(signed bool) []error {
	var errs []error
	if err := CheckName(n.Name); err != nil {
		errs = append(errs, err)
	}
	switch n.Kind {
	case Slack:
	case Webhook:
		if !signed {
			errs = append(errs, fmt.Errorf("%w: kind webhook signs with GATEWAY_FORWARD_SECRET, which is not set", ErrBad))
		}
	default:
		errs = append(errs, fmt.Errorf("%w: kind: slack or webhook, not %q", ErrBad, n.Kind))
	}
	if u, err := url.Parse(n.URL); n.URL != "" && (err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "") {
		errs = append(errs, fmt.Errorf("%w: the URL must be an absolute http(s) URL", ErrBad))
	}
	if len(n.Events) == 0 {
		errs = append(errs, fmt.Errorf("%w: events: name at least one of %s", ErrBad, strings.Join(Types, ", ")))
	}
	for i, e := range n.Events {
		switch {
		case !slices.Contains(Types, e):
			errs = append(errs, fmt.Errorf("%w: events: %q is none of %s", ErrBad, e, strings.Join(Types, ", ")))
		case slices.Contains(n.Events[:i], e):
			errs = append(errs, fmt.Errorf("%w: events: %s given twice", ErrBad, e))
		}
	}
	return errs
}

// Event is something operators want to hear of.
type Event struct {
	// Type is one of Types.
	Type string
	// Route is the route it is about; Provider the provider (either may be
	// empty).
	Route, Provider string
	// Count is how many times it happened since Since.
	Count int
	Since time.Time
	// Message says what happened, for people.
	Message string
	// Page is the console's page about it (a path under /admin/), or "".
	Page string
}

// subject is what an event is about, for the once-per-10-minutes rule.
func (e Event) subject() string {
	if e.Route != "" {
		return "route:" + e.Route
	}
	return "provider:" + e.Provider
}

// queued bounds the events waiting to become jobs: past it, an event is
// dropped, counted and logged.
const queued = 256

// Notifier takes events without blocking and makes each a River job per
// notification that wants it. Nil or without notifications, it takes none.
type Notifier struct {
	notifications []Notification
	inserter      *river.Client[pgx.Tx]
	logger        *slog.Logger
	counted       func(notification, result string)
	events        chan Event
	dropped       atomic.Int64

	// queued is when this process last queued each (event, subject): it
	// queues one at most once per Every, however often it happens.
	mu     sync.Mutex
	queued map[string]time.Time
}

// New returns a Notifier of notifications, inserting its jobs with inserter
// and counting each result with counted (sent, failed, suppressed, dropped).
func New(notifications []Notification, inserter *river.Client[pgx.Tx], logger *slog.Logger,
	counted func(notification, result string)) *Notifier {
	if counted == nil {
		counted = func(string, string) {}
	}
	return &Notifier{notifications: notifications, inserter: inserter, logger: logger, counted: counted, events: make(chan Event, queued),
		queued: map[string]time.Time{}}
}

// Notify hands e over, without waiting: when too many wait already, it is
// dropped (counted, and logged by Run). An event of a subject this process
// queued less than Every ago is counted suppressed at once.
func (n *Notifier) Notify(e Event) {
	if n == nil || !n.wanted(e.Type) {
		return
	}
	now := time.Now()
	key := e.Type + "\x00" + e.subject()
	n.mu.Lock()
	last, seen := n.queued[key]
	if seen && now.Sub(last) < Every {
		n.mu.Unlock()
		n.countWanting(e.Type, "suppressed")
		return
	}
	n.queued[key] = now
	n.mu.Unlock()
	if e.Since.IsZero() {
		e.Since = now
	}
	e.Message = errtext.Clean(e.Message)
	if e.Count == 0 {
		e.Count = 1
	}
	select {
	case n.events <- e:
	default:
		n.dropped.Add(1)
		n.countWanting(e.Type, "dropped")
	}
}

// countWanting counts result for each notification that takes typ.
func (n *Notifier) countWanting(typ, result string) {
	for _, nt := range n.notifications {
		if nt.Wants(typ) {
			n.counted(nt.Name, result)
		}
	}
}

// wanted reports whether a notification takes events of type typ.
func (n *Notifier) wanted(typ string) bool {
	for _, nt := range n.notifications {
		if nt.Wants(typ) {
			return true
		}
	}
	return false
}

// Run makes the events handed over jobs until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	if n == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-n.events:
			if d := n.dropped.Swap(0); d > 0 {
				n.logger.WarnContext(ctx, "notifications dropped: events came faster than they could be queued", "dropped", d)
			}
			for _, nt := range n.notifications {
				if !nt.Wants(e.Type) {
					continue
				}
				args := Args{Notification: nt.Name, Type: e.Type, Subject: e.subject(), Route: e.Route, Provider: e.Provider,
					Count: e.Count, Since: e.Since.UTC(), Message: e.Message, Page: e.Page}
				if _, err := n.inserter.Insert(ctx, args, nil); err != nil && ctx.Err() == nil {
					n.counted(nt.Name, "dropped")
					n.logger.WarnContext(ctx, "a notification could not be queued", "notification", nt.Name, "event", e.Type, "error", err)
				}
			}
		}
	}
}
