package filter

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"reflect"
	"strconv"
	"strings"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/tidwall/gjson"

	"github.com/hookgate/hookgate/internal/payload"
)

// MaxString is the longest payload string a filter reads, in bytes (256 KiB:
// a GitHub issue or pull request body, 65,536 characters, fits). A filter
// that reads a longer one fails on that delivery (false, counted, logged):
// CEL charges a call such as split, replace or matches only after it ran, so
// what a single call may scan is bounded by what the filter can read.
const MaxString = 256 << 10

// A filter sees the payload through a view over its bytes: an object or an
// array is read only where the filter looks, and only the values it reaches
// are made into CEL values. What a filter costs follows what it reads, never
// the payload's shape:
//
//   - in time: CEL charges a constant per step, whatever the step scans, so
//     the view charges its own scans (a key looked up, an array or object
//     indexed, a string decoded, a number parsed) in bytes against the
//     evaluation's scan budget (ScanPerByte bytes per payload byte and
//     ScanSlack more), and remembers the values it made, so that a field read
//     in a loop is scanned for once;
//   - in memory: an array's index is 4 bytes an element and an object's 4
//     bytes a key (each value is in one index, and takes at least 2 payload
//     bytes: at most 2 bytes per payload byte); an object's table of keys by
//     hash and the values remembered are kept only within that allowance,
//     2 bytes per payload byte and keepSlack more for a small payload.

// keepSlack is what a view may keep beyond 2 bytes per payload byte, so that
// the few fields a filter reads on a small payload are remembered too.
const keepSlack = 64 << 10

// entryBytes is what remembering one value costs, counted generously: its
// slot in a map (which doubles as it grows) and the view of an object or an
// array it holds.
const entryBytes = 160

// scope is what the views of one payload share: the values they made and
// remember, what they may still keep, and the scan budget of the evaluation
// under way. One evaluation reads it at a time (Input's lock).
type scope struct {
	size int // the payload's bytes
	keep int // bytes the view may still keep; below 0, it remembers nothing more

	fields map[field]ref.Val // an object's key: its value, nil when absent
	elems  map[elem]ref.Val  // an array's element (strings and views only)

	left    int                     // bytes the evaluation may still scan
	over    bool                    // the evaluation's budget ran out
	ctx     context.Context         // the evaluation's (see begin)
	cancel  context.CancelCauseFunc // ends ctx
	limit   *types.Err              // what a read past the budget gives, made when first needed
	seed    maphash.Seed
	scanned int64 // bytes scanned by every evaluation, for tests
}

type field struct {
	o   *object
	key string
}

type elem struct {
	l *list
	i int
}

// view returns the view of a payload's JSON text, one object.
func view(raw string) *object {
	s := &scope{size: len(raw), keep: 2*len(raw) + keepSlack, seed: maphash.MakeSeed()}
	s.left = s.budget()
	return &object{s: s, raw: raw}
}

func (s *scope) budget() int { return ScanPerByte*s.size + ScanSlack }

// failure says why an evaluation past its budget is false.
func (s *scope) failure() error {
	return fmt.Errorf("%w: the filter scanned more than %d bytes of a %d-byte payload", ErrScanLimit, s.budget(), s.size)
}

// begin starts an evaluation with a new scan budget. For a filter that
// loops, it returns the context to evaluate it under: done when the budget
// runs out, which CEL checks between a comprehension's steps
// (InterruptCheckFrequency); made once per payload, and again only after it
// was done.
func (s *scope) begin(loops bool) context.Context {
	if loops && (s.ctx == nil || s.over) {
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
	}
	s.left, s.over = s.budget(), false
	return s.ctx
}

// scan charges n bytes scanned and reports whether the budget held.
func (s *scope) scan(n int) bool {
	s.scanned += int64(n)
	if s.over {
		return false
	}
	if s.left -= n; s.left < 0 {
		s.over = true
		if s.cancel != nil {
			s.cancel(ErrScanLimit)
		}
		s.limit = types.WrapErr(s.failure()).(*types.Err)
		return false
	}
	return true
}

// outOfRange is what reading past an index gives: past the scan budget,
// the index is not built.
func (s *scope) outOfRange(i int) ref.Val {
	if s.over {
		return s.limit
	}
	return types.NewErr("index out of range: %d", i)
}

// hold counts n bytes kept for an index. Past the allowance the view forgets
// what it remembered, so that what it keeps stays within it.
func (s *scope) hold(n int) {
	if s.keep -= n; s.keep < 0 {
		s.fields, s.elems = nil, nil
	}
}

// remembers reports whether the view may keep one more value (v, under a key
// of extra bytes), and counts what it costs when it may.
func (s *scope) remembers(v ref.Val, extra int) bool {
	n := entryBytes + extra
	if str, ok := v.(types.String); ok && len(str) > 0 {
		n += len(str) // a decoded string is its own copy; a plain one shares the payload's bytes, counted anyway
	}
	if s.keep < n {
		return false
	}
	s.keep -= n
	return true
}

// make turns one JSON value, as gjson found it, into what CEL reads: a view
// of an object or an array, a string, an integer (exact, so ids past 2^53
// compare as written), a double, a bool or null.
func (s *scope) make(r gjson.Result) ref.Val {
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
		if r.IsArray() {
			return &list{s: s, raw: r.Raw}
		}
		return &object{s: s, raw: r.Raw}
	}
	return types.NullValue
}

// worthKeeping reports whether an array's element costs more to make again
// than to remember: a string (decoded) or a view (which keeps its index). A
// number is parsed again, charged by its length. (A field is remembered
// whatever it is: finding it is what costs.)
func worthKeeping(v ref.Val) bool {
	switch v.(type) {
	case types.String, *object, *list, *types.Err:
		return true
	}
	return false
}

// object is a JSON object's view: a traits.Mapper whose keys are strings.
type object struct {
	s   *scope
	raw string // its JSON text
	// keys are the offsets in raw of its distinct keys, in order, found when
	// first needed (for size, iteration and equality; a field read needs
	// none).
	keys    []uint32
	table   []uint32 // its keys by hash, when kept (see index)
	indexed bool
	looked  int // bytes its lookups scanned before it was indexed
}

var (
	_ traits.Mapper = (*object)(nil)
	_ traits.Lister = (*list)(nil)
)

// Find implements traits.Mapper: the first value of the key. A key once
// found, or found absent, is not looked for again. An object looked up in
// more than twice its bytes is indexed, its keys found by their hash from
// then on, so that a filter looking up many keys scans it a few times, not
// once a key.
func (o *object) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	f := field{o, string(k)}
	if v, ok := o.s.fields[f]; ok {
		return v, v != nil
	}
	if !o.indexed && o.looked > 2*len(o.raw) {
		o.index()
	}
	if o.s.over {
		return o.s.limit, true
	}
	var r gjson.Result
	var scanned int
	if o.table != nil {
		r, scanned = o.probe(string(k))
	} else {
		r = gjson.Get(o.raw, gjson.Escape(string(k)))
		scanned = len(o.raw)
		if r.Exists() {
			scanned = r.Index + len(r.Raw)
		}
		o.looked += scanned
	}
	if !o.s.scan(scanned) {
		return o.s.limit, true
	}
	var v ref.Val
	if r.Exists() {
		v = o.s.make(r)
	}
	if o.s.remembers(v, len(k)) {
		if o.s.fields == nil {
			o.s.fields = map[field]ref.Val{}
		}
		o.s.fields[f] = v
	}
	return v, v != nil
}

// probe finds a key by its hash, in an indexed object, and returns its
// value and the bytes it scanned.
func (o *object) probe(name string) (gjson.Result, int) {
	_, found, entry, scanned := o.slot(o.table, o.keys, name)
	if !found {
		return gjson.Result{}, scanned
	}
	at := int(o.keys[entry&(1<<idxBits-1)-1])
	i := skipSpace(o.raw, stringEnd(o.raw, at+1))
	i = skipSpace(o.raw, i+1) // past the colon
	end := valueEnd(o.raw, i)
	return gjson.Parse(o.raw[i:end]), scanned + end - at
}

// A table's slot holds an index in keys plus one (0 is a free slot) in its
// low idxBits, and the key's hash's top bits above them, so that a probe
// compares only the keys whose hash nearly matches. An object holds at most
// payload.MaxValues keys, which fit.
const idxBits = 23

const _ = uint(1<<idxBits - 1 - payload.MaxValues) // fails to compile if MaxValues outgrows idxBits

// slot returns where name is in table, or the free slot where it belongs,
// the entry for it there, and the bytes of the keys it compared.
func (o *object) slot(table, keys []uint32, name string) (j int, found bool, entry uint32, scanned int) {
	h := maphash.String(o.s.seed, name)
	tag := uint32(h>>(64-(32-idxBits))) << idxBits
	mask := len(table) - 1
	for j = int(h) & mask; table[j] != 0; j = (j + 1) & mask {
		if table[j]&^(1<<idxBits-1) != tag {
			continue
		}
		k := o.keyText(keys[table[j]&(1<<idxBits-1)-1])
		if scanned += len(k); k == name {
			return j, true, table[j], scanned
		}
	}
	return j, false, tag | uint32(len(keys)+1), scanned
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
	if _, ok := o.Find(key); !o.s.over {
		return types.Bool(ok)
	}
	return o.s.limit
}

// index returns the offsets of the object's distinct keys (the first of a
// key given twice), building them once: 4 bytes a key, and a table of 4
// bytes a slot (1.5 to 3 a key) to find the keys given twice, kept to find
// keys by when the view may keep it. Past the scan budget it returns none.
func (o *object) index() []uint32 {
	if o.indexed || !o.s.scan(2*len(o.raw)) {
		return o.keys
	}
	n := 0
	walk(o.raw, func(int, int) { n++ })
	keys := make([]uint32, 0, n)
	slots := 1
	for slots < n+n/2+1 {
		slots <<= 1
	}
	table := make([]uint32, slots)
	walk(o.raw, func(at, _ int) {
		if j, found, entry, _ := o.slot(table, keys, o.keyText(uint32(at))); !found {
			table[j] = entry
			keys = append(keys, uint32(at))
		}
	})
	o.keys, o.indexed = keys, true
	o.s.hold(4 * cap(keys))
	if o.s.keep >= 4*len(table) {
		o.table = table
		o.s.hold(4 * len(table))
	}
	return keys
}

// keyText is the key whose quoted text starts at offset at, decoded only
// when it holds an escape.
func (o *object) keyText(at uint32) string {
	end := stringEnd(o.raw, int(at)+1)
	if k := o.raw[at+1 : end-1]; strings.IndexByte(k, '\\') < 0 {
		return k
	}
	return gjson.Parse(o.raw[at:end]).Str
}

// key is the i-th distinct key as CEL reads it.
func (o *object) key(i int) ref.Val {
	keys := o.index()
	if i >= len(keys) {
		return o.s.outOfRange(i)
	}
	if !o.s.scan(len(o.raw[keys[i]:stringEnd(o.raw, int(keys[i])+1)])) {
		return o.s.limit
	}
	return types.String(o.keyText(keys[i]))
}

// Size implements traits.Sizer. Past the scan budget it is 0; the
// evaluation is then stopped and its result not used.
func (o *object) Size() ref.Val { return types.Int(len(o.index())) }

// Iterator implements traits.Iterable: the keys, each made a CEL string
// when reached.
func (o *object) Iterator() traits.Iterator {
	return &iterator{n: len(o.index()), at: o.key}
}

// Equal implements ref.Val as CEL's own maps do.
func (o *object) Equal(other ref.Val) ref.Val {
	m, ok := other.(traits.Mapper)
	if !ok || o.Size() != m.Size() {
		return types.False
	}
	for i := range o.index() {
		k := o.key(i)
		mine, _ := o.Find(k)
		theirs, found := m.Find(k)
		if o.s.over {
			return o.s.limit
		}
		if !found || types.Equal(mine, theirs) != types.True {
			return types.False
		}
	}
	return types.True
}

// ConvertToNative implements ref.Val by decoding the object's bytes: a
// bounded copy, since the payload's values are bounded.
func (o *object) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return native(o.s, o.raw, typeDesc)
}

// ConvertToType implements ref.Val.
func (o *object) ConvertToType(t ref.Type) ref.Val { return convertTo(o, t) }

// Type implements ref.Val.
func (o *object) Type() ref.Type { return types.MapType }

// Value implements ref.Val: the object's JSON text.
func (o *object) Value() any { return o.raw }

// list is a JSON array's view: a traits.Lister. Its elements are found once,
// when first needed, as the offsets where they start (4 bytes an element, so
// at most 2 bytes per byte of the densest array, [0,0,...]); an element ends
// where the next begins, less the comma and white space between them.
type list struct {
	s       *scope
	raw     string // its JSON text
	starts  []uint32
	indexed bool
}

// index returns the offsets of the elements, building them once. Past the
// scan budget it returns none.
func (l *list) index() []uint32 {
	if l.indexed || !l.s.scan(2*len(l.raw)) {
		return l.starts
	}
	n := 0
	walk(l.raw, func(int, int) { n++ })
	starts := make([]uint32, 0, n)
	walk(l.raw, func(_, at int) { starts = append(starts, uint32(at)) })
	l.starts, l.indexed = starts, true
	l.s.hold(4 * cap(starts))
	return starts
}

// at is the i-th element, made once when it is a string or a view.
func (l *list) at(i int) ref.Val {
	e := elem{l, i}
	if v, ok := l.s.elems[e]; ok {
		return v
	}
	starts := l.index()
	if i >= len(starts) {
		return l.s.outOfRange(i)
	}
	end := strings.LastIndexByte(l.raw, ']')
	if i+1 < len(starts) {
		end = int(starts[i+1])
	}
	raw := strings.TrimRight(l.raw[starts[i]:end], " \t\r\n,")
	if raw[0] != '{' && raw[0] != '[' && !l.s.scan(len(raw)) {
		return l.s.limit
	}
	v := l.s.make(gjson.Parse(raw))
	if worthKeeping(v) && l.s.remembers(v, 0) {
		if l.s.elems == nil {
			l.s.elems = map[elem]ref.Val{}
		}
		l.s.elems[e] = v
	}
	return v
}

// Size implements traits.Sizer. Past the scan budget it is 0, as object's.
func (l *list) Size() ref.Val { return types.Int(len(l.index())) }

// Get implements traits.Indexer.
func (l *list) Get(index ref.Val) ref.Val {
	i, err := types.GetOrError(index)
	if err != nil {
		return types.ValOrErr(index, "%v", err)
	}
	if i < 0 || i >= len(l.index()) {
		return l.s.outOfRange(i)
	}
	return l.at(i)
}

// Contains implements traits.Container.
func (l *list) Contains(elem ref.Val) ref.Val {
	for i := range l.index() {
		v := l.at(i)
		if l.s.over {
			return l.s.limit
		}
		if elem.Equal(v) == types.True {
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
		if elems[i] = l.at(i); l.s.over {
			return l.s.limit
		}
	}
	return types.NewRefValList(types.DefaultTypeAdapter, elems).Add(other)
}

// Equal implements ref.Val as CEL's own lists do. CEL charges it as one
// step; the view charges each element it makes.
func (l *list) Equal(other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok || l.Size() != o.Size() {
		return types.False
	}
	for i := range l.index() {
		mine, theirs := l.at(i), o.Get(types.Int(i))
		if l.s.over {
			return l.s.limit
		}
		if types.Equal(mine, theirs) != types.True {
			return types.False
		}
	}
	return types.True
}

// ConvertToNative implements ref.Val, as object's does.
func (l *list) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return native(l.s, l.raw, typeDesc)
}

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
func (l *list) Value() any { return l.raw }

// native decodes JSON text into a new value of typeDesc, charged as a scan.
func native(s *scope, raw string, typeDesc reflect.Type) (any, error) {
	if !s.scan(len(raw)) {
		return nil, s.limit
	}
	v := reflect.New(typeDesc)
	if err := json.Unmarshal([]byte(raw), v.Interface()); err != nil {
		return nil, fmt.Errorf("payload value as %v: %w", typeDesc, err)
	}
	return v.Elem().Interface(), nil
}

// walk calls fn with the offsets in raw, the valid JSON text of an object or
// an array, of each member's key (-1 in an array) and value. It allocates
// nothing and decodes nothing.
func walk(raw string, fn func(key, value int)) {
	object := raw[0] == '{'
	i := 1
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == '}' || raw[i] == ']' {
			return
		}
		key := -1
		if object {
			key = i
			i = skipSpace(raw, stringEnd(raw, i+1))
			i = skipSpace(raw, i+1) // past the colon
		}
		fn(key, i)
		i = skipSpace(raw, valueEnd(raw, i))
		if i < len(raw) && raw[i] == ',' {
			i++
		}
	}
}

// stringEnd returns the offset just past the closing quote of the string
// whose text starts at i.
func stringEnd(s string, i int) int {
	start := i
	for {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			return len(s)
		}
		i += j
		k := i
		for k > start && s[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
		i++
	}
}

// valueEnd returns the offset just past the JSON value that starts at i.
func valueEnd(s string, i int) int {
	switch s[i] {
	case '"':
		return stringEnd(s, i+1)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = stringEnd(s, i+1) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(s) && !strings.ContainsRune(",}] \t\r\n", rune(s[i])) {
		i++
	}
	return i
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
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

// RawJSON returns the JSON text of an object or array of the payload that
// an evaluation reached, byte for byte, and whether v is one: a
// transformation that sends part of the payload sends it as it came.
func RawJSON(v ref.Val) (string, bool) {
	switch x := v.(type) {
	case *object:
		return x.raw, true
	case *list:
		return x.raw, true
	}
	return "", false
}
