package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/v3/pkg/types"
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
// attachments are. A packet that socket.io-msgpack-parser would refuse
// (checkPacket), MessagePack that is malformed, truncated, followed by
// trailing bytes, nested deeper than 32 levels, with maps whose keys are
// not strings, or with extension types, is an error: the library closes
// that connection.
//
// The bytes are first walked by scanMsgpack, which checks every declared
// length against the bytes that remain before anything is allocated (a
// 5-byte "array of 2^32 items" would otherwise make the decoder allocate
// up to its own limits, megabytes per message); then vmihailenco/msgpack
// decodes them.
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
// use their json tags, so every parser sends the same field names.
func encodeMsgpackPacket(p *parser.Packet) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)

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
// encodes as bin.
func binaryAsBytes(v any) any {
	switch t := v.(type) {
	case types.BufferInterface:
		return t.Bytes()
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = binaryAsBytes(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = binaryAsBytes(e)
		}
		return out
	default:
		return v
	}
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
)

// maxMsgpackDepth bounds nesting (the packet map is level 1).
const maxMsgpackDepth = 32

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
	if err := scanMsgpack(b); err != nil {
		return nil, err
	}
	var raw any
	if err := msgpack.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("msgpack parser: %w", err)
	}
	v, err := jsonShaped(raw)
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
		if _, obj := data.(map[string]any); hasData && !obj {
			return nil, errMsgpackData
		}
	case parser.DISCONNECT:
		if hasData {
			return nil, errMsgpackData
		}
	case parser.CONNECT_ERROR:
		_, str := data.(string)
		_, obj := data.(map[string]any)
		if !str && !obj {
			return nil, errMsgpackData
		}
	default: // EVENT, ACK
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

// jsonShaped turns decoded MessagePack into the shapes encoding/json gives
// (see MsgpackParser).
func jsonShaped(v any) (any, error) {
	switch t := v.(type) {
	case nil, bool, string, float64:
		return t, nil
	case float32:
		return float64(t), nil
	case int8, int16, int32, int64:
		return float64(reflect.ValueOf(t).Int()), nil
	case uint8, uint16, uint32, uint64:
		return float64(reflect.ValueOf(t).Uint()), nil
	case []byte:
		return types.NewBytesBuffer(t), nil
	case []any:
		for i, e := range t {
			s, err := jsonShaped(e)
			if err != nil {
				return nil, err
			}
			t[i] = s
		}
		return t, nil
	case map[string]any:
		for k, e := range t {
			s, err := jsonShaped(e)
			if err != nil {
				return nil, err
			}
			t[k] = s
		}
		return t, nil
	default: // maps with other keys, extension values
		return nil, fmt.Errorf("msgpack parser: %T has no JSON form", v)
	}
}

// scanMsgpack walks the MessagePack value b holds, with vmihailenco/msgpack's
// Decoder primitives (PeekCode, DecodeBytesLen, DecodeArrayLen,
// DecodeMapLen, Skip), and refuses bytes after it. It makes nothing of what
// it reads: every declared length is checked against the bytes left (an
// item of an array or map takes at least one byte) and skipped, so the
// decoder never sizes anything from a length alone. Extension types are
// refused here. (Through the library's Decoder the walk costs about 0.4 us
// a packet where the hand-written one it replaced took 0.1: some 6% of
// decoding a small event, which Unmarshal dominates; no allocations
// either way.)
func scanMsgpack(b []byte) error {
	s := scanners.Get().(*msgpackScanner)
	defer scanners.Put(s)
	s.r.Reset(b)
	defer s.r.Reset(nil)
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

func (s *msgpackScanner) value(depth int) error {
	if depth > maxMsgpackDepth {
		return errMsgpackTooDeep
	}
	c, err := s.dec.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		n, err := s.dec.DecodeBytesLen()
		if err != nil {
			return err
		}
		if err := s.fits(uint64(n), n < 0); err != nil {
			return err
		}
		_, err = s.r.Seek(int64(n), io.SeekCurrent)
		return err
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
	case msgpcode.IsExt(c) || c == 0xc1: // 0xc1 is never used
		return fmt.Errorf("msgpack parser: unsupported type byte 0x%02x", c)
	}
	return s.dec.Skip() // nil, bool, a number: 8 bytes at most
}

// fits refuses n bytes or items beyond the bytes left; wrapped is a 32-bit
// length the library made a negative int of (on a 32-bit platform).
func (s *msgpackScanner) fits(n uint64, wrapped bool) error {
	if wrapped || n > uint64(s.r.Len()) {
		return errMsgpackTruncated
	}
	return nil
}

// items walks n values (n ≤ 2^33: a map32's keys and values).
func (s *msgpackScanner) items(n uint64, wrapped bool, depth int) error {
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
