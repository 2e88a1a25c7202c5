package transport

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zishang520/socket.io/parsers/engine/v3/packet"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

func msgPacket(n int) *packet.Packet {
	return &packet.Packet{Type: packet.MESSAGE, Data: types.NewStringBufferString(strings.Repeat("x", n))}
}

func TestOutboundGuardBytes(t *testing.T) {
	var trips atomic.Int32
	why := make(chan string, 4)
	g := &outboundGuard{maxBytes: 10_000, maxWait: time.Minute, trip: func(w string, _ int64) { trips.Add(1); why <- w }}
	now := time.Now().UnixNano()
	var batch []*packet.Packet
	for range 9 {
		p := msgPacket(999)
		batch = append(batch, p)
		g.created(p, now) // 9 × 1000 bytes: under the bound
	}
	g.flushed(batch) // the client took them
	if got := g.pending.Load(); got != 0 {
		t.Fatalf("pending after flush: %d", got)
	}
	for range 9 {
		g.created(msgPacket(999), now)
	}
	select {
	case w := <-why:
		t.Fatalf("tripped under the bound: %s", w)
	case <-time.After(50 * time.Millisecond):
	}
	g.created(msgPacket(1999), now) // 11,000 unread
	g.created(msgPacket(1999), now)
	select {
	case w := <-why:
		if w != "too much unread data" {
			t.Fatalf("why: %q", w)
		}
	case <-time.After(time.Second):
		t.Fatal("did not trip over the bound")
	}
	time.Sleep(50 * time.Millisecond)
	if trips.Load() != 1 {
		t.Fatalf("tripped %d times", trips.Load())
	}
}

// Data left unread longer than maxWait trips the guard on the next packet,
// whatever the size; a flush in time resets the clock.
func TestOutboundGuardAge(t *testing.T) {
	why := make(chan string, 1)
	g := &outboundGuard{maxBytes: 1 << 20, maxWait: time.Second, trip: func(w string, _ int64) { why <- w }}
	t0 := time.Now().UnixNano()
	p := msgPacket(10)
	g.created(p, t0)
	g.created(msgPacket(10), t0+int64(900*time.Millisecond))
	g.flushed([]*packet.Packet{p}) // one still pending: the clock restarts now
	g.created(msgPacket(10), time.Now().UnixNano()+int64(500*time.Millisecond))
	select {
	case w := <-why:
		t.Fatalf("tripped early: %s", w)
	case <-time.After(50 * time.Millisecond):
	}
	g.created(msgPacket(10), time.Now().UnixNano()+int64(2*time.Second))
	select {
	case w := <-why:
		if w != "unread for too long" {
			t.Fatalf("why: %q", w)
		}
	case <-time.After(time.Second):
		t.Fatal("did not trip on age")
	}
}
