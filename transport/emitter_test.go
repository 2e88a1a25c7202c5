package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/engine/v3/transports"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

// emitterOps runs the operations ops describes on e and returns what was
// seen: each listener run (by its number) and each answer. Listeners are
// closures of distinct functions, so that RemoveListener can tell them
// apart (both emitters match by code pointer). A function is added either
// with On or with Once, never both: there the library's Once removes the
// On listener (see emitter).
func emitterOps(e types.EventEmitter, ops []byte) string {
	var out strings.Builder
	fns := [...]types.EventListener{
		func(...any) { out.WriteString("0 ") },
		func(...any) { out.WriteString("1 ") },
		func(...any) { out.WriteString("2 ") },
		func(...any) { out.WriteString("3 ") },
	}
	evts := [...]types.EventName{"a", "b", "c"}
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i]%6, ops[i+1]
		evt, fn := evts[int(arg)%len(evts)], fns[int(arg/3)%len(fns)]
		switch op {
		case 0: // listeners 0 and 1 are added with On
			_ = e.On(evt, fns[int(arg/3)%2])
		case 1: // 2 and 3 with Once (see emitter on the two together)
			_ = e.Once(evt, fns[2+int(arg/3)%2])
		case 2:
			fmt.Fprintf(&out, "emit %s: ", evt)
			e.Emit(evt)
			out.WriteString("| ")
		case 3:
			fmt.Fprintf(&out, "remove %s %t | ", evt, e.RemoveListener(evt, fn))
		case 4:
			e.RemoveAllListeners(evt)
		case 5:
			fmt.Fprintf(&out, "count %s %d | ", evt, e.ListenerCount(evt))
		}
	}
	return out.String()
}

// FuzzEmitter runs the same operations on our emitter and on the
// library's: the listeners that run, in their order, and the answers of
// RemoveListener and ListenerCount are the same.
func FuzzEmitter(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 2, 0, 2, 0})
	f.Add([]byte{1, 3, 1, 3, 3, 3, 2, 3, 5, 3})
	f.Add([]byte{0, 1, 0, 4, 1, 7, 3, 4, 2, 1, 4, 1, 2, 1, 5, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 400 {
			return
		}
		ours, theirs := emitterOps(NewEmitter(), ops), emitterOps(types.NewEventEmitter(), ops)
		if ours != theirs {
			t.Fatalf("ops %v:\nours   %s\ntheirs %s", ops, ours, theirs)
		}
	})
}

func TestEmitterBookkeeping(t *testing.T) {
	e := NewEmitter()
	var got []string
	_ = e.On("x", func(...any) { got = append(got, "on") })
	_ = e.Once("y", func(a ...any) { got = append(got, fmt.Sprint("once ", a)) })
	_ = e.On("x", func(...any) { panic("boom") }, nil, func(...any) { got = append(got, "after the panic") })
	if n := e.ListenerCount("x"); n != 3 { // nil is not added
		t.Fatalf("ListenerCount(x) = %d, want 3", n)
	}
	if names := fmt.Sprint(e.EventNames()); names != "[x y]" || e.Len() != 2 {
		t.Fatalf("EventNames = %s, Len = %d; want [x y], 2", names, e.Len())
	}
	e.Emit("x")
	e.Emit("y", 1, 2)
	e.Emit("y", 3)
	if want := "[on after the panic once [1 2]]"; fmt.Sprint(got) != want {
		t.Fatalf("ran %v, want %s", got, want)
	}
	if e.ListenerCount("y") != 0 || len(e.Listeners("x")) != 3 || e.Len() != 1 {
		t.Fatalf("after the emits: y has %d, x has %d, Len %d", e.ListenerCount("y"), len(e.Listeners("x")), e.Len())
	}
	if !e.RemoveAllListeners("x") || e.RemoveAllListeners("x") || e.Len() != 0 {
		t.Fatal("RemoveAllListeners(x) twice: want true, then false, and nothing left")
	}
	_ = e.On("z", func(...any) {})
	e.Clear()
	if e.Len() != 0 {
		t.Fatal("Clear left listeners")
	}
}

// A listener may add, remove and emit on its own emitter (no lock is held
// while it runs), and a Once listener runs once however many goroutines
// emit at the same time.
func TestEmitterReentrantAndConcurrent(t *testing.T) {
	e := NewEmitter()
	var inner atomic.Int32
	_ = e.On("outer", func(...any) {
		_ = e.On("inner", func(...any) { inner.Add(1) })
		e.Emit("inner")
	})
	e.Emit("outer")
	if inner.Load() != 1 {
		t.Fatalf("inner ran %d times, want 1", inner.Load())
	}
	var once atomic.Int32
	_ = e.Once("close", func(...any) { once.Add(1) })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { e.Emit("close") })
	}
	wg.Wait()
	if once.Load() != 1 {
		t.Fatalf("the Once listener ran %d times, want 1", once.Load())
	}
}

func TestEmitterEmitAllocatesNothing(t *testing.T) {
	e := NewEmitter()
	for range emitInline {
		_ = e.On("packet", func(...any) {})
	}
	if n := testing.AllocsPerRun(100, func() { e.Emit("packet", 1) }); n > 1 { // the variadic argument's box
		t.Fatalf("Emit allocated %v times, want at most 1", n)
	}
}

// SetEmitter takes the library's objects that a connection owns, and
// nothing that already has listeners.
func TestSetEmitter(t *testing.T) {
	tr := transports.MakeTransport()
	if !SetEmitter(tr) {
		t.Fatal("SetEmitter refused a new transport")
	}
	if !isOurs(tr) {
		t.Fatal("the transport is not on our emitter")
	}
	d := NewJSONParser().NewDecoder()
	got := make(chan any, 1)
	_ = d.On("decoded", func(a ...any) { got <- a[0] })
	if err := d.Add(`2["hello",1]`); err != nil {
		t.Fatal(err)
	}
	if p, ok := (<-got).(*parser.Packet); !ok || p.Type != parser.EVENT {
		t.Fatalf("decoded %#v", p)
	}
	if !isOurs(d.(bigNumberDecoder).Decoder) {
		t.Fatal("NewJSONParser's decoder is not on our emitter")
	}
	busy := transports.MakeTransport()
	_ = busy.On("packet", func(...any) {})
	if SetEmitter(busy) || isOurs(busy) {
		t.Fatal("SetEmitter replaced an emitter that has listeners")
	}
	s := socket.MakeSocket()
	_ = s.On("error", func(...any) {}) // what the library's constructor adds
	if !SetSocketEmitter(s) || !isOurs(s.StrictEventEmitter) || s.ListenerCount("error") != 1 {
		t.Fatal("SetSocketEmitter refused a new socket, or lost its error listener")
	}
	_ = s.On("message", func(...any) {})
	if SetSocketEmitter(s) || s.ListenerCount("message") != 1 {
		t.Fatal("SetSocketEmitter replaced the emitter of a socket with listeners")
	}
	if SetEmitter(struct{ types.EventEmitter }{}) || SetEmitter(nil) {
		t.Fatal("SetEmitter took what is not a pointer to a struct")
	}
}

// isOurs reports whether v (a pointer to a struct that embeds an
// emitter) is on our emitter.
func isOurs(v any) bool {
	f := reflect.ValueOf(v).Elem().FieldByName("EventEmitter")
	return f.IsValid() && !f.IsNil() && f.Elem().Type() == reflect.TypeFor[*emitter]()
}

// adoptEmitter moves a library emitter's listeners onto ours: in order,
// On listeners as they are, Once listeners unwrapped (they still run once,
// and RemoveListener finds them by the function given to Once).
func TestAdoptEmitter(t *testing.T) {
	if info := libEmitterInfo(); !info.ok {
		t.Fatal("the library's Once wrapper is not the layout adopt.go mirrors")
	}
	var seen []string
	mark := func(s string) types.EventListener { return func(...any) { seen = append(seen, s) } }
	onA1, onceA2, onA3 := mark("a1"), mark("a2"), mark("a3")
	onceB := func(...any) { seen = append(seen, "b") }
	removed := func(...any) { seen = append(seen, "removed") }
	old := types.NewEventEmitter()
	_ = old.On("a", onA1)
	_ = old.Once("a", onceA2)
	_ = old.On("a", onA3)
	_ = old.Once("b", onceB)
	_ = old.Once("c", removed)
	_ = old.Once("spent", mark("spent"))
	old.Emit("spent") // a fired Once listener leaves the library's event empty
	host := &struct{ types.EventEmitter }{old}
	if !adoptField(host) || !isOurs(host) {
		t.Fatal("adoptField did not swap the library's emitter")
	}
	e := host.EventEmitter
	if !e.RemoveListener("c", removed) {
		t.Fatal("RemoveListener did not find a Once listener by its function")
	}
	e.Emit("a")
	e.Emit("a")
	e.Emit("b")
	e.Emit("b")
	e.Emit("c")
	e.Emit("spent")
	if got := strings.Join(seen, ","); got != "spent,a1,a2,a3,a1,a3,b" {
		t.Fatalf("listeners run: %s; want spent,a1,a2,a3,a1,a3,b", got)
	}
	if n := e.ListenerCount("a"); n != 2 {
		t.Fatalf("%d listeners of a left, want 2", n)
	}
	// ours, a nil one and a struct without an emitter are left alone
	if adoptField(host) || adoptField(&struct{ types.EventEmitter }{}) || adoptField(&struct{ x int }{}) || adoptField(nil) {
		t.Fatal("adoptField swapped what is not the library's emitter")
	}
}

// FuzzJSONDecoder feeds text packets to the JSON parser's decoder: it
// decodes what the library's decoder decodes, the same, and beyond it only
// EVENTs and ACKs of valid JSON that the library refused as invalid
// payloads (numbers beyond float64: bigNumberDecoder); it never panics.
func FuzzJSONDecoder(f *testing.F) {
	for _, s := range []string{
		`42["heartbeat",{}]`, `421["conversation:join",{"conversationId":1e999}]`,
		`2/admin,7["x",` + strings.Repeat("9", 400) + `]`, `31[1e999]`, `3/a,[]`, `2[]`, `2["connect",1e999]`,
		`2[1e999]`, `2"x"`, `0{"token":"t"}`, `1`, `451-["a",{"_placeholder":true,"num":0}]`, `2/a`, `2123456789012345678901["a"]`,
		`2["a",1e999] junk`, `2["a",1e999]`, `2/a[,["x",1e999]`, `2/` + strings.Repeat("n", 600) + `,["a",1e999]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		decoded := func(d parser.Decoder) (*parser.Packet, error) {
			var got *parser.Packet
			_ = d.On("decoded", func(a ...any) { got, _ = a[0].(*parser.Packet) })
			err := d.Add(text)
			d.Destroy()
			return got, err
		}
		lib, libErr := decoded(parser.NewParser().NewDecoder())
		ours, err := decoded(NewJSONParser().NewDecoder())
		if libErr == nil || lib != nil {
			if !reflect.DeepEqual(lib, ours) || (err == nil) != (libErr == nil) {
				t.Fatalf("%q: library %+v (%v), ours %+v (%v)", text, lib, libErr, ours, err)
			}
			return
		}
		if ours == nil {
			if err == nil {
				t.Fatalf("%q: no packet and no error", text)
			}
			return
		}
		if err != nil || !errors.Is(libErr, parser.ErrInvalidPayload) {
			t.Fatalf("%q: decoded %+v with error %v, the library's %v", text, ours, err, libErr)
		}
		args, ok := ours.Data.([]any)
		if !ok || (ours.Type != parser.EVENT && ours.Type != parser.ACK) || (ours.Type == parser.EVENT && len(args) == 0) {
			t.Fatalf("%q: decoded %+v", text, ours)
		}
		payload := text[1:]
		if strings.HasPrefix(payload, "/") {
			_, payload, _ = strings.Cut(payload, ",")
		}
		if payload = strings.TrimLeft(payload, "0123456789"); !json.Valid([]byte(payload)) {
			t.Fatalf("%q: decoded %+v from invalid JSON", text, ours)
		}
	})
}
