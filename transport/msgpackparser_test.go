package transport

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

func decodeOne(t testing.TB, b []byte) (*parser.Packet, error) {
	t.Helper()
	d := MsgpackParser{}.NewDecoder()
	var got *parser.Packet
	_ = d.On("decoded", func(args ...any) { got = args[0].(*parser.Packet) })
	err := d.Add(types.NewBytesBuffer(b))
	if err == nil && got == nil {
		t.Fatal("no error and no packet")
	}
	return got, err
}

func mp(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type payloadWithTags struct {
	ConversationID string  `json:"conversationId"`
	At             *string `json:"at"`
	Skip           string  `json:"skip,omitempty"`
}

func TestMsgpackParserRoundTrip(t *testing.T) {
	id := uint64(7)
	bin := types.NewBytesBuffer([]byte{0, 1, 2, 255})
	for _, p := range []*parser.Packet{
		{Type: parser.CONNECT, Nsp: "/", Data: map[string]any{"token": "abc"}},
		{Type: parser.CONNECT, Nsp: "/admin"},
		{Type: parser.DISCONNECT, Nsp: "/"},
		{Type: parser.EVENT, Nsp: "/", Data: []any{"typing", map[string]any{"n": 1.5, "big": float64(1 << 40), "neg": -3.0, "ok": true, "nil": nil}}},
		{Type: parser.EVENT, Nsp: "/", Id: &id, Data: []any{"file", bin}},
		{Type: parser.ACK, Nsp: "/", Id: &id, Data: []any{map[string]any{"ok": true, "list": []any{"a", "b"}}}},
		{Type: parser.CONNECT_ERROR, Nsp: "/", Data: map[string]any{"message": "unauthorized"}},
	} {
		enc := MsgpackParser{}.NewEncoder().Encode(p)
		if len(enc) != 1 {
			t.Fatalf("%v: %d buffers", p, len(enc))
		}
		got, err := decodeOne(t, enc[0].Bytes())
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if got.Type != p.Type || got.Nsp != p.Nsp || (got.Id == nil) != (p.Id == nil) || (p.Id != nil && *got.Id != *p.Id) {
			t.Errorf("%+v: got %+v", p, got)
		}
		if !reflect.DeepEqual(asBytes(got.Data), asBytes(p.Data)) {
			t.Errorf("%+v: data %#v", p, got.Data)
		}
	}
}

// asBytes compares binary values by content (and NaN as equal to itself).
func asBytes(v any) any {
	switch t := v.(type) {
	case types.BufferInterface:
		return "bin:" + hex.EncodeToString(t.Bytes())
	case float64:
		if math.IsNaN(t) {
			return "NaN"
		}
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = asBytes(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = asBytes(e)
		}
		return out
	}
	return v
}

// Struct payloads travel with their json names, as with the JSON parser.
func TestMsgpackParserStructTags(t *testing.T) {
	p := &parser.Packet{Type: parser.EVENT, Nsp: "/", Data: []any{"presence:join", payloadWithTags{ConversationID: "c1"}}}
	got, err := decodeOne(t, MsgpackParser{}.NewEncoder().Encode(p)[0].Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"presence:join", map[string]any{"conversationId": "c1", "at": nil}}
	if !reflect.DeepEqual(got.Data, want) {
		t.Fatalf("got %#v", got.Data)
	}
}

// What socket.io-msgpack-parser's encoder (notepack) writes for an event
// with an ack id decodes to the same packet.
func TestMsgpackParserReadsNotepackBytes(t *testing.T) {
	// notepack.encode({type: 2, data: ["heartbeat", {active: true}], nsp: "/", id: 1})
	b, _ := hex.DecodeString("84a47479706502a46461746192a9686561727462656174" + "81a6616374697665c3" + "a36e7370a12fa26964" + "01")
	got, err := decodeOne(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != parser.EVENT || got.Nsp != "/" || got.Id == nil || *got.Id != 1 ||
		!reflect.DeepEqual(got.Data, []any{"heartbeat", map[string]any{"active": true}}) {
		t.Fatalf("got %+v", got)
	}
}

// A map key that is a number, nil or a boolean is its string, as a Node
// server (notepack.io) makes it a property name: the event gets its
// handler's answer. It closed the connection (a client in another language
// can send such keys; the official one cannot).
func TestMsgpackParserKeysAsJavaScript(t *testing.T) {
	head := mpHex(t, "83a474797065"+"02a36e7370a12fa464617461"+"92a178") // {type: 2, nsp: "/", data: ["x", …]}
	// {conversationId: "c", 1: 2, nil: 3, true: 4, -1.5: 5, 1e21: 6}
	payload := mpHex(t, "86"+"ae636f6e766572736174696f6e4964a163"+"0102"+"c003"+"c304"+"cbbff800000000000005"+"cb444b1ae4d6e2ef5006")
	got, err := decodeOne(t, append(head, payload...))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"x", map[string]any{"conversationId": "c", "1": 2.0, "null": 3.0, "true": 4.0, "-1.5": 5.0, "1e+21": 6.0}}
	if !reflect.DeepEqual(got.Data, want) {
		t.Fatalf("got %#v, want %#v", got.Data, want)
	}
}

func TestMsgpackParserRefuses(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, maxMsgpackDepth+1)
	deep = append(deep, 0xc0)
	for _, tc := range []struct {
		name string
		in   []byte
		err  error
	}{
		{"empty", nil, errMsgpackTruncated},
		{"not a map", mp(t, []any{1, 2}), errMsgpackData},
		{"no type", mp(t, map[string]any{"nsp": "/", "data": []any{"x"}}), errMsgpackType},
		{"type too big", mp(t, map[string]any{"type": 5, "nsp": "/", "data": []any{"x"}}), errMsgpackType},
		{"fractional type", mp(t, map[string]any{"type": 2.5, "nsp": "/", "data": []any{"x"}}), errMsgpackType},
		{"no nsp", mp(t, map[string]any{"type": 2, "data": []any{"x"}}), errMsgpackNsp},
		{"event without array", mp(t, map[string]any{"type": 2, "nsp": "/", "data": "x"}), errMsgpackData},
		{"event without a name", mp(t, map[string]any{"type": 2, "nsp": "/", "data": []any{}}), errMsgpackData},
		{"event named by a map", mp(t, map[string]any{"type": 2, "nsp": "/", "data": []any{map[string]any{}}}), errMsgpackData},
		{"event named disconnect", mp(t, map[string]any{"type": 2, "nsp": "/", "data": []any{"disconnect", "x"}}), errMsgpackData},
		{"event named connect", mp(t, map[string]any{"type": 2, "nsp": "/", "data": []any{"connect"}}), errMsgpackData},
		{"event named newListener", mp(t, map[string]any{"type": 2, "nsp": "/", "data": []any{"newListener", "x"}}), errMsgpackData},
		{"disconnect with data", mp(t, map[string]any{"type": 1, "nsp": "/", "data": "x"}), errMsgpackData},
		{"connect with array", mp(t, map[string]any{"type": 0, "nsp": "/", "data": []any{}}), errMsgpackData},
		{"negative id", mp(t, map[string]any{"type": 2, "nsp": "/", "data": []any{"x"}, "id": -1}), errMsgpackID},
		{"string id", mp(t, map[string]any{"type": 2, "nsp": "/", "data": []any{"x"}, "id": "1"}), errMsgpackID},
		{"array32 of 2^32-1 items in 9 bytes", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0, 0xc0, 0xc0}, errMsgpackTruncated},
		{"map32 of 2^32-1 pairs", []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0}, errMsgpackTruncated},
		{"str32 longer than the input", []byte{0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'}, errMsgpackTruncated},
		{"bin32 longer than the input", []byte{0xc6, 0xff, 0xff, 0xff, 0xff, 'a'}, errMsgpackTruncated},
		{"too deep", deep, errMsgpackTooDeep},
		{"trailing bytes", append(mp(t, map[string]any{"type": 1, "nsp": "/"}), 0xc0), errMsgpackTrailing},
		{"an extension instead of the packet map", []byte{0xd6, 0xff, 0, 0, 0, 1}, errMsgpackData},
		{"ext32 longer than the input", []byte{0xc9, 0xff, 0xff, 0xff, 0xff, 0, 1}, errMsgpackTruncated},
		{"ext8 longer than the input", []byte{0x91, 0xc7, 0x05, 0x00, 1, 2}, errMsgpackTruncated},
		{"fixext 16 cut short", []byte{0x91, 0xd8, 0x01, 1, 2, 3}, errMsgpackTruncated},
		{"ext header cut short", []byte{0x91, 0xc8, 0x00}, errMsgpackTruncated},
		{"binary key in the payload", append(mpHex(t, "83a474797065"+"02a36e7370a12fa464617461"+"92a178"), 0x81, 0xc4, 0x01, 'k', 0x02), errMsgpackKey},
		{"array key in the payload", append(mpHex(t, "83a474797065"+"02a36e7370a12fa464617461"+"92a178"), 0x81, 0x91, 0x01, 0x02), errMsgpackKey},
	} {
		_, err := decodeOne(t, tc.in)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	for name, in := range map[string][]byte{
		"never-used 0xc1":    {0xc1},
		"integer map keys":   mp(t, map[int]any{1: 2}),
		"text frame instead": nil,
	} {
		var err error
		if in == nil {
			err = MsgpackParser{}.NewDecoder().Add(types.NewStringBufferString(`2["x"]`))
		} else {
			_, err = decodeOne(t, in)
		}
		if err == nil || !strings.HasPrefix(err.Error(), "msgpack parser:") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func mpHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// What a real client's notepack.io 2.2.0 writes for an ArrayBuffer or a
// typed array (ext 8/16/32 of type 0), a Date (fixext 8 of type 0) and
// undefined (fixext 1 of type 0) decodes as Node's server decodes it:
// binary, a time, nil; any other extension is [type, binary].
func TestMsgpackParserExtensions(t *testing.T) {
	// socket.io-msgpack-parser 3.0.2's encoding of {type: 2, nsp: "/",
	// data: ["x", new Uint8Array([1, 2, 3]), new Date(1700000000123),
	// new Date(-1), [undefined], new Float32Array([1.5]).buffer,
	// new Uint8Array(300)]}
	b := mpHex(t, "83a47479706502a36e7370a12fa46461746197a178"+
		"c70300010203"+ // ext 8, type 0: the Uint8Array
		"d7000000018bcfe5687b"+ // fixext 8, type 0: the Date
		"d700ffffffffffffffff"+ // Date(-1)
		"91d40000"+ // [undefined]
		"c704000000c03f"+ // the Float32Array's buffer
		"c8012c00"+strings.Repeat("00", 300)) // ext 16, type 0
	p, err := decodeOne(t, b)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"x", "bin:010203", time.UnixMilli(1700000000123).UTC(),
		time.Date(1969, 12, 31, 23, 59, 59, 999e6, time.UTC), []any{nil},
		"bin:0000c03f", "bin:" + strings.Repeat("00", 300)}
	if got := asBytes(p.Data); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	if d := p.Data.([]any)[2].(time.Time); d.Location() != time.UTC || d.Format(time.RFC3339Nano) != "2023-11-14T22:13:20.123Z" {
		t.Errorf("date %v", d)
	}

	// Other extension types and sizes are [type, bytes], as notepack 2.2.0
	// returns them (a MessagePack timestamp, type -1, included).
	b = mpHex(t, "83a47479706502a36e7370a12fa46461746196a178"+
		"d40507"+ // fixext 1, type 5
		"c70203aabb"+ // ext 8, type 3
		"d7010102030405060708"+ // fixext 8, type 1
		"d6ff00000001"+ // fixext 4, type -1
		"c9000000010009") // ext 32, type 0: an ArrayBuffer
	if p, err = decodeOne(t, b); err != nil {
		t.Fatal(err)
	}
	want = []any{"x", []any{5.0, "bin:07"}, []any{3.0, "bin:aabb"},
		[]any{1.0, "bin:0102030405060708"}, []any{-1.0, "bin:00000001"}, "bin:09"}
	if got := asBytes(p.Data); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
}

// A time.Time goes out as notepack 2.2.0 writes a Date: what
// socket.io-msgpack-parser writes for {type: 2, nsp: "/", data: ["t",
// new Date(1700000000123)]} holds the same fixext 8.
func TestMsgpackParserEncodesDate(t *testing.T) {
	at := time.UnixMilli(1700000000123).In(time.FixedZone("X", 3600))
	p := &parser.Packet{Type: parser.EVENT, Nsp: "/", Data: []any{"t", at, map[string]any{"at": at}, []any{time.UnixMilli(-1)}}}
	b := MsgpackParser{}.NewEncoder().Encode(p)[0].Bytes()
	for _, want := range []string{"a174d7000000018bcfe5687b", "a26174d7000000018bcfe5687b", "91d700ffffffffffffffff"} {
		if !strings.Contains(hex.EncodeToString(b), want) {
			t.Errorf("%x does not hold %s", b, want)
		}
	}
	got, err := decodeOne(t, b)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"t", at.UTC(), map[string]any{"at": at.UTC()}, []any{time.UnixMilli(-1).UTC()}}
	if !reflect.DeepEqual(got.Data, want) {
		t.Fatalf("got %#v", got.Data)
	}
}

// nested returns depth levels of arrays (depth ≥ 1) around null.
func nested(depth int) []byte {
	return append(bytes.Repeat([]byte{0x91}, depth), 0xc0)
}

// Nesting is bounded as encoding/json bounds it (10,000 levels, the
// packet map included); a payload deeper than the handlers allow is
// theirs to refuse.
func TestMsgpackParserDepth(t *testing.T) {
	head := mpHex(t, "83a47479706503a36e7370a12fa464617461") // {type: 3 (an ACK: its list may start with a list), nsp: "/", data: …
	for _, tc := range []struct {
		depth int // the packet map is level 1
		err   error
	}{
		{40, nil},
		{9999, nil},
		{maxMsgpackDepth, nil},
		{maxMsgpackDepth + 1, errMsgpackTooDeep},
		{10001, errMsgpackTooDeep},
		{100000, errMsgpackTooDeep},
	} {
		b := append(append([]byte{}, head...), nested(tc.depth-1)...)
		p, err := decodeOne(t, b)
		if !errors.Is(err, tc.err) {
			t.Errorf("%d deep: %v, want %v", tc.depth, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		n := 1
		for v := p.Data; v != nil; n++ {
			v = v.([]any)[0]
		}
		if n != tc.depth {
			t.Errorf("%d deep: decoded %d levels", tc.depth, n)
		}
	}

	// A state:set with a state 40 objects deep reaches the handler (which
	// refuses it with invalid_argument); a connect's auth 40 deep too.
	state := map[string]any{"v": 1.0}
	for range 39 {
		state = map[string]any{"a": state}
	}
	id := uint64(4)
	for _, in := range []*parser.Packet{
		{Type: parser.EVENT, Nsp: "/", Id: &id, Data: []any{"state:set", map[string]any{"conversationId": "c1", "state": state}}},
		{Type: parser.CONNECT, Nsp: "/", Data: map[string]any{"token": "t", "deep": state}},
	} {
		p, err := decodeOne(t, MsgpackParser{}.NewEncoder().Encode(in)[0].Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p.Data, in.Data) {
			t.Errorf("got %#v", p.Data)
		}
	}
}

type withMap struct {
	M map[string]any `json:"m"`
}

// Map keys are written in sorted order, as the JSON encoder writes them,
// at every level: the same value always encodes to the same bytes.
func TestMsgpackParserSortsKeys(t *testing.T) {
	inner := map[string]any{}
	for i := range 20 {
		inner[string(rune('t'-i))+"k"] = float64(i)
	}
	data := []any{"e", inner, []any{inner}, withMap{M: inner}, map[string]string{"b": "1", "a": "2", "c": "3"}}
	p := &parser.Packet{Type: parser.EVENT, Nsp: "/", Data: data}
	enc := MsgpackParser{}.NewEncoder()
	first := enc.Encode(p)[0].Bytes()
	for range 50 {
		if b := enc.Encode(p)[0].Bytes(); !bytes.Equal(b, first) {
			t.Fatalf("%x\nthen %x", first, b)
		}
	}
	// Every map's keys, in the order they were written.
	var walk func(d *msgpack.Decoder) [][]string
	walk = func(d *msgpack.Decoder) (maps [][]string) {
		c, err := d.PeekCode()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
			n, _ := d.DecodeMapLen()
			var keys []string
			var sub [][]string
			for range n {
				k, err := d.DecodeString()
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
				sub = append(sub, walk(d)...)
			}
			return append([][]string{keys}, sub...)
		case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
			n, _ := d.DecodeArrayLen()
			for range n {
				maps = append(maps, walk(d)...)
			}
			return maps
		}
		if err := d.Skip(); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	d := msgpack.NewDecoder(bytes.NewReader(first))
	// the packet map, "type" and its value, then "data"
	if _, err := d.DecodeMapLen(); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, err := d.DecodeString(); return err },
		d.Skip,
		func() error { _, err := d.DecodeString(); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	maps := walk(d) // data
	if len(maps) != 5 {
		t.Fatalf("%d maps: %q", len(maps), maps)
	}
	for _, keys := range maps {
		if !sort.StringsAreSorted(keys) {
			t.Errorf("keys out of order: %q", keys)
		}
	}
}

func FuzzMsgpackParser(f *testing.F) {
	id := uint64(3)
	for _, p := range []*parser.Packet{
		{Type: parser.CONNECT, Nsp: "/", Data: map[string]any{"token": "abc"}},
		{Type: parser.EVENT, Nsp: "/", Id: &id, Data: []any{"conversation:join", map[string]any{"conversationId": "c1"}}},
		{Type: parser.EVENT, Nsp: "/", Data: []any{"bin", types.NewBytesBuffer([]byte{1, 2})}},
		{Type: parser.DISCONNECT, Nsp: "/"},
	} {
		f.Add(MsgpackParser{}.NewEncoder().Encode(p)[0].Bytes())
	}
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x91, 0x91, 0x91, 0xc0})
	f.Add([]byte{0xd6, 0xff, 0, 0, 0, 1})
	// notepack 2.2.0's extensions: an ArrayBuffer, a Date, undefined, [type, bytes]
	f.Add([]byte{0x83, 0xa4, 't', 'y', 'p', 'e', 0x02, 0xa3, 'n', 's', 'p', 0xa1, '/', 0xa4, 'd', 'a', 't', 'a',
		0x95, 0xc7, 0x02, 0x00, 1, 2, 0xd7, 0x00, 0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0x7b, 0x91, 0xd4, 0x00, 0x00,
		0xd5, 0x07, 1, 2, 0xc9, 0, 0, 0, 1, 0x00, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeOne(t, b)
		if err != nil {
			return
		}
		// what was accepted encodes, and reads back the same
		enc := MsgpackParser{}.NewEncoder().Encode(p)
		if len(enc) != 1 {
			t.Fatalf("accepted %x but cannot encode %+v", b, p)
		}
		again, err := decodeOne(t, enc[0].Bytes())
		if err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", p, err)
		}
		if !reflect.DeepEqual(asBytes(again.Data), asBytes(p.Data)) || again.Type != p.Type || again.Nsp != p.Nsp {
			t.Fatalf("round trip changed %+v into %+v", p, again)
		}
	})
}

// A CONNECT whose data is notepack's undefined (a client without auth) is
// a CONNECT without auth, as in Node: the handshake then refuses it with a
// connect_error. It closed the connection, and the client reconnected
// without end (a black-box audit, 2026-12-07). A map key "__proto__" is
// dropped, as Node's decoder drops it (it sets the object's prototype):
// relayed, it became the prototype of what every msgpack client decoded.
func TestMsgpackParserUndefinedAuthAndProto(t *testing.T) {
	// notepack.encode({type: 0, nsp: "/", data: undefined}): undefined is fixext 1 of type 0
	got, err := decodeOne(t, mpHex(t, "83a47479706500a36e7370a12fa464617461d40000"))
	if err != nil || got.Type != parser.CONNECT || got.Data != nil {
		t.Fatalf("CONNECT with undefined data: %+v, %v; want a CONNECT without data", got, err)
	}
	// {type: 2, nsp: "/", data: ["x", {"__proto__": {"isAdmin": true}, "a": 1}]}
	got, err = decodeOne(t, mpHex(t, "83a47479706502a36e7370a12fa464617461"+"92a178"+"82a95f5f70726f746f5f5f81a7697341646d696ec3a16101"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []any{"x", map[string]any{"a": 1.0}}; !reflect.DeepEqual(got.Data, want) {
		t.Fatalf("got %#v, want %#v (no __proto__)", got.Data, want)
	}
}
