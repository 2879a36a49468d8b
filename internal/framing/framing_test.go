package framing_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/framing"
)

// serve runs a server behind Listen whose handler answers with what the
// package says of each request, and the SHA-256 of the body it read, and
// returns its address.
func serve(t *testing.T) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		verdict := "followed"
		switch {
		case framing.Ambiguous(r):
			verdict = "ambiguous"
			w.Header().Set("Connection", "close")
		case framing.Untracked(r):
			verdict = "untracked"
		}
		if verdict != "ambiguous" {
			b, _ := io.ReadAll(r.Body)
			sum := sha256.Sum256(b)
			verdict += " " + hex.EncodeToString(sum[:4])
		}
		_, _ = io.WriteString(w, verdict)
	}))
	srv.Listener = framing.Listen(srv.Listener, 68<<10)
	srv.Config.ConnContext = framing.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// answers sends raw on one connection, in pieces of size bytes (0: at
// once), and returns each answer (its status and body), up to n, until the
// connection closes or idles.
func answers(t *testing.T, addr, raw string, size, n int) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for i := 0; size > 0 && len(raw) > size; i++ {
			_, _ = io.WriteString(c, raw[:size])
			raw = raw[size:]
			if i%16 == 0 || len(raw) < 256 {
				time.Sleep(time.Millisecond) // so that the pieces arrive apart
			}
		}
		_, _ = io.WriteString(c, raw)
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	var got []string
	for len(got) < n {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return got
		}
		b, _ := io.ReadAll(res.Body)
		answer := string(b)
		if res.StatusCode != http.StatusOK {
			answer = res.Status
		}
		got = append(got, answer)
		if res.Close {
			return got
		}
	}
	return got
}

func sum(body string) string {
	s := sha256.Sum256([]byte(body))
	return hex.EncodeToString(s[:4])
}

func post(headers, body string) string {
	return "POST / HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body
}

func withLength(body string) string {
	return post("Content-Length: "+strconv.Itoa(len(body))+"\r\n", body)
}

// A request holding both Transfer-Encoding and Content-Length, in any
// spelling or coding, folded or not, is found wherever it comes on a
// connection, and handed to the handler framed by its Content-Length, marked;
// the requests before it are served as they are. Bodies are counted through
// whatever the pieces they arrive in, so a body that looks like a head is
// never read as one. A chunked request alone leaves the connection
// untracked; a Marker a client sends itself is taken out.
func TestFramingIsFollowedAcrossRequests(t *testing.T) {
	t.Parallel()
	addr := serve(t)
	smuggled := post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n")
	lookalike := "x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
	for _, c := range []struct {
		name, raw string
		want      []string
	}{
		{"two plain requests", withLength(`{"a":1}`) + withLength(""), []string{"followed " + sum(`{"a":1}`), "followed " + sum("")}},
		{"a body that looks like a head", withLength(lookalike) + withLength("{}"), []string{"followed " + sum(lookalike), "followed " + sum("{}")}},
		{"both headers", smuggled, []string{"ambiguous"}},
		{"both headers, after a plain request", withLength("{}") + smuggled, []string{"followed " + sum("{}"), "ambiguous"}},
		{"both headers, lower case", post("content-length: 5\r\ntransfer-encoding: chunked\r\n", "0\r\n\r\n"), []string{"ambiguous"}},
		{"a coding net/http does not know", post("Transfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"), []string{"ambiguous"}},
		{"identity", post("Transfer-Encoding: identity\r\nContent-Length: 2\r\n", "{}"), []string{"ambiguous"}},
		{"an empty coding", post("Transfer-Encoding:\r\nContent-Length: 2\r\n", "{}"), []string{"ambiguous"}},
		{"two codings", post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"), []string{"ambiguous"}},
		{"a folded coding", post("Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"), []string{"ambiguous"}},
		{"HTTP/1.0", "POST / HTTP/1.0\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"ambiguous"}},
		{"bare line feeds", "POST / HTTP/1.1\nHost: x\nContent-Length: 2\nTransfer-Encoding: chunked\n\n0\n\n", []string{"ambiguous"}},
		{"chunked alone", post("Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"), []string{"untracked " + sum("{}")}},
		{"a marker sent by the client", post(framing.Marker+": ambiguous\r\nContent-Length: 2\r\n", "{}"), []string{"followed " + sum("{}")}},
		{"a folded header", post("Content-Length: 2\r\nX-A: b\r\n c\r\n", "{}"), []string{"followed " + sum("{}")}},
	} {
		for _, size := range []int{0, 1, 7} {
			if got := answers(t, addr, c.raw, size, len(c.want)); strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("%s, in pieces of %d: %q, want %q", c.name, size, got, c.want)
			}
		}
	}
}

// What a client sends that is framed one way reaches the handler byte for
// byte, however it is cut into pieces and pipelined.
func TestPlainRequestsPassUnchanged(t *testing.T) {
	t.Parallel()
	addr := serve(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		var raw strings.Builder
		var want []string
		for range 1 + rng.IntN(5) {
			body := strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(20000))
			if rng.IntN(4) == 0 {
				body = "HTTP/1.1\r\n\r\nContent-Length: 9\r\n\r\n" + body
			}
			raw.WriteString(post(fmt.Sprintf("X-Round: %d\r\nContent-Length: %d\r\n", round, len(body)), body))
			want = append(want, "followed "+sum(body))
		}
		size := []int{0, 1, 3, 100, 4096}[rng.IntN(5)]
		if size == 1 && raw.Len() > 20000 {
			size = 13 // a byte at a time would be slow
		}
		if got := answers(t, addr, raw.String(), size, len(want)); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("round %d in pieces of %d: %q, want %q", round, size, got, want)
		}
	}
}
