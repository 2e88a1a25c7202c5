package transport

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/presenced/presenced/internal/fuzzinput"
)

// decodeSamples are Socket.IO event arrays: the fast reader must take the
// plain ones and give the same result as encoding/json; the rest it must
// leave to encoding/json.
var decodeSamples = []string{
	`["heartbeat",{"active":true}]`,
	`["heartbeat"]`,
	`["heartbeat",null]`,
	`[ "conversation:join" , { "conversationId" : "c-1" } ]`,
	"[\"x\",\n\t{\"a\":[1,2.5,-0,-3e2,4E+1,5e-1,{}],\"b\":{\"c\":[]},\"d\":false}]",
	`["state:set",{"conversationId":"c","state":{"composing":"a draft","n":1e20}}]`,
	`[]`,
	`[{"dup":1,"dup":2}]`,
	`[12345678901234567890123]`,
	`[0.1, 1.7976931348623157e308]`,
	// not plain: encoding/json decides
	`["esc\"aped"]`,
	`["caf` + "\u00e9" + `"]`,
	`["tab` + "\t" + `"]`,
	`[1e400]`,
	`[01]`, `[1.]`, `[.5]`, `[-]`, `[1e]`, `[+1]`, `[0x10]`, `[Infinity]`, `[NaN]`,
	`[1,]`, `[,1]`, `[1 2]`, `{"a":1}`, `null`, `"s"`, `[`, `]`, `[{]`, `[{"a"}]`, `[{"a":}]`, `[{"a":1,}]`, `[{1:2}]`,
	`[tru]`, `[nul]`, `[true false]`, `[1]x`, `[1] `, ` [1]`,
	`[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]`,
}

func TestDecodeArgsMatchesEncodingJSON(t *testing.T) {
	for _, in := range decodeSamples {
		checkDecode(t, []byte(in))
	}
	// the common case must not fall back
	for _, in := range decodeSamples[:10] {
		if _, ok := decodeArgs([]byte(in)); !ok {
			t.Errorf("decodeArgs(%s): fell back on plain input", in)
		}
	}
}

func FuzzDecodeArgs(f *testing.F) {
	for _, in := range decodeSamples {
		f.Add([]byte(in))
	}
	// numbers beyond float64: the fallback's (decodeSlow)
	f.Add([]byte(`["conversation:join",{"conversationId":1e999}]`))
	f.Add([]byte(`["x",-` + strings.Repeat("9", 400) + `] `))
	f.Fuzz(func(t *testing.T, in []byte) { checkDecode(t, in) })
}

// fuzzScratch is reused by every checkDecode, as readDirect's are: what
// one input leaves in it must not show in the next one's result.
var fuzzScratch directCall

func checkDecode(t *testing.T, in []byte) {
	t.Helper()
	got, ok := decodeArgs(in)
	into, okInto := decodeArgsInto(in, &fuzzScratch)
	if okInto != ok {
		t.Fatalf("decodeArgs(%q) ok %v, into a scratch %v", in, ok, okInto)
	}
	if ok && !reflect.DeepEqual(asMaps(got), asMaps(into)) {
		t.Fatalf("decodeArgs(%q) = %#v, into a scratch %#v", in, got, into)
	}
	fuzzScratch.reset()
	if !ok {
		checkDecodeSlow(t, in) // encoding/json's turn
		return
	}
	var want []any
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("decodeArgs(%q) = %#v, but encoding/json fails: %v", in, got, err)
	}
	// the array's objects come as Objects up to maxObjectFields fields,
	// and as maps past that; as maps, they are what encoding/json reads
	for i, v := range got {
		if o, isObj := v.(*Object); isObj {
			if len(*o) > maxObjectFields {
				t.Fatalf("decodeArgs(%q): an Object of %d fields", in, len(*o))
			}
			got[i] = objectMap(*o)
		} else if m, isMap := v.(map[string]any); isMap && len(m) <= maxObjectFields && !repeatsKey(in) {
			t.Fatalf("decodeArgs(%q): a map of %d fields, not an Object", in, len(m))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeArgs(%q) = %#v, encoding/json %#v", in, got, want)
	}
}

// checkDecodeSlow checks readDirect's fallback: what encoding/json
// reads, it reads the same; beyond that it reads only valid JSON (numbers
// that do not fit a float64, as json.Numbers), with nothing after it.
func checkDecodeSlow(t *testing.T, in []byte) {
	t.Helper()
	var got, want []any
	ok := decodeSlow(in, &got)
	if err := json.Unmarshal(in, &want); err == nil {
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeSlow(%q) = %#v (%v), encoding/json %#v", in, got, ok, want)
		}
		return
	}
	if ok && !json.Valid(in) {
		t.Fatalf("decodeSlow(%q) = %#v on invalid JSON", in, got)
	}
}

// asMaps is args with its Objects as maps (a copy).
func asMaps(args []any) []any {
	out := make([]any, len(args))
	for i, v := range args {
		if o, isObj := v.(*Object); isObj {
			v = objectMap(*o)
		}
		out[i] = v
	}
	return out
}

// objectMap is o as encoding/json decodes it.
func objectMap(o Object) map[string]any {
	m := make(map[string]any, len(o))
	for _, f := range o {
		m[f.Key] = f.Value
	}
	return m
}

// repeatsKey reports whether in might hold an object with a repeated key,
// whose map has fewer fields than the object sent.
func repeatsKey(in []byte) bool { return bytes.Count(in, []byte(`":`)) > maxObjectFields }

func TestDecodeArgsObjects(t *testing.T) {
	got, ok := decodeArgs([]byte(`["heartbeat",{"active":true},{"a":1,"a":2,"b":{"c":"d"}},{}]`))
	if !ok {
		t.Fatal("fell back")
	}
	hb, isObj := got[1].(*Object)
	if !isObj {
		t.Fatalf("heartbeat payload %#v", got[1])
	}
	if v, found := hb.Get("active"); !found || v != true {
		t.Fatalf("heartbeat payload %#v", got[1])
	}
	o := *got[2].(*Object)
	if v, _ := o.Get("a"); v != 2.0 {
		t.Errorf("a repeated key: %#v, want the last value", v)
	}
	if v, _ := o.Get("b"); !reflect.DeepEqual(v, map[string]any{"c": "d"}) {
		t.Errorf("a nested object: %#v, want a map", v)
	}
	if _, found := o.Get("x"); found {
		t.Error("a missing key found")
	}
	if e, isObj := got[3].(*Object); !isObj || len(*e) != 0 {
		t.Errorf("empty object %#v", got[3])
	}
	many := `[{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9}]`
	if got, ok := decodeArgs([]byte(many)); !ok || len(got[0].(map[string]any)) != 9 {
		t.Errorf("%s: %#v, want a map", many, got)
	}
}

// A heartbeat is decoded into a direct event's scratch without allocating,
// once the scratch has seen the event's name and keys; a long string is
// not kept in the scratch's names.
func TestDecodeArgsIntoScratch(t *testing.T) {
	in := []byte(`["heartbeat",{"active":true}]`)
	sc := new(directCall)
	first, ok := decodeArgsInto(in, sc)
	if !ok {
		t.Fatal("fell back")
	}
	name := first[0].(string)
	sc.reset()
	allocs := testing.AllocsPerRun(100, func() {
		args, ok := decodeArgsInto(in, sc)
		if !ok || len(args) != 2 {
			t.Fatalf("decoded %#v, %v", args, ok)
		}
		if v, _ := args[1].(*Object).Get("active"); v != true {
			t.Fatalf("active = %#v", v)
		}
		sc.reset()
	})
	if allocs != 0 {
		t.Errorf("a heartbeat decoded into a warm scratch allocates %v times, want 0", allocs)
	}
	again, _ := decodeArgsInto(in, sc)
	if s := again[0].(string); s != name || unsafe.StringData(s) != unsafe.StringData(name) {
		t.Errorf("the event name was not interned: %q", s)
	}
	sc.reset()
	// Objects beyond the scratch's are allocated; three in one event
	many, ok := decodeArgsInto([]byte(`["x",{"a":"1"},{"b":"2"},{"c":"3"}]`), sc)
	if !ok || len(many) != 4 {
		t.Fatalf("decoded %#v", many)
	}
	for i, k := range []string{"a", "b", "c"} {
		if v, _ := many[i+1].(*Object).Get(k); v != strconv.Itoa(i+1) {
			t.Errorf("object %d: %s = %#v", i, k, v)
		}
	}
	sc.reset()
	long := strings.Repeat("x", maxInterned+1)
	_, _ = decodeArgsInto([]byte(`["`+long+`"]`), sc)
	for _, n := range sc.names {
		if len(n.s) > maxInterned {
			t.Errorf("a string of %d bytes was interned", len(n.s))
		}
	}
	// what a released scratch held is gone; a late reply writes nothing
	sc.w = &wsTransport{}
	sc.reset()
	if sc.w != nil || sc.args[0] != nil || sc.objs != 0 || sc.fields[0][0].Key != "" {
		t.Errorf("reset left %+v", sc)
	}
	sc.Reply("late") // no transport: nothing to write to, and no panic
}

type marshalsItself struct{ A int }

func (m marshalsItself) MarshalJSON() ([]byte, error) { return []byte(`"custom"`), nil }

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	values := []any{
		nil, true, false, "", "plain text", "a<b>&c", "quote\"back\\slash", "ctl\n", "caf\u00e9", "\u2028", "\xff",
		0, 42, -7, int64(math.MaxInt64), 0.0, 1.0, -2.5, 19434.0, 1e20, 1e21, 1e-6, 1e-7, 123456789.123, math.Copysign(0, -1),
		[]any{}, []any(nil), []any{1.0, "x", nil, []any{true}},
		map[string]any{}, map[string]any(nil),
		map[string]any{"ok": true, "serverTime": "2026-11-30T15:17:54.203Z", "nextInMs": int64(19434)},
		map[string]any{"z": 1, "a": map[string]any{"y": []any{"q"}, "b": nil}, "m": "<tag>"},
		map[string]any{"key<": 1, "k": 2},
		map[string]any{"members": []string{"u1", "u2"}, "t": time.Unix(0, 0).UTC(), "c": marshalsItself{1}},
		[]any{map[string]any{"ok": false, "error": map[string]any{"code": "invalid_argument", "message": "conversationId is required"}}},
		[]string(nil), struct{ X int }{3}, json.RawMessage(`{ "raw" : 1 }`),
	}
	for _, v := range values {
		compareAppendJSON(t, v, t.Errorf)
	}
	// a value encoding/json refuses is refused
	if _, err := appendJSON(nil, []any{math.NaN()}); err == nil {
		t.Error("NaN encoded")
	}
	if _, err := appendJSON(nil, map[string]any{"c": make(chan int)}); err == nil {
		t.Error("channel encoded")
	}
}

// compareAppendJSON checks appendJSON's encoding of v (after a prefix)
// against encoding/json's: a refusal by one only is fatal, other output is
// reported with report.
func compareAppendJSON(t *testing.T, v any, report func(format string, args ...any)) {
	t.Helper()
	want, werr := json.Marshal(v)
	got, gerr := appendJSON([]byte("43"), v)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%#v: error %v, encoding/json %v", v, gerr, werr)
	}
	if werr == nil && !bytes.Equal(got, append([]byte("43"), want...)) {
		report("%#v: %s, encoding/json %s", v, got[2:], want)
	}
}

// valueBuilder makes, from fuzz input (a fuzzinput.Program), values of the
// kinds the server's acks and events hold.
type valueBuilder struct{ fuzzinput.Program }

func (vb *valueBuilder) value(depth int) any {
	switch op := vb.Next() % 14; {
	case op == 0:
		return nil
	case op == 1:
		return vb.Next()&1 == 1
	case op == 2:
		return vb.Str()
	case op == 3:
		return int(vb.U64())
	case op == 4:
		return int64(int16(vb.U64()))
	case op == 5:
		return vb.X
	case op == 6:
		return math.Float64frombits(vb.U64())
	case op == 7:
		return float64(int32(vb.U64())) / float64(int(vb.Next())%8+1)
	case op == 8 && depth < 6:
		a := []any{}
		for range vb.Next() % 5 {
			a = append(a, vb.value(depth+1))
		}
		return a
	case op == 9 && depth < 6:
		m := map[string]any{}
		for range vb.Next() % 5 {
			m[vb.Str()] = vb.value(depth + 1)
		}
		return m
	case op == 10:
		if vb.Next()&1 == 1 {
			return []any(nil)
		}
		return map[string]any(nil)
	case op == 11:
		return []string{vb.Str(), vb.Str()}
	case op == 12:
		return json.RawMessage(vb.Str()) // encoding/json checks it
	}
	return int32(vb.U64())
}

// FuzzAppendJSON checks the encoding direction of the fast path (acks are
// written with appendJSON): for values built from the input, the output or
// the refusal is encoding/json's.
func FuzzAppendJSON(f *testing.F) {
	f.Add([]byte{9, 3, 2, 0, 3, 1, 1, 7, 1, 2, 3, 4, 5, 6, 7, 8, 2}, "okserverTimenextInMs2026-11-30T15:17:54.203Z", 19434.0)
	f.Add([]byte{8, 4, 2, 0, 5, 5, 6, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1, 10, 1, 11, 0, 3, 2, 1}, "caf\u00e9 <b>\"\\\n\xff\u2028", math.Inf(1))
	f.Add([]byte{9, 2, 0, 2, 8, 2, 9, 1, 1, 3, 2, 12, 0, 40}, `{"a": [1, 2]} x`, math.Copysign(0, -1))
	f.Add([]byte{8, 3, 6, 0x44, 0x50, 0, 0, 0, 0, 0, 0, 6, 0x3e, 0xb0, 0xc6, 0xf7, 0xa0, 0xb5, 0xed, 0x8d, 6, 0, 0, 0, 0, 0, 0, 0, 1}, "", 1e21)
	f.Fuzz(func(t *testing.T, prog []byte, s string, x float64) {
		vb := &valueBuilder{fuzzinput.Program{B: prog, S: s, X: x}}
		v := vb.value(0)
		compareAppendJSON(t, v, t.Fatalf)
	})
}
