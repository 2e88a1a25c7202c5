// Kept hand-written after a comparison with github.com/gobwas/ws v1.5.0
// (2026-12-01, Go 1.26.8, 2 shared cores under load, medians of 5 runs of
// 1,000 masked heartbeat frames 42["heartbeat",{"active":true}] read from
// an in-memory connection in 4 KB reads): this reader 80 ns/op, gobwas's
// ReadHeaderBuffer on a bufio.Reader with Cipher 121 ns/op, its
// wsutil.Reader 200 ns/op; all three 0 allocs/op. The comparison
// (wsframes_gobwas_test.go, build tag compare_gobwas) needs gobwas, which
// go.mod does not require, so it runs against a copy of go.mod:
//
//	cp go.mod /tmp/cmp.mod && cp go.sum /tmp/cmp.sum &&
//	go get -modfile=/tmp/cmp.mod github.com/gobwas/ws@v1.5.0 &&
//	go test -modfile=/tmp/cmp.mod -tags compare_gobwas -run Gobwas -bench FrameReader -count 5 ./transport/
//
// (go mod tidy reads files of every build tag: it would add gobwas to
// go.mod, as a test dependency only.)

package transport

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	ws "github.com/gorilla/websocket"
)

// frameReader reads a client's websocket messages (RFC 6455) straight off
// the connection, into a buffer it reuses. gorilla's reader allocates on
// every message, and in Go an allocation during a GC cycle makes the
// goroutine that did it help with the marking: at least 64 KB of scanning
// per goroutine per cycle. With a reader goroutine per socket, all
// allocating at once, that put a whole cycle's marking on the sockets'
// readers within half a second, and every heartbeat waited behind it. This
// reader does not allocate once its buffer has grown to the messages' size,
// so the marking stays with the GC's own workers (see directPool).
//
// The replies to PING and CLOSE frames are written by the transport
// (writeControl, wsout.go) under its frame lock, so that they never land
// inside another frame. Compression is never negotiated (the engine's
// perMessageDeflate is off), so a frame with a reserved bit set is an
// error, as it is for gorilla.
type frameReader struct {
	conn  net.Conn
	ctl   controlWriter
	limit int64 // largest message, as the engine's maxHttpBufferSize
	idle  time.Duration

	buf  []byte // buf[r:w] are read and not consumed
	r, w int
	frag []byte // a fragmented message so far
}

// controlWriter writes PONG and CLOSE frames (the transport's
// writeControl: frameLocked).
type controlWriter interface {
	WriteControl(messageType int, data []byte, deadline time.Time) error
}

const (
	opContinuation = 0
	opText         = 1
	opBinary       = 2
	opClose        = 8
	opPing         = 9
	opPong         = 10

	frameBufStart = 512     // a new connection's read buffer
	frameBufKeep  = 4 << 10 // the largest buffer kept between messages
	controlWait   = time.Second
	maxFrameHead  = 14 // 2 bytes, a 64-bit length, a 4-byte mask key
)

var errProtocol = errors.New("websocket: protocol error")

// next returns the next data message and its type (ws.TextMessage or
// ws.BinaryMessage). The message is valid until the following call.
// Control frames are answered on the way. A CLOSE from the client ends
// with a *ws.CloseError; a connection that ends without one, with a
// *ws.CloseError of code 1006, as gorilla reports them.
func (f *frameReader) next() (int, []byte, error) {
	f.release()
	fragType := 0
	for {
		if f.idle > 0 {
			_ = f.conn.SetReadDeadline(time.Now().Add(f.idle))
		}
		if err := f.fill(2); err != nil {
			return 0, nil, err
		}
		b0, b1 := f.buf[f.r], f.buf[f.r+1]
		fin, op := b0&0x80 != 0, int(b0&0x0f)
		if b0&0x70 != 0 || b1&0x80 == 0 { // reserved bits; clients must mask
			return 0, nil, f.refuse(ws.CloseProtocolError, errProtocol)
		}
		head, n := 2, int64(b1&0x7f)
		switch n {
		case 126:
			head = 4
		case 127:
			head = 10
		}
		if err := f.fill(head + 4); err != nil {
			return 0, nil, err
		}
		switch head {
		case 4:
			n = int64(binary.BigEndian.Uint16(f.buf[f.r+2:]))
		case 10:
			u := binary.BigEndian.Uint64(f.buf[f.r+2:])
			if u > 1<<63-1 { // RFC 6455 §5.2: the most significant bit must be 0
				return 0, nil, f.refuse(ws.CloseProtocolError, errProtocol)
			}
			n = int64(u)
		}
		control := op >= opClose
		if control && (!fin || n > 125) {
			return 0, nil, f.refuse(ws.CloseProtocolError, errProtocol)
		}
		// Overflow-safe: n is in [0, 2^63) and len(f.frag) ≤ f.limit, so
		// the subtraction cannot wrap (n + len(f.frag) could: a declared
		// length of 2^63-1 after a one-byte fragment wrapped negative, passed
		// the check, and fill then spun on an empty read forever). The
		// second test matters where an int is 32 bits and the limit is
		// larger: int(n) below would lose n's top bits.
		if n > f.limit-int64(len(f.frag)) || n > math.MaxInt-maxFrameHead {
			return 0, nil, f.refuse(ws.CloseMessageTooBig, ws.ErrReadLimit)
		}
		var key [4]byte
		copy(key[:], f.buf[f.r+head:])
		f.r += head + 4
		if err := f.fill(int(n)); err != nil {
			return 0, nil, err
		}
		payload := f.buf[f.r : f.r+int(n)]
		f.r += int(n)
		unmask(payload, key)

		switch op {
		case opPing:
			if err := f.ctl.WriteControl(ws.PongMessage, payload, time.Now().Add(controlWait)); err != nil && !errors.Is(err, ws.ErrCloseSent) {
				return 0, nil, err
			}
			continue
		case opPong:
			continue
		case opClose:
			return 0, nil, f.closed(payload)
		case opText, opBinary:
			if fragType != 0 {
				return 0, nil, f.refuse(ws.CloseProtocolError, errProtocol)
			}
			mt := ws.TextMessage
			if op == opBinary {
				mt = ws.BinaryMessage
			}
			if fin {
				if mt == ws.TextMessage && !utf8.Valid(payload) {
					return 0, nil, f.refuse(ws.CloseInvalidFramePayloadData, errProtocol) // RFC 6455 §8.1
				}
				return mt, payload, nil
			}
			fragType = mt
			f.frag = append(f.frag, payload...)
		case opContinuation:
			if fragType == 0 {
				return 0, nil, f.refuse(ws.CloseProtocolError, errProtocol)
			}
			f.frag = append(f.frag, payload...)
			if fin {
				if fragType == ws.TextMessage && !utf8.Valid(f.frag) {
					return 0, nil, f.refuse(ws.CloseInvalidFramePayloadData, errProtocol)
				}
				return fragType, f.frag, nil
			}
		default:
			return 0, nil, f.refuse(ws.CloseProtocolError, errProtocol)
		}
	}
}

// release gives back, between messages, the buffers grown for a large
// one. What a read brought in beyond that message (the next frames' first
// bytes) moves to a small buffer, unless it is large itself.
func (f *frameReader) release() {
	unread := f.w - f.r
	if unread == 0 {
		f.r, f.w = 0, 0
	}
	if cap(f.buf) > frameBufKeep && unread <= frameBufKeep/2 {
		var small []byte
		if unread > 0 {
			small = make([]byte, max(frameBufStart, 2*unread))
			copy(small, f.buf[f.r:f.w])
		}
		f.buf, f.r, f.w = small, 0, unread
	}
	if f.frag != nil {
		if cap(f.frag) > frameBufKeep {
			f.frag = nil
		} else {
			f.frag = f.frag[:0]
		}
	}
}

// fill makes at least n bytes available at buf[r:]. n is at most
// f.limit plus a frame header (next checks a declared length before asking
// for it); anything else is refused rather than trusted.
func (f *frameReader) fill(n int) error {
	if n < 0 || int64(n)-maxFrameHead > f.limit {
		return errProtocol
	}
	if f.w-f.r >= n {
		return nil
	}
	f.buf = f.buf[:cap(f.buf)]
	if f.r+n > len(f.buf) && f.r > 0 { // the unread bytes move down
		f.w = copy(f.buf, f.buf[f.r:f.w])
		f.r = 0
	}
	for f.w-f.r < n {
		if f.w == len(f.buf) {
			// Full (and f.r is 0): the buffer grows as the bytes arrive,
			// not to the declared length at once, which a header alone
			// would otherwise cost. It doubles, up to what n needs.
			grown := make([]byte, max(min(n, 2*len(f.buf)), frameBufStart))
			f.w = copy(grown, f.buf[:f.w])
			f.buf = grown
		}
		m, err := f.conn.Read(f.buf[f.w:])
		f.w += m
		if err != nil && f.w-f.r < n {
			if errors.Is(err, io.EOF) {
				return &ws.CloseError{Code: ws.CloseAbnormalClosure, Text: io.ErrUnexpectedEOF.Error()}
			}
			return err
		}
	}
	return nil
}

// await waits up to d for the next message's first bytes, between
// messages (no fragment pending): false, nil if none came.
//
// Its read usually finds the socket empty (EAGAIN) before the runtime
// waits: one syscall per message, which looks skippable after a read that
// drained the socket. It is not: RawConn.Read and Read both reset the
// connection's readiness before their first try (internal/poll's
// prepareRead), so bytes that came between the last read and the wait
// would be reported by nothing but that try. Tried (2026-12-07) with a
// RawConn.Read whose first call waits: 1 µs less CPU a heartbeat, and a
// test's message sent while its reader was busy waited for the next one.
func (f *frameReader) await(d time.Duration) (bool, error) {
	if f.w > f.r {
		return true, nil
	}
	f.r, f.w = 0, 0
	if cap(f.buf) == 0 {
		f.buf = readBufs.Get().(*[frameBufStart]byte)[:]
	}
	f.buf = f.buf[:cap(f.buf)]
	_ = f.conn.SetReadDeadline(time.Now().Add(d))
	n, err := f.conn.Read(f.buf)
	f.w = n
	// Whatever comes next (the message, or the connection parked or read
	// on), it is not under d: next sets the idle deadline at each frame,
	// so only a connection without one needs d cleared here.
	if f.idle <= 0 {
		_ = f.conn.SetReadDeadline(time.Time{})
	}
	switch {
	case n > 0: // an error is reported again by the next read
		return true, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false, nil
	case errors.Is(err, io.EOF):
		return false, &ws.CloseError{Code: ws.CloseAbnormalClosure, Text: io.ErrUnexpectedEOF.Error()}
	case err == nil:
		return true, nil // nothing read, nothing wrong: read on
	}
	return false, err
}

// drained reports that nothing read is left to consume.
func (f *frameReader) drained() bool { return f.w == f.r }

// parkBuffer gives back the read buffer of a connection with nothing buffered,
// when it is the small one, to be shared while the connection is parked.
func (f *frameReader) parkBuffer() {
	if f.w == f.r && cap(f.buf) == frameBufStart {
		readBufs.Put((*[frameBufStart]byte)(f.buf[:frameBufStart]))
		f.buf, f.r, f.w = nil, 0, 0
	}
}

// readBufs are the small read buffers of the connections being read.
var readBufs = sync.Pool{New: func() any { return new([frameBufStart]byte) }}

// closed answers the client's CLOSE frame and reports it as gorilla does.
func (f *frameReader) closed(payload []byte) error {
	code, text := ws.CloseNoStatusReceived, ""
	if len(payload) == 1 {
		return f.refuse(ws.CloseProtocolError, errProtocol) // RFC 6455 §5.5.1: a code is two bytes
	}
	if len(payload) >= 2 {
		code, text = int(binary.BigEndian.Uint16(payload)), string(payload[2:])
		if !utf8.ValidString(text) || !closeCodeValid(code) {
			return f.refuse(ws.CloseProtocolError, errProtocol)
		}
	}
	reply := []byte{}
	if code != ws.CloseNoStatusReceived {
		reply = ws.FormatCloseMessage(code, "")
	}
	_ = f.ctl.WriteControl(ws.CloseMessage, reply, time.Now().Add(controlWait))
	return &ws.CloseError{Code: code, Text: text}
}

// closeCodeValid reports whether a peer may send code in a CLOSE frame
// (RFC 6455 §7.4): the defined codes but those only reported locally
// (1005, 1006, 1015) and the reserved 1004, and the ranges 3000-4999 of
// libraries and applications.
func closeCodeValid(code int) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// refuse closes the connection with code, and returns err.
func (f *frameReader) refuse(code int, err error) error {
	_ = f.ctl.WriteControl(ws.CloseMessage, ws.FormatCloseMessage(code, ""), time.Now().Add(controlWait))
	return err
}

func unmask(b []byte, key [4]byte) {
	i := 0
	if len(b) >= 8 {
		k := uint64(binary.LittleEndian.Uint32(key[:]))
		k |= k << 32
		for ; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:])^k)
		}
	}
	for ; i < len(b); i++ {
		b[i] ^= key[i&3]
	}
}
