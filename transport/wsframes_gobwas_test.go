//go:build compare_gobwas

// The hand-written frame reader (wsframes.go) against github.com/gobwas/ws,
// on the same in-memory connections: a zero-allocation test and
// benchmarks. Not built by default (gobwas is no dependency of the
// product); the command is in wsframes.go's first comment.

package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	gws "github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	ws "github.com/gorilla/websocket"
)

// gobwasFrames does frameReader's job (messages, fragments, PING answered,
// CLOSE, the limit) with gobwas/ws's frame functions: ReadHeaderBuffer on a
// bufio.Reader, the payload read into a reused buffer, Cipher to unmask.
type gobwasFrames struct {
	src   *bufio.Reader
	fr    frameReader // for its closed and refuse
	limit int64
	head  [gws.MaxHeaderSize - 2]byte
	buf   []byte
	msg   []byte
}

func newGobwasFrames(r io.Reader, ctl controlWriter, limit int64) *gobwasFrames {
	return &gobwasFrames{src: bufio.NewReaderSize(r, 4096), fr: frameReader{ctl: ctl}, limit: limit}
}

func (g *gobwasFrames) next() (int, []byte, error) {
	g.msg = g.msg[:0]
	fragType := 0
	for {
		h, err := gws.ReadHeaderBuffer(g.src, g.head[:])
		if err != nil {
			return 0, nil, err
		}
		if h.Rsv != 0 || !h.Masked || h.OpCode.IsControl() && (!h.Fin || h.Length > 125) {
			return 0, nil, g.fr.refuse(ws.CloseProtocolError, errProtocol)
		}
		if h.Length > g.limit-int64(len(g.msg)) {
			return 0, nil, g.fr.refuse(ws.CloseMessageTooBig, ws.ErrReadLimit)
		}
		if int64(cap(g.buf)) < h.Length {
			g.buf = make([]byte, h.Length)
		}
		p := g.buf[:h.Length]
		if _, err := io.ReadFull(g.src, p); err != nil {
			return 0, nil, err
		}
		gws.Cipher(p, h.Mask, 0)
		switch h.OpCode {
		case gws.OpPing:
			if err := g.fr.ctl.WriteControl(ws.PongMessage, p, time.Now().Add(controlWait)); err != nil {
				return 0, nil, err
			}
		case gws.OpPong:
		case gws.OpClose:
			return 0, nil, g.fr.closed(p)
		case gws.OpText, gws.OpBinary:
			if fragType != 0 {
				return 0, nil, g.fr.refuse(ws.CloseProtocolError, errProtocol)
			}
			mt := ws.TextMessage
			if h.OpCode == gws.OpBinary {
				mt = ws.BinaryMessage
			}
			if h.Fin {
				return mt, p, nil
			}
			fragType = mt
			g.msg = append(g.msg, p...)
		case gws.OpContinuation:
			if fragType == 0 {
				return 0, nil, g.fr.refuse(ws.CloseProtocolError, errProtocol)
			}
			g.msg = append(g.msg, p...)
			if h.Fin {
				return fragType, g.msg, nil
			}
		default:
			return 0, nil, g.fr.refuse(ws.CloseProtocolError, errProtocol)
		}
	}
}

// gobwasUtil is the same with gobwas's higher level wsutil.Reader (which
// checks the headers, limits the message, unmasks as it streams).
type gobwasUtil struct {
	rd  *wsutil.Reader
	fr  frameReader
	ctl [125]byte
	buf []byte
}

func newGobwasUtil(r io.Reader, ctl controlWriter, limit int64) *gobwasUtil {
	g := &gobwasUtil{fr: frameReader{ctl: ctl}}
	g.rd = &wsutil.Reader{Source: bufio.NewReaderSize(r, 4096), State: gws.StateServerSide, MaxMessageSize: limit}
	g.rd.OnIntermediate = func(h gws.Header, r io.Reader) error { return g.control(h, r) }
	return g
}

func (g *gobwasUtil) control(h gws.Header, r io.Reader) error {
	p := g.ctl[:h.Length]
	if _, err := io.ReadFull(r, p); err != nil {
		return err
	}
	switch h.OpCode {
	case gws.OpPing:
		return g.fr.ctl.WriteControl(ws.PongMessage, p, time.Now().Add(controlWait))
	case gws.OpClose:
		return g.fr.closed(p)
	}
	return nil
}

func (g *gobwasUtil) next() (int, []byte, error) {
	for {
		h, err := g.rd.NextFrame()
		if err != nil {
			return 0, nil, err
		}
		if h.OpCode.IsControl() {
			if err := g.control(h, g.rd); err != nil {
				return 0, nil, err
			}
			continue
		}
		n := 0
		for {
			if n == len(g.buf) {
				g.buf = append(g.buf, make([]byte, max(512, len(g.buf)))...)
			}
			m, err := g.rd.Read(g.buf[n:])
			n += m
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return 0, nil, err
			}
		}
		mt := ws.TextMessage
		if h.OpCode == gws.OpBinary {
			mt = ws.BinaryMessage
		}
		return mt, g.buf[:n], nil
	}
}

type messageReader interface {
	next() (int, []byte, error)
}

var readers = []struct {
	name string
	new  func(r io.Reader, ctl controlWriter, limit int64) messageReader
}{
	{"hand-written", func(r io.Reader, ctl controlWriter, limit int64) messageReader {
		return &frameReader{conn: r.(*loopConn), ctl: ctl, limit: limit}
	}},
	{"gobwas ReadHeaderBuffer", func(r io.Reader, ctl controlWriter, limit int64) messageReader {
		return newGobwasFrames(r, ctl, limit)
	}},
	{"gobwas wsutil.Reader", func(r io.Reader, ctl controlWriter, limit int64) messageReader {
		return newGobwasUtil(r, ctl, limit)
	}},
}

// The readers read the same messages (fragments and control frames
// between them included).
func TestGobwasReadersAgree(t *testing.T) {
	long := bytes.Repeat([]byte("0123456789"), 50)
	var in []byte
	in = append(in, frame(true, opText, []byte(`42["heartbeat",{"active":true}]`), false)...)
	in = append(in, frame(true, opBinary, long, false)...)
	in = append(in, frame(false, opText, []byte("42[\"a"), false)...)
	in = append(in, frame(true, opPing, []byte("p1"), false)...)
	in = append(in, frame(true, opContinuation, []byte("\"]"), false)...)
	in = append(in, frame(true, opClose, []byte{0x03, 0xe8}, false)...)
	want := []string{`1:42["heartbeat",{"active":true}]`, "2:" + string(long), `1:42["a"]`}
	for _, r := range readers {
		l := &ctlLog{}
		c := &loopConn{scriptConn: scriptConn{data: in, chunk: 7}}
		c.all = nil
		m := r.new(c, l, 100<<10)
		for i, w := range want {
			mt, msg, err := m.next()
			if got := string(rune('0'+mt)) + ":" + string(msg); err != nil || got != w {
				t.Fatalf("%s: message %d: %.40q %v", r.name, i, got, err)
			}
		}
		if _, _, err := m.next(); !errors.As(err, new(*ws.CloseError)) {
			t.Fatalf("%s: after CLOSE: %v", r.name, err)
		}
		if len(l.frames) != 2 || l.frames[0] != "2:p1" {
			t.Fatalf("%s: control frames %q", r.name, l.frames)
		}
	}
}

// TestFrameReaderDoesNotAllocate, for every reader.
func TestGobwasReadersAllocations(t *testing.T) {
	for _, r := range readers {
		m := r.new(&loopConn{scriptConn: scriptConn{chunk: 4096}, all: heartbeats()}, &ctlLog{}, 100<<10)
		if _, _, err := m.next(); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(5000, func() {
			if _, _, err := m.next(); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: %.2f allocations per message", r.name, allocs)
	}
}

func BenchmarkFrameReaderCompared(b *testing.B) {
	for _, r := range readers {
		b.Run(r.name, func(b *testing.B) {
			all := heartbeats()
			m := r.new(&loopConn{scriptConn: scriptConn{chunk: 4096}, all: all}, &ctlLog{}, 100<<10)
			b.SetBytes(int64(len(all) / 1000))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := m.next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
