// Package verify checks webhook signatures. It is pure: bytes and secrets go in,
// a verdict comes out. It knows nothing of HTTP, databases or providers' payloads.
//
// Every comparison of a computed MAC with a received one is constant-time
// (hmac.Equal), and every configured secret is tried against every candidate
// signature, so the time taken does not depend on how much of a forged
// signature was right.
package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// Errors returned by this package. Callers match them with errors.Is.
var (
	// ErrMissingSignature means the request carried no signature to check.
	ErrMissingSignature = errors.New("signature missing")
	// ErrSignatureMismatch means no configured secret produced a received
	// signature, or the signature could not be parsed.
	ErrSignatureMismatch = errors.New("signature does not match")
	// ErrTimestampOutOfTolerance means a timestamped signature matched but its
	// time is too far from the clock, in either direction.
	ErrTimestampOutOfTolerance = errors.New("timestamp outside tolerance")
)

// HMACSHA256 returns the HMAC-SHA256 of msg keyed by secret.
func HMACSHA256(secret, msg []byte) []byte {
	return hmacParts(secret, msg)
}

// hmacParts is the HMAC-SHA256 of the concatenated parts, without building it.
func hmacParts(secret []byte, parts ...[]byte) []byte {
	return Sign(sha256.New, secret, parts...)
}

// Secrets is a list of secrets that are all valid at once, so that a secret can
// be rotated: add the new one, move senders over, remove the old one. The first
// is the primary.
type Secrets []string

// String shows how many secrets there are, never one: a configuration or a
// provider printed with %v or %+v must not show them.
func (s Secrets) String() string { return fmt.Sprintf("[%d redacted]", len(s)) }

// GoString is String, for %#v.
func (s Secrets) GoString() string { return s.String() }

// MarshalText redacts the secrets in JSON and YAML.
func (s Secrets) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Match reports the index of the first secret whose HMAC-SHA256 over msg equals
// one of the candidate MACs, or ErrSignatureMismatch. With no candidates it
// returns ErrMissingSignature. All pairs are compared, in constant time each.
func (s Secrets) Match(msg []byte, candidates ...[]byte) (int, error) {
	return s.MatchParts([][]byte{msg}, candidates)
}

// MatchParts is Match for a message given in parts (such as a timestamp, a
// separator and the body), which it never copies into one buffer.
func (s Secrets) MatchParts(msg [][]byte, candidates [][]byte) (int, error) {
	return s.MatchPartsWith(sha256.New, msg, candidates)
}

// ParseHexSHA256 decodes a hex-encoded HMAC-SHA256: 64 hex digits. Anything
// else is ErrSignatureMismatch, since it can match no secret; empty is
// ErrMissingSignature. A signature header can so be refused before the body it
// covers is read.
func ParseHexSHA256(macHex string) ([]byte, error) {
	if macHex == "" {
		return nil, ErrMissingSignature
	}
	mac, err := hex.DecodeString(macHex)
	if err != nil || len(mac) != sha256.Size {
		return nil, ErrSignatureMismatch
	}
	return mac, nil
}

// MatchHex is Match for one hex-encoded MAC. A MAC that is not valid hex is a
// mismatch.
func (s Secrets) MatchHex(msg []byte, macHex string) (int, error) {
	if macHex == "" {
		return -1, ErrMissingSignature
	}
	mac, err := hex.DecodeString(macHex)
	if err != nil {
		return -1, ErrSignatureMismatch
	}
	return s.Match(msg, mac)
}

// MatchBase64 is Match for one standard base64-encoded MAC. A MAC that is not
// valid base64 is a mismatch.
func (s Secrets) MatchBase64(msg []byte, macB64 string) (int, error) {
	if macB64 == "" {
		return -1, ErrMissingSignature
	}
	mac, err := base64.StdEncoding.DecodeString(macB64)
	if err != nil {
		return -1, ErrSignatureMismatch
	}
	return s.Match(msg, mac)
}
