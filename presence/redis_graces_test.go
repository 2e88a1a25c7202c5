package presence_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
)

// graceUnderWay starts a node n1 with bob (b1) and alice (a1) in c1, and
// disconnects b1: bob's flap grace (3 s) is under way. It returns the
// moment of the disconnect.
func graceUnderWay(t *testing.T) (*fakeClockRedis, *presence.RedisEngine, time.Time) {
	t.Helper()
	f, n1 := aliceAndBob(t)
	gone := f.clock.Now()
	if err := n1.Disconnect(context.Background(), "b1"); err != nil {
		t.Fatal(err)
	}
	return f, n1, gone
}

// tickEvents runs n ticks of eng, a second apart, and returns their events.
func (f *fakeClockRedis) tickEvents(t *testing.T, eng *presence.RedisEngine, n int) []presence.Event {
	t.Helper()
	var evs []presence.Event
	for range n {
		f.clock.Advance(time.Second)
		if err := eng.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, f.rec.TakeEvents()...)
	}
	return evs
}

// offlineOf returns the offline statuses of user among evs.
func offlineOf(evs []presence.Event, user string) []presence.Event {
	var out []presence.Event
	for _, ev := range evs {
		if ev.Kind == presence.EventStatus && ev.UserID == user && ev.Status == presence.Offline {
			out = append(out, ev)
		}
	}
	return out
}

func render(evs []presence.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = enginetest.Render(ev)
	}
	return out
}

// loseG deletes the keys of slot {g} (the users' records, the timers, the
// leases), as a Redis Cluster master without replica that held them and
// came back empty lost them; the conversations' records stay.
func loseG(t *testing.T, f *fakeClockRedis) {
	t.Helper()
	ctx := context.Background()
	n := 0
	iter := f.rdb.Scan(ctx, 0, f.prefix+":{g}:*", 1000).Iterator()
	for iter.Next(ctx) {
		n += int(f.rdb.Del(ctx, iter.Val()).Val())
	}
	if n == 0 {
		t.Fatal("no key of {g} to lose")
	}
}

// A flap grace under way when Redis loses {g}'s data, its timers with it,
// is ended by the node that started it once its resync finds the loss:
// the leave goes out when the grace ends, and the offline status with the
// disconnect as last seen. Before, nothing ended it: the user stayed in
// the rosters (as away) for good, and subscribers never saw them go (a
// black-box audit of a {g} master lost without replica, 2026-12-07).
func TestRedisGraceEndsAfterItsTimersLost(t *testing.T) {
	f, n1, gone := graceUnderWay(t)
	loseG(t, f)
	evs := f.tickEvents(t, n1, 8) // the grace is 3 s
	got := render(evs)
	if n := countOf(got, "leave c1 bob disconnected"); n != 1 {
		t.Errorf("events %q: bob's leave told %d times, want once", got, n)
	}
	if off := offlineOf(evs, "bob"); len(off) != 1 || !off[0].LastSeen.Equal(gone) {
		t.Errorf("bob's offline statuses %+v, want one, last seen at the disconnect (%v)", off, gone)
	}
	if got := rosterUsers(t, n1, "c1"); !slices.Equal(got, []string{"alice"}) {
		t.Errorf("roster %v, want alice", got)
	}
}

// The same when Redis lost everything (a restart without persistence):
// the conversation's member record went with the timers, and the node
// that started the grace announces the leave itself, dated at the
// disconnect. Before, only the offline status was told: the room's
// members kept bob for good (a black-box audit, 2026-12-07: 9 of 9 users
// who disconnected in the 3 s before a restart).
func TestRedisGraceEndsAfterAllDataLost(t *testing.T) {
	f, n1, gone := graceUnderWay(t)
	loseData(f.rdb, f.prefix)
	evs := f.tickEvents(t, n1, 8)
	got := render(evs)
	var leaves []presence.Event
	for _, ev := range evs {
		if ev.Kind == presence.EventLeave && ev.UserID == "bob" {
			leaves = append(leaves, ev)
		}
	}
	if len(leaves) != 1 || !leaves[0].At.Equal(gone) || leaves[0].Reason != presence.ReasonDisconnected {
		t.Errorf("events %q: bob's leaves %+v, want one, disconnected, at the disconnect (%v)", got, leaves, gone)
	}
	if off := offlineOf(evs, "bob"); len(off) != 1 || !off[0].LastSeen.Equal(gone) {
		t.Errorf("bob's offline statuses %+v, want one, last seen at the disconnect (%v)", off, gone)
	}
	if n := countOf(got, "leave c1 alice"); n != 0 {
		t.Errorf("events %q: alice (connected) told gone", got)
	}
	if got := rosterUsers(t, n1, "c1"); !slices.Equal(got, []string{"alice"}) {
		t.Errorf("roster %v, want alice", got)
	}
}

// A grace that ended normally (its timers in {g} fired: leave and offline
// told) is not ended again when the node's next renewal finds its lease
// gone while {g} is intact (the lease lapsed in a stall and another node
// reaped it): {g}'s epoch is unchanged. Before, the offline status went out
// a second time (a review, 2026-12-07).
func TestRedisGraceOfAReapedNodeEndedOnce(t *testing.T) {
	f, n1, _ := graceUnderWay(t)
	ctx := context.Background()
	// the grace (3 s) ends, its timers fire as ever
	if off := offlineOf(f.tickEvents(t, n1, 4), "bob"); len(off) != 1 {
		t.Fatalf("bob's offline told %d times at the grace's end, want once", len(off))
	}
	// n1's lease is gone, {g} intact (as a reap of n1 leaves it)
	f.rdb.ZRem(ctx, f.prefix+":{g}:lease", "n1")
	f.rdb.HDel(ctx, f.prefix+":{g}:holder", "n1")
	if off := offlineOf(f.tickEvents(t, n1, 3), "bob"); len(off) != 0 {
		t.Errorf("bob's offline told again (%+v): the grace had ended by its timers", off)
	}
}

// Bob's two sockets, b1 on n1 and b2 on n2, both in c1, both disconnect
// while Redis fails, and c1's member records are lost. n1's retry runs
// first: Redis still counts b2, so n1 holds the leave back (oweLeave). n2's
// retry finds no other socket and tells the leave, and notes it
// (markToldLeaves): n1's runOwed, owedAfter later, finds the record still
// missing and does not tell it again, as it did before (a review,
// 2026-12-07).
func TestRedisHeldBackLeaveToldOnce(t *testing.T) {
	_, got := lostRecordsOfBob(t, "c1", true)
	if n := countOf(got, "leave c1 bob disconnected"); n != 1 {
		t.Errorf("events %q: bob's leave of c1 told %d times, want once", got, n)
	}
}

// After {g}'s loss, runGraces ends each conversation's grace before it
// announces the offline status: the leaves go first, then the status, as
// removeFrom's do (before, the grace timers were set due again, and their
// leaves came at a later runDue, after the status; a review, 2026-12-07).
func TestRedisLostGraceLeavesBeforeOffline(t *testing.T) {
	f, n1, _ := graceUnderWay(t)
	loseG(t, f)
	got := render(f.tickEvents(t, n1, 8))
	leave, off := slices.Index(got, "leave c1 bob disconnected"), slices.Index(got, "status bob offline")
	if leave < 0 || off < 0 || off < leave {
		t.Errorf("events %q: bob's offline before (or without) the leave", got)
	}
}

// A grace started after {g}'s loss but before this node's resync has its
// timer in the new {g}, and the resync orphans it with the lost ones: its
// timer tells the offline status and notes it (userGrace), and runGraces,
// finding the record gone, does not tell it again, as it did before (a
// review, 2026-12-07).
func TestRedisGraceStartedAfterALossEndedOnce(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	n1, n2 := f.node(presence.Config{NodeID: "n1"}), f.node(presence.Config{NodeID: "n2"})
	f.tick(t, n1)
	f.tick(t, n2)
	for _, c := range []struct {
		eng       *presence.RedisEngine
		sid, user string
	}{{n1, "b1", "bob"}, {n2, "b2", "bob"}, {n2, "a2", "alice"}} {
		if err := c.eng.Connect(ctx, presence.Socket{ID: c.sid, UserID: c.user}); err != nil {
			t.Fatal(err)
		}
	}
	f.rec.Take()
	loseData(f.rdb, f.prefix)
	// n2 finds the loss first (its resync brings bob back, with b2)
	for range 10 {
		f.tick(t, n2)
		if f.rdb.HExists(ctx, f.prefix+":{g}:users", "bob").Val() {
			break
		}
	}
	got := f.rec.Take()
	t.Logf("after n2's resync: %q; keys %q", got, f.rdb.Keys(ctx, f.prefix+":*").Val())
	// bob's sockets go, n1's before n1's own renewal finds the loss
	if err := n2.Disconnect(ctx, "b2"); err != nil {
		t.Fatal(err)
	}
	if err := n1.Disconnect(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	got = append(got, f.rec.Take()...)
	for i := range 20 {
		f.clock.Advance(time.Second)
		for j, eng := range []*presence.RedisEngine{n1, n2} {
			if err := eng.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if evs := f.rec.Take(); len(evs) > 0 {
				t.Logf("tick %d of n%d: %q", i, j+1, evs)
				got = append(got, evs...)
			}
		}
	}
	t.Logf("events %q", got)
	if n := countOf(got, "status bob offline"); n != 1 {
		t.Fatalf("events %q: bob's offline told %d times, want once", got, n)
	}
}

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
