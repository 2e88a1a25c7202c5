package handlers

import (
	"testing"
	"time"
)

func TestOpContextsBoundEachEvent(t *testing.T) {
	o := opContexts{timeout: 10 * time.Second}
	t0 := time.Now()
	a := o.get(t0)
	b := o.get(t0.Add(opSlot / 2))
	if a != b {
		t.Fatal("events of one slot got different contexts")
	}
	for _, at := range []time.Time{t0, t0.Add(opSlot / 2)} {
		d, ok := a.Deadline()
		if !ok || d.Sub(at) < o.timeout || d.Sub(at) > o.timeout+opSlot {
			t.Fatalf("deadline %v for an event at %v: want within [timeout, timeout+slot]", d.Sub(at), at.Sub(t0))
		}
	}
	c := o.get(t0.Add(opSlot))
	if c == a {
		t.Fatal("an event after the slot shares its context")
	}
	if d, _ := c.Deadline(); d.Sub(t0.Add(opSlot)) < o.timeout {
		t.Fatalf("next slot's deadline %v short", d.Sub(t0.Add(opSlot)))
	}
	// a clock that went back does not reuse a slot from its future
	if o.get(t0.Add(-time.Second)) == c {
		t.Fatal("an earlier event got a later slot's context")
	}
	if a.Err() != nil {
		t.Fatal("context ended before its deadline")
	}
	short := opContexts{timeout: time.Millisecond}
	ctx := short.get(time.Now())
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("context not ended after its deadline")
	}
}
