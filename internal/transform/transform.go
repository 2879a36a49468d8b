// Package transform shapes what a route sends: a route's transformation is a
// CEL expression over the same variables as its filter (provider, event,
// headers, payload) that yields a map with any of
//
//   - body: a map or a list, sent as JSON (application/json); or a string,
//     sent as it is with the delivery's content type. Without it the
//     delivery's own bytes and content type are sent.
//   - headers: a map of header names to strings, added to the request;
//     names hookgate sets itself (Idempotency-Key, Content-Type,
//     X-Hookgate-*, webhook-*) and the connection's own (Host,
//     Content-Length, Transfer-Encoding, Connection, Upgrade, TE, Trailer,
//     Keep-Alive, Proxy-*) are ignored.
//   - path: appended to the target's URL path ("/invoices"), its query kept.
//   - skip: true, the dispatch succeeds without a request.
//
// It is compiled when the route is, and evaluated bounded as filters are
// (package filter: a cost limit and a scan budget over the payload). The
// stored receipt is never changed: a transformation makes what one attempt
// sends, and signatures are computed over that.
package transform

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"golang.org/x/net/http/httpguts"

	"github.com/hookgate/hookgate/internal/errtext"
	"github.com/hookgate/hookgate/internal/filter"
)

// ErrInvalid means a transformation does not compile or cannot yield a map.
var ErrInvalid = errors.New("invalid transformation")

// ErrFailed means a transformation could not be evaluated on a delivery, or
// gave what cannot be sent; the attempt fails with it.
var ErrFailed = errors.New("transformation failed")

// MaxSlack bounds a transformed body: at most twice the delivery's body and
// MaxSlack (1 MiB) more.
const MaxSlack = 1 << 20

// Transform is a compiled transformation.
type Transform struct {
	expr *filter.Filter
}

// String returns its text.
func (t *Transform) String() string { return t.expr.String() }

// Compile compiles a transformation: its value must be a map (or dyn, a
// value known only when evaluated). Its errors say where in the text it
// fails.
func Compile(src string) (*Transform, error) {
	f, err := filter.CompileExpr(src, func(t *cel.Type) error {
		if t.Kind() == cel.MapKind || t.Kind() == cel.DynKind || t.Kind() == cel.AnyKind {
			return nil
		}
		return fmt.Errorf("its type is %s, not a map such as {\"body\": payload.data, \"path\": \"/invoices\"}", t)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, filter.Explain(err))
	}
	return &Transform{expr: f}, nil
}

// Result is what an attempt sends.
type Result struct {
	// Body and ContentType are sent; the delivery's own unless the
	// transformation gave a body.
	Body        []byte
	ContentType string
	// BodyChanged says the transformation gave the body.
	BodyChanged bool
	// Headers are added to the request, each name canonical.
	Headers map[string]string
	// Path is appended to the target URL's path; "" for none.
	Path string
	// Skip means no request: the dispatch succeeds.
	Skip bool
}

// keys are the names a transformation's map may hold.
var keys = []string{"body", "headers", "path", "skip"}

// Apply evaluates the transformation on a delivery (its provider, event,
// kept headers, content type and body, as filters see it). Its error wraps
// ErrFailed and says why; a transformation never changes in.Body. A nil
// Transform sends the delivery as it came.
func (t *Transform) Apply(in *filter.Input) (Result, error) {
	res := Result{Body: in.Body, ContentType: in.ContentType, Headers: map[string]string{}}
	if t == nil {
		return res, nil
	}
	err := t.expr.Eval(in, func(out ref.Val) error {
		m, ok := out.(traits.Mapper)
		if !ok {
			return fmt.Errorf("it gave %s, not a map", out.Type().TypeName())
		}
		seen := map[string]ref.Val{}
		for it := m.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			name, ok := k.Value().(string)
			if !ok || !slices.Contains(keys, name) {
				return fmt.Errorf("its map has the key %v; it may have %s", k.Value(), strings.Join(keys, ", "))
			}
			seen[name] = m.Get(k)
		}
		if v, ok := seen["body"]; ok {
			if err := res.setBody(v, len(in.Body)); err != nil {
				return err
			}
		}
		if v, ok := seen["headers"]; ok {
			if err := res.setHeaders(v); err != nil {
				return err
			}
		}
		if v, ok := seen["path"]; ok {
			p, ok := v.Value().(string)
			if !ok || v.Type() != types.StringType {
				return fmt.Errorf("path is %s, not a string", v.Type().TypeName())
			}
			if err := CheckPath(p); err != nil {
				return err
			}
			res.Path = p
		}
		if v, ok := seen["skip"]; ok {
			b, ok := v.Value().(bool)
			if !ok {
				return fmt.Errorf("skip is %s, not a bool", v.Type().TypeName())
			}
			res.Skip = b
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return res, nil
}

// setBody sets the body a transformation gave: a string as it is, anything
// else as JSON.
func (r *Result) setBody(v ref.Val, size int) error {
	_, isMap := v.(traits.Mapper)
	_, isList := v.(traits.Lister)
	if s, ok := v.(types.String); ok {
		r.Body = []byte(string(s))
	} else if !isMap && !isList {
		return fmt.Errorf("body is %s: give a map or a list (sent as JSON) or a string (sent as it is)", v.Type().TypeName())
	} else {
		var b strings.Builder
		if err := writeJSON(&b, v); err != nil {
			return fmt.Errorf("body: %w", err)
		}
		r.Body, r.ContentType = []byte(b.String()), "application/json"
	}
	if limit := 2*size + MaxSlack; len(r.Body) > limit {
		return fmt.Errorf("body: %d bytes, more than a transformation may send (%d)", len(r.Body), limit)
	}
	r.BodyChanged = true
	return nil
}

// writeJSON writes a CEL value as JSON: a value of the payload as its own
// text, a map's keys sorted.
func writeJSON(b *strings.Builder, v ref.Val) error {
	if raw, ok := filter.RawJSON(v); ok {
		b.WriteString(raw)
		return nil
	}
	if b.Len() > 64<<20 {
		return errors.New("too large")
	}
	switch x := v.(type) {
	case types.Null:
		b.WriteString("null")
	case types.Bool, types.Int, types.Uint, types.String:
		j, _ := json.Marshal(x.Value())
		b.Write(j)
	case types.Double:
		j, err := json.Marshal(float64(x))
		if err != nil {
			return fmt.Errorf("a number JSON cannot hold: %v", float64(x))
		}
		b.Write(j)
	case traits.Mapper:
		var names []string
		vals := map[string]ref.Val{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			name, ok := k.Value().(string)
			if !ok {
				return fmt.Errorf("a map key %v is not a string", k.Value())
			}
			names, vals[name] = append(names, name), x.Get(k)
		}
		sort.Strings(names)
		b.WriteByte('{')
		for i, name := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			j, _ := json.Marshal(name)
			b.Write(j)
			b.WriteByte(':')
			if err := writeJSON(b, vals[name]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case traits.Lister:
		b.WriteByte('[')
		for i, it := 0, x.Iterator(); it.HasNext() == types.True; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, it.Next()); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case *types.Err:
		return x
	default:
		return fmt.Errorf("a %s has no JSON form (make it a string)", v.Type().TypeName())
	}
	return nil
}

// setHeaders adds the headers a transformation gave, but those it may not
// set.
func (r *Result) setHeaders(v ref.Val) error {
	m, ok := v.(traits.Mapper)
	if !ok {
		return fmt.Errorf("headers is %s, not a map of names to strings", v.Type().TypeName())
	}
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		name, ok := k.Value().(string)
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("headers: %v is not a header name", k.Value())
		}
		val, ok := m.Get(k).(types.String)
		if !ok || !httpguts.ValidHeaderFieldValue(string(val)) {
			return fmt.Errorf("headers: %s must be a string a header can hold", name)
		}
		if Reserved(name) {
			continue
		}
		r.Headers[http.CanonicalHeaderKey(name)] = string(val)
	}
	return nil
}

// Reserved reports whether a transformation's header is ignored: hookgate
// sets it itself, or it belongs to the connection.
func Reserved(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "idempotency-key", "content-type", "host", "content-length", "transfer-encoding", "connection", "upgrade",
		"te", "trailer", "keep-alive", "user-agent", "traceparent", "tracestate":
		return true
	}
	return strings.HasPrefix(n, "x-hookgate-") || strings.HasPrefix(n, "webhook-") || strings.HasPrefix(n, "svix-") || strings.HasPrefix(n, "proxy-")
}

// CheckPath checks a path a transformation appends to a target: it starts
// with /, and holds no query, fragment, "." or ".." segment, or control
// character.
func CheckPath(p string) error {
	if p == "" {
		return nil
	}
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#\\") || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("path %q must start with / and hold no ?, # or \\", errtext.Excerpt(p, 80))
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if u, err := url.PathUnescape(seg); err != nil || u == "." || u == ".." {
			return fmt.Errorf("path %q may not hold a . or .. segment or a bad %% escape", errtext.Excerpt(p, 80))
		}
	}
	return nil
}

// Target returns the target URL with the path (checked by CheckPath)
// appended to its path, its query kept.
func Target(target, path string) (string, error) {
	if path == "" {
		return target, nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", err
	}
	var segs []string
	for seg := range strings.SplitSeq(path[1:], "/") {
		s, err := url.PathUnescape(seg)
		if err != nil {
			return "", err
		}
		segs = append(segs, s)
	}
	return u.JoinPath(segs...).String(), nil
}

// Position is where in a transformation's text a compile error is.
type Position struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// linePosition is where Compile's errors say they are (filter.Explain).
var linePosition = regexp.MustCompile(`line (\d+), column (\d+):`)

// PositionOf returns where the first error of a failed Compile is, nil when
// it names no place (a limit of the whole expression, or not a compile
// error).
func PositionOf(err error) *Position {
	if !errors.Is(err, ErrInvalid) {
		return nil
	}
	m := linePosition.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	if line < 1 {
		return nil
	}
	return &Position{Line: line, Column: col}
}
