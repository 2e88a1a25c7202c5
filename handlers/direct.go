package handlers

import (
	"time"

	"github.com/presenced/presenced/transport"
)

// Direct events. The library hands each event through a long pipeline:
// engine packet emitters, the Socket.IO decoder, the socket's task queue (a
// goroutine started per burst), the ack encoder, the engine's write buffer
// and the websocket transport's own write queue (another goroutine). Under
// heartbeat load that pipeline, not presenced's work, is where the CPU and
// the garbage go. The server's websocket transport therefore reads EVENT
// packets of the main namespace itself and hands them to DirectEvent, which
// runs the same handler on the reader's goroutine; its ack is written
// straight to the websocket. Anything DirectEvent declines takes the
// library's path unchanged.

// slowDirect is how long a direct event may hold its connection's reader
// before the connection's events go back to the library's queue for
// slowBackoff: a reader blocked on a slow backend would not read the
// client's pongs (and other events) meanwhile. It is well above what a GC
// cycle on a busy node adds to a handler: falling back on the library's
// heavier path then would only add load at the worst moment.
const (
	slowDirect  = 250 * time.Millisecond
	slowBackoff = time.Second
)

// DirectEvent runs one event of the main namespace read straight off the
// websocket of the Engine.IO connection engineID: args are the decoded
// packet data (the event name first), ack is nil when the client asked for
// none. It reports false, having done nothing, when the event must take the
// library's path instead: an unknown connection or event, a connection not
// set up yet or closing, events of the socket still in the library's queue
// (they go first), or a backend that was slow a moment ago.
//
// slot is the websocket's own cache (transport.Dispatcher): DirectEvent
// keeps the connection there, so that only its first event (and the first
// after a namespace reconnect) looks it up by engineID.
func (h *Sockets) DirectEvent(slot *any, engineID func() string, args []any, ack transport.Replier) bool {
	name, _ := firstString(args)
	fn, ok := h.handlers[name]
	if !ok {
		return false
	}
	c := h.connOf(slot, engineID)
	if c == nil {
		return false
	}
	select {
	case <-c.ready:
	default:
		return false
	}
	// (marked: a message the library has not taken off the queue yet,
	// whose event would come after this one: before 2026-12-07 only the
	// events it had were counted, and one behind a busy queue was
	// overtaken)
	if c.pending.Load() != 0 || c.marked.Load() != 0 || !c.sock.Connected() {
		return false
	}
	start := time.Now()
	if until := c.slowUntil.Load(); until != 0 && start.UnixNano() < until {
		return false
	}
	h.serve(c, name, fn, args[1:], ack, time.Time{}, false)
	if d := time.Since(start); d > slowDirect {
		c.slowUntil.Store(start.Add(d + slowBackoff).UnixNano())
	}
	return true
}

// connOf is the connection engineID's socket, through slot (DirectEvent),
// or nil if it has none.
func (h *Sockets) connOf(slot *any, engineID func() string) *Conn {
	c, _ := (*slot).(*Conn)
	if c == nil || !c.sock.Connected() {
		v, ok := h.direct.Load(engineID())
		if !ok {
			return nil
		}
		c = v.(*Conn)
		*slot = c
	}
	return c
}

// Backlog implements transport.Backlogger: the socket's known events
// waiting for their handlers, and the messages handed to the library
// whose packets are not off its queue yet (Mark).
func (h *Sockets) Backlog(slot *any, engineID func() string) (int, bool) {
	c := h.connOf(slot, engineID)
	if c == nil || !c.sock.Connected() {
		return 0, false
	}
	return int(c.pending.Load()) + int(c.marked.Load()), true
}

// Mark implements transport.Backlogger: the packets just handed to the
// library count until a task queued behind them runs.
func (h *Sockets) Mark(slot *any, engineID func() string, packets int) {
	c := h.connOf(slot, engineID)
	if c == nil || !c.sock.Connected() {
		return
	}
	n := int64(packets)
	c.marked.Add(n)
	c.sock.Enqueue(func() { c.marked.Add(-n) })
}
