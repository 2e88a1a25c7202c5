package transport

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
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

// asBytes compares binary values by content.
func asBytes(v any) any {
	switch t := v.(type) {
	case types.BufferInterface:
		return "bin:" + hex.EncodeToString(t.Bytes())
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = asBytes(e)
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

func TestMsgpackParserRefuses(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, 40)
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
	} {
		_, err := decodeOne(t, tc.in)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	for name, in := range map[string][]byte{
		"ext (a timestamp)":  {0xd6, 0xff, 0, 0, 0, 1},
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
