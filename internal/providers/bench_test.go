package providers_test

import (
	"fmt"
	"runtime"
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
	st := providers.Stripe{Secrets: verify.Secrets{stripeSecret}, Tolerance: 5 * time.Minute}
	h := signedHeader(st.Source(), body, "", "", now)
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
			h := signedHeader(c, body, "id-1", "thing.created", now)
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

// pushPayload is a GitHub push of n commits, shaped as GitHub sends one
// (commits with authors and file lists, the repository, the pusher).
func pushPayload(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"ec26c3e57ca3a959ca5aad62de7213c562f8c821","created":false,"deleted":false,"forced":false,"base_ref":null,"compare":"https://github.com/acme/api/compare/6113728f27ae...ec26c3e57ca3","commits":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"%040x","tree_id":"%040x","distinct":true,"message":"Fix the flaky retry test (#%d)\n\nThe backoff now waits on a signal.","timestamp":"2026-01-02T03:04:05+00:00","url":"https://github.com/acme/api/commit/%040x","author":{"name":"Octo Cat","email":"octocat@example.com","username":"octocat"},"committer":{"name":"GitHub","email":"noreply@github.com","username":"web-flow"},"added":["internal/retry/signal.go"],"removed":[],"modified":["internal/retry/retry.go","internal/retry/retry_test.go"]}`,
			i, i+1, i, i)
	}
	b.WriteString(`],"repository":{"id":186853002,"node_id":"MDEwOlJlcG9zaXRvcnkxODY4NTMwMDI=","name":"api","full_name":"acme/api","private":false,"owner":{"name":"acme","login":"acme","id":21031067,"type":"Organization","site_admin":false},"html_url":"https://github.com/acme/api","description":"The API","fork":false,"created_at":1557933565,"updated_at":"2026-01-02T03:04:05Z","pushed_at":1767323045,"size":4210,"stargazers_count":12,"language":"Go","has_issues":true,"archived":false,"default_branch":"main","topics":["api","go"]},"pusher":{"name":"octocat","email":"octocat@example.com"},"sender":{"login":"octocat","id":21031067,"type":"User","site_admin":false}}`)
	return []byte(b.String())
}

// BenchmarkParseShapes is what verify-and-parse allocates per payload byte
// (alloc-B/payload-B) for three shapes: one long string, a million tiny
// values, and a real-shaped push of 2,048 commits. A tree parser costs tens
// of bytes a value; reading the fields in place costs a fraction of a byte
// per payload byte whatever the shape.
//
//	go test -run '^$' -bench ParseShapes -benchmem ./internal/providers/
func BenchmarkParseShapes(b *testing.B) {
	head := `{"ref":"refs/heads/main","repository":{"id":1,"pushed_at":1},"padding":`
	shapes := []struct {
		name string
		body []byte
	}{
		{"string-2MB", fmt.Appendf(nil, `%s%q}`, head, strings.Repeat("x", 2<<20))},
		{"numbers-1M", []byte(head + "[" + strings.Repeat("0,", 1e6-1) + "0]}")},
		{"push-2048-commits", pushPayload(2048)},
	}
	gh := providers.GitHub{Secrets: verify.Secrets{ghSecret}}
	for _, s := range shapes {
		b.Run(s.name, func(b *testing.B) {
			h := githubHeader(s.body, "push", nil)
			b.SetBytes(int64(len(s.body)))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			n := 0
			for b.Loop() {
				if _, err := providers.Parse(gh, h, s.body, time.Now()); err != nil {
					b.Fatal(err)
				}
				n++
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n*len(s.body)), "alloc-B/payload-B")
		})
	}
}
