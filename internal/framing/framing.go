// Package framing follows how each HTTP/1.x request on a connection says
// where its body ends, by reading the request heads as their bytes arrive,
// before net/http parses them. net/http serves a request that carries both
// Transfer-Encoding and Content-Length by dropping the Content-Length, and
// keeps the connection open; RFC 9112 §6.3 says such a message "ought to be
// handled as an error" and that the server "MUST close the connection after
// responding", since a proxy in front may have framed it by the other header
// (request smuggling). net/http does not tell a handler that the header was
// there, so a listener from Listen records it per connection, and Of tells
// the handler.
//
// Only heads are read, and a body only counted through, until the framing
// cannot be followed without decoding it (a chunked body) or a head is not
// one to follow (folded header lines, one too large): from then on the
// connection is Untracked, and must be closed after its answer.
package framing

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
)

// Framing is what a connection's requests so far say of their framing.
type Framing int32

// The framings Of reports.
const (
	// Followed: every request so far said where its body ends one way only.
	Followed Framing = iota
	// Untracked: a request's body could not be counted through (a chunked
	// body, a folded or oversized head): the connection's later requests
	// cannot be followed, so it is closed after its answer.
	Untracked
	// Ambiguous: a request carried both Transfer-Encoding and
	// Content-Length: it is refused and the connection closed.
	Ambiguous
)

// maxHead bounds the head that is followed: past it net/http refuses the
// request (MaxHeaderBytes, plus its own slack), and the connection is
// Untracked.
const maxHead = 1 << 20

// Listen returns ln with each accepted connection followed (see the package
// documentation); serve with ConnContext so that Of finds it.
func Listen(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, first: true}, nil
}

type connKey struct{}

// ConnContext is for http.Server's ConnContext: it puts a followed
// connection where Of finds it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// Of returns what the framing of r's connection is, as far as its bytes
// have arrived (a request's head has, by the time it is served).
// A request that did not come through Listen and ConnContext is Followed.
func Of(r *http.Request) Framing {
	c, _ := r.Context().Value(connKey{}).(*conn)
	if c == nil {
		return Followed
	}
	return Framing(c.framing.Load())
}

// conn follows the requests read from it. Read is never called by two
// goroutines at once (net/http reads a connection from one at a time); Of
// reads only the framing.
type conn struct {
	net.Conn
	framing atomic.Int32

	body    int64 // bytes of the current body still to count through
	inBody  bool
	first   bool // the next line is a request line
	head    int  // bytes of the current head so far
	line    []byte
	long    bool // the current line is longer than is kept
	cl, te  bool // the current head's Content-Length and Transfer-Encoding
	length  int64
	badSize bool // a Content-Length net/http refuses
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.framing.Load() == int32(Followed) {
		c.scan(p[:n])
	}
	return n, err
}

// keepLine is how much of a line is kept: enough for a header's name and a
// Content-Length's value.
const keepLine = 128

// scan follows b, the next bytes of the connection.
func (c *conn) scan(b []byte) {
	for len(b) > 0 && c.framing.Load() == int32(Followed) {
		if c.inBody {
			k := min(int64(len(b)), c.body)
			c.body -= k
			b = b[k:]
			if c.body == 0 {
				c.inBody = false
			}
			continue
		}
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		c.head += len(part)
		if len(c.line)+len(part) <= keepLine {
			c.line = append(c.line, part...)
		} else {
			c.long = true
		}
		if c.head > maxHead {
			c.stop(Untracked)
			return
		}
		if i < 0 {
			return
		}
		b = b[i+1:]
		c.head++
		c.endLine()
	}
}

// endLine reads the line just ended.
func (c *conn) endLine() {
	line := bytes.TrimSuffix(c.line, []byte("\r"))
	long := c.long
	c.line, c.long = c.line[:0], false
	switch {
	case c.first:
		if len(line) == 0 || long {
			// net/http refuses it and closes the connection; nothing
			// more to follow.
			c.stop(Untracked)
			return
		}
		c.first = false
	case len(line) == 0:
		c.endHead()
	case line[0] == ' ' || line[0] == '\t':
		c.stop(Untracked) // a folded line: its value joins the one before
	default:
		name, value, _ := bytes.Cut(line, []byte(":"))
		switch {
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			c.te = true
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if long || err != nil || n < 0 || c.cl && n != c.length {
				c.badSize = true // net/http refuses it
			}
			c.cl, c.length = true, n
		}
	}
}

// endHead decides on a head whose blank line has arrived.
func (c *conn) endHead() {
	switch {
	case c.te && c.cl:
		c.stop(Ambiguous)
		return
	case c.te, c.badSize:
		c.stop(Untracked)
		return
	}
	if c.cl && c.length > 0 {
		c.inBody, c.body = true, c.length
	}
	c.first, c.head, c.cl, c.te, c.length = true, 0, false, false, 0
}

func (c *conn) stop(f Framing) {
	c.framing.Store(int32(f))
	c.line = nil
}
