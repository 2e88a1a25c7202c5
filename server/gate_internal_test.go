package server

import (
	"sync/atomic"
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

// While busy, a connect needs a narrow slot too: with that one held, the
// next waits for it (at most the bound, counted once over both waits);
// once not busy, the wide slots alone let connects in.
func TestConnectGateNarrows(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	g := &connectGate{slots: make(chan struct{}, 3), narrow: make(chan struct{}, 1), busy: busy.Load,
		wait: 100 * time.Millisecond, holders: map[string]func(){}}
	a := g.enter()
	if len(g.slots) != 1 || len(g.narrow) != 1 {
		t.Fatalf("a busy connect holds %d wide and %d narrow slots, want 1 and 1", len(g.slots), len(g.narrow))
	}
	got := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		b := g.enter()
		d := time.Since(start)
		b()
		got <- d // after it left: the counts below see both gone
	}()
	time.Sleep(30 * time.Millisecond)
	select {
	case d := <-got:
		t.Fatalf("a second busy connect went in after %v with the narrow slot held", d)
	default:
	}
	a()
	if d := <-got; d > 90*time.Millisecond {
		t.Fatalf("the waiting connect got the narrow slot after %v", d)
	}
	if len(g.slots) != 0 || len(g.narrow) != 0 {
		t.Fatalf("after both left: %d wide, %d narrow slots held", len(g.slots), len(g.narrow))
	}

	// the narrow slot held: a busy connect waits the bound, then goes on
	// with its wide slot only
	hold := g.enter()
	start := time.Now()
	c := g.enter()
	if d := time.Since(start); d < 80*time.Millisecond || d > time.Second {
		t.Fatalf("a busy connect with the narrow slot held waited %v, want about 100ms", d)
	}
	if len(g.slots) != 2 || len(g.narrow) != 1 {
		t.Fatalf("%d wide and %d narrow slots held, want 2 and 1", len(g.slots), len(g.narrow))
	}
	c()
	busy.Store(false)
	d, e := g.enter(), g.enter() // not busy: the wide slots are enough
	if len(g.slots) != 3 || len(g.narrow) != 1 {
		t.Fatalf("not busy: %d wide and %d narrow slots held, want 3 and 1", len(g.slots), len(g.narrow))
	}
	hold()
	d()
	e()
	if len(g.slots) != 0 || len(g.narrow) != 0 {
		t.Fatalf("all left: %d wide, %d narrow slots held", len(g.slots), len(g.narrow))
	}
}
