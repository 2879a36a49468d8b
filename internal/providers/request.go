package providers

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"
)

// NewRequest returns a POST of body to url, signed as a sender of c's kind
// signs it at now with c's first secret: the content type, delivery id, event
// and signature headers that Kinds[c.Kind].Sign sets. It is the one way a
// signed delivery is built, for gateway send, the bench and the tests; a
// test of a refusal changes the request it returns (a header, the body).
//
// id and event are what the sender says they are, where its kind sends them
// in headers; a kind that reads them from the payload ignores them (the
// kind's Sample is a payload that carries them). An unknown kind, or a source
// without a secret, is an error.
func NewRequest(ctx context.Context, c SourceConfig, url string, body []byte, id, event string, now time.Time) (*http.Request, error) {
	k, ok := Kinds[c.Kind]
	if !ok {
		return nil, fmt.Errorf("source %s: unknown kind %q", c.Name, c.Kind)
	}
	if len(c.Secrets) == 0 {
		return nil, fmt.Errorf("source %s: no secret to sign with", c.Name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if err := k.Sign(c, req.Header, body, id, event, now); err != nil {
		return nil, fmt.Errorf("source %s: %w", c.Name, err)
	}
	return req, nil
}
