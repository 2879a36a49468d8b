package providers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/providers"
	"github.com/hookgate/hookgate/internal/verify"
)

// The verify-and-parse path of one delivery of about 6 KB, as the gateway
// runs it for every request before touching the database.
//
//	go test -run '^$' -bench . -benchmem ./internal/providers/
func BenchmarkParseGitHub(b *testing.B) {
	body := fmt.Appendf(nil, `{"action":"synchronize","number":7,"pull_request":{"id":1234,"state":"open","updated_at":"2026-01-02T03:04:05Z","body":%q},"repository":{"id":1}}`,
		strings.Repeat("x", 5800))
	h := githubHeader(body, "pull_request", nil)
	gh := providers.GitHub{Secrets: verify.Secrets{ghSecret}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := providers.Parse(gh, h, body, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseStripe(b *testing.B) {
	now := time.Now()
	body := fmt.Appendf(nil, `{"id":"evt_1","object":"event","type":"invoice.paid","created":%d,"data":{"object":{"id":"in_1","lines":%q}}}`,
		now.Unix(), strings.Repeat("x", 5800))
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Stripe-Signature", verify.SignTimestamped(stripeSecret, now, body))
	st := providers.Stripe{Secrets: verify.Secrets{stripeSecret}, Tolerance: 5 * time.Minute}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := providers.Parse(st, h, body, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseSource is the same path for a source of each kind, its
// sample payload padded to about 6 KB.
func BenchmarkParseSource(b *testing.B) {
	now := time.Now()
	for _, kind := range providers.KindNames() {
		b.Run(kind, func(b *testing.B) {
			c := kindConfigs()[kind]
			k := providers.Kinds[kind]
			sample := k.Sample(c, "id-1", "thing.created", now)
			body := fmt.Appendf(nil, `{"padding":%q,%s`, strings.Repeat("x", 5800), sample[1:])
			h := http.Header{}
			if err := k.Sign(c, h, body, "id-1", "thing.created", now); err != nil {
				b.Fatal(err)
			}
			p, err := providers.NewSource(c)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := providers.Parse(p, h, body, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
