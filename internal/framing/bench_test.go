package framing

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
)

// readerConn is a connection whose reads come from r.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// BenchmarkHeads reads keep-alive requests (a GitHub-like head and a 6 KB
// body) through a followed connection, as net/http's 4 KiB reads would.
//
//	go test -run '^$' -bench Heads -benchmem ./internal/framing/
func BenchmarkHeads(b *testing.B) {
	body := strings.Repeat("x", 6000)
	head := "POST /webhooks/github HTTP/1.1\r\nHost: hooks.example.com\r\nUser-Agent: GitHub-Hookshot/abc\r\n" +
		"Content-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: 72d3162e-cc78-11e3-81ab-4c9367dc0958\r\n" +
		"X-GitHub-Hook-ID: 292430182\r\nX-Hub-Signature-256: sha256=" + strings.Repeat("ab", 32) + "\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\nAccept: */*\r\n\r\n"
	one := []byte(head + body)
	stream := bytes.Repeat(one, 100)
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(one)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 100 {
		c := &conn{Conn: readerConn{r: bytes.NewReader(stream)}, maxHead: 68 << 10}
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
	}
}
