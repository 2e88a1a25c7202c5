package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// Every length takes the shortest header form (RFC 6455 §5.2), and
// sealFrame builds in place the frame buildFrame builds anew.
func TestFrameHeaders(t *testing.T) {
	for _, tc := range []struct {
		n      int
		header int
	}{{0, 2}, {1, 2}, {125, 2}, {126, 4}, {65535, 4}, {65536, 10}, {1 << 20, 10}} {
		payload := bytes.Repeat([]byte{'z'}, tc.n)
		f := buildFrame(opText, nil, payload)
		if len(f) != tc.header+tc.n {
			t.Fatalf("%d bytes: frame of %d, want header %d", tc.n, len(f), tc.header)
		}
		if f[0] != 0x81 {
			t.Fatalf("%d bytes: first byte %#x, want FIN and text", tc.n, f[0])
		}
		var got int
		switch l := int(f[1]); {
		case l < 126:
			got = l
		case l == 126:
			got = int(binary.BigEndian.Uint16(f[2:4]))
		default:
			if f[2]&0x80 != 0 {
				t.Fatalf("%d bytes: 64-bit length with its top bit set", tc.n)
			}
			got = int(binary.BigEndian.Uint64(f[2:10]))
		}
		if got != tc.n || !bytes.Equal(f[tc.header:], payload) {
			t.Fatalf("%d bytes: header says %d", tc.n, got)
		}
		buf := append(make([]byte, maxFrameHeader), payload...)
		if sealed := sealFrame(buf, opText); !bytes.Equal(sealed, f) {
			t.Fatalf("%d bytes: sealFrame differs from buildFrame", tc.n)
		}
	}
	if f := buildFrame(opBinary, []byte{'4'}, []byte("ab")); !bytes.Equal(f, []byte{0x82, 3, '4', 'a', 'b'}) {
		t.Fatalf("binary frame with a prefix: %v", f)
	}
}

// A batch whose client does not read gives its write slot back after
// slotWait and goes on waiting for that client alone: with every slot
// taken by such writers, another connection's batch is still written at
// once, and each slow client, once it reads, gets its whole batch intact.
func TestWriteSlotsFreedBySlowReaders(t *testing.T) {
	batch := func(tag byte) net.Buffers {
		return net.Buffers{bytes.Repeat([]byte{tag}, 100), bytes.Repeat([]byte{tag + 1}, 200)}
	}
	type slow struct {
		peer net.Conn
		done chan error
	}
	var slows []slow
	for i := range cap(writeSlots) {
		srv, peer := net.Pipe() // unbuffered: a write waits for the peer's read
		w := &wsTransport{netConn: srv, writeWait: 10 * time.Second}
		s := slow{peer: peer, done: make(chan error, 1)}
		go func() { s.done <- w.writeFrames(batch(byte('a'+2*i)), nil) }()
		slows = append(slows, s)
	}
	time.Sleep(5 * slotWait)

	srv, peer := net.Pipe()
	defer srv.Close()
	defer peer.Close()
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 300)
		_, _ = io.ReadFull(peer, buf)
		got <- buf
	}()
	w := &wsTransport{netConn: srv, writeWait: 10 * time.Second}
	start := time.Now()
	if err := w.writeFrames(batch('x'), nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a batch waited %v behind clients that do not read", d)
	}
	if b := <-got; !bytes.Equal(b, bytes.Join(batch('x'), nil)) {
		t.Fatalf("fast client got %q", b)
	}

	for i, s := range slows {
		buf := make([]byte, 300)
		if _, err := io.ReadFull(s.peer, buf); err != nil {
			t.Fatal(err)
		}
		if err := <-s.done; err != nil {
			t.Fatalf("slow writer %d: %v", i, err)
		}
		if want := bytes.Join(batch(byte('a'+2*i)), nil); !bytes.Equal(buf, want) {
			t.Fatalf("slow client %d got %q, want its batch whole", i, buf)
		}
		s.peer.Close()
	}
}

// A frame the socket takes only in part is finished by a writer goroutine
// before anything queued after it, whole and in order; the frame lock is
// free again once the queue is written.
func TestTryWritePartialFrame(t *testing.T) {
	w, client := tcpTransport(t)
	big := buildFrame(opText, nil, bytes.Repeat([]byte{'a'}, 4<<20)) // more than the socket takes at once
	small := buildFrame(opText, nil, []byte("after"))
	if !w.queue(big) || !w.queue(small) {
		t.Fatal("queue refused")
	}
	readAll(t, client, append(append([]byte(nil), big...), small...))
	waitWriterDone(t, w)
	if !w.frameMu.TryLock() {
		t.Fatal("the frame lock is still held after the queue was written")
	}
	w.frameMu.Unlock()
}

// Frames written in part, one after another as soon as the client has
// read the one before, each hand the frame lock on to a writer of their
// own: a writer that has ended its turn never touches the hand-on of the
// next (under -race, a shared flag read unlocked was reported here), and
// every frame arrives whole and in order.
func TestTryWritePartialFramesInTurn(t *testing.T) {
	w, client := tcpTransport(t)
	for i := range 100 {
		f := buildFrame(opText, nil, bytes.Repeat([]byte{byte('a' + i%26)}, 64<<10))
		if !w.queue(f) {
			t.Fatalf("round %d: queue refused", i)
		}
		readAll(t, client, f) // the next queue may meet this writer ending its turn
	}
	waitWriterDone(t, w)
	if !w.frameMu.TryLock() {
		t.Fatal("the frame lock is still held after the queue was written")
	}
	w.frameMu.Unlock()
}

// The unread bound does not count the frame at the head of the queue: a
// client that reads gets one frame larger than the bound and stays; frames
// queued behind it count.
func TestUnreadBoundSparesHead(t *testing.T) {
	w, client := tcpTransport(t)
	why := make(chan string, 1)
	w.guard.Store(&outboundGuard{maxBytes: 1 << 20, maxWait: time.Minute, trip: func(s string, _ int64) { why <- s }})
	big := buildFrame(opText, nil, bytes.Repeat([]byte{'a'}, 3<<20))
	small := buildFrame(opText, nil, []byte("after"))
	if !w.queue(big) || !w.queue(small) {
		t.Fatal("queue refused")
	}
	readAll(t, client, append(append([]byte(nil), big...), small...))
	waitWriterDone(t, w)
	noTrip(t, why, "tripped on one frame over the bound, read by its client")
	// a client that reads nothing: the frames behind the head pass the bound
	var more []byte
	for range 3 {
		f := buildFrame(opText, nil, bytes.Repeat([]byte{'b'}, 1<<20))
		w.queue(f)
		more = append(more, f...)
	}
	wantTrip(t, why, "too much unread data", "did not trip on 2 MiB behind the head")
	readAll(t, client, more) // (the guard's trip closes nothing here: the writer ends)
	waitWriterDone(t, w)
}

// tcpTransport is a transport on a loopback TCP connection whose socket
// takes little at once, and the client's end.
func tcpTransport(t *testing.T) (*wsTransport, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv := (<-accepted).(*net.TCPConn)
	t.Cleanup(func() { srv.Close() })
	_ = srv.SetWriteBuffer(4096)
	raw, err := srv.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return &wsTransport{netConn: srv, raw: raw, writeWait: 10 * time.Second}, client
}

// readAll reads len(want) bytes from the client and compares them.
func readAll(t *testing.T, client net.Conn, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the client did not get the frames whole and in order")
	}
}

// waitWriterDone waits for the transport's writer to finish its queue.
func waitWriterDone(t *testing.T, w *wsTransport) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		w.out.mu.Lock()
		idle := !w.out.writing
		w.out.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer did not finish")
		}
	}
}

// Frames queued behind a large one are written in order, the small
// batches coalesced into one buffer; once the queue is written the socket
// keeps no queue array longer than keepFrames.
func TestBurstQueueLetGo(t *testing.T) {
	w, client := tcpTransport(t)
	want := []byte(nil)
	big := buildFrame(opText, nil, bytes.Repeat([]byte{'a'}, 4<<20))
	if !w.queue(big) {
		t.Fatal("queue refused")
	}
	want = append(want, big...)
	for i := range 500 {
		f := buildFrame(opText, nil, []byte(fmt.Sprintf("frame %d", i)))
		if !w.queue(f) {
			t.Fatal("queue refused")
		}
		want = append(want, f...)
	}
	readAll(t, client, want)
	waitWriterDone(t, w)
	w.out.mu.Lock()
	defer w.out.mu.Unlock()
	if c, s := cap(w.out.frames), cap(w.out.spare); c > keepFrames || s > keepFrames {
		t.Fatalf("kept queue arrays of %d and %d frames", c, s)
	}
}

// coalesce joins a batch up to coalesceMax bytes and declines a larger one.
func TestCoalesce(t *testing.T) {
	batch := net.Buffers{[]byte("ab"), []byte("c"), []byte("def")}
	buf := coalesce(batch)
	if buf == nil || string(*buf) != "abcdef" {
		t.Fatalf("coalesce = %v", buf)
	}
	coalescePool.Put(buf)
	if coalesce(net.Buffers{make([]byte, coalesceMax), []byte("x")}) != nil {
		t.Fatal("a batch over coalesceMax was coalesced")
	}
}
