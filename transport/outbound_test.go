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
	noTrip(t, why, "tripped under the bound")
	g.created(msgPacket(1999), now) // 11,000 unread
	g.created(msgPacket(1999), now)
	wantTrip(t, why, "too much unread data", "did not trip over the bound")
	time.Sleep(50 * time.Millisecond)
	if trips.Load() != 1 {
		t.Fatalf("tripped %d times", trips.Load())
	}
}

// The oldest packet waiting is not counted: one message larger than the
// bound waits for its client (within maxWait); what comes behind it trips
// the guard once it passes the bound itself.
func TestOutboundGuardLargeMessage(t *testing.T) {
	why := make(chan string, 1)
	g := &outboundGuard{maxBytes: 10_000, maxWait: time.Minute, trip: func(w string, _ int64) { why <- w }}
	now := time.Now().UnixNano()
	big := msgPacket(30_000)
	g.created(big, now)
	g.created(msgPacket(99), now)
	noTrip(t, why, "tripped on one message over the bound")
	g.flushed([]*packet.Packet{big})
	g.created(msgPacket(30_000), now) // behind the 100 bytes left: counted
	wantTrip(t, why, "too much unread data", "did not trip on a large message behind another")
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
	noTrip(t, why, "tripped early")
	g.created(msgPacket(10), time.Now().UnixNano()+int64(2*time.Second))
	wantTrip(t, why, "unread for too long", "did not trip on age")
}

// noTrip fails the test (what: how) if the guard trips within 50ms.
func noTrip(t *testing.T, why <-chan string, what string) {
	t.Helper()
	select {
	case w := <-why:
		t.Fatalf("%s: %s", what, w)
	case <-time.After(50 * time.Millisecond):
	}
}

// wantTrip fails the test unless the guard trips for want within a second
// (else it fails with missing).
func wantTrip(t *testing.T, why <-chan string, want, missing string) {
	t.Helper()
	select {
	case w := <-why:
		if w != want {
			t.Fatalf("why: %q", w)
		}
	case <-time.After(time.Second):
		t.Fatal(missing)
	}
}
