package presence_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/presence"
)

// An orphaned grace whose first conversation's grace was ended (convGrace
// ran, the leave returned) and whose second failed tells the first leave
// and keeps the second for a later tick. Before, the grace was put back
// whole and its events dropped: at the retry the first found nothing to
// end, and bob's leave of c1 was never told (a review, 2026-12-07).
func TestRedisLostGracePartlyEnded(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	n1 := f.node(presence.Config{NodeID: "n1"})
	f.tick(t, n1)
	connectJoin(t, n1, "a1", "alice", "c1", "c2")
	connectJoin(t, n1, "b1", "bob", "c1", "c2")
	f.rec.Take()
	if err := n1.Disconnect(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	loseG(t, f)
	var armed atomic.Int32
	armed.Store(1)
	key := f.prefix + ":{c:c2}:on" // convGrace's KEYS[1], of c2
	f.rdb.AddHook(redistest.FailHook{Fail: func(cmd redis.Cmder) bool {
		a := cmd.Args()
		return redistest.IsScript(cmd) && len(a) > 4 && fmt.Sprint(a[3]) == key && fmt.Sprint(a[2]) == "4" && armed.CompareAndSwap(1, 0)
	}})
	var got []string
	for range 10 {
		f.clock.Advance(time.Second)
		_ = n1.Tick(ctx) // (the injected failure is reported once)
		got = append(got, f.rec.Take()...)
	}
	if armed.Load() != 0 {
		t.Fatalf("the failure was never injected; events %q", got)
	}
	for _, want := range []string{"leave c1 bob disconnected", "leave c2 bob disconnected", "status bob offline"} {
		if n := countOf(got, want); n != 1 {
			t.Errorf("events %q: %q told %d times, want once", got, want, n)
		}
	}
	if r := rosterUsers(t, n1, "c1"); len(r) != 1 {
		t.Errorf("roster of c1 %v, want alice", r)
	}
}
