package providers

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/payload"
)

// gitlab verifies GitLab's webhooks: X-Gitlab-Token carries the secret
// itself, compared in constant time with each configured one before the body
// is read. The id is X-Gitlab-Event-UUID; the event the payload's
// object_kind, with "." and object_attributes.action when there is one
// (merge_request.open).
type gitlab struct{ source }

var gitlabKind = Kind{
	New:   func(c SourceConfig) (Provider, error) { return gitlab{source{cfg: c}}, nil },
	Timed: untimed,
	Sign: func(c SourceConfig, h http.Header, _ []byte, id, event string, _ time.Time) error {
		kind, _, _ := strings.Cut(event, ".")
		h.Set("Content-Type", "application/json")
		h.Set("User-Agent", "GitLab/18.0.0")
		h.Set("X-Gitlab-Event", cmp.Or(gitlabHookNames[kind], "System Hook"))
		h.Set("X-Gitlab-Event-UUID", id)
		h.Set("X-Gitlab-Token", c.Secrets[0])
		return nil
	},
	Sample: func(_ SourceConfig, _, event string, now time.Time) []byte {
		kind, action, _ := strings.Cut(event, ".")
		fields := map[string]any{"object_kind": kind, "project": map[string]any{"id": 1, "path_with_namespace": "acme/api"}}
		if action != "" {
			fields["object_attributes"] = map[string]any{"id": now.Unix(), "action": action, "updated_at": now.UTC().Format(time.RFC3339)}
		}
		return sample(fields)
	},
}

// gitlabHookNames are X-Gitlab-Event's values for a project hook's object kinds.
var gitlabHookNames = map[string]string{
	"push": "Push Hook", "tag_push": "Tag Push Hook", "issue": "Issue Hook", "note": "Note Hook",
	"merge_request": "Merge Request Hook", "wiki_page": "Wiki Page Hook", "pipeline": "Pipeline Hook",
	"build": "Job Hook", "deployment": "Deployment Hook", "release": "Release Hook",
}

var gitlabKeptHeaders = []string{"X-Gitlab-Event", "X-Gitlab-Event-UUID", "X-Gitlab-Webhook-UUID", "X-Gitlab-Instance", "User-Agent"}

// Check implements Provider.
func (p gitlab) Check(h http.Header, _ time.Time) (Request, error) {
	contentType, err := p.checkJSON(h)
	if err != nil {
		return Request{}, err
	}
	id, err := requireHeader(h, "X-Gitlab-Event-UUID")
	if err != nil {
		return Request{}, err
	}
	idx, err := p.cfg.Secrets.MatchToken(h.Get("X-Gitlab-Token"))
	if err != nil {
		return Request{}, fmt.Errorf("X-Gitlab-Token: %w", err)
	}
	return Request{ContentType: contentType, DeliveryID: id, Headers: keptHeaders(h, gitlabKeptHeaders...), matched: idx + 1}, nil
}

// Verify implements Provider: the token was checked with the headers.
func (p gitlab) Verify(req Request, pieces Body) (Delivery, error) {
	if req.matched == 0 {
		return Delivery{}, fmt.Errorf("X-Gitlab-Token: %w", errUnchecked)
	}
	d := p.delivery(req, pieces.Bytes(), req.matched-1)
	err := p.finish(&d, "", "", func(v payload.Object) error {
		kind := v.Get("object_kind").Text()
		if action := v.Get("object_attributes", "action").Text(); kind != "" && action != "" {
			kind += "." + action
		}
		d.Event = kind
		return nil
	})
	return d, err
}
