package providers

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/payload"
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
