package presence_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
)

// A grace that ended normally (its timers in {g} fired: leave and offline
// told) is not ended again when the node's next renewal finds its lease
// gone while {g} is intact (the lease lapsed in a stall and another node
// reaped it): {g}'s epoch is unchanged. Before, the offline status went out
// a second time (a review, 2026-12-07).
func TestRedisGraceOfAReapedNodeEndedOnce(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	n1 := f.node(presence.Config{NodeID: "n1"})
	f.tick(t, n1)
	connectJoin(t, n1, "b1", "bob", "c1")
	connectJoin(t, n1, "a1", "alice", "c1")
	f.rec.Take()
	if err := n1.Disconnect(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	var offline []presence.Event
	collect := func() {
		for _, ev := range f.rec.TakeEvents() {
			if ev.Kind == presence.EventStatus && ev.UserID == "bob" && ev.Status == presence.Offline {
				offline = append(offline, ev)
			}
		}
	}
	// the grace (3 s) ends, its timers fire as ever
	for range 4 {
		f.clock.Advance(time.Second)
		if err := n1.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		collect()
	}
	if len(offline) != 1 {
		t.Fatalf("bob's offline told %d times at the grace's end, want once", len(offline))
	}
	// n1's lease is gone, {g} intact (as a reap of n1 leaves it)
	f.rdb.ZRem(ctx, f.prefix+":{g}:lease", "n1")
	f.rdb.HDel(ctx, f.prefix+":{g}:holder", "n1")
	for range 3 {
		f.clock.Advance(time.Second)
		_ = n1.Tick(ctx)
		collect()
	}
	if len(offline) != 1 {
		t.Errorf("bob's offline told %d times (%+v), want once: the grace had ended by its timers", len(offline), offline)
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
	f := newFakeClockRedis(t)
	n1, n2 := f.node(presence.Config{NodeID: "n1"}), f.node(presence.Config{NodeID: "n2"})
	f.tick(t, n1)
	f.tick(t, n2)
	connectJoin(t, n1, "b1", "bob", "c1")
	connectJoin(t, n2, "b2", "bob", "c1")
	connectJoin(t, n2, "a1", "alice", "c1")
	f.rec.Take()
	f.failDisconnect(t, n1, "b1", "fail", false)
	f.failDisconnect(t, n2, "b2", "fail", false)
	f.loseMembers(t, "c1")
	got := f.ticksEvery(t, 30*time.Second, 12, nil, n1, n2)
	if n := countOf(got, "leave c1 bob disconnected"); n != 1 {
		t.Errorf("events %q: bob's leave of c1 told %d times, want once", got, n)
	}
}

// After {g}'s loss, runGraces ends each conversation's grace before it
// announces the offline status: the leaves go first, then the status, as
// removeFrom's do (before, the grace timers were set due again, and their
// leaves came at a later runDue, after the status; a review, 2026-12-07).
func TestRedisLostGraceLeavesBeforeOffline(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	n1 := f.node(presence.Config{NodeID: "n1"})
	f.tick(t, n1)
	connectJoin(t, n1, "b1", "bob", "c1")
	connectJoin(t, n1, "a1", "alice", "c1")
	f.rec.Take()
	if err := n1.Disconnect(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	loseG(t, f)
	var got []string
	for range 8 {
		f.clock.Advance(time.Second)
		if err := n1.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		for _, ev := range f.rec.TakeEvents() {
			got = append(got, enginetest.Render(ev))
		}
	}
	leave, off := slices.Index(got, "leave c1 bob disconnected"), slices.Index(got, "status bob offline")
	if leave < 0 || off < 0 || off < leave {
		t.Errorf("events %q: bob's offline before (or without) the leave", got)
	}
}
