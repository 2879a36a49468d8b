package providers

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fastjson"

	"github.com/hookgate/hookgate/internal/verify"
)

// GitHub verifies and parses GitHub webhook deliveries.
type GitHub struct {
	// Secrets are the webhook secrets; any may match (rotation).
	Secrets verify.Secrets
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

// Parse implements Provider. The signature (X-Hub-Signature-256 only; the SHA-1
// header is not accepted) covers the raw body, form-encoded or not.
func (g GitHub) Parse(h http.Header, body []byte, _ time.Time) (Delivery, error) {
	contentType := h.Get("Content-Type")
	mt := mediaType(contentType)
	if mt != "application/json" && mt != "application/x-www-form-urlencoded" {
		return Delivery{}, fmt.Errorf("%w: GitHub deliveries must be application/json or application/x-www-form-urlencoded, got %q", ErrUnsupportedMediaType, truncate(contentType))
	}
	id, err := requireHeader(h, "X-GitHub-Delivery")
	if err != nil {
		return Delivery{}, err
	}
	event, err := requireHeader(h, "X-GitHub-Event")
	if err != nil {
		return Delivery{}, err
	}
	scope := strings.TrimSpace(h.Get("X-GitHub-Hook-ID"))
	if len(scope) > maxIDLen || !printable(scope) {
		return Delivery{}, fmt.Errorf("%w: X-GitHub-Hook-ID must be printable text of at most %d bytes", ErrMissingHeader, maxIDLen)
	}

	sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
	if !ok {
		return Delivery{}, fmt.Errorf("%w: X-Hub-Signature-256 is required", verify.ErrMissingSignature)
	}
	idx, err := g.Secrets.MatchHex(body, sig)
	if err != nil {
		return Delivery{}, fmt.Errorf("X-Hub-Signature-256: %w", err)
	}

	payload := body
	if mt == "application/x-www-form-urlencoded" {
		if payload, err = DecodeGitHubForm(body); err != nil {
			return Delivery{}, err
		}
	}
	d := Delivery{
		Provider:    "github",
		Scope:       scope,
		DeliveryID:  id,
		Event:       event,
		ContentType: contentType,
		Headers:     keptHeaders(h, githubKeptHeaders...),
		Body:        body,
		SecretIndex: idx,
	}
	err = parseObject(payload, func(v *fastjson.Value) {
		if action := text(v.Get("action")); action != "" && len(action) <= maxIDLen && printable(action) {
			d.Event = event + "." + action
		}
		d.Entity, d.EventTime = githubEntity(event, v)
	})
	if err != nil {
		return Delivery{}, err
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
func githubEntity(event string, v *fastjson.Value) (string, time.Time) {
	object := func(kind string) (string, time.Time) {
		id := idText(v.Get(kind, "id"))
		if id == "" {
			return "", time.Time{}
		}
		return "github:" + kind + ":" + id, timeValue(v.Get(kind, "updated_at"))
	}
	switch event {
	case "pull_request", "pull_request_review", "pull_request_review_comment", "pull_request_review_thread":
		return object("pull_request")
	case "issues", "issue_comment":
		return object("issue")
	case "workflow_run":
		return object("workflow_run")
	case "push":
		ref := text(v.Get("ref"))
		if ref == "" || len(ref) > maxIDLen || !printable(ref) {
			return "", time.Time{}
		}
		id := idText(v.Get("repository", "id"))
		if id == "" {
			return "", time.Time{}
		}
		return "github:push:" + id + ":" + ref, timeValue(v.Get("repository", "pushed_at"))
	}
	return "", time.Time{}
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
