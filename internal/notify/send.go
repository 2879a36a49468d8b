package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/store"
)

// Args are one event to send to one notification: a River job.
type Args struct {
	Notification string    `json:"notification" river:"unique"`
	Type         string    `json:"type" river:"unique"`
	Subject      string    `json:"subject" river:"unique"`
	Route        string    `json:"route,omitempty"`
	Provider     string    `json:"provider,omitempty"`
	Count        int       `json:"count"`
	Since        time.Time `json:"since"`
	Message      string    `json:"message"`
	Page         string    `json:"page,omitempty"`
}

// Kind implements river.JobArgs. Stable: stored in river_job.
func (Args) Kind() string { return "hookgate_notify" }

// InsertOpts implements river.JobArgsWithInsertOpts: one job per
// notification, event and subject in each 10 minutes (the worker's claim
// makes it at most one send in any 10 minutes), retried a few times.
func (Args) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 6, UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: Every}}
}

// Worker sends notifications' jobs.
type Worker struct {
	river.WorkerDefaults[Args]
	// Pool holds the claims of sends.
	Pool *pgxpool.Pool
	// Notifications are the configured ones, by name.
	Notifications []Notification
	// Secrets sign a webhook notification (GATEWAY_FORWARD_SECRET).
	Secrets []string
	// PublicURL is GATEWAY_PUBLIC_URL, for links to the console; empty:
	// none.
	PublicURL string
	// HTTP sends; nil: a client with a 10 s timeout.
	HTTP *http.Client
	// Counted counts each result (sent, failed, suppressed); Logger logs
	// failures.
	Counted func(notification, result string)
	Logger  *slog.Logger
}

// Timeout implements river.Worker.
func (w *Worker) Timeout(*river.Job[Args]) time.Duration { return 30 * time.Second }

// Work sends one event to one notification, unless it was sent less than
// 10 minutes ago (then it is counted suppressed).
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	a := job.Args
	var n *Notification
	for i := range w.Notifications {
		if w.Notifications[i].Name == a.Notification {
			n = &w.Notifications[i]
		}
	}
	if n == nil {
		return river.JobCancel(fmt.Errorf("notification %q is no longer configured", a.Notification))
	}
	counted := w.Counted
	if counted == nil {
		counted = func(string, string) {}
	}
	// A retry of a send that failed was claimed by its first attempt.
	if job.Attempt == 1 {
		ok, err := store.ClaimNotification(ctx, w.Pool, a.Notification, a.Type, a.Subject, Every)
		if err != nil {
			return err
		}
		if !ok {
			counted(a.Notification, "suppressed")
			return nil
		}
	}
	if err := w.send(ctx, *n, job.ID, a); err != nil {
		counted(a.Notification, "failed")
		if w.Logger != nil {
			w.Logger.WarnContext(ctx, "a notification could not be sent; River tries again", "notification", a.Notification,
				"event", a.Type, "attempt", job.Attempt, "error", err)
		}
		return err
	}
	counted(a.Notification, "sent")
	return nil
}

// Payload is what a webhook notification's body holds.
type Payload struct {
	Type       string    `json:"type"`
	Route      *string   `json:"route"`
	Provider   *string   `json:"provider"`
	Count      int       `json:"count"`
	Since      time.Time `json:"since"`
	Message    string    `json:"message"`
	ConsoleURL *string   `json:"console_url"`
}

// send posts a to n: Slack's {"text"}, or Payload signed like a forward.
func (w *Worker) send(ctx context.Context, n Notification, jobID int64, a Args) error {
	console := ""
	if w.PublicURL != "" && a.Page != "" {
		console = strings.TrimSuffix(w.PublicURL, "/") + a.Page
	}
	var body []byte
	switch n.Kind {
	case Slack:
		text := fmt.Sprintf("hookgate: %s", a.Message)
		if console != "" {
			text += fmt.Sprintf(" <%s|Open the console>", console)
		}
		body, _ = json.Marshal(map[string]string{"text": text})
	default:
		body, _ = json.Marshal(Payload{Type: a.Type, Route: orNull(a.Route), Provider: orNull(a.Provider), Count: a.Count,
			Since: a.Since, Message: a.Message, ConsoleURL: orNull(console)})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notification %s: %w", n.Name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if n.Kind == Webhook {
		if err := forward.Sign(w.Secrets, req.Header, "ntf_"+strconv.FormatInt(jobID, 10), time.Now(), body); err != nil {
			return err
		}
	}
	client := w.HTTP
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		// The URL may hold a secret (Slack's does): not in the error.
		return fmt.Errorf("notification %s: the request failed: %s", n.Name, withoutURL(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("notification %s: answered %d", n.Name, resp.StatusCode)
	}
	return nil
}

// withoutURL is a client error's text without the URL it names.
func withoutURL(err error) string {
	if ue, ok := err.(interface{ Unwrap() error }); ok && strings.HasPrefix(err.Error(), "Post ") {
		return ue.Unwrap().Error()
	}
	return err.Error()
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
