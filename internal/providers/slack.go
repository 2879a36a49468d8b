package providers

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/payload"
	"github.com/hookgate/hookgate/internal/verify"
)

// slack verifies Slack's Events API requests: X-Slack-Signature is
// "v0=" and the hex HMAC-SHA256 of "v0:<X-Slack-Request-Timestamp>:<body>"
// keyed by the app's signing secret, and the timestamp is within the
// tolerance. The id is the payload's event_id, the event its event.type, the
// scope its team_id. A url_verification request is answered with its
// challenge and stored as nothing.
type slack struct{ source }

var slackKind = Kind{
	New:   func(c SourceConfig) (Provider, error) { return slack{source{cfg: c}}, nil },
	Timed: timed,
	Sign: func(c SourceConfig, h http.Header, body []byte, _, _ string, now time.Time) error {
		h.Set("Content-Type", "application/json")
		h.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
		h.Set("X-Slack-Request-Timestamp", strconv.FormatInt(now.Unix(), 10))
		h.Set("X-Slack-Signature", verify.SignSlack(c.Secrets[0], now, body))
		return nil
	},
	Sample: func(_ SourceConfig, id, event string, now time.Time) []byte {
		return sample(map[string]any{"type": "event_callback", "team_id": "T0001", "api_app_id": "A0001", "event_id": id,
			"event_time": now.Unix(), "event": map[string]any{"type": event, "channel": "C0001", "user": "U0001", "text": "hello",
				"ts": strconv.FormatInt(now.Unix(), 10) + ".000100"}})
	},
}

var slackKeptHeaders = []string{"X-Slack-Request-Timestamp", "X-Slack-Retry-Num", "X-Slack-Retry-Reason", "User-Agent"}

// Check implements Provider.
func (p slack) Check(h http.Header, now time.Time) (Request, error) {
	contentType, err := p.checkJSON(h)
	if err != nil {
		return Request{}, err
	}
	sig, ok := strings.CutPrefix(h.Get("X-Slack-Signature"), "v0=")
	if !ok {
		return Request{}, fmt.Errorf("%w: X-Slack-Signature is required (v0=...)", verify.ErrMissingSignature)
	}
	mac, err := verify.ParseHexSHA256(sig)
	if err != nil {
		return Request{}, fmt.Errorf("X-Slack-Signature: %w", err)
	}
	ts, err := verify.ParseUnix(h.Get("X-Slack-Request-Timestamp"))
	if err != nil {
		return Request{}, fmt.Errorf("X-Slack-Request-Timestamp: %w", err)
	}
	if err := verify.Fresh(ts, now, p.cfg.Tolerance); err != nil {
		return Request{}, fmt.Errorf("X-Slack-Request-Timestamp: %w", err)
	}
	return Request{
		ContentType:  contentType,
		Headers:      keptHeaders(h, slackKeptHeaders...),
		signedPrefix: [][]byte{[]byte("v0:" + strconv.FormatInt(ts.Unix(), 10) + ":")},
		signatures:   [][]byte{mac},
	}, nil
}

// Verify implements Provider.
func (p slack) Verify(req Request, pieces Body) (Delivery, error) {
	idx, err := p.cfg.Secrets.MatchParts(append(slices.Clip(req.signedPrefix), pieces...), req.signatures)
	if err != nil {
		return Delivery{}, fmt.Errorf("X-Slack-Signature: %w", err)
	}
	d := p.delivery(req, pieces.Bytes(), idx)
	var verification bool
	var challenge string
	v, err := readObject(d.Body)
	if err != nil {
		return Delivery{}, err
	}
	if verification = v.Get("type").Text() == "url_verification"; verification {
		challenge = v.Get("challenge").Text()
	}
	if verification {
		if challenge == "" || len(challenge) > MaxIDLen || !Printable(challenge) {
			return Delivery{}, fmt.Errorf("%w: a url_verification's challenge must be printable text of 1 to %d bytes", ErrBadPayload, MaxIDLen)
		}
		return Delivery{Provider: p.cfg.Name, Challenge: challenge, SecretIndex: idx}, nil
	}
	var rateLimited bool
	err = p.finish(&d, "", "", func(v payload.Object) error {
		if d.Scope = v.Get("team_id").Text(); !ValidID(d.Scope) {
			return fmt.Errorf("%w: the payload's team_id must be printable text of at most %d bytes", ErrBadPayload, MaxIDLen)
		}
		d.DeliveryID, d.Event = idText(v.Get("event_id")), v.Get("event", "type").Text()
		if v.Get("type").Text() == "app_rate_limited" {
			// Slack's notice that it dropped events: no event_id, one a
			// minute per team; keyed by that minute, so its retries are
			// duplicates.
			rateLimited = true
			d.DeliveryID, d.Event = "app_rate_limited:"+d.Scope+":"+v.Get("minute_rate_limited").Number(), "app_rate_limited"
		}
		return nil
	})
	if err != nil {
		return Delivery{}, err
	}
	if d.DeliveryID == "" || !ValidID(d.DeliveryID) {
		return Delivery{}, fmt.Errorf("%w: the payload's event_id must be a non-empty string of at most %d bytes", ErrBadPayload, MaxIDLen)
	}
	if !rateLimited && (d.Event == "" || !ValidID(d.Event)) {
		return Delivery{}, fmt.Errorf("%w: the payload's event.type must be a non-empty printable string of at most %d bytes", ErrBadPayload, MaxIDLen)
	}
	return d, nil
}
