package framing_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/framing"
)

// serve runs a server whose handler answers with what Of says of each
// request's connection, and returns its address.
func serve(t *testing.T) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, []string{"followed", "untracked", "ambiguous"}[framing.Of(r)])
	}))
	srv.Listener = framing.Listen(srv.Listener)
	srv.Config.ConnContext = framing.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// answers sends raw on one connection, in pieces of size bytes (0: at
// once), and returns the body of each answer read, up to n, until the
// connection closes or idles.
func answers(t *testing.T, addr, raw string, size, n int) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for size > 0 && len(raw) > size {
			_, _ = io.WriteString(c, raw[:size])
			raw = raw[size:]
			time.Sleep(time.Millisecond)
		}
		_, _ = io.WriteString(c, raw)
	}()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	br := bufio.NewReader(c)
	var got []string
	for len(got) < n {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return got
		}
		b, _ := io.ReadAll(res.Body)
		got = append(got, string(b))
		if res.Close {
			return got
		}
	}
	return got
}

// The framing is followed across requests on one connection, their bodies
// counted through whatever the pieces they arrive in, so that a request
// holding both Transfer-Encoding and Content-Length is found wherever it
// comes, and a body that looks like a head is never read as one.
func TestFramingIsFollowedAcrossRequests(t *testing.T) {
	t.Parallel()
	addr := serve(t)
	post := func(headers, body string) string {
		return "POST / HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body
	}
	withLength := func(body string) string {
		return post("Content-Length: "+itoa(len(body))+"\r\n", body)
	}
	smuggled := post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n")
	lookalike := "x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
	for _, c := range []struct {
		name, raw string
		want      string
	}{
		{"two plain requests", withLength(`{"a":1}`) + withLength(""), "followed followed"},
		{"a body that looks like a head", withLength(lookalike) + withLength("{}"), "followed followed"},
		{"both headers", smuggled, "ambiguous"},
		{"both headers, after a plain request", withLength("{}") + smuggled, "? ambiguous"},
		{"both headers, lower case", post("content-length: 5\r\ntransfer-encoding: chunked\r\n", "0\r\n\r\n"), "ambiguous"},
		{"chunked alone", post("Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"), "untracked"},
		{"a folded header", post("Content-Length: 2\r\nX-A: b\r\n c\r\n", "{}"), "untracked"},
		{"bare line feeds", "POST / HTTP/1.1\nHost: x\nContent-Length: 2\nTransfer-Encoding: chunked\n\n0\n\n", "ambiguous"},
	} {
		for _, size := range []int{0, 1, 7} {
			got := strings.Join(answers(t, addr, c.raw, size, len(strings.Fields(c.want))), " ")
			want := c.want
			if strings.HasPrefix(want, "? ") {
				// A pipelined request before the ambiguous one may be
				// answered before or after its head arrived.
				if got != "followed ambiguous" && got != "ambiguous ambiguous" {
					t.Errorf("%s, in pieces of %d: %q", c.name, size, got)
				}
				continue
			}
			if got != want {
				t.Errorf("%s, in pieces of %d: %q, want %q", c.name, size, got, want)
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
