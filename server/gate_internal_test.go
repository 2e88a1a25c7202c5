package server

import (
	"testing"
	"time"
)

// A full gate makes a connect wait, at most its bound, then lets it on
// without a slot; a slot given back lets the next one in at once; giving
// one back twice frees one slot only.
func TestConnectGate(t *testing.T) {
	g := &connectGate{slots: make(chan struct{}, 2), wait: 50 * time.Millisecond, holders: map[string]func(){}}
	a, b := g.enter(), g.enter()
	start := time.Now()
	c := g.enter() // full: waits the bound, then goes on without a slot
	if d := time.Since(start); d < 40*time.Millisecond || d > time.Second {
		t.Fatalf("a connect at a full gate waited %v, want about 50ms", d)
	}
	c()
	if len(g.slots) != 2 {
		t.Fatalf("a slotless leave freed a slot: %d held", len(g.slots))
	}
	got := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		g.enter()
		got <- time.Since(start)
	}()
	time.Sleep(10 * time.Millisecond)
	a()
	a() // twice: one slot
	if d := <-got; d > 40*time.Millisecond {
		t.Fatalf("a waiting connect got the freed slot after %v", d)
	}
	if len(g.slots) != 2 {
		t.Fatalf("%d slots held, want 2 (b and the waiter)", len(g.slots))
	}
	g.hold("s1", b)
	g.leaveFor("s1")
	g.leaveFor("s1")
	g.leaveFor("unknown")
	if len(g.slots) != 1 || len(g.holders) != 0 {
		t.Fatalf("after leaveFor: %d slots held, %d holders", len(g.slots), len(g.holders))
	}
}
