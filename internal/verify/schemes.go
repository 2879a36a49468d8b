package verify

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
)

// Hashes are the hashes an HMAC scheme may name: what senders with their own
// HMAC header use.
var Hashes = map[string]func() hash.Hash{"sha1": sha1.New, "sha256": sha256.New, "sha512": sha512.New}

// MatchPartsWith is MatchParts with another hash than SHA-256.
func (s Secrets) MatchPartsWith(h func() hash.Hash, msg [][]byte, candidates [][]byte) (int, error) {
	if len(candidates) == 0 {
		return -1, ErrMissingSignature
	}
	matched := -1
	for i, secret := range s {
		want := Sign(h, []byte(secret), msg...)
		for _, got := range candidates {
			if hmac.Equal(want, got) && matched < 0 {
				matched = i
			}
		}
	}
	if matched < 0 {
		return -1, ErrSignatureMismatch
	}
	return matched, nil
}

// MatchToken returns the index of the secret equal to token, compared in
// constant time with every secret: GitLab's X-Gitlab-Token, a shared secret
// sent as it is. Empty is ErrMissingSignature.
func (s Secrets) MatchToken(token string) (int, error) {
	if token == "" {
		return -1, ErrMissingSignature
	}
	matched := -1
	for i, secret := range s {
		// ConstantTimeCompare returns at once on a length difference: the
		// length of a secret is not what an attacker lacks.
		if subtle.ConstantTimeCompare([]byte(secret), []byte(token)) == 1 && matched < 0 {
			matched = i
		}
	}
	if matched < 0 {
		return -1, ErrSignatureMismatch
	}
	return matched, nil
}

// Fresh returns ErrTimestampOutOfTolerance when t is further than tolerance
// from now, in either direction.
func Fresh(t, now time.Time, tolerance time.Duration) error {
	if skew := now.Sub(t); skew.Abs() > tolerance {
		when := skew.Round(time.Second).String() + " ago"
		if skew < 0 {
			when = (-skew).Round(time.Second).String() + " ahead of this server's clock"
		}
		return fmt.Errorf("%w: signed %s, tolerance %s", ErrTimestampOutOfTolerance, when, tolerance)
	}
	return nil
}

// ParseUnix reads a timestamp header of unix seconds. Anything else is a
// mismatch (it can prove nothing); empty is ErrMissingSignature.
func ParseUnix(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, ErrMissingSignature
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 || sec > 253402300799 {
		return time.Time{}, fmt.Errorf("%w: the timestamp must be unix seconds", ErrSignatureMismatch)
	}
	return time.Unix(sec, 0), nil
}

// Decode decodes a MAC in an encoding a scheme names: "hex" or "base64"
// (standard alphabet, padded or not). What does not decode is a mismatch.
func Decode(encoding, s string) ([]byte, error) {
	if s == "" {
		return nil, ErrMissingSignature
	}
	var mac []byte
	var err error
	switch encoding {
	case "hex":
		mac, err = hex.DecodeString(s)
	case "base64":
		mac, err = base64.StdEncoding.DecodeString(s)
		if err != nil {
			mac, err = base64.RawStdEncoding.DecodeString(s)
		}
	default:
		return nil, fmt.Errorf("unknown encoding %q", encoding)
	}
	if err != nil || len(mac) == 0 {
		return nil, ErrSignatureMismatch
	}
	return mac, nil
}

// Encode encodes a MAC as Decode reads it.
func Encode(encoding string, mac []byte) string {
	if encoding == "base64" {
		return base64.StdEncoding.EncodeToString(mac)
	}
	return hex.EncodeToString(mac)
}

// Sign returns the HMAC of the concatenated parts keyed by secret's bytes.
func Sign(h func() hash.Hash, secret []byte, parts ...[]byte) []byte {
	mac := hmac.New(h, secret)
	for _, p := range parts {
		mac.Write(p)
	}
	return mac.Sum(nil)
}

// StandardKey returns the HMAC key of a Standard Webhooks secret: the
// base64 after the "whsec_" prefix (the prefix is optional, as in the
// specification's reference libraries).
func StandardKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, errors.New("a Standard Webhooks secret is whsec_ followed by base64")
	}
	return key, nil
}

// ParseStandardSignatures reads a webhook-signature header: space-separated
// "<version>,<base64>" pairs. Only v1 (HMAC-SHA256) is read; v1a (asymmetric)
// and unknown versions are skipped, and so is a v1 that is not base64. No
// usable v1 is a mismatch; empty is ErrMissingSignature.
func ParseStandardSignatures(header string) ([][]byte, error) {
	if strings.TrimSpace(header) == "" {
		return nil, ErrMissingSignature
	}
	var macs [][]byte
	for _, f := range strings.Fields(header) {
		version, sig, ok := strings.Cut(f, ",")
		if !ok || version != "v1" {
			continue
		}
		if mac, err := base64.StdEncoding.DecodeString(sig); err == nil && len(mac) == sha256.Size {
			macs = append(macs, mac)
		}
	}
	if len(macs) == 0 {
		return nil, fmt.Errorf("%w: no usable v1 signature (v1,<base64 of 32 bytes>)", ErrSignatureMismatch)
	}
	return macs, nil
}

// SignStandard returns a webhook-signature header value, as a Standard
// Webhooks sender computes it: "v1," and the base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>" keyed by the secret's decoded key.
func SignStandard(secret, id string, t time.Time, body []byte) (string, error) {
	key, err := StandardKey(secret)
	if err != nil {
		return "", err
	}
	mac := Sign(sha256.New, key, []byte(id), []byte("."), strconv.AppendInt(nil, t.Unix(), 10), []byte("."), body)
	return "v1," + base64.StdEncoding.EncodeToString(mac), nil
}

// SignSlack returns an X-Slack-Signature value, as Slack computes it:
// "v0=" and the hex HMAC-SHA256 of "v0:<timestamp>:<body>" keyed by the
// signing secret's bytes.
func SignSlack(secret string, t time.Time, body []byte) string {
	mac := Sign(sha256.New, []byte(secret), []byte("v0:"), strconv.AppendInt(nil, t.Unix(), 10), []byte(":"), body)
	return "v0=" + hex.EncodeToString(mac)
}
