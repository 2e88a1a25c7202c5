package transport

import (
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"unsafe"

	"github.com/zishang520/socket.io/v3/pkg/types"
)

// Two of a websocket connection's emitters are made by the library before
// any code of ours sees them: the engine socket's, and the upgraded
// connection's (types.WebSocketConn). Each is a concurrent map with an
// entry and a mutex-guarded slice per event, and a Once listener is three
// objects more: about 1.6 KB of live heap per socket, in some twenty
// small objects (docs/benchmarks/presence-load.md). Once the engine has
// done with a new connection's initialization, and before its reader
// starts (heartbeat.go, takeHeartbeat), adoptEmitter moves their
// listeners onto an emitter of ours, in order, with each Once listener
// unwrapped so that it stays a once listener with its own code pointer
// (RemoveListener finds it as the library's did).
//
// What may use those emitters afterwards is ordered after the swap: the
// reader (it waits for initMu), the heartbeat wheel (the connection joins
// it after the swap), and what they and the handlers start. One library
// goroutine is not: the Socket.IO client's connect timeout (45 s), started
// before the swap, which closes a connection that never sent its CONNECT.
// It reads the emitter 45 s after the swap wrote it, with no
// synchronization between the two that the race detector would see.

// libOnce mirrors the library's oneTimeListener (pkg/types/events.go,
// v3.0.6): what its Once stores for a listener is the method value
// (*oneTimeListener).execute. onceProbe checks the layout at run time.
type libOnce struct {
	fired   *sync.Once
	evt     types.EventName
	emitter unsafe.Pointer
	fn      types.EventListener
}

// methodValue is how Go represents a bound method value: a pointer to
// the wrapper's code, then the receiver.
type methodValue struct {
	_    uintptr // the wrapper's code
	recv unsafe.Pointer
}

// libEmitter is what the library can tell of its emitters: their type,
// and the code pointer of a Once listener's wrapper. ok is false when the
// layout above does not hold, and then nothing is adopted.
type libEmitter struct {
	typ      reflect.Type
	onceCode uintptr
	ok       bool
}

var libEmitterInfo = sync.OnceValue(onceProbe)

// onceProbe registers a known function with the library's Once and checks
// that unwrapping what it stored gives that function back.
func onceProbe() (info libEmitter) {
	defer func() {
		if recover() != nil {
			info.ok = false
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	probe := func(...any) {}
	e := types.NewEventEmitter()
	info.typ = reflect.TypeOf(e)
	_ = e.Once("probe", probe)
	ls := e.Listeners("probe")
	if len(ls) != 1 || ls[0] == nil {
		return info
	}
	info.onceCode = reflect.ValueOf(ls[0]).Pointer()
	o := unwrapOnce(ls[0])
	info.ok = o != nil && o.fired != nil && o.evt == "probe" && o.fn != nil &&
		reflect.ValueOf(o.fn).Pointer() == reflect.ValueOf(probe).Pointer()
	return info
}

func unwrapOnce(fn types.EventListener) *libOnce {
	mv := *(**methodValue)(unsafe.Pointer(&fn))
	if mv == nil || mv.recv == nil {
		return nil
	}
	return (*libOnce)(mv.recv)
}

// adoptEmitter returns an emitter of ours with old's listeners, when old
// is the library's; ok is false, and old is to be kept, otherwise. Nothing
// else may use old meanwhile or after: the caller swaps it out.
func adoptEmitter(old types.EventEmitter) (e *emitter, ok bool) {
	info := libEmitterInfo()
	if !info.ok || old == nil || reflect.TypeOf(old) != info.typ {
		return nil, false
	}
	e = &emitter{}
	for _, evt := range old.EventNames() {
		for _, fn := range old.Listeners(evt) {
			if fn == nil {
				continue
			}
			once := reflect.ValueOf(fn).Pointer() == info.onceCode
			if once {
				o := unwrapOnce(fn)
				if o == nil || o.fn == nil || o.evt != evt {
					return nil, false
				}
				fn = o.fn
			}
			e.ls = append(e.ls, listener{evt: evt, fn: fn, once: once})
		}
	}
	e.ls = slices.Clip(e.ls)
	return e, true
}

// adoptField swaps the types.EventEmitter embedded in the struct v points
// to for adoptEmitter's, and reports whether it did.
func adoptField(v any) bool {
	f, ok := emitterField(v)
	if !ok {
		return false
	}
	old, _ := f.Interface().(types.EventEmitter)
	e, ok := adoptEmitter(old)
	if ok {
		f.Set(reflect.ValueOf(types.EventEmitter(e)))
	}
	return ok
}
