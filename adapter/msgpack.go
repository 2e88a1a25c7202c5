package adapter

import (
	"bytes"
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
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/transport"
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
//     as JavaScript sees it), except NaN and ±Infinity, which become a
//     jsNumber (a number to a msgpack client, null in JSON); bin becomes
//     []byte, a timestamp extension becomes a transport.Date (a Date to a
//     msgpack client, the ISO 8601 string Date.prototype.toJSON prints in
//     JSON).

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

// jsNumber is a number JSON has no form for (NaN, +Infinity, -Infinity)
// read from another node or an emitter. A float64 would not do: the
// packet decoding makes null of it (encoding/json, and so the JSON
// parser's encoder, refuses it), while a Node server gives its msgpack
// clients the number. So it keeps the number for MessagePack
// (EncodeMsgpack, and writeMsgpack towards Redis: float 64, as notepack
// writes it), and is null wherever it becomes JSON (MarshalJSON, and
// appendJSON), as JSON.stringify writes it.
type jsNumber float64

var (
	_ json.Marshaler        = jsNumber(0)
	_ msgpack.CustomEncoder = jsNumber(0)
)

// MarshalJSON implements json.Marshaler: null.
func (jsNumber) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// EncodeMsgpack implements msgpack.CustomEncoder: float 64.
func (n jsNumber) EncodeMsgpack(enc *msgpack.Encoder) error { return enc.EncodeFloat64(float64(n)) }

// String is the number as JavaScript's String prints it.
func (n jsNumber) String() string {
	switch f := float64(n); {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(float64(n), 'f', -1, 64)
}

// number is a decoded float: a float64, or a jsNumber when JSON has no
// form for it.
func number(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return jsNumber(f)
	}
	return f
}

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

// writeMsgpackArray writes an array of v's elements, each with elem,
// refusing a length the format cannot hold (checkLength).
func writeMsgpackArray[T any](enc *msgpack.Encoder, v []T, elem func(T) error) error {
	if err := checkLength(len(v)); err != nil {
		return err
	}
	if err := enc.EncodeArrayLen(len(v)); err != nil {
		return err
	}
	for _, e := range v {
		if err := elem(e); err != nil {
			return err
		}
	}
	return nil
}

// writeMsgpackMapLen writes a map header for n pairs, refusing n the
// format cannot hold (checkLength).
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
	case int, int8, int16, int32, int64:
		return enc.EncodeInt(reflect.ValueOf(v).Int())
	case uint, uint8, uint16, uint32, uint64:
		return enc.EncodeUint(reflect.ValueOf(v).Uint())
	case float32:
		return writeMsgpackFloat(enc, float64(v))
	case float64:
		return writeMsgpackFloat(enc, v)
	case jsNumber:
		return enc.EncodeFloat64(float64(v))
	case transport.Date:
		return enc.EncodeTime(time.Time(v)) // the timestamp (type -1), as notepack 3 writes a Date
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
		return writeMsgpackArray(enc, v, func(e any) error { return writeMsgpack(enc, buf, e) })
	case []string:
		return writeMsgpackArray(enc, v, func(e string) error { return writeMsgpackString(enc, e) })
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

// decodeMsgpack reads one notepack-encoded value (bytes after it are not
// read).
//
// The MessagePack formats are read by vmihailenco/msgpack's Decoder
// primitives (PeekCode, DecodeInt64/Uint64/Float64, DecodeString,
// DecodeBytes, DecodeMapLen/ArrayLen, DecodeExtHeader, DecodeTime). What
// stays here is what notepack's reading, and hostile input, need and the
// library's DecodeInterface does not give:
//   - every number is a float64, as JavaScript reads it (the library gives
//     int8…uint64 by format, and its DecodeFloat64 reads uint 64 through
//     int64, negative from 2^63), NaN and ±Infinity a jsNumber;
//   - a map takes any key, printed as String(key) would (keyString): the
//     library's maps want string keys or give map[any]any;
//   - extensions are notepack's: a timestamp is a transport.Date,
//     type 0 is undefined or an ArrayBuffer, others [type, bytes] (the
//     library refuses an extension type nobody registered);
//   - bounds: depth (maxDepth), and no length is believed beyond the input
//     left (owed, claim). The library sizes a slice or map from the declared
//     length up to a million elements, bin up to 4 GB, and each nested
//     container would again, so containers are walked here and a string,
//     binary or extension length is checked before the library reads it.
//
// On BenchmarkMsgpackDecode this takes about 1.2 times the CPU of the
// hand-written reader it replaced (2.1 against 1.7 us a broadcast), with
// the same allocations: the hot path's cost is the values it makes.
func decodeMsgpack(p []byte) (any, error) {
	d := decoders.Get().(*msgpackDecoder)
	d.r.Reset(p)
	v, err := d.value(0)
	d.r.Reset(nil)
	d.owed = 0
	if len(p) <= maxPooledDecode {
		decoders.Put(d) // a larger input may have grown the Decoder's buffer
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, errShortBuffer // the library's word for running out of input
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

var errShortBuffer = errors.New("adapter: truncated msgpack data")

type msgpackDecoder struct {
	r   bytes.Reader // the input; dec reads it with no buffering of its own
	dec *msgpack.Decoder
	// owed counts the elements the arrays and maps being read have
	// declared and not yet begun. Each takes a byte at least, so a
	// container may declare no more elements than the bytes left beyond
	// those: nested containers cannot each claim the same remaining bytes
	// (each level of 500 did, and 6.5 KB of input allocated 164 MB).
	owed int
	// scratch holds a string's bytes while it is read (DecodeString reads
	// into the Decoder's buffer the same way).
	scratch []byte
}

// maxPooledDecode: a decoder that read a larger input is not kept (its
// scratch may have grown to the longest string read).
const maxPooledDecode = 64 << 10

var decoders = sync.Pool{New: func() any {
	d := &msgpackDecoder{}
	d.dec = msgpack.NewDecoder(&d.r) // a bytes.Reader is an io.ByteScanner: read in place
	return d
}}

const maxDepth = 1000

// offset is where the next byte is read.
func (d *msgpackDecoder) offset() int64 { return d.r.Size() - int64(d.r.Len()) }

// fits refuses a length of data beyond the input left (on a 32-bit
// platform the library makes an int of a 32-bit length: negative from
// 2^31).
func (d *msgpackDecoder) fits(n int) error {
	if n < 0 || n > d.r.Len() {
		return errShortBuffer
	}
	return nil
}

func (d *msgpackDecoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("adapter: msgpack data nested too deeply")
	}
	c, err := d.dec.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case c == msgpcode.Nil:
		return nil, d.dec.DecodeNil()
	case c == msgpcode.False || c == msgpcode.True:
		return d.dec.DecodeBool()
	case msgpcode.IsFixedNum(c) || c >= msgpcode.Int8 && c <= msgpcode.Int64:
		n, err := d.dec.DecodeInt64()
		return float64(n), err
	case c >= msgpcode.Uint8 && c <= msgpcode.Uint64:
		n, err := d.dec.DecodeUint64()
		return float64(n), err
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := d.dec.DecodeFloat64()
		return number(f), err
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		// The length is checked before the data is read (DecodeBytes would
		// make a slice of the declared length first).
		n, err := d.dec.DecodeBytesLen()
		if err != nil {
			return nil, err
		}
		if err := d.fits(n); err != nil {
			return nil, err
		}
		if msgpcode.IsBin(c) {
			p := make([]byte, n) // a copy of its own, empty not nil
			return p, d.dec.ReadFull(p)
		}
		if cap(d.scratch) < n {
			d.scratch = make([]byte, n)
		}
		s := d.scratch[:n]
		if err := d.dec.ReadFull(s); err != nil {
			return nil, err
		}
		return string(s), nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.dec.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		return d.arrayOf(n, depth)
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.dec.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		return d.mapOf(n, depth)
	case msgpcode.IsExt(c):
		return d.ext()
	}
	return nil, fmt.Errorf("adapter: invalid msgpack byte 0x%02x", c)
}

// claim reserves the input for n elements of per values each (a map's
// pair is 2), or refuses them if the bytes left, beyond those the
// enclosing containers are owed, cannot hold them.
func (d *msgpackDecoder) claim(n, per int) error {
	if n < 0 || n > (d.r.Len()-d.owed)/per {
		return errShortBuffer
	}
	d.owed += n * per
	return nil
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
		if key := keyString(k); key != protoKey {
			m[key] = v
		}
	}
	return m, nil
}

// protoKey is a map key that notepack.io's decoder in a Node server makes
// the object's prototype, not a property: it is in no object Node relays.
// Passed on, it became the prototype of the objects every msgpack client
// decoded (their properties inherited, not their own): so it is dropped,
// as Node drops it (a black-box audit of the msgpack parser, 2026-12-07).
const protoKey = "__proto__"

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
	case jsNumber:
		return k.String()
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
	case jsNumber:
		return append(b, k.String()...)
	case transport.Date:
		return append(b, k.ISO()...)
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

// ext reads an extension as notepack does. The timestamp type (-1) becomes
// a transport.Date (a Date to a msgpack client, its ISO string in JSON);
// notepack's legacy type 0 of length 1 is undefined (nil); type 0
// otherwise an ArrayBuffer ([]byte); anything else [type, bytes] as
// notepack returns it.
func (d *msgpackDecoder) ext() (any, error) {
	at := d.offset()
	typ, n, err := d.dec.DecodeExtHeader()
	if err != nil {
		return nil, err
	}
	if err := d.fits(n); err != nil {
		return nil, err
	}
	if typ == -1 && (n == 4 || n == 8 || n == 12) {
		_, _ = d.r.Seek(at, io.SeekStart)
		t, err := d.dec.DecodeTime()
		if err != nil {
			return nil, err
		}
		return transport.Date(t), nil
	}
	data := make([]byte, n)
	if err := d.dec.ReadFull(data); err != nil {
		return nil, err
	}
	switch {
	case typ == 0 && n == 1:
		return nil, nil
	case typ == 0:
		return data, nil
	}
	return []any{float64(typ), data}, nil
}

// appendJSON writes v as JSON.stringify would for the same value: obj keeps
// key order, HTML characters are not escaped, and values without a JSON form
// (functions, a jsNumber) are null.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case obj:
		return appendJSONList(b, '{', '}', len(v), func(b []byte, i int) ([]byte, error) {
			b = appendJSONString(b, v[i].k)
			return appendJSON(append(b, ':'), v[i].v)
		})
	case []any:
		return appendJSONList(b, '[', ']', len(v), func(b []byte, i int) ([]byte, error) {
			return appendJSON(b, v[i])
		})
	case string:
		return appendJSONString(b, v), nil
	case nil, jsNumber:
		return append(b, "null"...), nil
	case transport.Date:
		return appendJSONString(b, v.ISO()), nil
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

// appendJSONList writes n members with elem between open and end, comma
// separated.
func appendJSONList(b []byte, open, end byte, n int, elem func([]byte, int) ([]byte, error)) ([]byte, error) {
	b = append(b, open)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = elem(b, i); err != nil {
			return b, err
		}
	}
	return append(b, end), nil
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
