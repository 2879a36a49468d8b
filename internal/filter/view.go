package filter

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/tidwall/gjson"
)

// MaxString is the longest payload string a filter reads, in bytes (256 KiB:
// a GitHub issue or pull request body, 65,536 characters, fits). A filter
// that reads a longer one fails on that delivery (false, counted, logged):
// CEL charges a call such as split, replace or matches only after it ran, so
// what a single call may scan is bounded by what the filter can read.
const MaxString = 256 << 10

// A filter sees the payload through a view over its bytes: an object or an
// array is read only where the filter looks, and only the values it reaches
// are made into CEL values. What a filter costs in memory follows what it
// reads, never the payload's shape.

// value turns one JSON value into what CEL reads: a view of an object or an
// array, a string, an integer (exact, so ids past 2^53 compare as written), a
// double, a bool or null.
func value(r gjson.Result) ref.Val {
	switch r.Type {
	case gjson.String:
		if len(r.Str) > MaxString {
			return types.NewErr("a payload string of %d bytes is longer than filters read (%d)", len(r.Str), MaxString)
		}
		return types.String(r.Str)
	case gjson.Number:
		if i, err := strconv.ParseInt(r.Raw, 10, 64); err == nil {
			return types.Int(i)
		}
		if u, err := strconv.ParseUint(r.Raw, 10, 64); err == nil {
			return types.Uint(u)
		}
		f, err := strconv.ParseFloat(r.Raw, 64)
		if err != nil && math.IsInf(f, 0) {
			return types.NullValue
		}
		return types.Double(f)
	case gjson.True:
		return types.True
	case gjson.False:
		return types.False
	case gjson.JSON:
		r.Index = 0 // offsets of what it holds are counted from its own start
		if r.IsArray() {
			return &list{r: r}
		}
		return &object{r: r}
	}
	return types.NullValue
}

// object is a JSON object's view: a traits.Mapper whose keys are strings.
type object struct {
	r gjson.Result
	// keys are its distinct keys in order, found when first needed (for
	// size, iteration and equality; a field read needs none).
	keys []string
}

var (
	_ traits.Mapper = (*object)(nil)
	_ traits.Lister = (*list)(nil)
)

// Find implements traits.Mapper: the first value of the key.
func (o *object) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	r := o.r.Get(gjson.Escape(string(k)))
	if !r.Exists() {
		return nil, false
	}
	return value(r), true
}

// Get implements traits.Indexer.
func (o *object) Get(key ref.Val) ref.Val {
	if v, ok := o.Find(key); ok {
		return v
	}
	return types.NewErr("no such key: %v", key)
}

// Contains implements traits.Container.
func (o *object) Contains(key ref.Val) ref.Val {
	_, ok := o.Find(key)
	return types.Bool(ok)
}

func (o *object) distinct() []string {
	if o.keys == nil {
		seen := map[string]struct{}{}
		o.keys = []string{}
		o.r.ForEach(func(k, _ gjson.Result) bool {
			if _, dup := seen[k.Str]; !dup {
				seen[k.Str] = struct{}{}
				o.keys = append(o.keys, k.Str)
			}
			return true
		})
	}
	return o.keys
}

// Size implements traits.Sizer.
func (o *object) Size() ref.Val { return types.Int(len(o.distinct())) }

// Iterator implements traits.Iterable: the keys.
func (o *object) Iterator() traits.Iterator {
	keys := o.distinct()
	return &iterator{n: len(keys), at: func(i int) ref.Val { return types.String(keys[i]) }}
}

// Equal implements ref.Val as CEL's own maps do.
func (o *object) Equal(other ref.Val) ref.Val {
	m, ok := other.(traits.Mapper)
	if !ok || o.Size() != m.Size() {
		return types.False
	}
	for _, k := range o.distinct() {
		mine, _ := o.Find(types.String(k))
		theirs, found := m.Find(types.String(k))
		if !found || types.Equal(mine, theirs) != types.True {
			return types.False
		}
	}
	return types.True
}

// ConvertToNative implements ref.Val by decoding the object's bytes: a
// bounded copy, since the payload's values are bounded.
func (o *object) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return native(o.r.Raw, typeDesc)
}

// ConvertToType implements ref.Val.
func (o *object) ConvertToType(t ref.Type) ref.Val { return convertTo(o, t) }

// Type implements ref.Val.
func (o *object) Type() ref.Type { return types.MapType }

// Value implements ref.Val: the object's JSON text.
func (o *object) Value() any { return o.r.Raw }

// list is a JSON array's view: a traits.Lister. Its elements are found once,
// when first needed, as the offsets where they start (4 bytes an element, so
// at most 2 bytes per byte of the densest array, [0,0,...]); an element ends
// where the next begins, less the comma and white space between them.
type list struct {
	r      gjson.Result
	starts []uint32
	found  bool
}

func (l *list) index() []uint32 {
	if !l.found {
		l.found = true
		n := 0
		l.r.ForEach(func(_, _ gjson.Result) bool { n++; return true })
		l.starts = make([]uint32, 0, n)
		l.r.ForEach(func(_, v gjson.Result) bool {
			l.starts = append(l.starts, uint32(v.Index))
			return true
		})
	}
	return l.starts
}

func (l *list) at(i int) ref.Val {
	starts := l.index()
	end := strings.LastIndexByte(l.r.Raw, ']')
	if i+1 < len(starts) {
		end = int(starts[i+1])
	}
	return value(gjson.Parse(strings.TrimRight(l.r.Raw[starts[i]:end], " \t\r\n,")))
}

// Size implements traits.Sizer.
func (l *list) Size() ref.Val { return types.Int(len(l.index())) }

// Get implements traits.Indexer.
func (l *list) Get(index ref.Val) ref.Val {
	i, err := types.GetOrError(index)
	if err != nil {
		return types.ValOrErr(index, "%v", err)
	}
	if i < 0 || i >= len(l.index()) {
		return types.NewErr("index out of range: %d", i)
	}
	return l.at(i)
}

// Contains implements traits.Container.
func (l *list) Contains(elem ref.Val) ref.Val {
	for i := range l.index() {
		if elem.Equal(l.at(i)) == types.True {
			return types.True
		}
	}
	return types.False
}

// Iterator implements traits.Iterable.
func (l *list) Iterator() traits.Iterator { return &iterator{n: len(l.index()), at: l.at} }

// Add implements traits.Adder: list concatenation, made of the elements.
func (l *list) Add(other ref.Val) ref.Val {
	elems := make([]ref.Val, len(l.index()))
	for i := range elems {
		elems[i] = l.at(i)
	}
	return types.NewRefValList(types.DefaultTypeAdapter, elems).Add(other)
}

// Equal implements ref.Val as CEL's own lists do.
func (l *list) Equal(other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok || l.Size() != o.Size() {
		return types.False
	}
	for i := range l.index() {
		if types.Equal(l.at(i), o.Get(types.Int(i))) != types.True {
			return types.False
		}
	}
	return types.True
}

// ConvertToNative implements ref.Val, as object's does.
func (l *list) ConvertToNative(typeDesc reflect.Type) (any, error) { return native(l.r.Raw, typeDesc) }

// ConvertToType implements ref.Val.
func (l *list) ConvertToType(t ref.Type) ref.Val { return convertTo(l, t) }

// convertTo is a view's ConvertToType: to its own type it is itself, to
// type its type, to nothing else.
func convertTo(v ref.Val, t ref.Type) ref.Val {
	switch t {
	case v.Type():
		return v
	case types.TypeType:
		return v.Type().(ref.Val)
	}
	return types.NewErr("type conversion error from %s to '%s'", v.Type().TypeName(), t)
}

// Type implements ref.Val.
func (l *list) Type() ref.Type { return types.ListType }

// Value implements ref.Val: the array's JSON text.
func (l *list) Value() any { return l.r.Raw }

// native decodes JSON text into a new value of typeDesc.
func native(raw string, typeDesc reflect.Type) (any, error) {
	v := reflect.New(typeDesc)
	if err := json.Unmarshal([]byte(raw), v.Interface()); err != nil {
		return nil, fmt.Errorf("payload value as %v: %w", typeDesc, err)
	}
	return v.Elem().Interface(), nil
}

// iterator walks n elements, made by at when reached.
type iterator struct {
	n, i int
	at   func(int) ref.Val
}

func (it *iterator) HasNext() ref.Val { return types.Bool(it.i < it.n) }

func (it *iterator) Next() ref.Val {
	if it.i >= it.n {
		return nil
	}
	it.i++
	return it.at(it.i - 1)
}

func (it *iterator) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("an iterator has no native value")
}
func (it *iterator) ConvertToType(ref.Type) ref.Val {
	return types.NewErr("an iterator converts to nothing")
}
func (it *iterator) Equal(ref.Val) ref.Val { return types.False }
func (it *iterator) Type() ref.Type        { return types.IteratorType }
func (it *iterator) Value() any            { return nil }
