package adapter

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/zishang520/socket.io/v3/pkg/types"
)

// This file holds a MessagePack codec that produces the bytes notepack.io
// (the codec of @socket.io/redis-adapter and @socket.io/redis-emitter)
// produces for the equivalent JavaScript value, and reads everything notepack
// writes:
//
//   - a number is a JavaScript number: an integral value is written in the
//     smallest int/uint format (fixint, uint8/16/32/64, int8/16/32/64), any
//     other value as float 64 (never float 32);
//   - binary ([]byte, and Socket.IO's byte buffers) is bin 8/16/32;
//   - objects are maps with string keys. Our own wire objects (type obj) keep
//     their key order, a Go map is written with sorted keys, and any other Go
//     value (a struct, a typed slice or map, a json.Marshaler) is written the
//     way encoding/json renders it, so a struct becomes a map keyed by its
//     JSON field names, in field order: exactly what a client connected to
//     this node would see for the same value;
//   - reading, every number becomes a float64 (as encoding/json gives it, and
//     as JavaScript sees it), bin becomes []byte, a timestamp extension
//     becomes the ISO 8601 string Date.prototype.toJSON would print.

// kv is one member of an ordered object.
type kv struct {
	k string
	v any
}

// obj is an object whose members are written in order, to msgpack and JSON.
type obj []kv

// get returns the value of key k, if present.
func (o obj) get(k string) (any, bool) {
	for _, e := range o {
		if e.k == k {
			return e.v, true
		}
	}
	return nil, false
}

// MarshalJSON writes o with its keys in order.
func (o obj) MarshalJSON() ([]byte, error) { return appendJSON(nil, o) }

var errUnsupported = errors.New("adapter: value cannot be encoded")

// errTooLong: msgpack lengths have 32 bits. A longer string, binary, array
// or map would go out with its length cut to the low 32 bits, which a
// reader takes for a short value followed by garbage.
var errTooLong = fmt.Errorf("%w: a string, binary, array or map of 2^32 or more", errUnsupported)

// checkLength refuses what a msgpack length cannot count, before anything
// of it is written.
func checkLength(n int) error {
	if uint64(n) > math.MaxUint32 {
		return errTooLong
	}
	return nil
}

// encodeMsgpack returns the notepack-compatible encoding of v.
func encodeMsgpack(v any) ([]byte, error) {
	return appendMsgpack(make([]byte, 0, 128), v)
}

func appendMsgpack(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, 0xc0), nil
	case bool:
		if v {
			return append(b, 0xc3), nil
		}
		return append(b, 0xc2), nil
	case string:
		return appendMsgpackString(b, v)
	case int:
		return appendMsgpackInt(b, int64(v)), nil
	case int8:
		return appendMsgpackInt(b, int64(v)), nil
	case int16:
		return appendMsgpackInt(b, int64(v)), nil
	case int32:
		return appendMsgpackInt(b, int64(v)), nil
	case int64:
		return appendMsgpackInt(b, v), nil
	case uint:
		return appendMsgpackUint(b, uint64(v)), nil
	case uint8:
		return appendMsgpackUint(b, uint64(v)), nil
	case uint16:
		return appendMsgpackUint(b, uint64(v)), nil
	case uint32:
		return appendMsgpackUint(b, uint64(v)), nil
	case uint64:
		return appendMsgpackUint(b, v), nil
	case float32:
		return appendMsgpackFloat(b, float64(v)), nil
	case float64:
		return appendMsgpackFloat(b, v), nil
	case json.Number:
		return appendMsgpackNumber(b, v)
	case []byte:
		return appendMsgpackBin(b, v)
	case *types.StringBuffer:
		if v == nil || v.Buffer == nil {
			return append(b, 0xc0), nil
		}
		return appendMsgpackString(b, v.String())
	case types.BufferInterface:
		if isNilPointer(v) {
			return append(b, 0xc0), nil
		}
		return appendMsgpackBin(b, v.Bytes())
	case obj:
		if err := checkLength(len(v)); err != nil {
			return b, err
		}
		b = appendMsgpackMapHeader(b, len(v))
		var err error
		for _, e := range v {
			if b, err = appendMsgpackString(b, e.k); err != nil {
				return b, err
			}
			if b, err = appendMsgpack(b, e.v); err != nil {
				return b, err
			}
		}
		return b, nil
	case []any:
		if err := checkLength(len(v)); err != nil {
			return b, err
		}
		b = appendMsgpackArrayHeader(b, len(v))
		var err error
		for _, e := range v {
			if b, err = appendMsgpack(b, e); err != nil {
				return b, err
			}
		}
		return b, nil
	case []string:
		if err := checkLength(len(v)); err != nil {
			return b, err
		}
		b = appendMsgpackArrayHeader(b, len(v))
		var err error
		for _, e := range v {
			if b, err = appendMsgpackString(b, e); err != nil {
				return b, err
			}
		}
		return b, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k, e := range v {
			if isFunc(e) {
				continue // notepack skips functions, JSON.stringify too
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if err := checkLength(len(keys)); err != nil {
			return b, err
		}
		b = appendMsgpackMapHeader(b, len(keys))
		var err error
		for _, k := range keys {
			if b, err = appendMsgpackString(b, k); err != nil {
				return b, err
			}
			if b, err = appendMsgpack(b, v[k]); err != nil {
				return b, err
			}
		}
		return b, nil
	case io.Reader:
		// Only reached for a reader that normalizeBinary did not replace.
		data, err := io.ReadAll(v)
		if err != nil {
			return b, fmt.Errorf("adapter: read binary argument: %w", err)
		}
		return appendMsgpackBin(b, data)
	}
	if isFunc(v) {
		return append(b, 0xc0), nil
	}
	// Anything else is rendered as encoding/json renders it.
	raw, err := json.Marshal(v)
	if err != nil {
		return b, fmt.Errorf("%w: %w", errUnsupported, err)
	}
	return appendMsgpackFromJSON(b, raw)
}

func isFunc(v any) bool {
	return v != nil && reflect.TypeOf(v).Kind() == reflect.Func
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

func appendMsgpackString(b []byte, s string) ([]byte, error) {
	n := len(s)
	if err := checkLength(n); err != nil {
		return b, err
	}
	switch {
	case n < 0x20:
		b = append(b, 0xa0|byte(n))
	case n < 0x100:
		b = append(b, 0xd9, byte(n))
	case n < 0x10000:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...), nil
}

func appendMsgpackBin(b []byte, p []byte) ([]byte, error) {
	n := len(p)
	if err := checkLength(n); err != nil {
		return b, err
	}
	switch {
	case n < 0x100:
		b = append(b, 0xc4, byte(n))
	case n < 0x10000:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = append(b, 0xc6)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, p...), nil
}

func appendMsgpackArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 0x10:
		return append(b, 0x90|byte(n))
	case n < 0x10000:
		return append(b, 0xdc, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdd)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	}
}

func appendMsgpackMapHeader(b []byte, n int) []byte {
	switch {
	case n < 0x10:
		return append(b, 0x80|byte(n))
	case n < 0x10000:
		return append(b, 0xde, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdf)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	}
}

func appendMsgpackUint(b []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(b, byte(v))
	case v < 0x100:
		return append(b, 0xcc, byte(v))
	case v < 0x10000:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v < 0x100000000:
		b = append(b, 0xce)
		return binary.BigEndian.AppendUint32(b, uint32(v))
	default:
		b = append(b, 0xcf)
		return binary.BigEndian.AppendUint64(b, v)
	}
}

func appendMsgpackInt(b []byte, v int64) []byte {
	if v >= 0 {
		return appendMsgpackUint(b, uint64(v))
	}
	switch {
	case v >= -0x20:
		return append(b, byte(v))
	case v >= -0x80:
		return append(b, 0xd0, byte(v))
	case v >= -0x8000:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= -0x80000000:
		b = append(b, 0xd2)
		return binary.BigEndian.AppendUint32(b, uint32(v))
	default:
		b = append(b, 0xd3)
		return binary.BigEndian.AppendUint64(b, uint64(v))
	}
}

// appendMsgpackFloat writes a JavaScript number: integral values as integers.
func appendMsgpackFloat(b []byte, f float64) []byte {
	if f == math.Trunc(f) && !math.IsInf(f, 0) {
		if f >= 0 && f < 1<<64 {
			return appendMsgpackUint(b, uint64(f))
		}
		if f < 0 && f >= -(1<<63) {
			return appendMsgpackInt(b, int64(f))
		}
	}
	b = append(b, 0xcb)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(f))
}

func appendMsgpackNumber(b []byte, n json.Number) ([]byte, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return appendMsgpackInt(b, i), nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return appendMsgpackUint(b, u), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return b, fmt.Errorf("%w: number %q", errUnsupported, s)
	}
	return appendMsgpackFloat(b, f), nil
}

// appendMsgpackFromJSON transcodes one JSON document, keeping object key order.
func appendMsgpackFromJSON(b []byte, raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readOrderedJSON(dec)
	if err != nil {
		return b, fmt.Errorf("%w: %w", errUnsupported, err)
	}
	return appendMsgpack(b, v)
}

// readOrderedJSON reads one JSON value into obj / []any / scalars.
func readOrderedJSON(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := obj{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := readOrderedJSON(dec)
				if err != nil {
					return nil, err
				}
				o = append(o, kv{k, v})
			}
			_, err = dec.Token() // '}'
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := readOrderedJSON(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err = dec.Token() // ']'
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return tok, nil // string, json.Number, bool, nil
	}
}

// decodeMsgpack reads one notepack-encoded value.
func decodeMsgpack(p []byte) (any, error) {
	d := msgpackDecoder{p: p}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	return v, nil
}

var errShortBuffer = errors.New("adapter: truncated msgpack data")

type msgpackDecoder struct {
	p   []byte
	off int
	// owed counts the elements the arrays and maps being read have
	// declared and not yet begun. Each takes a byte at least, so a
	// container may declare no more elements than the bytes left beyond
	// those: nested containers cannot each claim the same remaining bytes
	// (each level of 500 did, and 6.5 KB of input allocated 164 MB).
	owed int
}

const maxDepth = 1000

func (d *msgpackDecoder) need(n int) ([]byte, error) {
	if n < 0 || len(d.p)-d.off < n {
		return nil, errShortBuffer
	}
	s := d.p[d.off : d.off+n]
	d.off += n
	return s, nil
}

func (d *msgpackDecoder) u8() (int, error) {
	s, err := d.need(1)
	if err != nil {
		return 0, err
	}
	return int(s[0]), nil
}

func (d *msgpackDecoder) u16() (int, error) {
	s, err := d.need(2)
	if err != nil {
		return 0, err
	}
	return int(binary.BigEndian.Uint16(s)), nil
}

// u32 is a uint32, not an int: on a 32-bit platform an int would turn
// values from 2^31 negative.
func (d *msgpackDecoder) u32() (uint32, error) {
	s, err := d.need(4)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(s), nil
}

func (d *msgpackDecoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("adapter: msgpack data nested too deeply")
	}
	c, err := d.u8()
	if err != nil {
		return nil, err
	}
	switch {
	case c < 0x80:
		return float64(c), nil
	case c < 0x90:
		return d.mapOf(c&0x0f, depth)
	case c < 0xa0:
		return d.arrayOf(c&0x0f, depth)
	case c < 0xc0:
		return d.str(c & 0x1f)
	case c >= 0xe0:
		return float64(int8(byte(c))), nil
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6:
		n, err := d.length(c - 0xc4)
		if err != nil {
			return nil, err
		}
		s, err := d.need(n)
		if err != nil {
			return nil, err
		}
		return bytes.Clone(s), nil
	case 0xc7, 0xc8, 0xc9:
		n, err := d.length(c - 0xc7)
		if err != nil {
			return nil, err
		}
		return d.ext(n)
	case 0xca:
		s, err := d.need(4)
		if err != nil {
			return nil, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(s))), nil
	case 0xcb:
		s, err := d.need(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(s)), nil
	case 0xcc:
		n, err := d.u8()
		return float64(n), err
	case 0xcd:
		n, err := d.u16()
		return float64(n), err
	case 0xce:
		n, err := d.u32()
		return float64(n), err
	case 0xcf:
		s, err := d.need(8)
		if err != nil {
			return nil, err
		}
		return float64(binary.BigEndian.Uint64(s)), nil
	case 0xd0:
		s, err := d.need(1)
		if err != nil {
			return nil, err
		}
		return float64(int8(s[0])), nil
	case 0xd1:
		s, err := d.need(2)
		if err != nil {
			return nil, err
		}
		return float64(int16(binary.BigEndian.Uint16(s))), nil
	case 0xd2:
		s, err := d.need(4)
		if err != nil {
			return nil, err
		}
		return float64(int32(binary.BigEndian.Uint32(s))), nil
	case 0xd3:
		s, err := d.need(8)
		if err != nil {
			return nil, err
		}
		return float64(int64(binary.BigEndian.Uint64(s))), nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return d.ext(1 << (c - 0xd4))
	case 0xd9, 0xda, 0xdb:
		n, err := d.length(c - 0xd9)
		if err != nil {
			return nil, err
		}
		return d.str(n)
	case 0xdc, 0xdd:
		n, err := d.length(c - 0xdc + 1)
		if err != nil {
			return nil, err
		}
		return d.arrayOf(n, depth)
	case 0xde, 0xdf:
		n, err := d.length(c - 0xde + 1)
		if err != nil {
			return nil, err
		}
		return d.mapOf(n, depth)
	}
	return nil, fmt.Errorf("adapter: invalid msgpack byte 0x%02x", c)
}

// length reads a 1, 2 or 4 byte length (width 0, 1, 2). Whatever it
// counts (bytes, elements, pairs) takes a byte of input at least, so a
// length beyond the input left is refused here, before anything of its
// size is made, and the int it returns cannot have wrapped.
func (d *msgpackDecoder) length(width int) (int, error) {
	var n uint64
	switch width {
	case 0:
		v, err := d.u8()
		if err != nil {
			return 0, err
		}
		n = uint64(v)
	case 1:
		v, err := d.u16()
		if err != nil {
			return 0, err
		}
		n = uint64(v)
	default:
		v, err := d.u32()
		if err != nil {
			return 0, err
		}
		n = uint64(v)
	}
	if n > uint64(len(d.p)-d.off) {
		return 0, errShortBuffer
	}
	return int(n), nil
}

// claim reserves the input for n elements of per values each (a map's
// pair is 2), or refuses them if the bytes left, beyond those the
// enclosing containers are owed, cannot hold them.
func (d *msgpackDecoder) claim(n, per int) error {
	if n > (len(d.p)-d.off-d.owed)/per {
		return errShortBuffer
	}
	d.owed += n * per
	return nil
}

func (d *msgpackDecoder) str(n int) (any, error) {
	s, err := d.need(n)
	if err != nil {
		return nil, err
	}
	return string(s), nil
}

func (d *msgpackDecoder) arrayOf(n int, depth int) (any, error) {
	if err := d.claim(n, 1); err != nil {
		return nil, err
	}
	a := make([]any, n)
	for i := range a {
		d.owed--
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a[i] = v
	}
	return a, nil
}

func (d *msgpackDecoder) mapOf(n int, depth int) (any, error) {
	if err := d.claim(n, 2); err != nil {
		return nil, err
	}
	m := make(map[string]any, n)
	for range n {
		d.owed--
		k, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		d.owed--
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[keyString(k)] = v
	}
	return m, nil
}

// keyString renders a map key the way a JavaScript object key would be
// (String(key)): an array joins its elements with commas (null as
// nothing), binary is its bytes as text, and a map is "[object Object]".
// A map is not printed whole: maps nested as each other's keys would
// print the innermost key again at every level (10 KB under 500 levels
// allocated 7 MB).
func keyString(k any) string {
	switch k := k.(type) {
	case string:
		return k
	case float64:
		return strconv.FormatFloat(k, 'f', -1, 64)
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(k)
	}
	return string(appendKeyString(nil, k, true))
}

// appendKeyString appends keyString(k); top is false inside an array.
func appendKeyString(b []byte, k any, top bool) []byte {
	switch k := k.(type) {
	case string:
		return append(b, k...)
	case float64:
		return strconv.AppendFloat(b, k, 'f', -1, 64)
	case nil:
		if top {
			return append(b, "null"...)
		}
		return b
	case bool:
		return strconv.AppendBool(b, k)
	case []byte:
		return append(b, k...)
	case []any:
		for i, e := range k {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendKeyString(b, e, false)
		}
		return b
	case map[string]any:
		return append(b, "[object Object]"...)
	}
	return fmt.Append(b, k)
}

// ext reads an extension of n data bytes. The timestamp type (-1) becomes
// the ISO string a JavaScript Date serializes to; notepack's legacy type 0 of
// length 1 is undefined (nil); type 0 otherwise an ArrayBuffer ([]byte);
// anything else [type, bytes] as notepack returns it.
func (d *msgpackDecoder) ext(n int) (any, error) {
	ts, err := d.need(1)
	if err != nil {
		return nil, err
	}
	typ := int8(ts[0])
	data, err := d.need(n)
	if err != nil {
		return nil, err
	}
	switch {
	case typ == -1 && n == 4:
		return isoTime(time.Unix(int64(binary.BigEndian.Uint32(data)), 0)), nil
	case typ == -1 && n == 8:
		v := binary.BigEndian.Uint64(data)
		return isoTime(time.Unix(int64(v&0x3ffffffff), int64(v>>34))), nil
	case typ == -1 && n == 12:
		ns := binary.BigEndian.Uint32(data)
		sec := int64(binary.BigEndian.Uint64(data[4:]))
		return isoTime(time.Unix(sec, int64(ns))), nil
	case typ == 0 && n == 1:
		return nil, nil
	case typ == 0:
		return bytes.Clone(data), nil
	}
	return []any{float64(typ), bytes.Clone(data)}, nil
}

// isoTime prints t as Date.prototype.toJSON does.
func isoTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// appendJSON writes v as JSON.stringify would for the same value: obj keeps
// key order, HTML characters are not escaped, and values without a JSON form
// (functions) are null.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case obj:
		b = append(b, '{')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, e.k)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, e.v); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, e); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case string:
		return appendJSONString(b, v), nil
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case uint64:
		return strconv.AppendUint(b, v, 10), nil
	case types.BufferInterface:
		// JSON has no binary: Node's Buffer#toJSON shape.
		if isNilPointer(v) {
			return append(b, "null"...), nil
		}
		return appendJSON(b, bufferJSON(v.Bytes()))
	case []byte:
		return appendJSON(b, bufferJSON(v))
	}
	if isFunc(v) {
		return append(b, "null"...), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b, fmt.Errorf("%w: %w", errUnsupported, err)
	}
	return append(b, bytes.TrimRight(buf.Bytes(), "\n")...), nil
}

// bufferJSON is what JSON.stringify prints for a Node Buffer.
func bufferJSON(p []byte) obj {
	data := make([]any, len(p))
	for i, c := range p {
		data[i] = int(c)
	}
	return obj{{"type", "Buffer"}, {"data", data}}
}

func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c >= 0x20:
				b = append(b, c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// hasBinary reports whether v holds binary data where Socket.IO looks for
// it (in []any and map[string]any trees), like util.hasBinary in Node.
func hasBinary(v any) bool {
	switch v := v.(type) {
	case []byte:
		return true
	case *types.StringBuffer:
		return false
	case types.BufferInterface:
		return true
	case obj:
		for _, e := range v {
			if hasBinary(e.v) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasBinary(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range v {
			if hasBinary(e) {
				return true
			}
		}
	case *strings.Reader:
		return false
	case io.Reader:
		return true
	}
	return false
}

// normalizeBinary replaces, in place, readers that are not byte buffers
// (which can be read once only) with their bytes, so that this node's own
// encoding and the one sent to Redis both see the data.
func normalizeBinary(v any) any {
	switch t := v.(type) {
	case []any:
		for i, e := range t {
			t[i] = normalizeBinary(e)
		}
	case map[string]any:
		for k, e := range t {
			t[k] = normalizeBinary(e)
		}
	case types.BufferInterface, *strings.Reader, []byte, string:
	case io.Reader:
		data, err := io.ReadAll(t)
		if err == nil {
			return data
		}
	}
	return v
}
