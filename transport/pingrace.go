package transport

import (
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/parsers/engine/v3/packet"
	"github.com/zishang520/socket.io/servers/engine/v3"
)

// pongGuard works around a race in the Engine.IO library (servers/engine
// v3.0.6, socket.schedulePing): it writes a PING and only then arms the
// ping timeout. A PONG handled in between clears a timer not armed yet; the
// timer armed after it then fires pingTimeout later and closes a healthy
// connection ("ping timeout"). Measured with 10,000 sockets: 13–38 healthy
// sockets dropped in 2–3 minutes, on loopback where the PONG comes back in
// microseconds.
//
// The library emits "packetCreate" just before it writes the PING, and
// "packet" on the reader's goroutine just before it handles the PONG. A
// PONG that comes back within pongGuard of its PING waits until pongGuard
// has passed since the PING, by which time the timeout is armed and the
// PONG clears it as intended. It costs one short wait per ping interval,
// on that connection's reader only, and only when the client answers
// faster than pongGuard. With a 20 ms guard the 10,000-socket load run
// lost 1 connection instead of 31 (the one left: a ping goroutine held off
// the CPU longer than the guard on a saturated machine); the guard is 50 ms.
// (The fix in the library is to arm the timeout before writing the PING.)
//
// A connection on our websocket transport (wstransport.go) from its
// handshake does not meet the race: its heartbeat runs on the transport's
// wheel (heartbeat.go), and its PONGs never reach the engine. On one that
// upgraded to our websocket from polling the PONG is not held on the
// reader: the transport hands an early PONG to the engine later, from a
// timer, so the events read after it are not delayed. That hold is longer
// (wsPongHold: up to 1 s); by its end pongGuard has passed and this
// listener does not wait. The wait below remains for polling and for the
// library's own websocket transport.
const pongGuard = 50 * time.Millisecond

// WatchConn installs, on one engine connection, the ping-race guard above
// and a bound on what its client leaves unread (outboundGuard, outbound.go):
// more than maxBytes, or data older than maxWait (either ≤ 0: no bound),
// calls trip once, off the sender's goroutine, with the reason and the
// bytes waiting. One listener per engine event serves both.
func WatchConn(conn engine.Socket, maxBytes int64, maxWait time.Duration, trip func(why string, pending int64)) {
	watchConn(conn, &outboundGuard{maxBytes: maxBytes, maxWait: maxWait, trip: trip})
}

func watchConn(conn engine.Socket, g *outboundGuard) {
	// Our websocket transport keeps its own queue (wsout.go), which the
	// engine's packet events do not see: the same bound applies there.
	guardWS := func(t any) bool {
		w, ok := t.(*wsTransport)
		if ok {
			w.guard.Store(g)
		}
		return ok
	}
	if guardWS(conn.Transport()) {
		// A connection on our websocket from the start stays on it: the
		// engine's buffer never holds its packets (it is always writable)
		// and its early PONGs are held by the transport (holdPong), so the
		// listeners below would only cost memory.
		return
	}
	_ = conn.On("upgrade", func(args ...any) {
		if len(args) > 0 {
			guardWS(args[0])
		}
	})
	var pingAt atomic.Int64
	_ = conn.On("packetCreate", func(args ...any) {
		if p, ok := firstPacket(args); ok {
			now := time.Now().UnixNano()
			if p.Type == packet.PING {
				pingAt.Store(now)
			}
			g.created(p, now)
		}
	})
	_ = conn.On("flush", func(args ...any) {
		if len(args) > 0 {
			if ps, ok := args[0].([]*packet.Packet); ok {
				g.flushed(ps)
			}
		}
	})
	_ = conn.On("packet", func(args ...any) {
		if p, ok := firstPacket(args); ok && p.Type == packet.PONG {
			if since := time.Duration(time.Now().UnixNano() - pingAt.Load()); since >= 0 && since < pongGuard {
				time.Sleep(pongGuard - since)
			}
		}
	})
}

func firstPacket(args []any) (*packet.Packet, bool) {
	if len(args) == 0 {
		return nil, false
	}
	p, ok := args[0].(*packet.Packet)
	return p, ok && p != nil
}
