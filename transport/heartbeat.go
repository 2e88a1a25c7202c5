package transport

import (
	"sync"
	"time"

	"github.com/zishang520/socket.io/servers/engine/v3"
)

// The Engine.IO heartbeat of connections that start on our websocket.
//
// The library runs each connection's heartbeat on two timers of its own
// (servers/engine v3.0.6, socket.schedulePing and resetPingTimeout), each
// made with utils.SetTimeout, which parks a goroutine per pending timer:
// an idle socket held one goroutine (2.5 KB of stack) and a timer for its
// whole life only to send a PING every ping interval. For a connection on
// our websocket from its handshake, the heartbeat runs here instead, on
// one timer wheel for all of them, with the same protocol (Engine.IO v4):
// the server sends a PING every ping interval, counted from the last PONG,
// and closes the connection ("ping timeout") when the PONG is not back
// within the ping timeout. The wheel's goroutine runs only while it holds
// connections.
//
// The engine is kept from starting its own: the engine calls the
// heartbeat's start (socket.startHeartbeat) through the handshake's
// types.HttpContext once the transport's initialization has succeeded,
// after it has emitted "connection"; the wheel's "connection" listener
// (Websocket.Attach) discards that call (SetTransportReady(nil)) and puts
// the connection on the wheel. A connection that starts on polling and
// upgrades to our websocket keeps the engine's heartbeat, and so does an
// Engine.IO v3 client (whose heartbeat runs the other way round).
//
// As the PONGs never reach the engine, the library's ping race (a PONG
// handled before the engine armed its timeout, pingrace.go) cannot happen
// on these connections.

// pingFrame is an Engine.IO PING in a websocket text frame, shared by every
// connection (queued frames are not changed).
var pingFrame = []byte{0x81, 1, '2'}

// beat is a connection's place on the wheel, guarded by the wheel's mutex.
type beat struct {
	next, prev *wsTransport
	on         bool  // on the wheel (in a slot's list)
	gone       bool  // the connection closed: it never goes on the wheel
	due        int64 // the tick it is due at
	awaiting   bool  // a PING is out: at due, the connection has timed out
	timeout    func()
}

// heartbeat is the timer wheel: slots of tick each, a list of connections
// in each, a connection due at tick k in slot k % len(slots). A slot holds
// only connections due within one turn of the wheel (the wait is at most
// the longer of the ping interval and timeout); one due later than the
// tick at hand (the wheel fell behind by a turn) waits for its own.
type heartbeat struct {
	interval, timeout time.Duration
	tick              time.Duration
	epoch             time.Time
	clock             func() time.Time // time.Now; the tests' own

	mu      sync.Mutex
	slots   []*wsTransport // list heads
	next    int64          // the first tick not handled yet
	n       int            // connections on the wheel
	running bool           // the wheel's goroutine runs
}

func newHeartbeat(interval, timeout time.Duration) *heartbeat {
	tick := min(max(min(interval, timeout)/10, 5*time.Millisecond), 250*time.Millisecond)
	turn := int(max(interval, timeout)/tick) + 2
	return &heartbeat{interval: interval, timeout: timeout, tick: tick, epoch: time.Now(), clock: time.Now, slots: make([]*wsTransport, turn)}
}

// tickAfter is the first tick at or after d from now.
func (h *heartbeat) tickAfter(now time.Time, d time.Duration) int64 {
	t := now.Add(d).Sub(h.epoch)
	return max(int64((t+h.tick-1)/h.tick), h.next)
}

// add puts w on the wheel, its first PING due a ping interval from now;
// timeout is called (on a goroutine of its own) if a PONG is late. It
// reports false, doing nothing, when w has closed already.
func (h *heartbeat) add(w *wsTransport, timeout func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.beat.on || w.beat.gone {
		return false
	}
	w.beat.timeout = timeout
	w.beat.awaiting = false
	h.link(w, h.tickAfter(h.clock(), h.interval))
	h.n++
	if !h.running {
		h.running = true
		go h.run()
	}
	return true
}

// remove takes w off the wheel for good (its connection closed).
func (h *heartbeat) remove(w *wsTransport) {
	h.mu.Lock()
	w.beat.gone = true
	if w.beat.on {
		h.unlink(w)
		h.n--
		w.beat.timeout = nil
	}
	h.mu.Unlock()
}

// pong records w's PONG: its next PING is due a ping interval from now. A
// PONG that answers no PING changes nothing.
func (h *heartbeat) pong(w *wsTransport) {
	h.mu.Lock()
	if w.beat.on && w.beat.awaiting {
		h.unlink(w)
		w.beat.awaiting = false
		h.link(w, h.tickAfter(h.clock(), h.interval))
	}
	h.mu.Unlock()
}

func (h *heartbeat) link(w *wsTransport, due int64) {
	i := due % int64(len(h.slots))
	w.beat.due, w.beat.on, w.beat.prev = due, true, nil
	w.beat.next = h.slots[i]
	if w.beat.next != nil {
		w.beat.next.beat.prev = w
	}
	h.slots[i] = w
}

func (h *heartbeat) unlink(w *wsTransport) {
	if w.beat.prev != nil {
		w.beat.prev.beat.next = w.beat.next
	} else {
		h.slots[w.beat.due%int64(len(h.slots))] = w.beat.next
	}
	if w.beat.next != nil {
		w.beat.next.beat.prev = w.beat.prev
	}
	w.beat.next, w.beat.prev, w.beat.on = nil, nil, false
}

// run turns the wheel until it holds no connection. PINGs are queued and
// timeouts started outside the lock.
func (h *heartbeat) run() {
	t := time.NewTimer(h.tick)
	defer t.Stop()
	var pings []*wsTransport
	var late []func()
	for {
		<-t.C
		var empty bool
		pings, late, empty = h.advance(h.clock(), pings[:0], late[:0])
		for _, w := range pings {
			w.queue(pingFrame)
		}
		for _, fn := range late {
			go fn()
		}
		clear(pings)
		clear(late)
		if empty {
			return
		}
		t.Reset(h.tick)
	}
}

// advance handles every tick up to now: the connections due get a PING
// (appended to pings), or, when their PONG is late, leave the wheel (their
// timeouts appended to late). empty: the wheel holds nothing now, and its
// goroutine ends (the next add starts another).
func (h *heartbeat) advance(now time.Time, pings []*wsTransport, late []func()) (_ []*wsTransport, _ []func(), empty bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for cur := int64(now.Sub(h.epoch) / h.tick); h.next <= cur; h.next++ {
		k := h.next
		for w := h.slots[k%int64(len(h.slots))]; w != nil; {
			next := w.beat.next
			if w.beat.due <= k {
				h.unlink(w)
				if w.beat.awaiting {
					late = append(late, w.beat.timeout)
					w.beat.timeout = nil
					h.n--
				} else {
					w.beat.awaiting = true
					h.link(w, h.tickAfter(now, h.timeout))
					pings = append(pings, w)
				}
			}
			w = next
		}
	}
	if h.n == 0 {
		h.running = false
		return pings, late, true
	}
	return pings, late, false
}

// takeHeartbeat is the engine's "connection" listener (Websocket.Attach):
// a connection on our websocket from its handshake, speaking Engine.IO v4,
// gets its heartbeat from the wheel instead of the engine, and emitters of
// ours for the engine socket's and the websocket's (adopt.go). The engine
// calls its transport-ready callback, which would start its heartbeat,
// last in the initialization, after its own last use of those emitters
// and after the read permission that lets the reader start: the callback
// here swaps the emitters under initMu, which the reader waits for, and
// then puts the connection on the wheel (a connection whose initialization
// failed never joins it).
func (b *Websocket) takeHeartbeat(args ...any) {
	if len(args) == 0 || b.beats == nil {
		return
	}
	conn, ok := args[0].(engine.Socket)
	if !ok || conn.Protocol() != 4 {
		return
	}
	w, ok := conn.Transport().(*wsTransport)
	closer, canClose := conn.(interface{ OnClose(string, ...error) })
	ctx := conn.Request()
	// Without a read permission the engine has started its heartbeat already.
	if !ok || !canClose || w.upgradeSid != "" || ctx == nil || ctx.TransportReadPermission() == nil {
		return
	}
	w.initMu.Lock()
	ctx.SetTransportReady(func() { // instead of the engine's heartbeat
		defer w.initMu.Unlock()
		adoptField(conn)
		adoptField(w.conn)
		// After the swap: the wheel's goroutine, which may close the
		// connection (and so emit on its emitter), takes the wheel's lock
		// after add has, and so sees the new emitter.
		if b.beats.add(w, func() { closer.OnClose("ping timeout") }) {
			w.ownBeat.Store(true)
		}
	})
}
