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
	"sync"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
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

// writeMsgpackArrayLen writes an array header for n items, refusing n the
// format cannot hold (checkLength).
func writeMsgpackArrayLen(enc *msgpack.Encoder, n int) error {
	if err := checkLength(n); err != nil {
		return err
	}
	return enc.EncodeArrayLen(n)
}

// writeMsgpackMapLen writes a map header for n pairs, like
// writeMsgpackArrayLen.
func writeMsgpackMapLen(enc *msgpack.Encoder, n int) error {
	if err := checkLength(n); err != nil {
		return err
	}
	return enc.EncodeMapLen(n)
}

// encodeMsgpack returns the notepack-compatible encoding of v.
//
// The MessagePack formats are written by vmihailenco/msgpack's Encoder
// primitives, which pick the smallest format exactly as notepack does
// (fixstr/str 8/16/32, bin 8/16/32, fixarray/array 16/32, fixmap/map
// 16/32, positive and negative fixint, the smallest int/uint). What stays
// here is notepack's own choice of format for a value: a JavaScript number
// (writeMsgpackFloat), binary buffers as bin, key order, the refusal of lengths
// msgpack cannot count; the library's Encode(any) follows Go's types
// instead, so it is not used.
func encodeMsgpack(v any) ([]byte, error) {
	e := encoders.Get().(*msgpackEncoder)
	defer func() {
		e.buf = bytes.Buffer{} // holds nothing of the caller's
		encoders.Put(e)
	}()
	e.buf = *bytes.NewBuffer(make([]byte, 0, 128)) // the caller keeps the bytes
	if err := writeMsgpack(e.enc, &e.buf, v); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

// msgpackEncoder is an Encoder writing into its buffer, pooled: a broadcast
// then allocates only the bytes it returns.
type msgpackEncoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &msgpackEncoder{}
	e.enc = msgpack.NewEncoder(&e.buf) // no options: the formats are chosen here
	return e
}}

// writeMsgpack writes v with enc, whose writer is buf.
func writeMsgpack(enc *msgpack.Encoder, buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		return enc.EncodeNil()
	case bool:
		return enc.EncodeBool(v)
	case string:
		return writeMsgpackString(enc, v)
	case int:
		return enc.EncodeInt(int64(v))
	case int8:
		return enc.EncodeInt(int64(v))
	case int16:
		return enc.EncodeInt(int64(v))
	case int32:
		return enc.EncodeInt(int64(v))
	case int64:
		return enc.EncodeInt(v)
	case uint:
		return enc.EncodeUint(uint64(v))
	case uint8:
		return enc.EncodeUint(uint64(v))
	case uint16:
		return enc.EncodeUint(uint64(v))
	case uint32:
		return enc.EncodeUint(uint64(v))
	case uint64:
		return enc.EncodeUint(v)
	case float32:
		return writeMsgpackFloat(enc, float64(v))
	case float64:
		return writeMsgpackFloat(enc, v)
	case json.Number:
		return writeMsgpackNumber(enc, v)
	case []byte:
		return writeMsgpackBin(enc, buf, v)
	case *types.StringBuffer:
		if v == nil || v.Buffer == nil {
			return enc.EncodeNil()
		}
		return writeMsgpackString(enc, v.String())
	case types.BufferInterface:
		if isNilPointer(v) {
			return enc.EncodeNil()
		}
		return writeMsgpackBin(enc, buf, v.Bytes())
	case obj:
		if err := writeMsgpackMapLen(enc, len(v)); err != nil {
			return err
		}
		for _, e := range v {
			if err := writeMsgpackString(enc, e.k); err != nil {
				return err
			}
			if err := writeMsgpack(enc, buf, e.v); err != nil {
				return err
			}
		}
		return nil
	case []any:
		if err := writeMsgpackArrayLen(enc, len(v)); err != nil {
			return err
		}
		for _, e := range v {
			if err := writeMsgpack(enc, buf, e); err != nil {
				return err
			}
		}
		return nil
	case []string:
		if err := writeMsgpackArrayLen(enc, len(v)); err != nil {
			return err
		}
		for _, e := range v {
			if err := writeMsgpackString(enc, e); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k, e := range v {
			if isFunc(e) {
				continue // notepack skips functions, JSON.stringify too
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if err := writeMsgpackMapLen(enc, len(keys)); err != nil {
			return err
		}
		for _, k := range keys {
			if err := writeMsgpackString(enc, k); err != nil {
				return err
			}
			if err := writeMsgpack(enc, buf, v[k]); err != nil {
				return err
			}
		}
		return nil
	case io.Reader:
		// Only reached for a reader that normalizeBinary did not replace.
		data, err := io.ReadAll(v)
		if err != nil {
			return fmt.Errorf("adapter: read binary argument: %w", err)
		}
		return writeMsgpackBin(enc, buf, data)
	}
	if isFunc(v) {
		return enc.EncodeNil()
	}
	// Anything else is rendered as encoding/json renders it.
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnsupported, err)
	}
	return writeMsgpackFromJSON(enc, buf, raw)
}

func isFunc(v any) bool {
	return v != nil && reflect.TypeOf(v).Kind() == reflect.Func
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// writeMsgpackString refuses a length of 2^32 or more before writing: the
// library would cut it to its low 32 bits.
func writeMsgpackString(enc *msgpack.Encoder, s string) error {
	if err := checkLength(len(s)); err != nil {
		return err
	}
	return enc.EncodeString(s)
}

// writeMsgpackBin writes p as bin 8/16/32, an empty or nil p included
// (the library's EncodeBytes writes a nil slice as nil).
func writeMsgpackBin(enc *msgpack.Encoder, buf *bytes.Buffer, p []byte) error {
	if err := checkLength(len(p)); err != nil {
		return err
	}
	if err := enc.EncodeBytesLen(len(p)); err != nil {
		return err
	}
	_, err := buf.Write(p)
	return err
}

// writeMsgpackFloat writes a JavaScript number the way notepack does, by
// hand: JavaScript has no integers, and notepack writes an integral value
// in the smallest int/uint format and any other as float 64 (never float
// 32). The library's EncodeFloat64 writes float 64 for 1.0, and its
// compact-floats option converts through int64, which differs from
// notepack from 2^63 on (notepack writes uint 64 up to 2^64).
func writeMsgpackFloat(enc *msgpack.Encoder, f float64) error {
	if f == math.Trunc(f) && !math.IsInf(f, 0) {
		if f >= 0 && f < 1<<64 {
			return enc.EncodeUint(uint64(f))
		}
		if f < 0 && f >= -(1<<63) {
			return enc.EncodeInt(int64(f))
		}
	}
	return enc.EncodeFloat64(f)
}

func writeMsgpackNumber(enc *msgpack.Encoder, n json.Number) error {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return enc.EncodeInt(i)
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return enc.EncodeUint(u)
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%w: number %q", errUnsupported, s)
	}
	return writeMsgpackFloat(enc, f)
}

// writeMsgpackFromJSON transcodes one JSON document, keeping object key order.
func writeMsgpackFromJSON(enc *msgpack.Encoder, buf *bytes.Buffer, raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readOrderedJSON(dec)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnsupported, err)
	}
	return writeMsgpack(enc, buf, v)
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
//
// The decoder stays hand-written for now: it reads what notepack writes as
// JavaScript would (every number a float64, timestamps as ISO strings,
// maps with any key), and it bounds what an input may make it allocate
// (owed, claim, and the printing of map keys that are maps); moving it onto
// the library's Decoder primitives has to keep those bounds and the fuzz
// targets' corpora green, and is left for a change of its own.
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

// replaceElems applies f to each element of an array or map, in place,
// and returns v; any other value is returned as it is.
func replaceElems(v any, f func(any) any) any {
	switch t := v.(type) {
	case []any:
		for i, e := range t {
			t[i] = f(e)
		}
	case map[string]any:
		for k, e := range t {
			t[k] = f(e)
		}
	}
	return v
}

// normalizeBinary replaces, in place, readers that are not byte buffers
// (which can be read once only) with their bytes, so that this node's own
// encoding and the one sent to Redis both see the data.
func normalizeBinary(v any) any {
	switch t := v.(type) {
	case []any, map[string]any:
		return replaceElems(t, normalizeBinary)
	case types.BufferInterface, *strings.Reader, []byte, string:
	case io.Reader:
		data, err := io.ReadAll(t)
		if err == nil {
			return data
		}
	}
	return v
}
