package providers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/payload"
	"github.com/hookgate/hookgate/internal/verify"
)

// GitHub verifies and parses GitHub webhook deliveries, as GitHub documents
// them: https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
// (X-Hub-Signature-256, HMAC-SHA256 of the raw body) and
// https://docs.github.com/en/webhooks/webhook-events-and-payloads.
type GitHub struct {
	// Secrets are the webhook secrets; any may match (rotation).
	Secrets verify.Secrets
}

// githubKind is GitHub's, built in: GITHUB_WEBHOOK_SECRET configures it.
var githubKind = Kind{
	New:   func(c SourceConfig) (Provider, error) { return GitHub{Secrets: c.Secrets}, nil },
	Timed: untimed,
	Env:   "GITHUB_WEBHOOK_SECRET",
	// event is the X-GitHub-Event header and the payload's action:
	// pull_request.opened.
	Sign: func(c SourceConfig, h http.Header, body []byte, id, event string, _ time.Time) error {
		header, _, _ := strings.Cut(event, ".")
		h.Set("Content-Type", "application/json")
		h.Set("User-Agent", "GitHub-Hookshot/hookgate-send")
		h.Set("X-GitHub-Event", header)
		h.Set("X-GitHub-Delivery", id)
		h.Set("X-GitHub-Hook-ID", "1")
		h.Set("X-Hub-Signature-256", verify.SignGitHub(c.Secrets[0], body))
		return nil
	},
	Sample: githubSample,
}

// Source returns GitHub's configuration as a source of kind github.
func (g GitHub) Source() SourceConfig {
	return SourceConfig{Name: "github", Kind: "github", Secrets: g.Secrets}
}

// githubKeptHeaders are stored with the receipt. Signature headers never are.
var githubKeptHeaders = []string{
	"X-GitHub-Delivery",
	"X-GitHub-Event",
	"X-GitHub-Hook-ID",
	"X-GitHub-Hook-Installation-Target-ID",
	"X-GitHub-Hook-Installation-Target-Type",
	"User-Agent",
}

// Name returns "github".
func (GitHub) Name() string { return "github" }

// Check implements Provider: the content type (JSON or form), the delivery
// and event headers, the hook id, and an X-Hub-Signature-256 that is
// "sha256=" and 64 hex digits (the SHA-1 header is not accepted).
func (g GitHub) Check(h http.Header, _ time.Time) (Request, error) {
	contentType, mt, err := checkContentType(h, "GitHub", "application/json", "application/x-www-form-urlencoded")
	if err != nil {
		return Request{}, err
	}
	id, err := requireHeader(h, "X-GitHub-Delivery")
	if err != nil {
		return Request{}, err
	}
	event, err := requireHeader(h, "X-GitHub-Event")
	if err != nil {
		return Request{}, err
	}
	scope := strings.TrimSpace(h.Get("X-GitHub-Hook-ID"))
	if !ValidID(scope) {
		return Request{}, fmt.Errorf("%w: X-GitHub-Hook-ID must be printable text of at most %d bytes", ErrMissingHeader, MaxIDLen)
	}
	sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
	if !ok {
		return Request{}, fmt.Errorf("%w: X-Hub-Signature-256 is required", verify.ErrMissingSignature)
	}
	mac, err := verify.ParseHexSHA256(sig)
	if err != nil {
		return Request{}, fmt.Errorf("X-Hub-Signature-256: %w", err)
	}
	return Request{
		ContentType: contentType,
		Form:        mt == "application/x-www-form-urlencoded",
		Scope:       scope,
		DeliveryID:  id,
		Event:       event,
		Headers:     keptHeaders(h, githubKeptHeaders...),
		signatures:  [][]byte{mac},
	}, nil
}

// Verify implements Provider. The signature covers the raw body, form-encoded
// or not.
func (g GitHub) Verify(req Request, pieces Body) (Delivery, error) {
	idx, err := g.Secrets.MatchParts(pieces, req.signatures)
	if err != nil {
		return Delivery{}, fmt.Errorf("X-Hub-Signature-256: %w", err)
	}
	body := pieces.Bytes()
	payload := body
	if req.Form {
		if payload, err = DecodeGitHubForm(body); err != nil {
			return Delivery{}, err
		}
	}
	d := Delivery{
		Provider:    "github",
		Scope:       req.Scope,
		DeliveryID:  req.DeliveryID,
		Event:       req.Event,
		ContentType: req.ContentType,
		Headers:     req.Headers,
		Body:        body,
		SecretIndex: idx,
	}
	v, err := readObject(payload)
	if err != nil {
		return Delivery{}, err
	}
	action := v.Get("action").Text()
	if action != "" && ValidID(action) {
		d.Event = req.Event + "." + action
	}
	d.Entity, d.EventTime = githubEntity(req.Event, v)
	if !ValidID(action) {
		// Routes match on the action: dropping it would quietly route the
		// delivery elsewhere.
		return Delivery{}, fmt.Errorf("%w: the payload's action must be printable text of at most %d bytes", ErrBadPayload, MaxIDLen)
	}
	return d, nil
}

// DecodeGitHubForm returns the JSON in the payload field of a form-encoded
// GitHub delivery.
func DecodeGitHubForm(body []byte) ([]byte, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: the form body is not valid application/x-www-form-urlencoded", ErrBadPayload)
	}
	payload := form["payload"]
	if len(payload) != 1 {
		return nil, fmt.Errorf("%w: the form body must have exactly one payload field", ErrBadPayload)
	}
	return []byte(payload[0]), nil
}

// githubEntity applies the contract's Order table to a payload.
func githubEntity(event string, v payload.Object) (string, time.Time) {
	object := func(kind string) (string, time.Time) {
		id := idText(v.Get(kind, "id"))
		if id == "" {
			return "", time.Time{}
		}
		return "github:" + kind + ":" + id, v.Get(kind, "updated_at").Time()
	}
	switch event {
	case "pull_request", "pull_request_review", "pull_request_review_comment", "pull_request_review_thread":
		return object("pull_request")
	case "issues", "issue_comment":
		return object("issue")
	case "workflow_run":
		return object("workflow_run")
	case "push":
		ref := v.Get("ref").Text()
		if ref == "" || !ValidID(ref) {
			return "", time.Time{}
		}
		id := idText(v.Get("repository", "id"))
		if id == "" {
			return "", time.Time{}
		}
		return "github:push:" + id + ":" + ref, v.Get("repository", "pushed_at").Time()
	}
	return "", time.Time{}
}

// githubSample is a small but realistic payload of event (the header and the
// action: pull_request.opened).
func githubSample(_ SourceConfig, id, event string, now time.Time) []byte {
	event, action, _ := strings.Cut(event, ".")
	repo := map[string]any{"id": 5678, "full_name": "hookgate/demo", "pushed_at": now.Unix()}
	sender := map[string]any{"login": "octocat", "id": 1}
	p := map[string]any{"repository": repo, "sender": sender}
	if action != "" {
		p["action"] = action
	}
	stamp := now.UTC().Format(time.RFC3339)
	switch event {
	case "ping":
		p = map[string]any{"zen": "Design for failure.", "hook_id": 1, "hook": map[string]any{"type": "Repository", "events": []string{"*"}}, "repository": repo}
	case "push":
		after := sha256.Sum256([]byte(id)) // a commit id of its own for each delivery
		p["ref"] = "refs/heads/main"
		p["before"] = strings.Repeat("0", 40)
		p["after"] = hex.EncodeToString(after[:20])
		p["commits"] = []any{map[string]any{"id": "c0ffee", "message": "Say hello", "timestamp": stamp}}
	case "pull_request", "pull_request_review", "pull_request_review_comment", "pull_request_review_thread":
		p["number"] = 42
		p["pull_request"] = map[string]any{"id": 1234, "number": 42, "state": "open", "title": "Add hookgate", "updated_at": stamp}
	case "issues", "issue_comment":
		p["issue"] = map[string]any{"id": 777, "number": 7, "state": "open", "title": "A bug", "updated_at": stamp}
		if event == "issue_comment" {
			p["comment"] = map[string]any{"id": 99, "body": "Confirmed."}
		}
	case "workflow_run":
		p["workflow_run"] = map[string]any{"id": 31, "status": "completed", "conclusion": "success", "updated_at": stamp}
	}
	return sample(p)
}
