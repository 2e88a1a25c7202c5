package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/internal/jsontext"
)

// MsgpackParser is the Socket.IO parser of `socket.io-msgpack-parser`
// (PRESENCE_PARSER=msgpack), the one the official client bundles in
// socket.io.msgpack.min.js. Every packet is one MessagePack map
// {type, data, nsp, id?} in one binary Engine.IO message; binary values
// travel inside it (no attachments), and there are no BINARY_EVENT or
// BINARY_ACK packets. As in Node, the server and all its clients must use
// the same parser.
//
// Decoded values have the shapes the default (JSON) parser gives the
// handlers: maps with string keys, []any, float64 numbers, strings, bools,
// nil; binary values are types.BufferInterface, as the JSON parser's
// attachments are. Extension types are read as notepack.io 2.2.0 (the
// parser's codec) reads them: ext 8/16/32 of type 0 (an ArrayBuffer or a
// typed array) is binary, fixext 8 of type 0 (a Date) is a time.Time in
// UTC, fixext 1 of type 0 (undefined) is nil, and any other extension is
// the array [type, binary]. The handlers refuse what has no place where
// they want plain JSON. A packet that socket.io-msgpack-parser would
// refuse (checkPacket), MessagePack that is malformed, truncated, followed
// by trailing bytes, nested deeper than 10,000 levels (encoding/json's
// bound: how deep a payload may be is the handlers' business), or with a
// map key that is binary, an array, a map or an extension, is an error:
// the library closes that connection. A key that is a number, nil or a
// boolean is its string, as a Node server's property name is ({1: 2} is
// {"1": 2}).
//
// The bytes are first walked (msgpackScanner.scan), which checks every declared
// length against the bytes that remain before anything is allocated (a
// 5-byte "array of 2^32 items" would otherwise make the decoder allocate
// up to its own limits, megabytes per message); then decodeMsgpackValue
// reads them with vmihailenco/msgpack's Decoder primitives (the library's
// own Unmarshal reads extensions through a process-wide registry, with
// the MessagePack timestamp where notepack has its Date).
type MsgpackParser struct{}

var _ parser.Parser = MsgpackParser{}

// NewEncoder implements parser.Parser.
func (MsgpackParser) NewEncoder() parser.Encoder { return msgpackEncoder{} }

// NewDecoder implements parser.Parser.
func (MsgpackParser) NewDecoder() parser.Decoder {
	return &msgpackDecoder{EventEmitter: NewEmitter()}
}

type msgpackEncoder struct{}

// Encode implements parser.Encoder. A packet that cannot be encoded (a
// value MessagePack has no form for) encodes to nothing, as the JSON
// encoder drops data it cannot marshal.
func (msgpackEncoder) Encode(p *parser.Packet) []types.BufferInterface {
	b, err := encodeMsgpackPacket(p)
	if err != nil {
		return nil
	}
	return []types.BufferInterface{types.NewBytesBuffer(b)}
}

// encodeMsgpackPacket writes p as socket.io-msgpack-parser's encoder does:
// a map of type, data (when set), nsp and id (when set). Struct payloads
// use their json tags, so every parser sends the same field names. The
// keys of a map[string]any (and map[string]string, map[string]bool) are
// written in sorted order, as the JSON encoder writes them, wherever the
// map is (in an array, in a struct field): the same value always encodes
// to the same bytes. A time.Time in the payload's maps and arrays is
// written as notepack's Date (Date).
func encodeMsgpackPacket(p *parser.Packet) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true)

	n := 2
	if p.Data != nil {
		n++
	}
	if p.Id != nil {
		n++
	}
	if err := enc.EncodeMapLen(n); err != nil {
		return nil, err
	}
	if err := encodeField(enc, "type", int64(p.Type)); err != nil {
		return nil, err
	}
	if p.Data != nil {
		if err := encodeField(enc, "data", binaryAsBytes(p.Data)); err != nil {
			return nil, err
		}
	}
	nsp := p.Nsp
	if nsp == "" {
		nsp = "/"
	}
	if err := encodeField(enc, "nsp", nsp); err != nil {
		return nil, err
	}
	if p.Id != nil {
		if err := encodeField(enc, "id", *p.Id); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func encodeField(enc *msgpack.Encoder, key string, v any) error {
	if err := enc.EncodeString(key); err != nil {
		return err
	}
	return enc.Encode(v)
}

// binaryAsBytes replaces the library's buffers (binary attachments, as
// the handlers and the adapter hold them) by []byte, which MessagePack
// encodes as bin, and a time.Time by a Date.
func binaryAsBytes(v any) any {
	return jsontext.MapLeaves(v, func(leaf any) any {
		switch t := leaf.(type) {
		case types.BufferInterface:
			return t.Bytes()
		case time.Time:
			return Date(t)
		}
		return leaf
	})
}

// Date is a JavaScript Date in a payload: a time.Time that encodes as
// notepack.io 2.2.0 encodes a Date (and decodes one, decodeMsgpackValue),
// fixext 8 of type 0, the milliseconds since the epoch as a big-endian
// int64, and as JSON as Date.prototype.toJSON writes it (an ISO string
// with milliseconds, which encoding/json's form of a time.Time is not).
// The library would write the MessagePack timestamp, type -1, which
// notepack 2.2.0 reads as [-1, Buffer]. The adapter reads the Dates of
// other nodes and emitters (notepack 3's timestamps) into it, so that a
// msgpack client gets a Date, as from a Node server, and a JSON client
// the string.
type Date time.Time

var (
	_ msgpack.CustomEncoder = Date{}
	_ json.Marshaler        = Date{}
)

// ISO is the date as Date.prototype.toJSON prints it.
func (d Date) ISO() string { return time.Time(d).UTC().Format("2006-01-02T15:04:05.000Z") }

// MarshalJSON implements json.Marshaler.
func (d Date) MarshalJSON() ([]byte, error) { return []byte(`"` + d.ISO() + `"`), nil }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (d Date) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeExtHeader(0, 8); err != nil {
		return err
	}
	var b [8]byte
	ms := uint64(time.Time(d).UnixMilli())
	for i := range b {
		b[i] = byte(ms >> (56 - 8*i))
	}
	_, err := enc.Writer().Write(b[:])
	return err
}

type msgpackDecoder struct {
	types.EventEmitter
}

var (
	errMsgpackText      = errors.New("msgpack parser: text message (every packet is binary with this parser)")
	errMsgpackTruncated = errors.New("msgpack parser: truncated value")
	errMsgpackTooDeep   = errors.New("msgpack parser: nested too deep")
	errMsgpackTrailing  = errors.New("msgpack parser: trailing bytes after the packet")
	errMsgpackType      = errors.New("msgpack parser: invalid packet type")
	errMsgpackNsp       = errors.New("msgpack parser: invalid namespace")
	errMsgpackData      = errors.New("msgpack parser: invalid payload")
	errMsgpackID        = errors.New("msgpack parser: invalid ack id")
	errMsgpackKey       = errors.New("msgpack parser: a map key that is binary, an array, a map or an extension")
)

// maxMsgpackDepth bounds nesting (the packet map is level 1) as
// encoding/json bounds it for the JSON parser: how deep a payload may be
// is the handlers' business. The walks recurse once a level, on Go's
// growable stacks, and each level takes a byte at least, so a message
// (at most the server's buffer size) can hold no more than this many.
const maxMsgpackDepth = 10000

// Add implements parser.Decoder.
func (d *msgpackDecoder) Add(data any) error {
	var b []byte
	switch t := data.(type) {
	case types.BufferInterface:
		if _, text := t.(*types.StringBuffer); text {
			return errMsgpackText
		}
		b = t.Bytes()
	case []byte:
		b = t
	default:
		return errMsgpackText
	}
	p, err := decodeMsgpackPacket(b)
	if err != nil {
		return err
	}
	d.Emit("decoded", p)
	return nil
}

// Destroy implements parser.Decoder (it holds nothing between messages).
func (d *msgpackDecoder) Destroy() {}

// decodeMsgpackPacket reads one packet and checks it as
// socket.io-msgpack-parser's checkPacket does.
func decodeMsgpackPacket(b []byte) (*parser.Packet, error) {
	v, err := decodeMsgpackValue(b)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errMsgpackData
	}
	typ, ok := m["type"].(float64)
	if !ok || typ != math.Trunc(typ) || typ < float64(parser.CONNECT) || typ > float64(parser.CONNECT_ERROR) {
		return nil, errMsgpackType
	}
	p := &parser.Packet{Type: parser.PacketType(typ)}
	if p.Nsp, ok = m["nsp"].(string); !ok {
		return nil, errMsgpackNsp
	}
	data, hasData := m["data"]
	switch p.Type {
	case parser.CONNECT:
		// data is an object, or none: a client without auth sends
		// notepack's undefined (read as nil), which Node takes as no auth.
		// Refused, the connection closed before the "missing token"
		// connect_error, and the client reconnected without end (a
		// black-box audit of the msgpack parser, 2026-12-07)
		if _, obj := data.(map[string]any); hasData && data != nil && !obj {
			return nil, errMsgpackData
		}
	case parser.DISCONNECT:
		if hasData && data != nil {
			return nil, errMsgpackData
		}
	case parser.CONNECT_ERROR:
		_, str := data.(string)
		_, obj := data.(map[string]any)
		if !str && !obj {
			return nil, errMsgpackData
		}
	case parser.EVENT:
		// socket.io-msgpack-parser takes any list; socket.io-parser (the
		// JSON one) refuses an event with a reserved name, and so does
		// this one: "disconnect" sent as an event ran the socket's own
		// disconnect work, and left the connection open, out of its
		// user's presence and counts, still getting its rooms' events
		// (a black-box audit of the msgpack parser, 2026-12-07)
		if !ValidEventData(data) {
			return nil, errMsgpackData
		}
	default: // ACK
		if _, arr := data.([]any); !arr {
			return nil, errMsgpackData
		}
	}
	if hasData {
		p.Data = data
	}
	if idv, has := m["id"]; has && idv != nil {
		id, ok := idv.(float64)
		if !ok || id != math.Trunc(id) || id < 0 || id > 1<<53 {
			return nil, errMsgpackID
		}
		u := uint64(id)
		p.Id = &u
	}
	return p, nil
}

// reservedEvents are the event names Socket.IO keeps for itself: no
// client may send one, and socket.io-client refuses one it is sent.
var reservedEvents = map[string]bool{
	"connect": true, "connect_error": true, "disconnect": true,
	"disconnecting": true, "newListener": true, "removeListener": true,
}

// ReservedEvent reports whether name is an event name Socket.IO keeps
// for itself.
func ReservedEvent(name string) bool { return reservedEvents[name] }

// ValidEventData reports whether data is an EVENT packet's data as
// socket.io-parser takes it (its isPayloadValid): a list whose first
// element is a number or a name other than the reserved ones.
func ValidEventData(data any) bool {
	a, ok := data.([]any)
	if !ok || len(a) == 0 {
		return false
	}
	switch name := a[0].(type) {
	case float64:
		return true
	case string:
		return !reservedEvents[name]
	}
	return false
}

// decodeMsgpackValue reads the one MessagePack value b holds, once scan
// has found it well formed, into the shapes encoding/json
// gives (see MsgpackParser).
func decodeMsgpackValue(b []byte) (any, error) {
	s := scanners.Get().(*msgpackScanner)
	defer scanners.Put(s)
	defer s.r.Reset(nil)
	if err := s.scan(b); err != nil {
		return nil, err
	}
	s.r.Reset(b)
	v, err := s.decode()
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errMsgpackTruncated // the scan let nothing short through
		}
		return nil, err
	}
	return v, nil
}

// decode reads one value as notepack.io 2.2.0's decoder would, in
// JSON's shapes: every number is a float64, binary a byte buffer;
// extensions are as MsgpackParser says.
func (s *msgpackScanner) decode() (any, error) {
	c, err := s.dec.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case c == msgpcode.Nil:
		return nil, s.dec.DecodeNil()
	case c == msgpcode.False || c == msgpcode.True:
		return s.dec.DecodeBool()
	case msgpcode.IsFixedNum(c) || c >= msgpcode.Int8 && c <= msgpcode.Int64:
		n, err := s.dec.DecodeInt64()
		return float64(n), err
	case c >= msgpcode.Uint8 && c <= msgpcode.Uint64:
		n, err := s.dec.DecodeUint64() // DecodeInt64 would wrap a uint 64 from 2^63
		return float64(n), err
	case c == msgpcode.Float:
		f, err := s.dec.DecodeFloat32()
		return float64(f), err
	case c == msgpcode.Double:
		return s.dec.DecodeFloat64()
	case msgpcode.IsString(c):
		return s.dec.DecodeString()
	case msgpcode.IsBin(c):
		p, err := s.dec.DecodeBytes()
		if err != nil {
			return nil, err
		}
		if p == nil {
			p = []byte{}
		}
		return types.NewBytesBuffer(p), nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := s.dec.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = s.decode(); err != nil {
				return nil, err
			}
		}
		return a, nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := s.dec.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, n)
		for range n {
			kv, err := s.decode()
			if err != nil {
				return nil, err
			}
			k, ok := jsKey(kv)
			if !ok {
				return nil, errMsgpackKey
			}
			v, err := s.decode()
			if err != nil {
				return nil, err
			}
			if k != "__proto__" { // (as adapter's protoKey: Node drops it)
				m[k] = v
			}
		}
		return m, nil
	case msgpcode.IsExt(c):
		return s.ext(c)
	}
	return nil, fmt.Errorf("msgpack parser: unsupported type byte 0x%02x", c)
}

// jsKey is a map key as notepack.io makes it a property name in a Node
// server (JavaScript's String of it): a string as it is, a number as
// JavaScript writes it, nil "null", a boolean "true" or "false". Another
// key (binary, an array, a map, an extension) is refused.
func jsKey(v any) (string, bool) {
	switch k := v.(type) {
	case string:
		return k, true
	case nil:
		return "null", true
	case bool:
		return strconv.FormatBool(k), true
	case float64:
		switch {
		case math.IsNaN(k):
			return "NaN", true
		case math.IsInf(k, 1):
			return "Infinity", true
		case math.IsInf(k, -1):
			return "-Infinity", true
		case k == math.Trunc(k) && math.Abs(k) < 1e21:
			return strconv.FormatFloat(k, 'f', -1, 64), true
		}
		return strconv.FormatFloat(k, 'g', -1, 64), true
	}
	return "", false
}

// ext reads an extension as notepack.io 2.2.0 does: type 0 is an
// ArrayBuffer in ext 8/16/32, a Date in fixext 8 (big-endian int64
// milliseconds) and undefined in fixext 1; anything else is [type, bytes].
func (s *msgpackScanner) ext(c byte) (any, error) {
	typ, n, err := s.dec.DecodeExtHeader()
	if err != nil {
		return nil, err
	}
	data := make([]byte, n) // n was checked by the scan
	if err := s.dec.ReadFull(data); err != nil {
		return nil, err
	}
	if typ == 0 {
		switch c {
		case msgpcode.Ext8, msgpcode.Ext16, msgpcode.Ext32:
			return types.NewBytesBuffer(data), nil
		case msgpcode.FixExt1:
			return nil, nil
		case msgpcode.FixExt8:
			var ms uint64
			for _, x := range data {
				ms = ms<<8 | uint64(x)
			}
			return time.UnixMilli(int64(ms)).UTC(), nil
		}
	}
	return []any{float64(typ), types.NewBytesBuffer(data)}, nil
}

// scan walks the MessagePack value b holds, with vmihailenco/msgpack's
// Decoder primitives (PeekCode, DecodeBytesLen, DecodeArrayLen,
// DecodeMapLen, DecodeExtHeader, Skip), and refuses bytes after it. It
// makes nothing of what it reads: every declared length is checked against
// the bytes left (an item of an array or map takes at least one byte) and
// skipped, so the decoding that follows never sizes anything from a length
// alone; an extension's length too. (Through the library's Decoder the
// walk costs about 0.4 us a packet where the hand-written one it replaced
// took 0.1: some 6% of decoding a small event, which making the values
// dominates; no allocations either way.)
func (s *msgpackScanner) scan(b []byte) error {
	s.r.Reset(b)
	err := s.value(1)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errMsgpackTruncated
	}
	if err == nil && s.r.Len() != 0 {
		return errMsgpackTrailing
	}
	return err
}

type msgpackScanner struct {
	r   bytes.Reader
	dec *msgpack.Decoder // reads r in place (a bytes.Reader is an io.ByteScanner)
}

var scanners = sync.Pool{New: func() any {
	s := &msgpackScanner{}
	s.dec = msgpack.NewDecoder(&s.r)
	return s
}}

// value walks one value at depth (the number of arrays and maps it is
// in, itself included if it is one).
func (s *msgpackScanner) value(depth int) error {
	c, err := s.dec.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		return s.skip(s.dec.DecodeBytesLen())
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := s.dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		return s.items(uint64(n), n < 0, depth)
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := s.dec.DecodeMapLen()
		if err != nil {
			return err
		}
		return s.items(2*uint64(n), n < 0, depth)
	case msgpcode.IsExt(c):
		_, n, err := s.dec.DecodeExtHeader()
		return s.skip(n, err)
	case c == 0xc1: // never used
		return fmt.Errorf("msgpack parser: unsupported type byte 0x%02x", c)
	}
	return s.dec.Skip() // nil, bool, a number: 8 bytes at most
}

// skip passes over the n bytes of a string, binary or extension whose
// length was just read (err: that read's error), once they are there.
func (s *msgpackScanner) skip(n int, err error) error {
	if err != nil {
		return err
	}
	if err := s.fits(uint64(n), n < 0); err != nil {
		return err
	}
	_, err = s.r.Seek(int64(n), io.SeekCurrent)
	return err
}

// fits refuses n bytes or items beyond the bytes left; wrapped is a 32-bit
// length the library made a negative int of (on a 32-bit platform).
func (s *msgpackScanner) fits(n uint64, wrapped bool) error {
	if wrapped || n > uint64(s.r.Len()) {
		return errMsgpackTruncated
	}
	return nil
}

// items walks the n values (n ≤ 2^33: a map32's keys and values) of an
// array or map at depth.
func (s *msgpackScanner) items(n uint64, wrapped bool, depth int) error {
	if depth > maxMsgpackDepth {
		return errMsgpackTooDeep
	}
	if err := s.fits(n, wrapped); err != nil {
		return err
	}
	for ; n > 0; n-- {
		if err := s.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
