package handlers

import (
	"context"
	"sync/atomic"
	"time"
)

// Every event's work is bounded by OpTimeout. A context with its own
// deadline per event costs a timer and three objects, on every heartbeat;
// instead, events that start within the same opSlot share one context,
// whose deadline is OpTimeout after the slot's end: each event gets at
// least OpTimeout and at most OpTimeout+opSlot.

const opSlot = 100 * time.Millisecond

type opContexts struct {
	timeout time.Duration
	cur     atomic.Pointer[opSlotCtx]
}

type opSlotCtx struct {
	end int64 // unix ns: events that start before it share ctx
	ctx context.Context
	// cancel is never called before the deadline: the context's own timer
	// ends it, and an event's return does not end the others' work.
	cancel context.CancelFunc
}

// get returns the context for an event starting at now.
func (o *opContexts) get(now time.Time) context.Context {
	n := now.UnixNano()
	if s := o.cur.Load(); s != nil && n < s.end && n >= s.end-int64(opSlot) {
		return s.ctx
	}
	s := &opSlotCtx{end: n + int64(opSlot)}
	s.ctx, s.cancel = context.WithDeadline(context.Background(), now.Add(opSlot+o.timeout))
	o.cur.Store(s) // two events racing here each get a slot of their own: harmless
	return s.ctx
}
