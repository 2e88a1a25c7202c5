package adapter

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/transport"

	"github.com/presenced/presenced/internal/fuzzinput"
	"github.com/presenced/presenced/internal/memtest"
)

// Containers nested inside each other, each declaring as many elements as
// there are bytes left, must not each get a slice of that size: the
// elements still owed by the enclosing containers need those bytes too.
// (Each level used to allocate 16 bytes per remaining input byte: 6.5 KB
// of input made the decoder allocate 40 MB.)
func TestMsgpackNestedLengthsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		head byte
	}{{"array 32", 0xdd}, {"map 32", 0xdf}, {"array 16", 0xdc}, {"map 16", 0xde}} {
		const depth, pad = 500, 4000
		width := 4
		if tc.head == 0xdc || tc.head == 0xde {
			width = 2
		}
		total := depth*(1+width) + pad
		var in []byte
		for len(in) < depth*(1+width) {
			n := total - len(in) - 1 - width // every byte after this header
			in = append(in, tc.head)
			if width == 4 {
				in = binary.BigEndian.AppendUint32(in, uint32(n))
			} else {
				in = binary.BigEndian.AppendUint16(in, uint16(min(n, 0xffff)))
			}
		}
		in = append(in, bytes.Repeat([]byte{0xc0}, pad)...)
		var err error
		got := memtest.AllocatedBy(func() { _, err = decodeMsgpack(in) })
		if !errors.Is(err, errShortBuffer) {
			t.Errorf("%s: %v, want %v", tc.name, err, errShortBuffer)
		}
		if limit := uint64(64 * len(in)); got > limit {
			t.Errorf("%s: %d bytes of input made the decoder allocate %d bytes (more than %d)", tc.name, len(in), got, limit)
		}
	}
}

// A declared length beyond the input left is refused before anything of
// its size is made, whatever it counts. (On a 64-bit platform these were
// refused already; on a 32-bit one a 32-bit length of 2^31 or more became
// a negative int, and make panicked on it.)
func TestMsgpackDeclaredLengthsRefused(t *testing.T) {
	for _, head := range [][]byte{
		{0xd9, 0xff}, {0xda, 0xff, 0xff}, {0xdb, 0xff, 0xff, 0xff, 0xff}, {0xdb, 0x80, 0, 0, 0}, // str
		{0xc4, 0xff}, {0xc5, 0xff, 0xff}, {0xc6, 0xff, 0xff, 0xff, 0xff}, {0xc6, 0x80, 0, 0, 0}, // bin
		{0xc7, 0xff, 1}, {0xc8, 0xff, 0xff, 1}, {0xc9, 0xff, 0xff, 0xff, 0xff, 1}, {0xc9, 0x80, 0, 0, 0, 1}, // ext
		{0xdc, 0xff, 0xff}, {0xdd, 0xff, 0xff, 0xff, 0xff}, {0xdd, 0x80, 0, 0, 0}, // array
		{0xde, 0xff, 0xff}, {0xdf, 0xff, 0xff, 0xff, 0xff}, {0xdf, 0x80, 0, 0, 0}, // map
		{0x9f}, {0x8f}, {0xbf}, {0xd8, 1}, // fix types
	} {
		in := append(bytes.Clone(head), 1, 2, 3)
		var err error
		got := memtest.AllocatedBy(func() { _, err = decodeMsgpack(in) })
		if !errors.Is(err, errShortBuffer) {
			t.Errorf("% x: %v, want %v", in, err, errShortBuffer)
		}
		if got > 64<<10 {
			t.Errorf("% x: allocated %d bytes", in, got)
		}
	}
	// a map of 3 pairs needs 6 bytes at least; an array of 6 elements fits
	if _, err := decodeMsgpack([]byte{0xde, 0, 3, 1, 2, 3, 4, 5}); !errors.Is(err, errShortBuffer) {
		t.Errorf("map of 3 pairs in 5 bytes: %v", err)
	}
	if v, err := decodeMsgpack([]byte{0xdc, 0, 6, 1, 2, 3, 4, 5, 6}); err != nil || len(v.([]any)) != 6 {
		t.Errorf("array of 6: %v %v", v, err)
	}
	// uint 32 is unsigned whatever the platform's int
	if v, err := decodeMsgpack([]byte{0xce, 0xff, 0xff, 0xff, 0xff}); err != nil || v != float64(1<<32-1) {
		t.Errorf("uint 32 max: %v %v", v, err)
	}
}

// sameValue compares decoded values: NaN equals NaN, and an empty slice or
// map equals a nil one.
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case float64:
		b, ok := b.(float64)
		return ok && (a == b || a != a && b != b)
	case jsNumber:
		b, ok := b.(jsNumber)
		return ok && (a == b || a != a && b != b)
	case transport.Date:
		b, ok := b.(transport.Date)
		return ok && time.Time(a).Equal(time.Time(b))
	case []byte:
		b, ok := b.([]byte)
		return ok && bytes.Equal(a, b)
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	}
	return a == b
}

// FuzzMsgpackDecode reads arbitrary bytes: no panic, no more memory than a
// small multiple of the input, and what it reads is what it writes (the
// value decodes again, from its encoding, to itself, and that encoding is
// stable).
func FuzzMsgpackDecode(f *testing.F) {
	for _, seed := range [][]byte{
		{0x93, 0xa3, 'u', 'i', 'd', 0x82, 0xa4, 't', 'y', 'p', 'e', 0x02, 0xa3, 'n', 's', 'p', 0xa1, '/', 0xc0},
		{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0},
		{0xdf, 0, 0, 0, 2, 0xcb, 0x7f, 0xef, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x92, 0x01, 0x02, 0xc3},
		{0xd6, 0xff, 0, 0, 0, 1}, {0xd7, 0xff, 0xff, 0xff, 0xff, 0xfc, 0xff, 0xff, 0xff, 0xff}, {0xc7, 12, 0xff, 0x3b, 0x9a, 0xc9, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		{0xd4, 0, 0}, {0xd5, 0, 1, 2}, {0xd8, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		{0xca, 0x7f, 0xc0, 0, 0}, {0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0},
		{0xc6, 0, 0, 0, 3, 1, 2, 3}, {0xdb, 0, 0, 0, 2, 0xff, 0xfe}, {0xc1},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var v any
		var err error
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v, err = decodeMsgpack(in)
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(64*len(in)+64<<10); got > limit {
			t.Fatalf("%d bytes of input allocated %d bytes", len(in), got)
		}
		if err != nil {
			return
		}
		enc, err := encodeMsgpack(v)
		if err != nil {
			t.Fatalf("%#v decoded, but does not encode: %v", v, err)
		}
		back, err := decodeMsgpack(enc)
		if err != nil || !sameValue(v, back) {
			t.Fatalf("%#v decoded, encoded as % x, read back as %#v, %v", v, enc, back, err)
		}
		if again, _ := encodeMsgpack(back); !bytes.Equal(again, enc) {
			t.Fatalf("%#v encodes as % x, then as % x", v, enc, again)
		}
	})
}

// msgpackBuilder makes, from fuzz input (a fuzzinput.Program), values of
// the kinds the adapter encodes; strings and binary are cut from S. value
// returns the
// value and what decoding its encoding must give (the JavaScript view:
// every number a float64, objects maps).
type msgpackBuilder struct{ fuzzinput.Program }

// str is a piece of S, now and then repeated into a long one, for the 16-
// and 32-bit lengths.
func (mb *msgpackBuilder) str() string {
	if mb.S == "" {
		return ""
	}
	s := mb.Str()
	if mb.Next()%8 == 0 {
		s = strings.Repeat(s, 1+int(mb.Next())<<4)
	}
	return s
}

func (mb *msgpackBuilder) value(depth int) (v, want any) {
	switch op := mb.Next() % 16; {
	case op == 0:
		return nil, nil
	case op == 1:
		b := mb.Next()&1 == 1
		return b, b
	case op == 2:
		s := mb.str()
		return s, s
	case op == 3:
		i := int64(mb.U64())
		return i, float64(i)
	case op == 4:
		u := mb.U64()
		return u, float64(u)
	case op == 5:
		i := int(int16(mb.U64()))
		return i, float64(i)
	case op == 6:
		return mb.X, number(mb.X)
	case op == 7:
		f := math.Float64frombits(mb.U64())
		return f, number(f)
	case op == 8:
		p := []byte(mb.str())
		return p, p
	case op == 9 && depth < 6:
		var a, w []any
		for range mb.Next() % 5 {
			v, want := mb.value(depth + 1)
			a, w = append(a, v), append(w, want)
		}
		return a, w
	case op == 10 && depth < 6:
		m, w := map[string]any{}, map[string]any{}
		for range mb.Next() % 5 {
			k := mb.str()
			m[k], w[k] = mb.value(depth + 1)
		}
		return m, w
	case op == 11 && depth < 6:
		var o obj
		w := map[string]any{}
		for range mb.Next() % 5 {
			k := mb.str()
			v, want := mb.value(depth + 1)
			o, w[k] = append(o, kv{k, v}), want // the last of a key wins
		}
		return o, w
	case op == 12:
		a, b := int8(mb.Next()), uint16(mb.U64())
		return []any{a, b}, []any{float64(a), float64(b)}
	case op == 13:
		ss := []string{mb.str(), mb.str()}
		return ss, []any{ss[0], ss[1]}
	case op == 14:
		f := float32(mb.X)
		return f, number(float64(f))
	}
	n := int32(mb.U64())
	return n, float64(n)
}

// FuzzMsgpackRoundTrip encodes values built from the input and decodes
// them back: decode(encode(x)) is x as JavaScript would see it.
func FuzzMsgpackRoundTrip(f *testing.F) {
	f.Add([]byte{9, 3, 2, 0, 5, 11, 2, 2, 0, 3, 1, 1, 0, 8, 2, 3}, "uidtypensp/", 1.5)
	f.Add([]byte{10, 4, 3, 0x80, 0, 0, 0, 0, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 7, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1, 6}, "k\xff\u00e9", math.Inf(-1))
	f.Add([]byte{9, 4, 2, 0, 3, 0, 255, 8, 0, 3, 0, 200, 12, 0x80, 0xff, 0xff, 14}, "0123456789abcdefghijklmnopqrstuvwxyz", math.Copysign(0, -1))
	f.Fuzz(func(t *testing.T, prog []byte, s string, x float64) {
		mb := &msgpackBuilder{fuzzinput.Program{B: prog, S: s, X: x}}
		v, want := mb.value(0)
		enc, err := encodeMsgpack(v)
		if err != nil {
			t.Fatalf("%#v: %v", v, err)
		}
		got, err := decodeMsgpack(enc)
		if err != nil || !sameValue(got, want) {
			t.Fatalf("%#v encoded as % x, decoded as %#v, %v; want %#v", v, enc, got, err, want)
		}
	})
}

// A map key that is itself a map is "[object Object]", as in JavaScript:
// it used to be printed whole (fmt), so maps nested as each other's keys
// printed the innermost key once per level (a 10 KB key under 500 levels:
// 11 KB of input, more than 10 MB allocated).
func TestMsgpackKeysOfKeysBounded(t *testing.T) {
	const depth, size = 500, 10000
	in := bytes.Repeat([]byte{0x81}, depth)
	in = append(in, 0xda, size>>8, size&0xff)
	in = append(in, bytes.Repeat([]byte{'k'}, size)...)
	in = append(in, bytes.Repeat([]byte{0xc0}, depth)...)
	var v any
	var err error
	got := memtest.AllocatedBy(func() { v, err = decodeMsgpack(in) })
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := v.(map[string]any); !ok || len(m) != 1 || !has(m, "[object Object]") {
		t.Errorf("decoded %.80v", v)
	}
	if limit := uint64(64 * len(in)); got > limit {
		t.Errorf("%d bytes of input allocated %d bytes (more than %d)", len(in), got, limit)
	}
	// keys of other kinds, as String(key) gives them in JavaScript
	for _, tc := range []struct {
		key  []byte
		want string
	}{
		{[]byte{0x93, 0x01, 0xc0, 0x92, 0xa1, 'a', 0x80}, "1,,a,[object Object]"},
		{[]byte{0xc4, 2, 'h', 'i'}, "hi"},
		{[]byte{0xc0}, "null"}, {[]byte{0xc3}, "true"}, {[]byte{0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}, "1.5"}, {[]byte{0x90}, ""},
		{[]byte{0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0}, "NaN"}, {[]byte{0xcb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0}, "Infinity"},
		{[]byte{0x92, 0xcb, 0xff, 0xf0, 0, 0, 0, 0, 0, 0, 0x01}, "-Infinity,1"},
	} {
		v, err := decodeMsgpack(append(append([]byte{0x81}, tc.key...), 0xc0))
		if m, ok := v.(map[string]any); err != nil || !ok || !has(m, tc.want) {
			t.Errorf("key % x: %#v %v, want the key %q", tc.key, v, err, tc.want)
		}
	}
}

// BenchmarkMsgpackDecode reads what the adapter's hot path reads: a
// broadcast of @socket.io/redis-adapter (uid, packet, options), with a
// small object argument, and one carrying 1 KB of binary.
func BenchmarkMsgpackDecode(b *testing.B) {
	packet := func(args ...any) obj {
		return obj{{"type", 2}, {"data", append([]any{"presence"}, args...)}, {"nsp", "/"}}
	}
	opts := obj{{"rooms", []string{"room-1"}}, {"except", []string{}}, {"flags", obj{}}}
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"broadcast", []any{"ab12cd", packet(obj{{"user", "u-42"}, {"status", "online"}, {"at", 1.7e12}, {"seq", 12345}}), opts}},
		{"binary", []any{"ab12cd", packet(bytes.Repeat([]byte{7}, 1024)), opts}},
	} {
		in, err := encodeMsgpack(tc.v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := decodeMsgpack(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The values the decoder gives, format by format, as the hand-written
// decoder gave them before it moved onto vmihailenco/msgpack's primitives
// (and as the callers read them: JavaScript's view).
func TestMsgpackDecodeValues(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want any
	}{
		{[]byte{0x05}, 5.0}, {[]byte{0xff}, -1.0}, {[]byte{0xd0, 0x80}, -128.0},
		{[]byte{0xcc, 0xff}, 255.0}, {[]byte{0xcd, 0xff, 0xff}, 65535.0},
		{[]byte{0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0}, float64(1 << 63)}, // unsigned, not int64's negative
		{[]byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, -float64(1 << 63)},
		{[]byte{0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}, 1.5},
		{[]byte{0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0}, jsNumber(math.NaN())}, // NaN, ±Infinity: see jsNumber
		{[]byte{0xcb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0}, jsNumber(math.Inf(1))},
		{[]byte{0xca, 0xff, 0x80, 0, 0}, jsNumber(math.Inf(-1))},
		{[]byte{0xc0}, nil}, {[]byte{0xc2}, false}, {[]byte{0xc3}, true},
		{[]byte{0xa2, 'h', 'i'}, "hi"}, {[]byte{0xd9, 0}, ""},
		{[]byte{0xc4, 2, 1, 2}, []byte{1, 2}}, {[]byte{0xc4, 0}, []byte{}},
		{[]byte{0x92, 0x01, 0xa1, 'a'}, []any{1.0, "a"}}, {[]byte{0x90}, []any{}},
		{[]byte{0x82, 0xa1, 'a', 0x01, 0x02, 0xc0}, map[string]any{"a": 1.0, "2": nil}},
		{[]byte{0xd7, 0xff, 0, 0, 0, 4, 0, 0, 0, 1}, transport.Date(time.Unix(1, 1))}, // timestamp 64, 1 ns
		{[]byte{0xc7, 12, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}, transport.Date(time.Unix(2, 0))},
		{[]byte{0xd4, 0, 0}, nil},                                      // notepack's undefined
		{[]byte{0xd5, 0, 1, 2}, []byte{1, 2}},                          // ArrayBuffer
		{[]byte{0xd5, 5, 1, 2}, []any{5.0, []byte{1, 2}}},              // other types: [type, bytes]
		{[]byte{0xc7, 3, 0xff, 1, 2, 3}, []any{-1.0, []byte{1, 2, 3}}}, // a timestamp of no timestamp length
		{[]byte{0x01, 0xc1, 0xc1}, 1.0},                                // what follows the value is not read
	} {
		got, err := decodeMsgpack(tc.in)
		if err != nil || !sameValue(got, tc.want) || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", tc.want) {
			t.Errorf("% x: %#v %v, want %#v", tc.in, got, err, tc.want)
		}
		if b, ok := got.([]byte); ok && b == nil {
			t.Errorf("% x: nil binary", tc.in)
		}
	}
	for _, in := range [][]byte{{}, {0xc1}, {0xcd, 1}, {0x91}, {0xd6, 0xff, 0, 0}, {0xc7}} {
		if v, err := decodeMsgpack(in); err == nil {
			t.Errorf("% x: decoded %#v", in, v)
		}
	}
	deep := append(bytes.Repeat([]byte{0x91}, maxDepth+1), 0xc0)
	if _, err := decodeMsgpack(deep); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Errorf("%d levels: %v", maxDepth+1, err)
	}
}

// handshakeSent is h as another node decodes it from a fetchSockets answer.
func handshakeSent(t *testing.T, h *socket.Handshake) map[string]any {
	t.Helper()
	b, err := encodeMsgpack(handshakeObj(h))
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeMsgpack(b)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := v.(map[string]any)
	return m
}

// A handshake whose auth the server dropped (the token, once verified) is
// sent with an empty auth object, as Node would have it.
func TestHandshakeWithoutAuth(t *testing.T) {
	m := handshakeSent(t, &socket.Handshake{Headers: map[string]any{}, Query: map[string]any{}})
	if auth, ok := m["auth"].(map[string]any); !ok || len(auth) != 0 {
		t.Fatalf("auth sent as %#v, want {}", m["auth"])
	}
}

// A handshake reaches another node's fetchSockets in Node's shapes: the
// address without its port, the time as JavaScript's Date writes it.
func TestHandshakeNodeShapes(t *testing.T) {
	m := handshakeSent(t, &socket.Handshake{Headers: map[string]any{}, Query: map[string]any{}, Address: "127.0.0.1:57970", Time: "2026-12-06T20:44:00Z"})
	if m["address"] != "127.0.0.1" || m["time"] != "Sun Dec 06 2026 20:44:00 GMT+0000 (Coordinated Universal Time)" {
		t.Fatalf("address %q, time %q", m["address"], m["time"])
	}
	if got := hostOnly("[::1]:80"); got != "::1" {
		t.Errorf("hostOnly([::1]:80) = %q", got)
	}
}

// NaN and ±Infinity that @socket.io/redis-emitter (notepack 3.0.1) sends
// reach a msgpack client as numbers, as a Node server's
// socket.io-msgpack-parser sends them, and a JSON client as null, as
// JSON.stringify writes them; so does anything else that makes JSON of
// the decoded values (encoding/json, appendJSON), and the adapter's own
// msgpack keeps the numbers.
func TestNonFiniteNumbersForEachParser(t *testing.T) {
	// notepack 3.0.1: ["emitter", {type: 2, data: ["ev", NaN, Infinity,
	// {x: -Infinity, y: 1.5}], nsp: "/"}, {rooms: ["r1"], except: [], flags: {}}]
	v, p := emitterMessage(t, "93a7656d697474657283a47479706502a46461746194a26576cb7ff8000000000000cb7ff0000000000000"+
		"82a178cbfff0000000000000a179cb3ff8000000000000a36e7370a12f83a5726f6f6d7391a27231a665786365707490a5666c61677380")

	// socket.io-msgpack-parser, as our server writes it: floats 64, as
	// notepack 2.2.0 writes them for a Node server
	enc := transport.MsgpackParser{}.NewEncoder().Encode(p)
	if len(enc) != 1 {
		t.Fatalf("msgpack parser: %d buffers", len(enc))
	}
	mp := hex.EncodeToString(enc[0].Bytes())
	for _, want := range []string{
		"94a26576cb7ff8000000000000cb7ff0000000000000",   // "ev", NaN, Infinity
		"82a178cbfff0000000000000a179cb3ff8000000000000", // {x: -Infinity, y: 1.5}
	} {
		if !strings.Contains(mp, want) {
			t.Errorf("msgpack parser wrote %s, without %s", mp, want)
		}
	}
	var back map[string]any
	if err := msgpack.Unmarshal(enc[0].Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	data, _ := back["data"].([]any)
	if len(data) != 4 || !isNaN(data[1]) || data[2] != math.Inf(1) || data[3].(map[string]any)["x"] != math.Inf(-1) {
		t.Errorf("a msgpack client reads %#v", back["data"])
	}

	// the JSON parser: null
	enc = parser.NewParser().NewEncoder().Encode(p)
	if len(enc) != 1 || enc[0].String() != `2["ev",null,null,{"x":null,"y":1.5}]` {
		t.Errorf("JSON parser wrote %v", enc)
	}
	// encoding/json and appendJSON: null
	if b, err := json.Marshal(p.Data); err != nil || string(b) != `["ev",null,null,{"x":null,"y":1.5}]` {
		t.Errorf("encoding/json: %s %v", b, err)
	}
	if b, err := appendJSON(nil, p.Data); err != nil || string(b) != `["ev",null,null,{"x":null,"y":1.5}]` {
		t.Errorf("appendJSON: %s %v", b, err)
	}
	// the adapter's msgpack, towards Redis: the numbers, as notepack 3.0.1
	// writes them (a Go map's keys sorted)
	b, err := encodeMsgpack(v)
	if err != nil || !strings.Contains(hex.EncodeToString(b), "94a26576cb7ff8000000000000cb7ff000000000000082a178cbfff0000000000000") {
		t.Errorf("encodeMsgpack: %x %v", b, err)
	}
	if again, err := decodeMsgpack(b); err != nil || !sameValue(again, v) {
		t.Errorf("encodeMsgpack: %x reads back as %#v %v", b, again, err)
	}
}

// A Date from another node or an emitter (notepack 3.0.1's timestamp)
// reaches a msgpack client as a Date, as from a Node server (notepack
// 2.2.0's fixext 8 of type 0), a JSON client as its ISO string, and goes
// back to Redis as the timestamp.
func TestDateForEachParser(t *testing.T) {
	// ["emitter", {type: 2, data: ["ev", new Date(1000)], nsp: "/"},
	// {rooms: ["r1"], except: [], flags: {}}]
	v, p := emitterMessage(t, "93a7656d697474657283a47479706502a46461746192a26576d6ff00000001a36e7370a12f"+
		"83a5726f6f6d7391a27231a665786365707490a5666c61677380")
	enc := transport.MsgpackParser{}.NewEncoder().Encode(p)
	if len(enc) != 1 || !strings.Contains(hex.EncodeToString(enc[0].Bytes()), "92a26576d70000000000000003e8") {
		t.Errorf("msgpack parser wrote %x, want the Date as notepack 2.2.0's fixext 8 of type 0", enc)
	}
	enc = parser.NewParser().NewEncoder().Encode(p)
	if len(enc) != 1 || enc[0].String() != `2["ev","1970-01-01T00:00:01.000Z"]` {
		t.Errorf("JSON parser wrote %v", enc)
	}
	if b, err := appendJSON(nil, p.Data); err != nil || string(b) != `["ev","1970-01-01T00:00:01.000Z"]` {
		t.Errorf("appendJSON: %s %v", b, err)
	}
	if b, err := encodeMsgpack(v); err != nil || !strings.Contains(hex.EncodeToString(b), "92a26576d6ff00000001") {
		t.Errorf("encodeMsgpack: %x %v, want the timestamp", b, err)
	}
}

// emitterMessage decodes an emitter's message (hex) and its packet.
func emitterMessage(t *testing.T, hexMsg string) (any, *parser.Packet) {
	t.Helper()
	in, err := hex.DecodeString(hexMsg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeMsgpack(in)
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodePacket(v.([]any)[1])
	if err != nil {
		t.Fatal(err)
	}
	return v, p
}

func isNaN(v any) bool {
	f, ok := v.(float64)
	return ok && math.IsNaN(f)
}

// A map key "__proto__" is dropped, as notepack.io's decoder in a Node
// server drops it (it sets the object's prototype): relayed, it became the
// prototype of what every msgpack client decoded (a black-box audit,
// 2026-12-07).
func TestMsgpackProtoKeyDropped(t *testing.T) {
	// {"__proto__": {"isAdmin": true}, "a": 1}
	in := []byte{0x82, 0xa9, '_', '_', 'p', 'r', 'o', 't', 'o', '_', '_', 0x81, 0xa7, 'i', 's', 'A', 'd', 'm', 'i', 'n', 0xc3, 0xa1, 'a', 0x01}
	got, err := decodeMsgpack(in)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := got.(map[string]any); !ok || len(m) != 1 || m["a"] != 1.0 {
		t.Fatalf("decoded %#v, want {a: 1} alone", got)
	}
}
