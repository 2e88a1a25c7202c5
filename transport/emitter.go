package transport

import (
	"errors"
	"log/slog"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

// emitter is a types.EventEmitter for the objects every connection owns:
// its transport, its Socket.IO parser's decoder and its Socket.IO socket.
//
// The library's emitter keeps a concurrent map per emitter (a read-only
// map, a dirty copy of it, an entry per event) and a mutex-guarded slice
// per event, and Once leaves the event's map entry and its empty slice
// behind; Emit copies the event's listeners on every call. A connection
// owns several emitters with a handful of listeners each: about 3.5 KB
// of heap per idle socket, 1.4 KB of it in the three above (measured,
// docs/benchmarks/presence-load.md). This one is a mutex and one slice
// of (event, listener) pairs, in the order they were added: 32 bytes a
// listener, and an Emit copies its listeners to the stack.
//
// It behaves as the library's does: listeners run in the order they were
// added, without the lock held (a listener may add, remove or emit); a
// panicking listener is logged and the next one runs; RemoveListener
// removes the first listener of the event with the same code pointer (as
// reflect.Value.Pointer gives it: closures of one function literal share
// it, as they do in the library); RemoveAllListeners removes the event;
// a Once listener is removed when an Emit takes it, so it runs once even
// when two goroutines emit at once. One difference, on purpose: a Once
// listener removes itself, where the library's removes the event's first
// listener with the same code pointer, which is another when the same
// function was also added with On (that one then stops, and the Once
// listener stays, spent).
type emitter struct {
	mu sync.Mutex
	ls []listener
}

// listener is 32 bytes; RemoveListener finds a function's code pointer
// when it needs it.
type listener struct {
	evt  types.EventName
	fn   types.EventListener
	once bool
}

var _ types.EventEmitter = (*emitter)(nil)

// NewEmitter returns an empty emitter (see emitter).
func NewEmitter() types.EventEmitter { return &emitter{} }

func (e *emitter) add(evt types.EventName, once bool, fns []types.EventListener) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, fn := range fns {
		if fn != nil {
			e.ls = append(e.ls, listener{evt: evt, fn: fn, once: once})
		}
	}
	return nil
}

func (e *emitter) AddListener(evt types.EventName, fns ...types.EventListener) error {
	return e.add(evt, false, fns)
}

func (e *emitter) On(evt types.EventName, fns ...types.EventListener) error {
	return e.add(evt, false, fns)
}

func (e *emitter) Once(evt types.EventName, fns ...types.EventListener) error {
	return e.add(evt, true, fns)
}

// emitInline is how many listeners an Emit takes without allocating.
const emitInline = 8

func (e *emitter) Emit(evt types.EventName, data ...any) {
	var inline [emitInline]types.EventListener
	run := inline[:0]
	e.mu.Lock()
	once := false
	for _, l := range e.ls {
		if l.evt == evt {
			run = append(run, l.fn)
			once = once || l.once
		}
	}
	if once {
		e.ls = slices.DeleteFunc(e.ls, func(l listener) bool { return l.evt == evt && l.once })
	}
	e.mu.Unlock()
	for _, fn := range run {
		callListener(evt, fn, data)
	}
}

// callListener runs one listener; a panic is logged, as the library's
// emitter logs it, and goes no further.
func callListener(evt types.EventName, fn types.EventListener, data []any) {
	defer func() {
		if r := recover(); r != nil {
			slog.Error("event listener panic recovered", "event", string(evt), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	fn(data...)
}

func (e *emitter) EventNames() []types.EventName {
	e.mu.Lock()
	defer e.mu.Unlock()
	var names []types.EventName
	for i, l := range e.ls {
		if !e.seenBefore(i, l.evt) {
			names = append(names, l.evt)
		}
	}
	return names
}

// seenBefore reports whether a listener before the i-th is for evt.
func (e *emitter) seenBefore(i int, evt types.EventName) bool {
	for _, l := range e.ls[:i] {
		if l.evt == evt {
			return true
		}
	}
	return false
}

func (e *emitter) ListenerCount(evt types.EventName) int {
	n := 0
	e.each(evt, func(listener) { n++ })
	return n
}

func (e *emitter) Listeners(evt types.EventName) []types.EventListener {
	var fns []types.EventListener
	e.each(evt, func(l listener) { fns = append(fns, l.fn) })
	return fns
}

// each calls f with each listener of evt, in order, under the lock.
func (e *emitter) each(evt types.EventName, f func(listener)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.ls {
		if l.evt == evt {
			f(l)
		}
	}
}

func (e *emitter) RemoveListener(evt types.EventName, fn types.EventListener) bool {
	if fn == nil {
		return false
	}
	ptr := reflect.ValueOf(fn).Pointer()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, l := range e.ls {
		if l.evt == evt && reflect.ValueOf(l.fn).Pointer() == ptr {
			e.ls = slices.Delete(e.ls, i, i+1) // zeroes the freed slot
			return true
		}
	}
	return false
}

func (e *emitter) RemoveAllListeners(evt types.EventName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.ls)
	e.ls = slices.DeleteFunc(e.ls, func(l listener) bool { return l.evt == evt })
	return len(e.ls) < n
}

func (e *emitter) Clear() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ls = nil
}

func (e *emitter) Len() int { return len(e.EventNames()) }

// SetEmitter gives v (a pointer to a struct that embeds types.EventEmitter,
// made by the library) an emitter of ours. The caller makes sure that no
// other goroutine has v yet; SetEmitter reports false, and changes
// nothing, when v already has listeners or has no such field.
func SetEmitter(v any) bool {
	f, ok := emitterField(v)
	if !ok {
		return false
	}
	if old, ok := f.Interface().(types.EventEmitter); ok && old != nil && old.Len() > 0 {
		return false
	}
	f.Set(reflect.ValueOf(NewEmitter()))
	return true
}

// emitterField is the settable types.EventEmitter field embedded in the
// struct v points to; false if v is not a pointer to such a struct.
func emitterField(v any) (reflect.Value, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	f := rv.Elem().FieldByName("EventEmitter")
	if !f.IsValid() || !f.CanSet() || f.Type() != reflect.TypeFor[types.EventEmitter]() {
		return reflect.Value{}, false
	}
	return f, true
}

// SetSocketEmitter gives a Socket.IO socket that the namespace has not
// added yet an emitter of ours. The library's constructor gives it one
// listener, a no-op for "error" (as Node's does, so that an error emitted
// with no listener is not fatal); the new emitter gets a no-op too. It
// reports false, and changes nothing, if the socket has other listeners.
func SetSocketEmitter(s *socket.Socket) bool {
	if s == nil || s.StrictEventEmitter == nil {
		return false
	}
	if old := s.StrictEventEmitter.EventEmitter; old != nil {
		if n := old.Len(); n > 1 || n == 1 && old.ListenerCount("error") != 1 {
			return false
		}
	}
	e := NewEmitter()
	_ = e.On("error", func(...any) {})
	s.StrictEventEmitter.EventEmitter = e
	return true
}

// JSONParser is the library's default Socket.IO parser, with its
// decoders on our emitter (one per connection).
type JSONParser struct{ parser.Parser }

// NewJSONParser returns the default parser with lean decoders.
func NewJSONParser() JSONParser { return JSONParser{parser.NewParser()} }

// NewDecoder implements parser.Parser.
func (p JSONParser) NewDecoder() parser.Decoder {
	d := p.Parser.NewDecoder()
	SetEmitter(d)
	return bigNumberDecoder{d}
}

// bigNumberDecoder is the library's decoder, except that an EVENT or ACK
// whose JSON has a number beyond float64 (1e999, 400 digits) is decoded,
// with such numbers as json.Numbers (decodeSlow), instead of failing as an
// invalid payload, which ends the session: it is valid JSON, a Node server
// reads it, and the websocket's direct path takes it (readDirect). The
// event then gets its handler's answer (invalid_argument where a number
// has no place). Every other packet, and every error, is the library's.
type bigNumberDecoder struct{ parser.Decoder }

// Add implements parser.Decoder.
func (d bigNumberDecoder) Add(data any) error {
	var raw []byte // a buffer's bytes: the library's Add reads past them, and nothing writes them again
	buf, isBuf := data.(*types.StringBuffer)
	if isBuf {
		raw = buf.Bytes()
	}
	err := d.Decoder.Add(data)
	if !errors.Is(err, parser.ErrInvalidPayload) {
		return err
	}
	text, isText := data.(string)
	switch {
	case isBuf:
		text = string(raw)
	case !isText:
		return err
	}
	if p, ok := decodeBigNumbers(text); ok {
		d.Emit("decoded", p)
		return nil
	}
	return err
}

// decodeBigNumbers decodes a text EVENT or ACK packet ("2", "3", then an
// optional "/namespace," and ack id) whose payload only decodeSlow reads,
// and checks it as the library does: an ACK's payload is an array, an
// EVENT's a non-empty one whose first element is the name of an event that
// is not reserved.
func decodeBigNumbers(text string) (*parser.Packet, bool) {
	if len(text) < 3 || (text[0] != '2' && text[0] != '3') {
		return nil, false
	}
	p := &parser.Packet{Type: parser.PacketType(text[0] - '0'), Nsp: "/"}
	rest := text[1:]
	if rest[0] == '/' {
		nsp, after, ok := strings.Cut(rest, ",")
		if !ok || len(nsp) > parser.DefaultMaxNamespaceLength {
			return nil, false
		}
		p.Nsp, rest = nsp, after
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i > 0 {
		if i > parser.DefaultMaxPacketIDLength {
			return nil, false
		}
		id, err := strconv.ParseUint(rest[:i], 10, 64)
		if err != nil {
			return nil, false
		}
		p.Id = &id
	}
	var args []any
	if !decodeSlow([]byte(rest[i:]), &args) || args == nil { // (null decodes as a nil array)
		return nil, false
	}
	if p.Type == parser.EVENT {
		if len(args) == 0 {
			return nil, false
		}
		name, ok := args[0].(string)
		if !ok || parser.ReservedEvents.Has(name) {
			return nil, false
		}
	}
	p.Data = args
	return p, true
}
