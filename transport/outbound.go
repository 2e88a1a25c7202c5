package transport

import (
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/parsers/engine/v3/packet"
)

// outboundGuard bounds what one connection's client has not taken yet
// (CONTRACT §1 Limits): the packets the engine holds for it in its write
// buffer, created but not yet flushed to the transport. A client that
// stops reading keeps the transport unwritable (a websocket write blocks
// on its full TCP window; a polling client does not come back for its
// data), and the library buffers everything sent to it meanwhile, without
// bound. The guard trips when those bytes pass maxBytes, or when the
// oldest of them has waited longer than maxWait; the connection is then
// closed (its disconnect work runs as for any close). On our websocket
// transport the engine's buffer stays empty (the transport is always
// writable) and the same bounds apply to the transport's own queue
// instead (wsout.go, checkUnread).
//
// The oldest packet waiting is not counted against maxBytes (head): a
// message larger than the bound reaches a client that takes it, within
// maxWait, and one more packet behind it trips the guard only if those
// behind pass maxBytes.
//
// What is flushed is at most one batch that the guard has already
// allowed: the engine hands the transport nothing more until that batch is
// written, and a websocket write that takes longer than maxWait fails
// (wsTransport's write deadline). So one connection holds at most about
// twice maxBytes and the message at the head, whatever it is sent.
type outboundGuard struct {
	maxBytes int64
	maxWait  time.Duration
	trip     func(why string, pending int64) // called once, not under any library lock held by the guard's callers

	pending atomic.Int64 // bytes created and not flushed
	since   atomic.Int64 // unix ns when the oldest unflushed packet was created; 0: none
	// head is the size of the oldest unflushed packet, which the byte
	// bound does not count (as the websocket queue's head): a client that
	// polls gets one message larger than the bound. 0: none known.
	head    atomic.Int64
	tripped atomic.Bool
}

// packetSize is what a packet costs while it waits: its payload's size
// (the whole buffer, whatever has been read of it: a broadcast shares one
// buffer between recipients), plus one for the type.
func packetSize(p *packet.Packet) int64 {
	if s, ok := p.Data.(interface{ Size() int64 }); ok {
		return s.Size() + 1
	}
	return 1
}

// created accounts a packet the engine has just put in its write buffer.
func (g *outboundGuard) created(p *packet.Packet, now int64) {
	size := packetSize(p)
	n := g.pending.Add(size)
	if g.since.CompareAndSwap(0, now) {
		g.head.Store(size)
	} else if g.maxWait > 0 {
		if since := g.since.Load(); since != 0 && time.Duration(now-since) > g.maxWait {
			g.fire("unread for too long", n)
			return
		}
	}
	if g.maxBytes > 0 && n-g.head.Load() > g.maxBytes {
		g.fire("too much unread data", n)
	}
}

// flushed accounts the engine handing its write buffer to the transport.
func (g *outboundGuard) flushed(ps []*packet.Packet) {
	var n int64
	for _, p := range ps {
		n += packetSize(p)
	}
	g.head.Store(0) // (what is left, if anything, is counted whole)
	if g.pending.Add(-n) <= 0 {
		g.since.Store(0)
	} else {
		// what is left was created after the flush began
		g.since.Store(time.Now().UnixNano())
	}
}

func (g *outboundGuard) fire(why string, pending int64) {
	if g.tripped.CompareAndSwap(false, true) && g.trip != nil {
		// Not on the sender's goroutine: it may hold locks of the library
		// (a broadcast, the engine's flush) that closing needs.
		go g.trip(why, pending)
	}
}
