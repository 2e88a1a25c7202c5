package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	ws "github.com/gorilla/websocket"

	"github.com/presenced/presenced/internal/memtest"
)

// scriptConn serves prepared bytes, at most chunk per Read.
type scriptConn struct {
	net.Conn
	data  []byte
	chunk int
}

func (c *scriptConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), c.chunk)
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}
func (c *scriptConn) SetReadDeadline(time.Time) error { return nil }

type ctlLog struct{ frames []string }

func (l *ctlLog) WriteControl(mt int, data []byte, _ time.Time) error {
	l.frames = append(l.frames, string(rune('0'+mt-8))+":"+string(data))
	return nil
}

// frame builds a client frame (masked unless unmasked is set).
func frame(fin bool, op byte, payload []byte, unmasked bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	mask := byte(0x80)
	if unmasked {
		mask = 0
	}
	switch n := len(payload); {
	case n < 126:
		out = append(out, mask|byte(n))
	case n < 1<<16:
		out = append(out, mask|126)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	default:
		out = append(out, mask|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	if unmasked {
		return append(out, payload...)
	}
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	out = append(out, key[:]...)
	for i, c := range payload {
		out = append(out, c^key[i%4])
	}
	return out
}

func newFrames(data []byte, chunk int) (*frameReader, *ctlLog) {
	l := &ctlLog{}
	return &frameReader{conn: &scriptConn{data: data, chunk: chunk}, ctl: l, limit: 100 << 10}, l
}

func TestFrameReaderMessages(t *testing.T) {
	long := bytes.Repeat([]byte("0123456789"), 50)   // 16-bit length
	huge := bytes.Repeat([]byte("abcdefghij"), 7000) // 64-bit length
	var in []byte
	in = append(in, frame(true, opText, []byte(`42["heartbeat",{"active":true}]`), false)...)
	in = append(in, frame(true, opBinary, []byte{0, 1, 2, 255}, false)...)
	in = append(in, frame(true, opText, long, false)...)
	in = append(in, frame(true, opText, huge, false)...)
	// a fragmented message with a PING and a PONG between its fragments
	in = append(in, frame(false, opText, []byte("42[\"a"), false)...)
	in = append(in, frame(true, opPing, []byte("p1"), false)...)
	in = append(in, frame(false, opContinuation, []byte("bc\","), false)...)
	in = append(in, frame(true, opPong, []byte("x"), false)...)
	in = append(in, frame(true, opContinuation, []byte("1]"), false)...)
	in = append(in, frame(true, opText, nil, false)...)
	in = append(in, frame(true, opClose, append([]byte{0x03, 0xe8}, "bye"...), false)...)
	want := []struct {
		mt  int
		msg []byte
	}{
		{ws.TextMessage, []byte(`42["heartbeat",{"active":true}]`)},
		{ws.BinaryMessage, []byte{0, 1, 2, 255}},
		{ws.TextMessage, long},
		{ws.TextMessage, huge},
		{ws.TextMessage, []byte(`42["abc",1]`)},
		{ws.TextMessage, []byte{}},
	}
	for _, chunk := range []int{1, 3, 7, 64, 1 << 20} {
		f, l := newFrames(in, chunk)
		for i, w := range want {
			mt, msg, err := f.next()
			if err != nil || mt != w.mt || !bytes.Equal(msg, w.msg) {
				t.Fatalf("chunk %d, message %d: %d %.40q %v, want %d %.40q", chunk, i, mt, msg, err, w.mt, w.msg)
			}
		}
		_, _, err := f.next()
		var ce *ws.CloseError
		if !errors.As(err, &ce) || ce.Code != ws.CloseNormalClosure || ce.Text != "bye" {
			t.Fatalf("chunk %d: after the CLOSE frame: %v", chunk, err)
		}
		if got := strings.Join(l.frames, "|"); got != "2:p1|0:"+string(ws.FormatCloseMessage(1000, "")) {
			t.Fatalf("chunk %d: control frames written %q (want the PONG, then the CLOSE reply)", chunk, got)
		}
		if cap(f.buf) > frameBufKeep*32 {
			t.Fatalf("chunk %d: buffer of %d bytes kept", chunk, cap(f.buf))
		}
	}
}

func TestFrameReaderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		err  error
		code int
	}{
		{"unmasked", frame(true, opText, []byte("42[]"), true), errProtocol, ws.CloseProtocolError},
		{"reserved bit", append([]byte{0xc1}, frame(true, opText, []byte("x"), false)[1:]...), errProtocol, ws.CloseProtocolError},
		{"continuation first", frame(true, opContinuation, []byte("x"), false), errProtocol, ws.CloseProtocolError},
		{"text inside a fragmented message", append(frame(false, opText, []byte("x"), false), frame(true, opText, []byte("y"), false)...), errProtocol, ws.CloseProtocolError},
		{"fragmented ping", frame(false, opPing, []byte("x"), false), errProtocol, ws.CloseProtocolError},
		{"unknown opcode", frame(true, 3, []byte("x"), false), errProtocol, ws.CloseProtocolError},
		// RFC 6455 §5.5.1, §7.4, §8.1
		{"close code of one byte", frame(true, opClose, []byte{3}, false), errProtocol, ws.CloseProtocolError},
		{"close code 1005 (never sent)", frame(true, opClose, []byte{0x03, 0xed}, false), errProtocol, ws.CloseProtocolError},
		{"close code 1006 (never sent)", frame(true, opClose, []byte{0x03, 0xee}, false), errProtocol, ws.CloseProtocolError},
		{"close code 999", frame(true, opClose, ws.FormatCloseMessage(999, ""), false), errProtocol, ws.CloseProtocolError},
		{"close code 2999", frame(true, opClose, ws.FormatCloseMessage(2999, ""), false), errProtocol, ws.CloseProtocolError},
		{"close code 5000", frame(true, opClose, ws.FormatCloseMessage(5000, ""), false), errProtocol, ws.CloseProtocolError},
		{"text not UTF-8", frame(true, opText, []byte("42[\"a\xff\"]"), false), errProtocol, ws.CloseInvalidFramePayloadData},
		{"fragmented text not UTF-8", append(frame(false, opText, []byte("42[\"\xe2\x82"), false), frame(true, opContinuation, []byte("\"]"), false)...), errProtocol, ws.CloseInvalidFramePayloadData},
		{"too big", frame(true, opText, make([]byte, 100<<10+1), false), ws.ErrReadLimit, ws.CloseMessageTooBig},
		{"too big in fragments", append(frame(false, opText, make([]byte, 60<<10), false), frame(true, opContinuation, make([]byte, 60<<10), false)...), ws.ErrReadLimit, ws.CloseMessageTooBig},
	} {
		f, l := newFrames(tc.in, 1<<20)
		_, _, err := f.next()
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
			continue
		}
		if want := "0:" + string(ws.FormatCloseMessage(tc.code, "")); len(l.frames) != 1 || l.frames[0] != want {
			t.Errorf("%s: control frames %q, want %q", tc.name, l.frames, want)
		}
	}
	// a connection that ends mid-frame is an abnormal closure, as gorilla reports it
	f, _ := newFrames(frame(true, opText, []byte("42[\"heartbeat\"]"), false)[:6], 1<<20)
	_, _, err := f.next()
	var ce *ws.CloseError
	if !errors.As(err, &ce) || ce.Code != ws.CloseAbnormalClosure || !ws.IsUnexpectedCloseError(err) {
		t.Fatalf("cut frame: %v, want close 1006", err)
	}
}

// Once its buffer fits the messages, the reader allocates nothing (the
// point of it: wsframes.go).
func TestFrameReaderDoesNotAllocate(t *testing.T) {
	one := frame(true, opText, []byte(`42["heartbeat",{"active":true}]`), false)
	in := bytes.Repeat(one, 1000)
	f, _ := newFrames(in, 4096)
	if _, _, err := f.next(); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(500, func() {
		if _, _, err := f.next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per message", allocs)
	}
}

// loopConn serves data over and over, at most 4096 bytes per read (a
// socket's read).
type loopConn struct {
	scriptConn
	all []byte
}

func (c *loopConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		c.data = c.all
	}
	return c.scriptConn.Read(p)
}

func heartbeats() []byte {
	return bytes.Repeat(frame(true, opText, []byte(`42["heartbeat",{"active":true}]`), false), 1000)
}

// BenchmarkFrameReader reads small masked text frames, heartbeats, from
// an in-memory connection (wsframes_gobwas_test.go compares gobwas/ws).
func BenchmarkFrameReader(b *testing.B) {
	all := heartbeats()
	f := &frameReader{conn: &loopConn{scriptConn: scriptConn{chunk: 4096}, all: all}, ctl: &ctlLog{}, limit: 100 << 10}
	b.SetBytes(int64(len(all) / 1000))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := f.next(); err != nil {
			b.Fatal(err)
		}
	}
}

// A declared length that would overflow when added to the fragment so far
// is refused at once (the reader used to wrap negative, pass the limit
// check, and spin on an empty read forever).
func TestFrameReaderHugeLengthsRefused(t *testing.T) {
	head := func(fin bool, op byte, n uint64) []byte {
		b0 := op
		if fin {
			b0 |= 0x80
		}
		out := []byte{b0, 0x80 | 127}
		out = binary.BigEndian.AppendUint64(out, n)
		return append(out, 1, 2, 3, 4)
	}
	junk := bytes.Repeat([]byte{0xAA}, 200<<10)
	for _, tc := range []struct {
		name string
		in   []byte
		err  error
		code int
	}{
		{"2^63-1 after a fragment", append(append(frame(false, opText, []byte("x"), false), head(true, opContinuation, 1<<63-1)...), junk...), ws.ErrReadLimit, ws.CloseMessageTooBig},
		{"2^63-1 alone", append(head(true, opText, 1<<63-1), junk...), ws.ErrReadLimit, ws.CloseMessageTooBig},
		{"limit minus fragment plus one", append(frame(false, opText, []byte("xy"), false), head(true, opContinuation, 100<<10-1)...), ws.ErrReadLimit, ws.CloseMessageTooBig},
		{"most significant bit set", append(head(true, opText, 1<<63), junk...), errProtocol, ws.CloseProtocolError},
		{"all ones", append(head(true, opBinary, ^uint64(0)), junk...), errProtocol, ws.CloseProtocolError},
	} {
		done := make(chan error, 1)
		f, l := newFrames(tc.in, 4096)
		go func() { _, _, err := f.next(); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
			}
			if want := "0:" + string(ws.FormatCloseMessage(tc.code, "")); len(l.frames) != 1 || l.frames[0] != want {
				t.Errorf("%s: control frames %q, want %q", tc.name, l.frames, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the reader did not return", tc.name)
		}
	}
	// exactly at the limit, in fragments, is still a message
	in := append(frame(false, opText, []byte("xy"), false), frame(true, opContinuation, make([]byte, 100<<10-2), false)...)
	f, _ := newFrames(in, 4096)
	if _, msg, err := f.next(); err != nil || len(msg) != 100<<10 {
		t.Fatalf("message at the limit: %d bytes, %v", len(msg), err)
	}
}

// fill refuses a count no frame can need, rather than trusting it.
func TestFrameReaderFillBounded(t *testing.T) {
	f, _ := newFrames(nil, 4096)
	for _, n := range []int{-1, 100<<10 + maxFrameHead + 1, math.MaxInt} {
		if err := f.fill(n); !errors.Is(err, errProtocol) {
			t.Errorf("fill(%d): %v", n, err)
		}
	}
}

// A frame's declared length is memory the reader grows into as the bytes
// arrive, not at once: a 14-byte header declaring a message of the limit's
// size used to cost a buffer of that size per connection, whether or not
// anything followed.
func TestFrameReaderGrowsAsBytesArrive(t *testing.T) {
	const limit = 16 << 20
	in := []byte{0x81, 0x80 | 127}
	in = binary.BigEndian.AppendUint64(in, limit-1)
	in = append(in, 1, 2, 3, 4)
	in = append(in, bytes.Repeat([]byte{'x'}, 1000)...) // then the connection ends
	f := &frameReader{conn: &scriptConn{data: in, chunk: 4096}, ctl: &ctlLog{}, limit: limit}
	var err error
	got := memtest.AllocatedBy(func() { _, _, err = f.next() })
	var ce *ws.CloseError
	if !errors.As(err, &ce) || ce.Code != ws.CloseAbnormalClosure {
		t.Fatalf("cut message: %v, want close 1006", err)
	}
	if got > 64<<10 {
		t.Fatalf("%d bytes read allocated %d bytes", len(in), got)
	}
	// and a message of that size still arrives whole
	msg := bytes.Repeat([]byte("0123456789abcdef"), (limit-16)/16)
	f = &frameReader{conn: &scriptConn{data: frame(true, opBinary, msg, false), chunk: 64 << 10}, ctl: &ctlLog{}, limit: limit}
	if mt, got, err := f.next(); err != nil || mt != ws.BinaryMessage || !bytes.Equal(got, msg) {
		t.Fatalf("large message: %d bytes, %v", len(got), err)
	}
}

// After a large message, the buffer kept for the next one is small even
// when the last read brought in the next frame's first bytes (the large
// buffer was kept as long as reads kept overlapping frames).
func TestFrameReaderShrinksAfterLargeMessage(t *testing.T) {
	mid := bytes.Repeat([]byte("0123456789"), 300)
	big := bytes.Repeat([]byte("0123456789"), 500)
	small := []byte(`42["heartbeat",{"active":true}]`)
	smalls := bytes.Repeat(frame(true, opText, small, false), 3)
	for _, tc := range []struct {
		name  string
		in    []byte
		large [][]byte
	}{
		// a large message in a buffer grown for an earlier one
		{"after a smaller one", slices.Concat(frame(true, opText, mid, false), frame(true, opText, big, false), smalls), [][]byte{mid, big}},
		// a fragment read into the buffer grown for the first
		{"fragmented", slices.Concat(frame(false, opText, big[:4500], false), frame(true, opContinuation, big[4500:], false), smalls), [][]byte{big}},
	} {
		for _, chunk := range []int{7, 100, 1000, 1 << 20} {
			f, _ := newFrames(tc.in, chunk)
			for _, want := range tc.large {
				if _, msg, err := f.next(); err != nil || !bytes.Equal(msg, want) {
					t.Fatalf("%s, chunk %d: large message: %d bytes, %v", tc.name, chunk, len(msg), err)
				}
			}
			for i := range 3 {
				if _, msg, err := f.next(); err != nil || !bytes.Equal(msg, small) {
					t.Fatalf("%s, chunk %d: message %d: %q, %v", tc.name, chunk, i, msg, err)
				}
				if cap(f.buf) > frameBufKeep {
					t.Fatalf("%s, chunk %d: a buffer of %d bytes kept after the large message", tc.name, chunk, cap(f.buf))
				}
			}
		}
	}
}

// fuzzFrameLimit is the fuzzed reader's limit: above frameBufKeep, so that
// buffers grown for a large message, and released after it, are exercised.
const fuzzFrameLimit = 6000

type readFrames struct {
	msgs  []string // type and bytes of each message
	ctl   []string // control frames written
	err   string   // how the reader ended
	wrong string   // a bound the reader broke
}

// readAllFrames runs a reader over in, served chunk bytes per read, until
// it fails, checking its bounds after every message.
func readAllFrames(in []byte, chunk int) readFrames {
	l := &ctlLog{}
	f := &frameReader{conn: &scriptConn{data: in, chunk: chunk}, ctl: l, limit: fuzzFrameLimit}
	var out readFrames
	for {
		mt, msg, err := f.next()
		if err != nil {
			out.ctl, out.err = l.frames, err.Error()
			return out
		}
		// a message is 6 bytes of input at least (2 of header, 4 of mask)
		switch {
		case len(out.msgs) >= len(in)/6:
			out.wrong = fmt.Sprintf("more messages than %d bytes can hold", len(in))
		case len(msg) > fuzzFrameLimit:
			out.wrong = fmt.Sprintf("a message of %d bytes, over the limit", len(msg))
		case cap(f.buf) > max(fuzzFrameLimit, frameBufKeep):
			out.wrong = fmt.Sprintf("a buffer of %d bytes for a message of %d", cap(f.buf), len(msg))
		}
		if out.wrong != "" {
			return out
		}
		out.msgs = append(out.msgs, string(rune('0'+mt))+":"+string(msg))
		// between messages (as next starts): what is kept stays small,
		// as what a read brings in beyond a message is less than a chunk
		f.release()
		if cap(f.buf) > frameBufKeep || cap(f.frag) > frameBufKeep {
			out.wrong = fmt.Sprintf("buffers of %d and %d bytes kept between messages (reads of %d bytes)", cap(f.buf), cap(f.frag), chunk)
			return out
		}
	}
}

// FuzzFrameReader feeds bytes to the frame reader, in small reads: it must
// neither panic nor hang, keep its limit and its buffers' bounds, and read
// the same messages, write the same control frames and end the same way
// whatever the size of the reads. testdata/fuzz/FuzzFrameReader holds the
// edge cases: 64-bit lengths (2^63-1, 2^63, 2^64-1, just over the limit),
// fragments with control frames between them, bad CLOSE frames.
func FuzzFrameReader(f *testing.F) {
	hb := []byte(`42["heartbeat",{"active":true}]`)
	f.Add(byte(3), bytes.Join([][]byte{frame(true, opText, hb, false), frame(true, opText, hb, false), frame(true, opBinary, []byte{0, 1}, false)}, nil))
	f.Add(byte(7), bytes.Join([][]byte{
		frame(false, opText, []byte(`42["a`), false), frame(true, opPing, []byte("p"), false),
		frame(true, opContinuation, []byte(`"]`), false), frame(true, opClose, []byte{0x03, 0xe8}, false),
	}, nil))
	f.Add(byte(63), frame(true, opText, bytes.Repeat([]byte("x"), fuzzFrameLimit+1), false))
	f.Fuzz(func(t *testing.T, chunk byte, in []byte) {
		done := make(chan [2]readFrames, 1)
		go func() {
			done <- [2]readFrames{readAllFrames(in, int(chunk%64)+1), readAllFrames(in, len(in)+1)}
		}()
		select {
		case got := <-done:
			small, whole := got[0], got[1]
			for _, r := range got {
				if r.wrong != "" {
					t.Fatal(r.wrong)
				}
			}
			if !slices.Equal(small.msgs, whole.msgs) || !slices.Equal(small.ctl, whole.ctl) || small.err != whole.err {
				t.Fatalf("reads of %d bytes: %q %q %s\nall at once: %q %q %s", chunk%64+1, small.msgs, small.ctl, small.err, whole.msgs, whole.ctl, whole.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d bytes not read within 10 s", len(in))
		}
	})
}

// With a limit above what an int holds (32-bit platforms), a declared
// length there is refused: int(n) used to keep its low 32 bits, and 2^32+3
// read as a 3-byte message, the rest of the stream taken for frames. (On
// 64 bits the length is within the limit, and the connection ends first.)
func TestFrameReaderLengthBeyondInt(t *testing.T) {
	in := []byte{0x81, 0x80 | 127}
	in = binary.BigEndian.AppendUint64(in, 1<<32+3)
	in = append(in, 0, 0, 0, 0)
	in = append(in, "abc"...)
	in = append(in, frame(true, opText, []byte(`42["heartbeat"]`), false)...)
	f := &frameReader{conn: &scriptConn{data: in, chunk: 4096}, ctl: &ctlLog{}, limit: 1 << 40}
	if mt, msg, err := f.next(); err == nil {
		t.Fatalf("read a message %d %q out of a frame of 2^32+3 bytes", mt, msg)
	}
}

// await's short deadline ends with it: the rest of a message that started
// within it may take longer (here with no idle timeout), and a wait that
// found nothing leaves no deadline behind either.
func TestFrameReaderAwaitDeadlineEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	f := &frameReader{conn: server, ctl: &ctlLog{}, limit: 100 << 10}
	const wait = 50 * time.Millisecond

	if ok, err := f.await(wait); ok || err != nil {
		t.Fatalf("await on a silent connection: %v, %v; want false, nil", ok, err)
	}
	msg := frame(true, opText, []byte(`42["heartbeat",{}]`), false)
	go func() {
		_, _ = client.Write(msg[:3])
		time.Sleep(3 * wait)
		_, _ = client.Write(msg[3:])
	}()
	// the first bytes come after the silent wait's deadline has passed
	time.Sleep(wait)
	if ok, err := f.await(wait); !ok || err != nil {
		t.Fatalf("await: %v, %v; want true, nil", ok, err)
	}
	mt, got, err := f.next()
	if err != nil || mt != ws.TextMessage || string(got) != `42["heartbeat",{}]` {
		t.Fatalf("next: %d %q %v", mt, got, err)
	}
}
