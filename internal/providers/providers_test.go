package providers_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

const (
	ghSecret     = "gh-secret"
	stripeSecret = "whsec_stripe"
)

// signedHeader is the headers of the request providers.NewRequest builds for
// c: what c's sender sends with body. It panics when c cannot sign, which is
// the test's own mistake.
func signedHeader(c providers.SourceConfig, body []byte, id, event string, at time.Time) http.Header {
	req, err := providers.NewRequest(context.Background(), c, "http://gateway/webhooks/"+c.Name, body, id, event, at)
	if err != nil {
		panic(err)
	}
	return req.Header
}

// githubHeader is what GitHub's hook 42 sends with body for event, its legacy
// SHA-1 signature too, changed by mod.
func githubHeader(body []byte, event string, mod func(http.Header)) http.Header {
	return githubSignedWith(ghSecret, body, event, mod)
}

// githubSignedWith is githubHeader, signed with secret.
func githubSignedWith(secret string, body []byte, event string, mod func(http.Header)) http.Header {
	h := signedHeader(providers.GitHub{Secrets: verify.Secrets{secret}}.Source(), body, "72d3162e-cc78-11e3-81ab-4c9367dc0958", event, time.Now())
	h.Set("X-GitHub-Hook-ID", "42")
	h.Set("X-Hub-Signature", "sha1=ignored")
	if mod != nil {
		mod(h)
	}
	return h
}

func TestGitHubParse(t *testing.T) {
	t.Parallel()
	gh := providers.GitHub{Secrets: verify.Secrets{"older", ghSecret}}
	prBody := []byte(`{"action":"opened","pull_request":{"id":1234,"updated_at":"2026-01-02T03:04:05Z"}}`)
	form := []byte("payload=" + url.QueryEscape(string(prBody)))

	tests := []struct {
		name       string
		body       []byte
		header     http.Header
		wantErr    error
		wantEvent  string
		wantEntity string
		wantTime   string
	}{
		{"pull request opened", prBody, githubHeader(prBody, "pull_request", nil), nil, "pull_request.opened", "github:pull_request:1234", "2026-01-02T03:04:05Z"},
		{"form encoded, signature over the raw form", form, githubHeader(form, "pull_request", func(h http.Header) {
			h.Set("Content-Type", "application/x-www-form-urlencoded")
		}), nil, "pull_request.opened", "github:pull_request:1234", "2026-01-02T03:04:05Z"},
		{"json with charset", prBody, githubHeader(prBody, "pull_request", func(h http.Header) {
			h.Set("Content-Type", "application/json; charset=utf-8")
		}), nil, "pull_request.opened", "github:pull_request:1234", "2026-01-02T03:04:05Z"},
		{"ping has no action and no entity", []byte(`{"zen":"Keep it logically awesome.","hook_id":42}`), nil, nil, "ping", "", ""},
		{"review shares the pull request entity", []byte(`{"action":"submitted","pull_request":{"id":9,"updated_at":"2026-01-02T03:04:05Z"}}`), nil, nil, "pull_request_review.submitted", "github:pull_request:9", "2026-01-02T03:04:05Z"},
		{"issue comment is the issue's entity", []byte(`{"action":"created","issue":{"id":77,"updated_at":"2026-02-01T00:00:00Z"}}`), nil, nil, "issue_comment.created", "github:issue:77", "2026-02-01T00:00:00Z"},
		{"push by repository and ref, unix pushed_at", []byte(`{"ref":"refs/heads/main","repository":{"id":5678,"pushed_at":1767323045}}`), nil, nil, "push", "github:push:5678:refs/heads/main", "2026-01-02T03:04:05Z"},
		{"workflow run", []byte(`{"action":"completed","workflow_run":{"id":31,"updated_at":"2026-01-02T03:04:05Z"}}`), nil, nil, "workflow_run.completed", "github:workflow_run:31", "2026-01-02T03:04:05Z"},
		{"odd types only lose ordering", []byte(`{"action":7,"pull_request":{"id":{"n":1},"updated_at":5}}`), nil, nil, "pull_request", "", ""},
		{"escaped keys and strings read as their text", []byte(`{"act\u0069on":"opened","pull_request":{"id":"12","updated_at":"2026-01-02T03:04:05\u005a"},` +
			`"ref":"refs\/heads\/main"}`), nil, nil, "pull_request.opened", "github:pull_request:12", "2026-01-02T03:04:05Z"},
		{"a null time leaves the entity unordered in time", []byte(`{"pull_request":{"id":12,"updated_at":null}}`), nil, nil, "pull_request", "github:pull_request:12", ""},
		{"an id beyond int64 is no id", []byte(`{"pull_request":{"id":123456789012345678901234,"updated_at":"2026-01-02T03:04:05Z"}}`), nil, nil, "pull_request", "", ""},
		{"a unix time past the year 9999 is no time", []byte(`{"ref":"refs/heads/x","repository":{"id":1,"pushed_at":10000000000000}}`), nil, nil, "push", "github:push:1:refs/heads/x", ""},
		{"a unix time that overflows is no time", []byte(`{"ref":"refs/heads/x","repository":{"id":1,"pushed_at":9223372036854775807}}`), nil, nil, "push", "github:push:1:refs/heads/x", ""},
		{"an RFC 3339 time that is the year 10000 in UTC is no time", []byte(`{"action":"edited","issue":{"id":3,"updated_at":"9999-12-31T23:59:59-23:59"}}`), nil, nil, "issues.edited", "github:issue:3", ""},
		{"fractional and negative times are no time", []byte(`{"ref":"refs/heads/x","repository":{"id":1,"pushed_at":1.5}}`), nil, nil, "push", "github:push:1:refs/heads/x", ""},

		{"xml is refused", prBody, githubHeader(prBody, "pull_request", func(h http.Header) { h.Set("Content-Type", "application/xml") }), providers.ErrUnsupportedMediaType, "", "", ""},
		{"no content type", prBody, githubHeader(prBody, "pull_request", func(h http.Header) { h.Del("Content-Type") }), providers.ErrUnsupportedMediaType, "", "", ""},
		{"a content type parameter that is not UTF-8 is the request's own 400", prBody, githubHeader(prBody, "pull_request", func(h http.Header) {
			h.Set("Content-Type", "application/json; charset=\"\xff\"")
		}), providers.ErrMissingHeader, "", "", ""},
		{"a content type with a NUL in a parameter", prBody, githubHeader(prBody, "pull_request", func(h http.Header) {
			h.Set("Content-Type", "application/json; x=\"a\x00b\"")
		}), providers.ErrMissingHeader, "", "", ""},
		{"an overlong content type", prBody, githubHeader(prBody, "pull_request", func(h http.Header) {
			h.Set("Content-Type", "application/json; x="+strings.Repeat("a", 2000))
		}), providers.ErrMissingHeader, "", "", ""},
		{"no delivery id", prBody, githubHeader(prBody, "pull_request", func(h http.Header) { h.Del("X-GitHub-Delivery") }), providers.ErrMissingHeader, "", "", ""},
		{"no event", prBody, githubHeader(prBody, "pull_request", func(h http.Header) { h.Del("X-GitHub-Event") }), providers.ErrMissingHeader, "", "", ""},
		{"delivery id not UTF-8", prBody, githubHeader(prBody, "pull_request", func(h http.Header) { h.Set("X-GitHub-Delivery", "\xba") }), providers.ErrMissingHeader, "", "", ""},
		{"hook id with a control character", prBody, githubHeader(prBody, "pull_request", func(h http.Header) { h.Set("X-GitHub-Hook-ID", "1\x00") }), providers.ErrMissingHeader, "", "", ""},
		{"missing header beats bad signature", prBody, githubHeader(prBody, "pull_request", func(h http.Header) {
			h.Del("X-GitHub-Event")
			h.Set("X-Hub-Signature-256", "sha256=00")
		}), providers.ErrMissingHeader, "", "", ""},
		{"only the SHA-1 signature", prBody, githubHeader(prBody, "pull_request", func(h http.Header) { h.Del("X-Hub-Signature-256") }), verify.ErrMissingSignature, "", "", ""},
		{"signature without prefix", prBody, githubHeader(prBody, "pull_request", func(h http.Header) {
			h.Set("X-Hub-Signature-256", strings.TrimPrefix(h.Get("X-Hub-Signature-256"), "sha256="))
		}), verify.ErrMissingSignature, "", "", ""},
		{"a signature that is not 64 hex digits", prBody, githubHeader(prBody, "pull_request", func(h http.Header) {
			h.Set("X-Hub-Signature-256", "sha256=abcd")
		}), verify.ErrSignatureMismatch, "", "", ""},
		{"wrong secret", prBody, githubSignedWith("nope", prBody, "pull_request", nil), verify.ErrSignatureMismatch, "", "", ""},
		{"signature of another body", prBody, githubHeader([]byte(`{}`), "pull_request", nil), verify.ErrSignatureMismatch, "", "", ""},
		{"an action holding a bidirectional override", []byte(`{"action":"a\u202eb"}`), nil, providers.ErrBadPayload, "", "", ""},
		{"a delivery id holding a zero-width space", prBody, githubHeader(prBody, "pull_request", func(h http.Header) {
			h.Set("X-GitHub-Delivery", "d\u200b1")
		}), providers.ErrMissingHeader, "", "", ""},
		{"an action that is not printable text", []byte(`{"action":"open\u0000ed"}`), nil, providers.ErrBadPayload, "", "", ""},
		{"signed but not JSON", []byte(`not json`), nil, providers.ErrBadPayload, "", "", ""},
		{"signed JSON array", []byte(`[1,2]`), nil, providers.ErrBadPayload, "", "", ""},
		{"signed truncated JSON", []byte(`{"action":"op`), nil, providers.ErrBadPayload, "", "", ""},
		{"a raw newline inside a string", []byte("{\"action\":\"op\nened\"}"), nil, providers.ErrBadPayload, "", "", ""},
		{"a bad escape in a field nobody reads", []byte(`{"action":"opened","x":"\q"}`), nil, providers.ErrBadPayload, "", "", ""},
		{"trailing data after the object", []byte(`{"action":"opened"} {}`), nil, providers.ErrBadPayload, "", "", ""},
		{"nested deeper than 300 levels", []byte(`{"a":` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `}`), nil, providers.ErrBadPayload, "", "", ""},
		{"form without payload", []byte("x=1"), githubHeader([]byte("x=1"), "ping", func(h http.Header) {
			h.Set("Content-Type", "application/x-www-form-urlencoded")
		}), providers.ErrBadPayload, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := tt.header
			if h == nil {
				h = githubHeader(tt.body, eventOf(tt.wantEvent), nil)
			}
			d, err := providers.Parse(gh, h, tt.body, time.Now())
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if d.Provider != "github" || d.Scope != "42" || d.DeliveryID != "72d3162e-cc78-11e3-81ab-4c9367dc0958" || d.SecretIndex != 1 {
				t.Fatalf("identity = %q %q %q %d", d.Provider, d.Scope, d.DeliveryID, d.SecretIndex)
			}
			if d.Event != tt.wantEvent || d.Entity != tt.wantEntity {
				t.Fatalf("event, entity = %q, %q; want %q, %q", d.Event, d.Entity, tt.wantEvent, tt.wantEntity)
			}
			if got := formatTime(d.EventTime); got != tt.wantTime {
				t.Fatalf("event time = %q, want %q", got, tt.wantTime)
			}
			if string(d.Body) != string(tt.body) {
				t.Fatalf("body was changed")
			}
			if _, ok := d.Headers["X-Hub-Signature-256"]; ok || d.Headers["X-Hub-Signature"] != "" {
				t.Fatalf("a signature header was kept: %v", d.Headers)
			}
			if d.Headers["X-GitHub-Hook-ID"] != "42" {
				t.Fatalf("headers = %v", d.Headers)
			}
		})
	}
}

// eventOf returns the X-GitHub-Event header that yields an event name; ping
// when none is expected.
func eventOf(event string) string {
	if event == "" {
		return "ping"
	}
	header, _, _ := strings.Cut(event, ".")
	return header
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func TestStripeParse(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_767_323_045, 0)
	st := providers.Stripe{Secrets: verify.Secrets{stripeSecret}, Tolerance: 5 * time.Minute}
	body := []byte(`{"id":"evt_1","type":"customer.subscription.updated","created":1767323045,"data":{"object":{"id":"sub_123","status":"active"}}}`)
	header := func(body []byte, mod func(http.Header)) http.Header {
		h := signedHeader(st.Source(), body, "", "", now)
		if mod != nil {
			mod(h)
		}
		return h
	}
	signed := func(b string) ([]byte, http.Header) { return []byte(b), header([]byte(b), nil) }

	t.Run("subscription event", func(t *testing.T) {
		t.Parallel()
		d, err := providers.Parse(st, header(body, nil), body, now)
		if err != nil {
			t.Fatal(err)
		}
		if d.Provider != "stripe" || d.Scope != "" || d.DeliveryID != "evt_1" || d.Event != "customer.subscription.updated" ||
			d.Entity != "stripe:sub_123" || !d.EventTime.Equal(now) {
			t.Fatalf("delivery = %+v", d)
		}
		if _, ok := d.Headers["Stripe-Signature"]; ok {
			t.Fatal("signature header kept")
		}
	})

	errCases := []struct {
		name    string
		body    []byte
		header  http.Header
		wantErr error
	}{
		{"form is refused", body, header(body, func(h http.Header) { h.Set("Content-Type", "application/x-www-form-urlencoded") }), providers.ErrUnsupportedMediaType},
		{"no signature", body, header(body, func(h http.Header) { h.Del("Stripe-Signature") }), verify.ErrMissingSignature},
		{"unparseable signature", body, header(body, func(h http.Header) { h.Set("Stripe-Signature", "garbage") }), verify.ErrSignatureMismatch},
		{"a charset that is not UTF-8 text", body, header(body, func(h http.Header) { h.Set("Content-Type", "application/json; charset=\"\xfe\"") }), providers.ErrMissingHeader},
		{"too old, whatever the signature", body, header(body, func(h http.Header) {
			h.Set("Stripe-Signature", "t=1,v1=00")
		}), verify.ErrTimestampOutOfTolerance},
		{"too old", body, signedHeader(st.Source(), body, "", "", now.Add(-time.Hour)), verify.ErrTimestampOutOfTolerance},
	}
	for _, c := range []string{`{"type":"x"}`, `{"id":"evt_2"}`, `{"id":5,"type":"x"}`, `"evt"`, `{"id":"evt_3","type":"x"`, `{"id":"evt_\u0000","type":"x"}`} {
		b, h := signed(c)
		errCases = append(errCases, struct {
			name    string
			body    []byte
			header  http.Header
			wantErr error
		}{"bad payload " + c, b, h, providers.ErrBadPayload})
	}
	for _, tt := range errCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := providers.Parse(st, tt.header, tt.body, now); !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}

	t.Run("no object id means no entity", func(t *testing.T) {
		t.Parallel()
		b, h := signed(`{"id":"evt_4","type":"balance.available","created":1}`)
		d, err := providers.Parse(st, h, b, now)
		if err != nil || d.Entity != "" || !d.EventTime.IsZero() {
			t.Fatalf("d = %+v, err = %v", d, err)
		}
	})
}

// FuzzDecodeGitHubForm checks the form decoder never panics and that what it
// returns is exactly the one payload field.
func FuzzDecodeGitHubForm(f *testing.F) {
	for _, seed := range []string{
		"payload=" + url.QueryEscape(`{"zen":"hi"}`),
		"payload=%7B%7D&other=1",
		"payload=1&payload=2",
		"payload=%zz",
		"payload",
		"=&=&",
		"",
		"payload=" + url.QueryEscape("{\"a\":\"\u00e9\"}"),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		payload, err := providers.DecodeGitHubForm(body)
		if err != nil {
			if !errors.Is(err, providers.ErrBadPayload) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		form, perr := url.ParseQuery(string(body))
		if perr != nil || len(form["payload"]) != 1 || form["payload"][0] != string(payload) {
			t.Fatalf("decoded %q from %q", payload, body)
		}
	})
}
