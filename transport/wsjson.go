package transport

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/presenced/presenced/internal/jsontext"
)

// JSON for the websocket's direct events (wstransport.go). encoding/json
// goes through reflection and, for a map, sorts its keys into a fresh
// slice; on the heartbeat path that was a tenth of the node's CPU and a
// third of its garbage. These two functions do the plain cases by hand and
// hand everything else to encoding/json, so their output and their reading
// are exactly encoding/json's (wsjson_test.go compares them).

// jsonAppender is a value that encodes itself exactly as json.Marshal
// would (lastseen.PresenceList).
type jsonAppender interface{ AppendJSON(dst []byte) []byte }

// appendJSON appends v as json.Marshal would encode it.
func appendJSON(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case jsonAppender:
		return v.AppendJSON(dst), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case string:
		if jsontext.Plain(v) {
			dst = append(dst, '"')
			dst = append(dst, v...)
			return append(dst, '"'), nil
		}
	case int:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(dst, v, 10), nil
	case float64:
		// encoding/json uses 'f' in this range and an exponent outside it
		if a := math.Abs(v); a == 0 || (a >= 1e-6 && a < 1e21) {
			return strconv.AppendFloat(dst, v, 'f', -1, 64), nil
		}
	case []any:
		if v == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendJSON(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		if v == nil {
			return append(dst, "null"...), nil
		}
		var arr [16]string
		keys := arr[:0]
		for k := range v {
			if !jsontext.Plain(k) {
				return appendMarshal(dst, v)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '"')
			dst = append(dst, k...)
			dst = append(dst, '"', ':')
			var err error
			if dst, err = appendJSON(dst, v[k]); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return appendMarshal(dst, v)
}

func appendMarshal(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// maxDepthFast bounds the nesting decodeArgs reads itself; deeper input
// goes to encoding/json.
const maxDepthFast = 16

// decodeArgs reads a Socket.IO packet's JSON array as json.Unmarshal into
// []any would, except that an element of the array that is an object of at
// most maxObjectFields fields is an *Object, not a map (its nested objects
// are maps). It reports false (nothing decoded) for anything but plain
// input (string escapes, bytes outside printable ASCII in strings, deep
// nesting) and for invalid JSON, which the caller then gives to
// encoding/json, for the same result or the same error.
func decodeArgs(b []byte) ([]any, bool) { return decodeArgsInto(b, nil) }

// decodeArgsInto is decodeArgs into a direct event's scratch (nil: none):
// the array and its Objects are the scratch's, valid until it is reused;
// what they hold (strings, nested maps and arrays) is not, and may be kept.
// A heartbeat so decodes without allocating (see directCall).
func decodeArgsInto(b []byte, sc *directCall) ([]any, bool) {
	d := fastDecoder{b: b, sc: sc}
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '[' {
		return nil, false
	}
	var v []any
	var ok bool
	if sc != nil {
		v, ok = d.elements(sc.args[:0], 0)
	} else {
		v, ok = d.array(0)
	}
	if !ok {
		return nil, false
	}
	d.space()
	if d.i != len(d.b) {
		return nil, false
	}
	return v, true
}

// Object is an event's argument that is a JSON object, as the websocket
// transport decodes it (as an *Object): its fields in the order sent. An
// event's payload is read a field or two at a time and then dropped, and a
// map cost about 300 bytes even for one field: a third of what a heartbeat
// allocated. The handlers take an *Object or a map (the library's path,
// and objects of more than maxObjectFields fields).
type Object []Field

// Field is one field of an Object.
type Field struct {
	Key   string
	Value any
}

// Get returns the value of key, the last one when the key repeats (as
// encoding/json's map keeps it).
func (o Object) Get(key string) (any, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].Key == key {
			return o[i].Value, true
		}
	}
	return nil, false
}

// maxObjectFields is the most fields an Object holds: past it, Get's scan
// costs more than a map's lookup, and such a payload is not one of the
// frequent events.
const maxObjectFields = 8

type fastDecoder struct {
	b  []byte
	i  int
	sc *directCall // nil: everything decoded is allocated
}

func (d *fastDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDecoder) value(depth int) (any, bool) {
	d.space()
	if d.i >= len(d.b) {
		return nil, false
	}
	switch c := d.b[d.i]; {
	case c == '"':
		return d.strValue()
	case c == '{':
		if depth == 0 { // an element of the arguments' array
			if o, ok := d.flatObject(); ok {
				return o, true
			}
		}
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == 't':
		return true, d.word("true")
	case c == 'f':
		return false, d.word("false")
	case c == 'n':
		return nil, d.word("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, false
}

func (d *fastDecoder) word(w string) bool {
	if len(d.b)-d.i < len(w) || string(d.b[d.i:d.i+len(w)]) != w {
		return false
	}
	d.i += len(w)
	return true
}

// str reads a string without escapes, of printable ASCII.
func (d *fastDecoder) str() (string, bool) {
	b, ok := d.strBytes()
	return string(b), ok
}

// number reads a number of the JSON grammar as a float64.
func (d *fastDecoder) number() (any, bool) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	intStart := d.i
	n := digits()
	if n == 0 || (n > 1 && d.b[intStart] == '0') {
		return nil, false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	f, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
	if err != nil {
		return nil, false
	}
	return f, true
}

func (d *fastDecoder) array(depth int) ([]any, bool) {
	return d.elements([]any{}, depth)
}

// elements reads an array's elements into out.
func (d *fastDecoder) elements(out []any, depth int) ([]any, bool) {
	if depth > maxDepthFast {
		return nil, false
	}
	if d.open(']') {
		return out, true
	}
	for {
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if more, ok := d.sep(']'); !ok || !more {
			return out, ok
		}
	}
}

func (d *fastDecoder) object(depth int) (map[string]any, bool) {
	if depth > maxDepthFast {
		return nil, false
	}
	out := map[string]any{}
	if d.open('}') {
		return out, true
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, false
		}
		d.i++
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		out[k] = v
		if more, ok := d.sep('}'); !ok || !more {
			return out, ok
		}
	}
}

// flatObject reads an object of at most maxObjectFields fields as an
// *Object (the scratch's while it has one free); for a larger one it
// reports false with nothing consumed, and the caller reads it as a map.
func (d *fastDecoder) flatObject() (*Object, bool) {
	start := d.i
	var fields [maxObjectFields]Field
	n := 0
	done := func() (*Object, bool) {
		if sc := d.sc; sc != nil && sc.objs < len(sc.obj) {
			i := sc.objs
			sc.objs++
			copy(sc.fields[i][:], fields[:n])
			sc.obj[i] = Object(sc.fields[i][:n:n])
			return &sc.obj[i], true
		}
		o := append(Object{}, fields[:n]...)
		return &o, true
	}
	if d.open('}') {
		return done()
	}
	for {
		d.space()
		if n == maxObjectFields || d.i >= len(d.b) || d.b[d.i] != '"' {
			d.i = start
			return nil, false
		}
		k, ok := d.key()
		if !ok {
			d.i = start
			return nil, false
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			d.i = start
			return nil, false
		}
		d.i++
		v, ok := d.value(1)
		if !ok {
			d.i = start
			return nil, false
		}
		fields[n] = Field{Key: k, Value: v}
		n++
		more, ok := d.sep('}')
		if !ok {
			d.i = start
			return nil, false
		}
		if !more {
			return done()
		}
	}
}

// key reads an object's key (str), interned in the scratch if there is one.
func (d *fastDecoder) key() (string, bool) {
	if d.sc == nil {
		return d.str()
	}
	b, ok := d.strBytes()
	if !ok {
		return "", false
	}
	if n := d.sc.intern(b); n != nil {
		return n.s, true
	}
	return string(b), true
}

// strValue reads a string value (str), boxed; interned and boxed once in
// the scratch if there is one.
func (d *fastDecoder) strValue() (any, bool) {
	if d.sc == nil {
		return d.str()
	}
	b, ok := d.strBytes()
	if !ok {
		return nil, false
	}
	n := d.sc.intern(b)
	if n == nil {
		return string(b), true
	}
	if n.box == nil {
		n.box = n.s
	}
	return n.box, true
}

// strBytes reads a string without escapes, of printable ASCII, and
// returns its bytes (in d.b).
func (d *fastDecoder) strBytes() ([]byte, bool) {
	d.i++ // the opening quote
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			s := d.b[start:d.i]
			d.i++
			return s, true
		}
		if c < 0x20 || c > 0x7e || c == '\\' {
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// open consumes a container's opening bracket and reports whether the
// container is empty (its closing bracket is consumed too).
func (d *fastDecoder) open(closing byte) bool {
	d.i++
	d.space()
	if d.i < len(d.b) && d.b[d.i] == closing {
		d.i++
		return true
	}
	return false
}

// sep reads what follows a container's element: a comma (more) or the
// closing bracket; anything else is not ok.
func (d *fastDecoder) sep(closing byte) (more, ok bool) {
	d.space()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		return true, true
	case closing:
		d.i++
		return false, true
	}
	return false, false
}
