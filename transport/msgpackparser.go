package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
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
	return &msgpackDecoder{EventEmitter: types.NewEventEmitter()}
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
	rest, err := scanMsgpack(b, 1)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, errMsgpackTrailing
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
	case int8:
		return float64(t), nil
	case int16:
		return float64(t), nil
	case int32:
		return float64(t), nil
	case int64:
		return float64(t), nil
	case uint8:
		return float64(t), nil
	case uint16:
		return float64(t), nil
	case uint32:
		return float64(t), nil
	case uint64:
		return float64(t), nil
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

// scanMsgpack walks one MessagePack value at the start of b and returns
// what follows it. It allocates nothing, and refuses any declared length
// longer than the bytes left (an item of an array or map takes at least
// one byte), so the decoder never sizes anything from a length alone.
// Extension types are refused here.
func scanMsgpack(b []byte, depth int) ([]byte, error) {
	if len(b) == 0 {
		return nil, errMsgpackTruncated
	}
	if depth > maxMsgpackDepth {
		return nil, errMsgpackTooDeep
	}
	c, b := b[0], b[1:]
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		return b, nil
	case c&0xf0 == 0x80: // fixmap
		return scanItems(b, 2*uint64(c&0x0f), depth)
	case c&0xf0 == 0x90: // fixarray
		return scanItems(b, uint64(c&0x0f), depth)
	case c&0xe0 == 0xa0: // fixstr
		return skipBytes(b, uint64(c&0x1f))
	}
	switch c {
	case 0xc4, 0xd9: // bin8, str8
		n, b, err := readLen(b, 1)
		if err != nil {
			return nil, err
		}
		return skipBytes(b, n)
	case 0xc5, 0xda: // bin16, str16
		n, b, err := readLen(b, 2)
		if err != nil {
			return nil, err
		}
		return skipBytes(b, n)
	case 0xc6, 0xdb: // bin32, str32
		n, b, err := readLen(b, 4)
		if err != nil {
			return nil, err
		}
		return skipBytes(b, n)
	case 0xcc, 0xd0: // uint8, int8
		return skipBytes(b, 1)
	case 0xcd, 0xd1:
		return skipBytes(b, 2)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return skipBytes(b, 4)
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return skipBytes(b, 8)
	case 0xdc: // array16
		n, b, err := readLen(b, 2)
		if err != nil {
			return nil, err
		}
		return scanItems(b, n, depth)
	case 0xdd: // array32
		n, b, err := readLen(b, 4)
		if err != nil {
			return nil, err
		}
		return scanItems(b, n, depth)
	case 0xde: // map16
		n, b, err := readLen(b, 2)
		if err != nil {
			return nil, err
		}
		return scanItems(b, 2*n, depth)
	case 0xdf: // map32
		n, b, err := readLen(b, 4)
		if err != nil {
			return nil, err
		}
		return scanItems(b, 2*n, depth)
	default: // 0xc1 (never used), ext and fixext (0xc7-0xc9, 0xd4-0xd8)
		return nil, fmt.Errorf("msgpack parser: unsupported type byte 0x%02x", c)
	}
}

// scanItems walks n values (n ≤ 2^33: a map32's keys and values).
func scanItems(b []byte, n uint64, depth int) ([]byte, error) {
	if n > uint64(len(b)) {
		return nil, errMsgpackTruncated
	}
	var err error
	for ; n > 0; n-- {
		if b, err = scanMsgpack(b, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func readLen(b []byte, width int) (uint64, []byte, error) {
	if len(b) < width {
		return 0, nil, errMsgpackTruncated
	}
	switch width {
	case 1:
		return uint64(b[0]), b[1:], nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), b[2:], nil
	default:
		return uint64(binary.BigEndian.Uint32(b)), b[4:], nil
	}
}

func skipBytes(b []byte, n uint64) ([]byte, error) {
	if n > uint64(len(b)) {
		return nil, errMsgpackTruncated
	}
	return b[n:], nil
}
