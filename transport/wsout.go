package transport

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	ws "github.com/gorilla/websocket"
)

// The websocket's outbound side. Everything a socket is sent on our
// transport (the engine's packets, the direct acks, and the frames of
// broadcasts encoded once for all their recipients, broadcast.go) goes
// through one queue of whole websocket frames, in the order it was
// queued, and is written to the connection by at most one goroutine at a
// time, as many frames as are waiting in one writev. So a socket keeps its
// order between acks, events and broadcasts, a broadcast costs each
// recipient a slice header in its queue, and a client that stops reading
// holds up only its own writer, never the sender.
//
// An idle connection has no writer goroutine. A frame queued on an idle
// connection is written at once by the sender, as far as the socket takes
// it without waiting (tryWrite): a broadcast costs each recipient that
// keeps up one system call and no goroutine. Only what the socket did not
// take starts a writer, which ends when the queue is empty. An ack found
// an idle connection is written by the event's own goroutine (the ack is
// the reply to what that goroutine just read), without a copy.
//
// The frames are written on the hijacked connection itself, not through
// gorilla's writer (which copies each message into its buffer and takes a
// syscall per message). Gorilla still writes the control frames the reader
// answers (wsframes.go), under the frame lock that every writer holds from
// a frame's first byte to its last, so frames never interleave.
type outbound struct {
	mu     sync.Mutex
	frames net.Buffers // whole frames queued, in order
	spare  net.Buffers // the last batch's array, for reuse
	bytes  int64       // queued and being written
	// head is the size of the oldest frame not written whole (the first
	// of the batch being written, or of the queue), which the unread
	// bound does not count: a client that reads gets one message larger
	// than the bound (the age bound still applies to it). 0: none.
	head    int64
	since   int64 // unix ns the oldest frame not yet written was queued; 0: none
	writing bool  // a writer runs (it owns conn writes)
	// closing: the transport was closed; the writer closes the connection
	// once the queue is written (or its deadline passes). dead: the
	// connection failed or was closed: nothing more is queued.
	closing, dead bool
}

// closeWait bounds how long a closing connection may take to write what is
// queued (a disconnect packet, say) before it is closed anyway.
const closeWait = time.Second

// maxFrameHeader is the longest header of a server frame (no mask).
const maxFrameHeader = 10

// appendFrameHeader appends the header of an unmasked final frame of
// opcode op carrying n bytes.
func appendFrameHeader(dst []byte, op int, n int) []byte {
	switch {
	case n < 126:
		return append(dst, 0x80|byte(op), byte(n))
	case n <= 0xffff:
		return append(dst, 0x80|byte(op), 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0x80|byte(op), 127)
		return binary.BigEndian.AppendUint64(dst, uint64(n))
	}
}

// frameHeaderLen is the length of appendFrameHeader's header for n bytes.
func frameHeaderLen(n int) int {
	switch {
	case n < 126:
		return 2
	case n <= 0xffff:
		return 4
	default:
		return 10
	}
}

// buildFrame returns a whole frame of op carrying prefix (0 or 1 byte)
// followed by payload, in one new slice.
func buildFrame(op int, prefix []byte, payload []byte) []byte {
	n := len(prefix) + len(payload)
	f := make([]byte, 0, frameHeaderLen(n)+n)
	f = appendFrameHeader(f, op, n)
	f = append(f, prefix...)
	return append(f, payload...)
}

// sealFrame turns buf, whose first maxFrameHeader bytes are reserved and
// whose rest is the payload, into a whole frame of op: the header is
// written just before the payload and the frame returned is a sub-slice.
func sealFrame(buf []byte, op int) []byte {
	n := len(buf) - maxFrameHeader
	h := frameHeaderLen(n)
	start := maxFrameHeader - h
	appendFrameHeader(buf[start:start], op, n)
	return buf[start:]
}

// queue adds whole frames to the outbound queue (shared: the caller
// keeps no right to change them) and starts the writer if none runs. It
// reports false when the connection is closed or closing.
func (w *wsTransport) queue(frames ...[]byte) bool {
	o := &w.out
	now := time.Now().UnixNano()
	o.mu.Lock()
	if o.dead || o.closing {
		o.mu.Unlock()
		return false
	}
	if !o.writing && len(o.frames) == 0 && len(frames) == 1 && w.raw != nil && w.frameMu.TryLock() {
		// (the frame lock is busy only while a control frame is written:
		// then this frame waits in the queue, for the writer)
		o.writing = true
		o.mu.Unlock()
		w.tryWrite(frames[0], now)
		return true
	}
	if o.bytes == 0 && len(frames) > 0 {
		o.head = int64(len(frames[0]))
	}
	for _, f := range frames {
		o.frames = append(o.frames, f)
		o.bytes += int64(len(f))
	}
	pending, since := o.bytes-o.head, o.since
	if since == 0 {
		o.since = now
	}
	start := !o.writing
	o.writing = true
	o.mu.Unlock()
	w.checkUnread(pending, since, now)
	if start {
		go w.drain(nil)
	}
	return true
}

// tryWrite writes frame to an idle connection at once, on the caller's
// goroutine, as far as the socket takes it without waiting (a
// non-blocking write): a broadcast then costs each recipient whose client
// keeps up one system call, and no goroutine. Whatever the socket did not
// take goes first in the queue, for a writer goroutine of its own (with the
// frame lock, when the write stopped inside the frame). The caller has set
// o.writing and holds the frame lock.
func (w *wsTransport) tryWrite(frame []byte, now int64) {
	o := &w.out
	n := w.rawWrite(frame)
	o.mu.Lock()
	if o.dead { // abandoned meanwhile
		o.mu.Unlock()
		w.frameMu.Unlock()
		return
	}
	if n == len(frame) {
		w.frameMu.Unlock()
		if len(o.frames) > 0 { // queued meanwhile, behind this write
			o.mu.Unlock()
			go w.drain(nil)
			return
		}
		w.writerDoneLocked()
		return
	}
	rest := frame[n:]
	o.frames = append(net.Buffers{rest}, o.frames...)
	o.bytes += int64(len(rest))
	o.head = int64(len(rest))
	pending, since := o.bytes-o.head, o.since
	if since == 0 {
		o.since = now
	}
	if n > 0 {
		w.frameMuHeld = true // the writer finishes the frame before anything else
	} else {
		w.frameMu.Unlock()
	}
	o.mu.Unlock()
	w.checkUnread(pending, since, now)
	go w.drain(nil)
}

// writerDoneLocked ends the writer's turn, the queue being empty (o.mu
// held; unlocked on return): it closes the connection if the transport was
// closed meanwhile.
func (w *wsTransport) writerDoneLocked() {
	o := &w.out
	o.writing = false
	if cap(o.frames) > keepFrames {
		o.frames = nil // a burst's array, not kept for the socket's life
	}
	closing := o.closing
	if closing {
		o.dead = true
	}
	o.mu.Unlock()
	if closing {
		w.endConn()
	}
}

// rawWrite writes what the socket takes of b without waiting, and returns
// how much that was (a failure is met again by the writer that goes on).
// The caller holds the frame lock.
func (w *wsTransport) rawWrite(b []byte) int {
	c := &w.rawCall
	if c.fn == nil {
		c.fn = c.write // a method value: allocated once, not per write
	}
	c.b, c.n = b, 0
	_ = w.raw.Write(c.fn)
	n := c.n
	c.b = nil
	return n
}

// rawCall is a non-blocking write's argument and result, with the
// callback RawConn.Write runs: a closure made per write would be an
// allocation per recipient of every broadcast.
type rawCall struct {
	b  []byte
	n  int
	fn func(fd uintptr) bool
}

// lockFrames takes the frame lock for a write, unless tryWrite handed it
// on to this writer.
func (w *wsTransport) lockFrames() {
	if w.frameMuHeld {
		w.frameMuHeld = false
		return
	}
	w.frameMu.Lock()
}

// frameLocked is the frame reader's control writer (writeControl).
type frameLocked struct{ w *wsTransport }

func (c frameLocked) WriteControl(messageType int, data []byte, deadline time.Time) error {
	return c.w.writeControl(messageType, data, deadline)
}

// errControlTooLong: a control frame carries at most 125 bytes.
var errControlTooLong = errors.New("transport: control frame payload over 125 bytes")

// writeControl writes a PONG or CLOSE frame as gorilla's WriteControl
// does (unmasked: we are the server; nothing more once a CLOSE is sent),
// under the frame lock, so that it never lands inside another frame.
func (w *wsTransport) writeControl(op int, data []byte, deadline time.Time) error {
	if len(data) > 125 {
		return errControlTooLong
	}
	var frame [2 + 125]byte
	frame[0], frame[1] = 0x80|byte(op), byte(len(data))
	n := 2 + copy(frame[2:], data)
	w.frameMu.Lock()
	defer w.frameMu.Unlock()
	if w.closeSent {
		return ws.ErrCloseSent
	}
	w.closeSent = op == ws.CloseMessage
	_ = w.netConn.SetWriteDeadline(deadline)
	_, err := w.netConn.Write(frame[:n])
	return err
}

// closeConn closes the connection and tells the transport's listeners, as
// the library's WebSocketConn.Close does (gorilla's Close only closes the
// network connection).
func (w *wsTransport) closeConn() {
	_ = w.netConn.Close()
	w.conn.Emit("close")
}

// writeNow writes frame at once on the calling goroutine when nothing is
// queued before it and no writer runs; otherwise it queues a copy. frame
// may be reused by the caller when writeNow returns.
func (w *wsTransport) writeNow(frame []byte) {
	o := &w.out
	o.mu.Lock()
	if o.dead || o.closing {
		o.mu.Unlock()
		return
	}
	if o.writing || len(o.frames) > 0 {
		o.mu.Unlock()
		w.queue(append([]byte(nil), frame...))
		return
	}
	o.writing = true
	o.bytes += int64(len(frame))
	o.head = int64(len(frame))
	o.since = time.Now().UnixNano()
	o.mu.Unlock()
	w.drain(frame)
}

// checkUnread applies the unread bound (outboundGuard's settings) to the
// queue: pending bytes queued behind the oldest frame not written whole
// (head), the oldest queued at since (0: none before now).
func (w *wsTransport) checkUnread(pending, since, now int64) {
	g := w.guard.Load()
	if g == nil {
		return
	}
	if g.maxWait > 0 && since != 0 && time.Duration(now-since) > g.maxWait {
		g.fire("unread for too long", pending)
		return
	}
	if g.maxBytes > 0 && pending > g.maxBytes {
		g.fire("too much unread data", pending)
	}
}

// drain is the writer. Called with first (a frame counted in bytes, not
// queued) it writes that frame only and leaves what was queued meanwhile to
// a writer goroutine. Called without, it writes what is queued, batch by
// batch, until the queue is empty; then it closes the connection if the transport was closed
// meanwhile. A failed write fails the connection and drops the queue.
func (w *wsTransport) drain(first []byte) {
	o := &w.out
	var batch net.Buffers
	wrote := first != nil
	for {
		if wrote {
			var n int
			var err error
			if first != nil {
				n, err = len(first), w.writeFrames(nil, first)
			} else {
				for _, f := range batch {
					n += len(f)
				}
				err = w.writeFrames(batch, nil)
				clear(batch)
			}
			o.mu.Lock()
			if o.dead { // abandoned meanwhile
				o.mu.Unlock()
				return
			}
			if err != nil {
				pending, closing := o.bytes, o.closing
				w.dropLocked()
				o.mu.Unlock()
				if !closing && errors.Is(err, os.ErrDeadlineExceeded) {
					// The client took nothing for the whole write deadline
					// (MaxUnreadAge): a slow consumer, counted as one.
					if g := w.guard.Load(); g != nil {
						g.fire("unread for too long", pending)
					}
				}
				w.closeConn()
				w.fail(err)
				return
			}
			o.bytes -= int64(n)
			o.head = 0
			if len(o.frames) == 0 {
				o.since = 0
			} else {
				o.head = int64(len(o.frames[0]))
				// what is left was queued while the batch was written
				o.since = time.Now().UnixNano()
			}
			if cap(batch) > cap(o.spare) && cap(batch) <= keepFrames {
				o.spare = batch[:0]
			}
		} else {
			o.mu.Lock()
			if o.dead {
				// A frame lock handed on by tryWrite (only to the writer it
				// starts, so only before that writer's first write) is
				// given back: the queue was dropped. frameMuHeld is read
				// here under o.mu, as tryWrite set it; a writer that has
				// written no longer looks at it, since the next tryWrite
				// may set it for a writer of its own.
				held := w.frameMuHeld
				w.frameMuHeld = false
				o.mu.Unlock()
				if held {
					w.frameMu.Unlock()
				}
				return
			}
		}
		if len(o.frames) == 0 {
			w.writerDoneLocked()
			return
		}
		if first != nil {
			// The caller wrote its own frame; what others queued meanwhile
			// is for a writer of its own, not for the caller to wait on.
			o.mu.Unlock()
			go w.drain(nil)
			return
		}
		batch, o.frames, o.spare = o.frames, o.spare[:0], nil
		wrote = true
		o.mu.Unlock()
	}
}

// writeFrames writes whole frames, the batch in one writev or the single
// frame, within the write deadline (closeWait once the transport is
// closing).
//
// A batch is written holding one of the node's write slots (writeSlots):
// the writers started by broadcasts are many (one per recipient with
// nothing queued), and unbounded they crowd the run queue of a saturated
// node, so that the events waiting to be read and answered (a join's ack)
// queue behind thousands of writes. With the slots, at most a few writers
// run and the rest wait parked, in order. A writer whose client does not
// take the batch within slotWait (its socket buffer is full) gives its
// slot back and waits for that client alone. A single frame (an ack,
// written by the event's goroutine) takes no slot.
func (w *wsTransport) writeFrames(batch net.Buffers, single []byte) error {
	deadline := w.writeDeadline()
	w.lockFrames()
	defer w.frameMu.Unlock()
	if single != nil {
		_ = w.netConn.SetWriteDeadline(deadline)
		_, err := w.netConn.Write(single)
		return err
	}
	if len(batch) > 1 {
		if buf := coalesce(batch); buf != nil {
			defer coalescePool.Put(buf)
			w.one[0] = *buf
			batch = w.one[:]
			defer clear(w.one[:])
		}
	}
	writeSlots <- struct{}{}
	short := time.Now().Add(slotWait)
	slotted := deadline.IsZero() || short.Before(deadline)
	if slotted {
		_ = w.netConn.SetWriteDeadline(short)
	} else {
		_ = w.netConn.SetWriteDeadline(deadline)
	}
	b := batch // WriteTo consumes its receiver: b is what is left
	_, err := b.WriteTo(w.netConn)
	<-writeSlots
	if err != nil && slotted && len(b) > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		// a slow reader: the rest without a slot, within the real deadline
		_ = w.netConn.SetWriteDeadline(w.writeDeadline())
		_, err = b.WriteTo(w.netConn)
	}
	return err
}

// keepFrames is the longest queue array a socket keeps once its queue is
// written: a burst's longer one is let go.
const keepFrames = 16

// coalesceMax is the most bytes a batch is copied into one buffer to be
// written with write(2) rather than writev(2). The runtime keeps each
// connection's largest array of iovecs for its life (16 bytes a frame):
// after a burst of small broadcasts, every socket held one.
const coalesceMax = 16 << 10

var coalescePool = sync.Pool{New: func() any { b := make([]byte, 0, coalesceMax); return &b }}

// coalesce copies batch into a pooled buffer (nil: the batch is over
// coalesceMax bytes); the caller puts the buffer back.
func coalesce(batch net.Buffers) *[]byte {
	n := 0
	for _, f := range batch {
		n += len(f)
	}
	if n > coalesceMax {
		return nil
	}
	buf := coalescePool.Get().(*[]byte)
	b := (*buf)[:0]
	for _, f := range batch {
		b = append(b, f...)
	}
	*buf = b
	return buf
}

// writeDeadline is a write's deadline from now: closeWait once the
// transport is closing, else writeWait (none when 0).
func (w *wsTransport) writeDeadline() time.Time {
	o := &w.out
	o.mu.Lock()
	closing := o.closing
	o.mu.Unlock()
	switch {
	case closing:
		return time.Now().Add(closeWait)
	case w.writeWait > 0:
		return time.Now().Add(w.writeWait)
	}
	return time.Time{}
}

// writeSlots bounds the batches being written at once on the node
// (writeFrames): half the processors, so that reading and answering keep
// the other half under a fan-out (a join burst, 5,000 sockets joining 3
// conversations of ~100 members each, 500 in flight, on 2 cores: join ack
// p50 / p99 424 / 1,548 ms without the slots, 276 / 864 ms with one, the
// whole burst done in 14 s instead of 22). slotWait is how long a batch
// may hold a slot waiting for its client to take it.
var writeSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))

const slotWait = 2 * time.Millisecond

// dropLocked forgets the queue: the connection is gone (o.mu held).
func (w *wsTransport) dropLocked() {
	o := &w.out
	clear(o.frames)
	o.frames, o.spare = nil, nil
	o.bytes, o.since, o.head = 0, 0, 0
	o.writing = false
	o.dead = true
}

// closeOut closes the outbound side: at once when nothing is queued or
// being written, else once the writer has written the queue, within
// closeWait.
func (w *wsTransport) closeOut() {
	o := &w.out
	o.mu.Lock()
	if o.dead || o.closing {
		o.mu.Unlock()
		return
	}
	o.closing = true
	if o.writing {
		// shorten a write in progress to closeWait
		_ = w.netConn.SetWriteDeadline(time.Now().Add(closeWait))
		o.mu.Unlock()
		return
	}
	o.dead = true
	o.mu.Unlock()
	w.endConn()
}

// normalClose is a CLOSE frame's payload: 1000, normal closure.
var normalClose = ws.FormatCloseMessage(ws.CloseNormalClosure, "")

// endConn ends a connection the server closes, once what was queued is
// written: a CLOSE frame first (1000, within closeWait), as RFC 6455 asks
// and as Node's engine.io does; clients saw 1006, an abnormal closure.
func (w *wsTransport) endConn() {
	_ = w.writeControl(ws.CloseMessage, normalClose, time.Now().Add(closeWait))
	w.closeConn()
}

// abandonOut drops the queue: the connection failed or the peer closed it.
func (w *wsTransport) abandonOut() {
	o := &w.out
	o.mu.Lock()
	w.dropLocked()
	o.mu.Unlock()
	w.closeConn()
}

// busy reports whether frames wait or are being written (a volatile
// packet is not queued behind them).
func (w *wsTransport) busy() bool {
	o := &w.out
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.writing || len(o.frames) > 0 || o.dead || o.closing
}
