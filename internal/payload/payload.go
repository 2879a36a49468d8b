// Package payload reads a webhook's JSON payload where it lies, without
// building a tree of it: what a delivery costs in memory follows its bytes,
// whatever their shape. A body is checked once (one JSON object, well formed,
// nested at most MaxDepth levels, holding at most MaxValues values), and
// then its fields are found by scanning the bytes (github.com/tidwall/gjson),
// each read allocating only the value it returns.
//
// Fields are matched by their exact names; of a key given twice, the first
// counts, for every reader (the delivery's id and event, its order fields,
// route filters).
package payload

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
)

// MaxDepth is how deeply a payload may nest objects and arrays.
const MaxDepth = 300

// MaxValues is the most JSON values a payload may hold (4 Mi, far above real
// payloads: a push of 2,048 commits holds about 100,000). It bounds whatever
// is kept per value (a filter's index of a list), never the bytes a payload
// may have; those are bounded by GATEWAY_MAX_BODY_BYTES.
const MaxValues = 4 << 20

// Errors of Check. Each says what the payload must be.
var (
	ErrNotObject = errors.New("the payload must be a JSON object")
	ErrInvalid   = errors.New("the payload is not valid JSON")
	ErrTooDeep   = fmt.Errorf("the payload is nested more than %d levels deep", MaxDepth)
	ErrTooMany   = fmt.Errorf("the payload holds more than %d JSON values", MaxValues)
)

// Check reports whether body is one well-formed JSON object within MaxDepth
// and MaxValues. It allocates nothing: one pass counts depth and values,
// skipping strings, and only a body within both limits is validated (whose
// validator recurses once per level).
func Check(body []byte) error {
	i := 0
	for i < len(body) && isSpace(body[i]) {
		i++
	}
	if i == len(body) || body[i] != '{' {
		return ErrNotObject
	}
	depth, values := 0, 1
	for ; i < len(body); i++ {
		switch body[i] {
		case '"':
			i = stringEnd(body, i+1)
		case '{', '[':
			if depth++; depth > MaxDepth {
				return ErrTooDeep
			}
			if values++; values > MaxValues {
				return ErrTooMany
			}
		case '}', ']':
			depth--
		case ',':
			// Every value but a container's first follows a comma: commas
			// plus containers bound the count from above.
			if values++; values > MaxValues {
				return ErrTooMany
			}
		}
	}
	if !gjson.ValidBytes(body) {
		return ErrInvalid
	}
	return nil
}

// stringEnd returns the index of the quote that ends the string whose
// contents start at i (len(body) when none does): the next quote preceded by
// an even number of backslashes. It jumps from quote to quote, so a string
// costs a memchr of its bytes, not a loop over them.
func stringEnd(body []byte, i int) int {
	for {
		j := bytes.IndexByte(body[i:], '"')
		if j < 0 {
			return len(body)
		}
		q := i + j
		n := 0 // backslashes right before the quote
		for k := q - 1; k >= i && body[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// Object is a checked payload, read in place.
type Object struct{ raw string }

// Of returns the payload of body, which Check accepted. The Object reads body
// where it lies, so body must not change while the Object is in use.
func Of(body []byte) Object {
	return Object{raw: unsafe.String(unsafe.SliceData(body), len(body))}
}

// Parse is Check, then Of.
func Parse(body []byte) (Object, error) {
	if err := Check(body); err != nil {
		return Object{}, err
	}
	return Of(body), nil
}

// Root is the whole object as a Value.
func (o Object) Root() Value { return Value{r: gjson.Result{Type: gjson.JSON, Raw: o.raw}} }

// Get returns the value at the path of names, each a key of an object (a
// decimal number is also an index of an array); an absent Value when there
// is none.
func (o Object) Get(names ...string) Value {
	return Value{r: get(o.Root().r, names...)}
}

// get follows names from r, each name matched exactly (escaped for gjson's
// path syntax).
func get(r gjson.Result, names ...string) gjson.Result {
	for _, name := range names {
		if !r.IsObject() && !r.IsArray() {
			return gjson.Result{}
		}
		r = gjson.Get(r.Raw, gjson.Escape(name))
	}
	return r
}

// Value is one JSON value of a payload, or an absent one.
type Value struct{ r gjson.Result }

// Result is the value as gjson reads it: for package filter's view.
func (v Value) Result() gjson.Result { return v.r }

// Text returns a JSON string's value, or "" when v is absent or no string.
func (v Value) Text() string {
	if v.r.Type != gjson.String {
		return ""
	}
	return v.r.Str
}

// Number returns a JSON number's text as written, or "" when v is absent or
// no number.
func (v Value) Number() string {
	if v.r.Type != gjson.Number {
		return ""
	}
	return v.r.Raw
}

// ID returns a JSON id, a string or an integer, as text; "" when it is
// neither (a number that is no 64-bit integer included).
func (v Value) ID() string {
	if n := v.Number(); n != "" {
		if _, err := strconv.ParseInt(n, 10, 64); err != nil {
			return ""
		}
		return n
	}
	return v.Text()
}

// maxUnixTime is the last second of the year 9999.
const maxUnixTime = 253402300799

// Time reads a JSON time that is either RFC 3339 text or unix seconds, in
// UTC. A time outside the years 1-9999 (which PostgreSQL and JSON cannot
// both hold) is the zero time, as is any other value.
func (v Value) Time() time.Time {
	var t time.Time
	if s := v.Text(); s != "" {
		parsed, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}
		}
		t = parsed.UTC()
	} else {
		sec, err := strconv.ParseInt(v.Number(), 10, 64)
		if err != nil || sec <= 0 || sec > maxUnixTime {
			return time.Time{}
		}
		t = time.Unix(sec, 0).UTC()
	}
	if !Storable(t) {
		return time.Time{}
	}
	return t
}

// Storable reports whether t, in UTC, falls in the years JSON and
// PostgreSQL both take: 1 to 9999.
func Storable(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 1 && y <= 9999
}
