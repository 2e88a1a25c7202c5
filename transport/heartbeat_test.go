package transport

import (
	"slices"
	"testing"
	"time"
)

// The heartbeat's wheel, turned by hand on a clock of the test's own.
func TestHeartbeatWheel(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newHeartbeat(2*time.Second, 3*time.Second) // ticks of 200 ms
	h.epoch, h.clock = now, func() time.Time { return now }
	h.running = true // turned by hand: add starts no goroutine
	timedOut := map[*wsTransport]int{}
	conn := func() *wsTransport {
		w := &wsTransport{}
		w.out.dead = true // queue does nothing
		if !h.add(w, func() { timedOut[w]++ }) {
			t.Fatal("add refused a new connection")
		}
		return w
	}
	step := func(d time.Duration, want ...*wsTransport) (empty bool) {
		t.Helper()
		now = now.Add(d)
		pings, late, empty := h.advance(now, nil, nil)
		for _, fn := range late {
			fn()
		}
		if len(pings) != len(want) {
			t.Fatalf("at %v: %d PINGs, want %d", now.Sub(h.epoch), len(pings), len(want))
		}
		for _, w := range want {
			if !slices.Contains(pings, w) {
				t.Fatalf("at %v: a connection was not pinged", now.Sub(h.epoch))
			}
		}
		return empty
	}
	a, b, c := conn(), conn(), conn()
	step(1900 * time.Millisecond) // no PING before the ping interval
	step(100*time.Millisecond, a, b, c)
	h.remove(c)
	if h.add(c, func() {}) {
		t.Fatal("a closed connection went back on the wheel")
	}
	step(400 * time.Millisecond)
	h.pong(a) // at 2.4 s: a's next PING at 4.4 s
	step(1900 * time.Millisecond)
	step(100*time.Millisecond, a)
	if len(timedOut) != 0 {
		t.Fatalf("timeouts before the ping timeout: %d", len(timedOut))
	}
	step(600 * time.Millisecond) // 5 s: b's PONG is 3 s late
	if timedOut[b] != 1 || timedOut[a] != 0 || timedOut[c] != 0 {
		t.Fatalf("after b's timeout: a %d, b %d, c %d timeouts; want 0, 1, 0", timedOut[a], timedOut[b], timedOut[c])
	}

	// A PONG that answers no PING does not move the next one.
	d := conn() // at 5 s: PING at 7 s
	step(time.Second)
	h.pong(d)
	step(time.Second, d)

	// The wheel falls behind by more than a turn (3.4 s here): every tick is
	// still handled once, and a connection added meanwhile, due more than a
	// turn after the last tick handled, waits for its own tick.
	now = now.Add(10 * time.Second) // 17 s; last handled: 7 s
	e := conn()                     // due at 19 s
	step(time.Second)               // 18 s: a and d time out (due at 7.4 and 10 s)
	if timedOut[a] != 1 || timedOut[d] != 1 || timedOut[b] != 1 {
		t.Fatalf("after the stall: a %d, b %d, d %d timeouts; want 1 each", timedOut[a], timedOut[b], timedOut[d])
	}
	step(time.Second, e)
	h.remove(e)
	if !step(time.Second) {
		t.Fatal("the wheel is empty, and its goroutine would not stop")
	}
	if h.running || h.n != 0 || slices.ContainsFunc(h.slots, func(w *wsTransport) bool { return w != nil }) {
		t.Fatalf("an empty wheel: running %v, %d connections", h.running, h.n)
	}
}
