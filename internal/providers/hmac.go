package providers

import (
	"cmp"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/verify"
)

// hmacSource verifies a sender's own HMAC header, as its configuration
// describes: the header, the hash, the encoding, a prefix, and optionally a
// timestamp header (then "<timestamp>.<body>" is what was signed, and the
// timestamp must be within the tolerance). The id and the event come from a
// header or a JSON path each.
type hmacSource struct {
	source
	hash func() hash.Hash
}

var headerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)

var hmacKind = Kind{
	New: func(c SourceConfig) (Provider, error) {
		s := &c.HMAC
		if s.Algorithm == "" {
			s.Algorithm = "sha256"
		}
		if s.Encoding == "" {
			s.Encoding = "hex"
		}
		h, ok := verify.Hashes[s.Algorithm]
		switch {
		case !headerNameRE.MatchString(s.SignatureHeader):
			return nil, keyError("signature_header", "must name a header, such as X-Acme-Signature")
		case !ok:
			return nil, keyError("algorithm", "must be sha1, sha256 or sha512, got %q", s.Algorithm)
		case s.Encoding != "hex" && s.Encoding != "base64":
			return nil, keyError("encoding", "must be hex or base64, got %q", s.Encoding)
		case s.TimestampHeader != "" && !headerNameRE.MatchString(s.TimestampHeader):
			return nil, keyError("timestamp_header", "must name a header")
		case (s.IDHeader == "") == (s.IDField == ""):
			return nil, errors.New("keys id_header and id_field: give one")
		case (s.EventHeader == "") == (s.EventField == ""):
			return nil, errors.New("keys event_header and event_field: give one")
		case s.IDHeader != "" && !headerNameRE.MatchString(s.IDHeader), s.EventHeader != "" && !headerNameRE.MatchString(s.EventHeader):
			return nil, errors.New("keys id_header and event_header: must name headers")
		case s.IDField != "" && !validPath(s.IDField), s.EventField != "" && !validPath(s.EventField):
			return nil, errors.New("keys id_field and event_field: must be JSON paths such as data.id")
		}
		seen := map[string]string{}
		for _, hd := range [][2]string{{"signature_header", s.SignatureHeader}, {"timestamp_header", s.TimestampHeader},
			{"id_header", s.IDHeader}, {"event_header", s.EventHeader}} {
			if hd[1] == "" {
				continue
			}
			name := http.CanonicalHeaderKey(hd[1])
			if key, clash := seen[name]; clash {
				return nil, fmt.Errorf("keys %s and %s name the same header, %s: each carries its own value", key, hd[0], name)
			}
			seen[name] = hd[0]
		}
		return hmacSource{source: source{cfg: c}, hash: h}, nil
	},
	Timed: func(c SourceConfig) bool { return c.HMAC.TimestampHeader != "" },
	Sign: func(c SourceConfig, h http.Header, body []byte, id, event string, now time.Time) error {
		s := c.HMAC
		hf, ok := verify.Hashes[cmp.Or(s.Algorithm, "sha256")]
		if !ok {
			return fmt.Errorf("unknown algorithm %q", s.Algorithm)
		}
		parts := [][]byte{body}
		if s.TimestampHeader != "" {
			ts := strconv.FormatInt(now.Unix(), 10)
			h.Set(s.TimestampHeader, ts)
			parts = [][]byte{[]byte(ts + "."), body}
		}
		h.Set("Content-Type", "application/json")
		h.Set(s.SignatureHeader, s.Prefix+verify.Encode(cmp.Or(s.Encoding, "hex"), verify.Sign(hf, []byte(c.Secrets[0]), parts...)))
		if s.IDHeader != "" {
			h.Set(s.IDHeader, id)
		}
		if s.EventHeader != "" {
			h.Set(s.EventHeader, event)
		}
		return nil
	},
	Sample: func(c SourceConfig, id, event string, now time.Time) []byte {
		fields := map[string]any{"created_at": now.UTC().Format(time.RFC3339), "data": map[string]any{"id": "obj_1"}}
		setPath(fields, c.HMAC.IDField, id)
		setPath(fields, c.HMAC.EventField, event)
		return sample(fields)
	},
}

// Check implements Provider.
func (p hmacSource) Check(h http.Header, now time.Time) (Request, error) {
	s := p.cfg.HMAC
	contentType, err := p.checkJSON(h)
	if err != nil {
		return Request{}, err
	}
	req := Request{ContentType: contentType}
	if s.IDHeader != "" {
		if req.DeliveryID, err = requireHeader(h, s.IDHeader); err != nil {
			return Request{}, err
		}
	}
	if s.EventHeader != "" {
		if req.Event, err = requireHeader(h, s.EventHeader); err != nil {
			return Request{}, err
		}
	}
	value := strings.TrimSpace(h.Get(s.SignatureHeader))
	if value == "" {
		return Request{}, fmt.Errorf("%w: %s is required", verify.ErrMissingSignature, s.SignatureHeader)
	}
	encoded, ok := strings.CutPrefix(value, s.Prefix)
	if !ok {
		return Request{}, fmt.Errorf("%s: %w: it must start with %q", s.SignatureHeader, verify.ErrSignatureMismatch, s.Prefix)
	}
	mac, err := verify.Decode(s.Encoding, encoded)
	if err != nil {
		return Request{}, fmt.Errorf("%s: %w", s.SignatureHeader, err)
	}
	req.signatures = [][]byte{mac}
	if s.TimestampHeader != "" {
		ts, err := verify.ParseUnix(strings.TrimSpace(h.Get(s.TimestampHeader)))
		if err != nil {
			return Request{}, fmt.Errorf("%s: %w", s.TimestampHeader, err)
		}
		if err := verify.Fresh(ts, now, p.cfg.Tolerance); err != nil {
			return Request{}, fmt.Errorf("%s: %w", s.TimestampHeader, err)
		}
		req.signedPrefix = [][]byte{[]byte(strconv.FormatInt(ts.Unix(), 10) + ".")}
	}
	var kept []string
	for _, name := range []string{s.IDHeader, s.EventHeader, s.TimestampHeader, "User-Agent"} {
		if name != "" {
			kept = append(kept, name)
		}
	}
	req.Headers = keptHeaders(h, kept...)
	return req, nil
}

// Verify implements Provider.
func (p hmacSource) Verify(req Request, pieces Body) (Delivery, error) {
	idx, err := p.cfg.Secrets.MatchPartsWith(p.hash, append(slices.Clip(req.signedPrefix), pieces...), req.signatures)
	if err != nil {
		return Delivery{}, fmt.Errorf("%s: %w", p.cfg.HMAC.SignatureHeader, err)
	}
	d := p.delivery(req, pieces.Bytes(), idx)
	return d, p.finish(&d, p.cfg.HMAC.IDField, p.cfg.HMAC.EventField, nil)
}

// setPath sets a dot-separated path in a map of maps.
func setPath(m map[string]any, path, v string) {
	if path == "" {
		return
	}
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}
