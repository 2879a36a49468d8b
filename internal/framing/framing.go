// Package framing stands between a listener's connections and net/http, and
// reads each HTTP/1.x request head before net/http does. net/http serves a
// request that carries both Transfer-Encoding and Content-Length by dropping
// the Content-Length (or answers a plain 501 for a coding it does not know),
// and keeps the connection open; RFC 9112 §6.3 says such a message "ought to
// be handled as an error" and that the server "MUST close the connection
// after responding", since a proxy in front may have framed it by the other
// header (request smuggling).
//
// A connection from Listen holds each request head back until it has arrived
// whole, then hands it on. A head holding both headers is handed on without
// its Transfer-Encoding lines and with the header Marker added, so that
// net/http frames it by its Content-Length and serves it like any other, and
// the handler (Ambiguous) refuses it and closes the connection; the requests
// before it on the connection are served as they are. A body is counted
// through by its Content-Length, never held. A chunked body cannot be
// counted through without decoding it: after one, and after a head that is
// not one to follow (too large, or a request line net/http refuses), the
// connection's bytes pass untouched and the connection is Untracked: it must
// be closed after its answer.
package framing

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
)

// Marker is the header a head that carried both Transfer-Encoding and
// Content-Length is handed on with, in their place; a head that carried it
// itself is handed on without it.
const Marker = "X-Hookgate-Framing"

// markerLine is Marker as a header line.
var markerLine = []byte(Marker + ": ambiguous\r\n")

// Listen returns ln with each accepted connection's request heads read
// before net/http reads them (see the package documentation). maxHead bounds
// a head that is held back: a longer one is handed on as it comes (net/http
// refuses it: its MaxHeaderBytes plus 4 KiB is the right bound). Serve with
// ConnContext so that Untracked finds the connection.
func Listen(ln net.Listener, maxHead int) net.Listener { return listener{ln, maxHead} }

type listener struct {
	net.Listener
	maxHead int
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, maxHead: l.maxHead}, nil
}

type connKey struct{}

// ConnContext is for http.Server's ConnContext: it puts a connection from
// Listen where Untracked finds it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// Ambiguous reports whether r carried both Transfer-Encoding and
// Content-Length: it came through Listen with Marker.
func Ambiguous(r *http.Request) bool { return r.Header.Get(Marker) != "" }

// Untracked reports whether r's connection can no longer be followed (a
// chunked body, a head not to follow): it must be closed after r's answer.
// A request that did not come through Listen and ConnContext is not.
func Untracked(r *http.Request) bool {
	c, _ := r.Context().Value(connKey{}).(*conn)
	return c != nil && c.untracked.Load()
}

// mode is what a connection's next bytes are.
type mode int

const (
	heads   mode = iota // a request head, held back until it has arrived whole
	body                // a body of known length, counted through
	through             // anything: passed untouched
)

// conn is a connection whose request heads are read before net/http reads
// them. net/http reads a connection from one goroutine at a time, so Read
// needs no lock; Untracked reads only the flag.
type conn struct {
	net.Conn
	maxHead   int
	untracked atomic.Bool

	mode    mode
	body    int64  // in body mode: the bytes of the body still to come
	head    []byte // the head so far, held back
	line    int    // where in head its last line, not yet ended, begins
	scratch []byte // what the connection's reads go into
	in      []byte // bytes read and not yet looked at (in scratch)
	out     []byte // bytes looked at, for the reader
	err     error  // the connection's error, once in and out are given
}

func (c *conn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if len(c.in) == 0 {
			if c.err != nil {
				return 0, c.err
			}
			switch {
			case c.mode == through:
				return c.Conn.Read(p)
			case c.mode == body:
				// Straight into p, no further than the body's end.
				n, err := c.Conn.Read(p[:min(int64(len(p)), c.body)])
				if c.body -= int64(n); c.body == 0 {
					c.mode = heads
				}
				return n, err
			}
			if c.scratch == nil {
				c.scratch = make([]byte, 4<<10)
			}
			n, err := c.Conn.Read(c.scratch)
			if n == 0 {
				return 0, err // a head cut short is not handed on: net/http sees the end
			}
			c.in, c.err = c.scratch[:n], err
		}
		c.step()
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// step looks at the bytes read, moving them to out as the mode allows.
// Called with out empty, so out never holds bytes of scratch or head that a
// later step overwrites.
func (c *conn) step() {
	switch c.mode {
	case through:
		c.out, c.in = c.in, nil
	case body:
		k := min(int64(len(c.in)), c.body)
		c.out, c.in = c.in[:k], c.in[k:]
		if c.body -= k; c.body == 0 {
			c.mode = heads
		}
	case heads:
		i := bytes.IndexByte(c.in, '\n')
		if i < 0 {
			c.head = append(c.head, c.in...)
			c.in = nil
			if len(c.head) > c.maxHead {
				c.stop() // net/http refuses it
			}
			return
		}
		start := c.line
		c.head = append(c.head, c.in[:i+1]...)
		c.in = c.in[i+1:]
		c.line = len(c.head)
		line := bytes.TrimRight(c.head[start:], "\r\n")
		switch {
		case len(c.head) > c.maxHead:
			c.stop()
		case start == 0 && len(line) == 0:
			c.stop() // an empty request line: net/http refuses it
		case start > 0 && len(line) == 0:
			c.endHead()
		}
	}
}

// stop hands on what is held and passes the rest untouched.
func (c *conn) stop() {
	c.out, c.head, c.line = c.head, nil, 0 // no more heads: out keeps it
	c.mode = through
	c.untracked.Store(true)
}

// endHead decides on a head whose blank line has arrived, and hands it on.
func (c *conn) endHead() {
	h := readHead(c.head)
	switch {
	case h.te && h.cl:
		c.out = h.without(c.head, true)
		c.mode = through // refused and closed: nothing after it is served
		c.untracked.Store(true)
	case h.te, h.badLength:
		c.out = h.without(c.head, false)
		c.mode = through
		c.untracked.Store(true)
	default:
		c.out = h.without(c.head, false)
		if h.length > 0 {
			c.mode, c.body = body, h.length
		}
	}
	// out may be head itself: it is reused only once out is read (step
	// runs with out empty).
	c.head, c.line = c.head[:0], 0
}

// head is what a request head says of its framing.
type head struct {
	te, cl, badLength bool
	length            int64
	marked            bool // it carries Marker itself
}

// readHead reads a whole head (request line, header lines, blank line), as
// net/http would: names are matched without regard to case; a line that
// begins with a space or tab continues the header before it (obs-fold).
func readHead(b []byte) head {
	var h head
	last := "" // the name of the header a folded line continues
	for i, raw := range lines(b) {
		line := bytes.TrimRight(raw, "\r\n")
		switch {
		case i == 0:
			continue
		case len(line) == 0:
			return h
		case line[0] == ' ' || line[0] == '\t':
			if last == "content-length" {
				h.badLength = true // net/http joins it to the value: not a number
			}
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		switch {
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			h.te, last = true, "transfer-encoding"
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if err != nil || n < 0 || h.cl && n != h.length {
				h.badLength = true // net/http refuses it
			}
			h.cl, h.length, last = true, n, "content-length"
		case bytes.EqualFold(name, []byte(Marker)):
			h.marked, last = true, ""
		default:
			last = ""
		}
	}
	return h
}

// lines yields b's lines, each with its line feed.
func lines(b []byte) func(yield func(int, []byte) bool) {
	return func(yield func(int, []byte) bool) {
		for i := 0; len(b) > 0; i++ {
			n := bytes.IndexByte(b, '\n') + 1
			if n == 0 {
				n = len(b)
			}
			if !yield(i, b[:n]) {
				return
			}
			b = b[n:]
		}
	}
}

// without returns b, the head h was read from, without the lines of Marker
// and, when ambiguous, of Transfer-Encoding (their folded lines with them),
// and then with Marker added. A head with nothing to take out or add is b.
func (h head) without(b []byte, ambiguous bool) []byte {
	if !ambiguous && !h.marked {
		return b
	}
	out := make([]byte, 0, len(b)+len(markerLine))
	dropping := false
	for i, raw := range lines(b) {
		line := bytes.TrimRight(raw, "\r\n")
		switch {
		case i == 0:
		case len(line) == 0:
			if ambiguous {
				out = append(out, markerLine...)
			}
			return append(out, raw...)
		case line[0] == ' ' || line[0] == '\t':
			if dropping {
				continue
			}
		default:
			name, _, _ := bytes.Cut(line, []byte(":"))
			dropping = bytes.EqualFold(name, []byte(Marker)) || ambiguous && bytes.EqualFold(name, []byte("Transfer-Encoding"))
			if dropping {
				continue
			}
		}
		out = append(out, raw...)
	}
	return out
}
