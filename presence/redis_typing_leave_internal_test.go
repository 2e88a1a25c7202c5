package presence

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
)

// leaveAfterStart holds a Leave's pipeline (convLeave, mode "left"), its
// typedBy already read, until a typing start of the same socket has
// returned: the leave's script runs after the start's ZADD, and the
// start's re-check (joinedSocket, d439bef) runs before the Leave deletes
// the conversation from the socket's local set. (A leave delayed between
// runLeave's typedBy and Redis: a preemption, a busy batch sender, a
// slower connection of the pool.)
type leaveAfterStart struct {
	mu            sync.Mutex
	armed         bool
	leaveSent     chan struct{}
	startReturned chan struct{}
}

func (h *leaveAfterStart) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *leaveAfterStart) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *leaveAfterStart) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		armed := h.armed
		h.mu.Unlock()
		if !armed {
			return next(ctx, cmds)
		}
		isLeave, isStart := false, false
		for _, c := range cmds {
			switch c.Name() {
			case "zadd":
				isStart = true
			case "evalsha", "eval":
				if slices.Contains(c.Args(), any("left")) {
					isLeave = true
				}
			}
		}
		switch {
		case isLeave:
			h.mu.Lock()
			h.armed = false
			h.mu.Unlock()
			close(h.leaveSent)
			<-h.startReturned
			return next(ctx, cmds)
		case isStart:
		}
		return next(ctx, cmds)
	}
}

// A leave whose typedBy ran before the start was noted, and whose script
// runs after the start's ZADD, misses the entry; the Leave's mark
// (leavingConv) makes the start refused, or taken back if it passed the
// check before the mark. Before, the start's check after its write ran
// before the Leave's local delete and passed, and the user was shown typing
// by a socket that left, until the entry's expiry (a review, 2026-12-07).
func TestTypingStartRacingLeave(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	eng, _, take := typingTestEngine(t, rdb, "tyleave", []string{"alice"}, []string{"c1"})
	k := eng.conv("c1")
	// warm the convLeave script (no NOSCRIPT retry under the hook)
	if err := eng.Connect(ctx, Socket{ID: "warm", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Join(ctx, "warm", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := eng.Leave(ctx, "warm", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := eng.Connect(ctx, Socket{ID: "a1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Join(ctx, "a1", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	take()

	h := &leaveAfterStart{armed: true, leaveSent: make(chan struct{}), startReturned: make(chan struct{})}
	rdb.AddHook(h)
	done := make(chan error, 1)
	go func() { done <- eng.Leave(ctx, "a1", "c1") }()
	<-h.leaveSent
	startErr := eng.TypingStart(ctx, "a1", "c1")
	close(h.startReturned)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	evs := take()
	score, err := rdb.ZScore(ctx, k.ty, "alice").Result()
	t.Logf("start returned %v; typing events %v; entry score %v (err %v)", startErr, evs, score, err)
	if err == nil {
		t.Errorf("socket a1 left c1, yet its typing entry stays (start returned %v, events %+v)", startErr, evs)
	}
}
