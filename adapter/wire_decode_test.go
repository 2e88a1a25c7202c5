package adapter

import (
	"math"
	"reflect"
	"testing"

	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
)

// Options and packets of other nodes and emitters, as both protocols
// (classic and sharded) decode them: what is no list of rooms, no packet
// type or no namespace name is malformed, never "every socket".
func TestDecodeOptsAndPacket(t *testing.T) {
	for _, v := range []any{
		nil, "r1", 5.0, []any{"r1"},
		map[string]any{"rooms": "r1"},
		map[string]any{"rooms": map[string]any{"r1": true}},
		map[string]any{"rooms": []any{true}},
		map[string]any{"rooms": []any{"r1"}, "except": "r2"},
		map[string]any{"except": []any{[]any{"r2"}}},
	} {
		if o, ok := decodeOpts(v); ok {
			t.Errorf("options %#v decoded as %+v", v, o)
		}
	}
	o, ok := decodeOpts(map[string]any{"rooms": []any{"r1", 7.0}, "except": nil})
	if !ok || !o.Rooms.Has("r1") || !o.Rooms.Has("7") || o.Rooms.Len() != 2 || o.Except.Len() != 0 {
		t.Errorf("rooms [r1 7]: %+v, %v", o, ok)
	}
	if o, ok := decodeOpts(map[string]any{}); !ok || o.Rooms.Len() != 0 {
		t.Errorf("no rooms (every socket, as in Node): %+v, %v", o, ok)
	}

	for _, v := range []any{
		map[string]any{"type": "2", "data": []any{"x"}},
		map[string]any{"data": []any{"x"}},
		map[string]any{"type": 2.5, "data": []any{"x"}},
		map[string]any{"type": -1.0, "data": []any{"x"}},
		map[string]any{"type": 7.0, "data": []any{"x"}},
		map[string]any{"type": 2.0, "data": []any{"x"}, "nsp": 5.0},
		// data socket.io-client refuses: every client reached would
		// close its connection (an interop audit, 2026-12-07)
		map[string]any{"type": 2.0, "data": "x"},
		map[string]any{"type": 2.0, "data": []any{}},
		map[string]any{"type": 2.0, "data": []any{nil, 1.0}},
		map[string]any{"type": 2.0, "data": []any{map[string]any{}}},
		map[string]any{"type": 2.0, "data": []any{"disconnect"}},
		map[string]any{"type": 2.0},
		map[string]any{"type": 3.0, "data": "x"},
		"packet",
	} {
		if p, err := decodePacket(v); err == nil {
			t.Errorf("packet %#v decoded as %+v", v, p)
		}
	}
	p, err := decodePacket(map[string]any{"type": 5.0, "nsp": nil, "data": []any{
		"ev", map[string]any{"a": math.NaN(), "b": []any{math.Inf(1), 1.5}}, math.Inf(-1), float32(math.NaN()), "s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != parser.EVENT || p.Nsp != "/" {
		t.Errorf("a binary event of no namespace: type %v nsp %q", p.Type, p.Nsp)
	}
	want := []any{"ev", map[string]any{"a": nil, "b": []any{nil, 1.5}}, nil, nil, "s"}
	if !reflect.DeepEqual(p.Data, want) {
		t.Errorf("data %#v, want %#v", p.Data, want)
	}
}

// FuzzDecodeBroadcast decodes a message of another node or an emitter as a
// classic broadcast ([uid, packet, opts], msgpack, or the sharded
// protocol's JSON) and checks what the decoders let through: a packet of a
// Socket.IO type with no number JSON cannot carry, and options whose rooms
// came from lists.
func FuzzDecodeBroadcast(f *testing.F) {
	for _, seed := range []string{
		"\x93\xa7emitter\x83\xa4type\x02\xa4data\x91\xa1x\xa3nsp\xa1/\x81\xa5rooms\x91\xa2r1",
		"\x93\xa7emitter\x83\xa4type\x02\xa4data\x92\xa1x\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00\xa3nsp\xa1/\x81\xa5rooms\xa2r1",
		`{"uid":"u","type":3,"nsp":"/","data":{"packet":{"type":2,"data":["x"],"nsp":"/"},"opts":{"rooms":"r1"}}}`,
		"\x93\xa1u\x82\xa4type\xa12\xa4data\x90\xc0",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeMessage(string(b))
		if err != nil {
			return
		}
		var packet, opts any
		switch m := v.(type) {
		case []any:
			if len(m) < 3 {
				return
			}
			packet, opts = m[1], m[2]
		case map[string]any:
			data, _ := asMap(m["data"])
			packet, opts = data["packet"], data["opts"]
		default:
			return
		}
		if p, err := decodePacket(packet); err == nil {
			if p.Type < parser.CONNECT || p.Type > parser.BINARY_ACK || p.Type == parser.BINARY_EVENT || p.Type == parser.BINARY_ACK {
				t.Fatalf("packet type %v let through", p.Type)
			}
			if hasNonJSONNumber(p.Data) {
				t.Fatalf("data %#v keeps a NaN or an infinity", p.Data)
			}
		}
		if o, ok := decodeOpts(opts); ok {
			m, isMap := opts.(map[string]any)
			if !isMap {
				t.Fatalf("options %#v that are no object let through", opts)
			}
			for _, k := range []string{"rooms", "except"} {
				if _, isList := m[k].([]any); m[k] != nil && !isList {
					t.Fatalf("%s %#v that is no list let through: %+v", k, m[k], o)
				}
			}
		}
	})
}

func hasNonJSONNumber(v any) bool {
	switch x := v.(type) {
	case float64:
		return math.IsNaN(x) || math.IsInf(x, 0)
	case float32:
		return math.IsNaN(float64(x)) || math.IsInf(float64(x), 0)
	case []any:
		for _, e := range x {
			if hasNonJSONNumber(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasNonJSONNumber(e) {
				return true
			}
		}
	}
	return false
}
