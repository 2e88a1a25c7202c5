package presence_test

import (
	"context"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
)

// statusOf is user's status as the cluster has it.
func statusOf(t *testing.T, eng *presence.RedisEngine, user string) presence.Status {
	t.Helper()
	ps, err := eng.Users(context.Background(), []string{user})
	if err != nil || len(ps) != 1 {
		t.Fatalf("Users(%s) = %+v, %v", user, ps, err)
	}
	return ps[0].Status
}

// stepTo advances the clock to t0+at in steps of 100 ms, ticking the
// engines in order at each step and letting their records go.
func stepTo(t *testing.T, f *fakeClockRedis, t0 time.Time, at time.Duration, engs ...*presence.RedisEngine) {
	t.Helper()
	for f.clock.Now().Before(t0.Add(at)) {
		f.clock.Advance(100 * time.Millisecond)
		for _, e := range engs {
			if err := e.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			e.Settle()
		}
	}
}

// twoAwayNodes are two nodes n1 and n2 with AwayAfter 10 s on one fake
// clock, and the clock's start.
func twoAwayNodes(t *testing.T) (*fakeClockRedis, *presence.RedisEngine, *presence.RedisEngine, time.Time) {
	f := newFakeClockRedis(t)
	cfg := presence.Config{TTL: time.Minute, AwayAfter: 10 * time.Second}
	cfg.NodeID = "n1"
	n1 := f.node(cfg)
	cfg.NodeID = "n2"
	n2 := f.node(cfg)
	return f, n1, n2, f.clock.Now()
}

// awayOnTime checks alice, last active at t0+0.5s, as eng reads her while
// engs tick: online at t0+10.4s, away at t0+12s (AwayAfter 10 s).
func awayOnTime(t *testing.T, f *fakeClockRedis, t0 time.Time, eng *presence.RedisEngine, engs ...*presence.RedisEngine) {
	t.Helper()
	stepTo(t, f, t0, 10400*time.Millisecond, engs...)
	if st := statusOf(t, eng, "alice"); st != presence.Online {
		t.Fatalf("alice %s 9.9 s after her last activity, want online", st)
	}
	stepTo(t, f, t0, 12*time.Second, engs...)
	if st := statusOf(t, eng, "alice"); st != presence.Away {
		t.Fatalf("alice %s 11.5 s after her last activity, want away", st)
	}
}

// A node records a user's activity at most once per activityEvery (1 s
// here); activity it saw and did not record is recorded when the user's
// away check comes, so the user turns away AwayAfter after their last
// activity, not after their last record.
func TestRedisAwayAfterLastActivity(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	eng := f.node(presence.Config{NodeID: "n1", TTL: time.Minute, AwayAfter: 10 * time.Second})
	t0 := f.clock.Now()
	connectJoin(t, eng, "a1", "alice") // recorded at t0
	stepTo(t, f, t0, 500*time.Millisecond, eng)
	if err := eng.Touch(ctx, "a1"); err != nil { // not recorded: within activityEvery
		t.Fatal(err)
	}
	eng.Settle()
	stepTo(t, f, t0, 10300*time.Millisecond, eng)
	if st := statusOf(t, eng, "alice"); st != presence.Online {
		t.Fatalf("alice %s 10.3 s after her connect and 9.8 s after her last activity, want online", st)
	}
	stepTo(t, f, t0, 10700*time.Millisecond, eng)
	if st := statusOf(t, eng, "alice"); st != presence.Away {
		t.Fatalf("alice %s 10.2 s after her last activity, want away", st)
	}
	var away int
	for _, ev := range f.rec.TakeEvents() {
		if ev.Kind == presence.EventStatus && ev.UserID == "alice" && ev.Status != presence.Online {
			away++
			if want := t0.Add(10500 * time.Millisecond); ev.Status != presence.Away || ev.At.Before(want) {
				t.Errorf("status event %s at %s, want away at or after %s", ev.Status, ev.At, want)
			}
		}
	}
	if away != 1 {
		t.Errorf("%d away events, want 1", away)
	}
	// activity brings her back at once
	if err := eng.Touch(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	if st := statusOf(t, eng, "alice"); st != presence.Online {
		t.Fatalf("alice %s after new activity, want online", st)
	}
}

// A user with sockets on two nodes, each of which connected one, 200 ms
// apart; n1 then saw activity that it does not record yet (within its
// activityEvery). Whichever node recorded the later connect, alice neither
// turns away early nor flaps. n2 ticks first at each step.
//   - n2 connected last: n2 checks first and is told to wait for n1's
//     deferred record.
//   - n1 connected last: n2, told to wait, checks again a slack after
//     n1's check, which records what n1 saw first.
func TestRedisAwayTwoNodes(t *testing.T) {
	for _, n1First := range []bool{true, false} {
		t.Run(map[bool]string{true: "n2 connected last", false: "n1 connected last"}[n1First], func(t *testing.T) {
			f, n1, n2, t0 := twoAwayNodes(t)
			ctx := context.Background()
			first, second := n1, n2
			fs, ss := "a1", "a2"
			if !n1First {
				first, second, fs, ss = n2, n1, "a2", "a1"
			}
			connectJoin(t, first, fs, "alice")
			stepTo(t, f, t0, 200*time.Millisecond, n2, n1)
			connectJoin(t, second, ss, "alice")
			stepTo(t, f, t0, 500*time.Millisecond, n2, n1)
			if err := n1.Touch(ctx, "a1"); err != nil { // n1 saw it and does not record it yet
				t.Fatal(err)
			}
			n1.Settle()
			awayOnTime(t, f, t0, n1, n2, n1)
			var changes []presence.Status
			for _, ev := range f.rec.TakeEvents() {
				if ev.Kind == presence.EventStatus && ev.UserID == "alice" && ev.At.After(t0.Add(time.Second)) {
					changes = append(changes, ev.Status)
				}
			}
			if len(changes) != 1 || changes[0] != presence.Away {
				t.Errorf("alice's status changes after t0+1s %v, want one: away", changes)
			}
		})
	}
}

// Activity a node saw and did not record yet (within its activityEvery)
// on a socket that then closed, the user's last there, while the user has
// a socket on another node: the disconnect records it, so that the other
// node turns the user away AwayAfter after it. The node forgot it with
// the socket, and the user turned away up to activityEvery early (30 s
// with the default AwayAfter).
func TestRedisAwayActivityOfClosedSocket(t *testing.T) {
	for _, mode := range []string{"grace", "now"} {
		t.Run(mode, func(t *testing.T) {
			f, n1, n2, t0 := twoAwayNodes(t)
			ctx := context.Background()
			connectJoin(t, n1, "a1", "alice")
			connectJoin(t, n2, "a2", "alice")
			stepTo(t, f, t0, 500*time.Millisecond, n1, n2)
			if err := n1.Touch(ctx, "a1"); err != nil { // n1 saw it and does not record it yet
				t.Fatal(err)
			}
			stepTo(t, f, t0, 600*time.Millisecond, n1, n2)
			disconnect := n1.Disconnect
			if mode == "now" {
				disconnect = n1.DisconnectNow
			}
			if err := disconnect(ctx, "a1"); err != nil {
				t.Fatal(err)
			}
			awayOnTime(t, f, t0, n2, n2, n1)
		})
	}
}

// Activity recorded by two nodes less than a second apart: each record is
// kept (the later one moves the recorded activity on), so that the node
// that checks first, from an earlier record, finds the other's and waits.
// Redis used to skip a record less than 1 s after the last, while its node
// set its own check from it: the user turned away that much early, from
// the other node's check (AwayAfter 3 s: 2.5 s after the last activity).
func TestRedisAwayRecordsCloseTogether(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	cfg := presence.Config{TTL: time.Minute, AwayAfter: 3 * time.Second}
	cfg.NodeID = "n1"
	n1 := f.node(cfg)
	cfg.NodeID = "n2"
	n2 := f.node(cfg)
	t0 := f.clock.Now()
	connectJoin(t, n1, "a1", "alice") // recorded at t0
	stepTo(t, f, t0, 300*time.Millisecond, n1, n2)
	connectJoin(t, n2, "a2", "alice") // recorded at 0.3 s
	for _, at := range []time.Duration{2700 * time.Millisecond, 3500 * time.Millisecond} {
		stepTo(t, f, t0, at, n1, n2)
		if err := n2.Touch(ctx, "a2"); err != nil { // each due on n2 (activityEvery 300 ms)
			t.Fatal(err)
		}
		n2.Settle()
	}
	stepTo(t, f, t0, 6300*time.Millisecond, n1, n2)
	if st := statusOf(t, n1, "alice"); st != presence.Online {
		t.Fatalf("alice %s 2.8 s after her last activity, want online", st)
	}
	stepTo(t, f, t0, 8*time.Second, n1, n2)
	if st := statusOf(t, n1, "alice"); st != presence.Away {
		t.Fatalf("alice %s 4.5 s after her last activity, want away", st)
	}
}

// A retired node (shutting down) fires none of the shared timers, its own
// users' grace ends included: another node does, and its leave goes out
// through rooms that node still serves. The retired node keeps its lease.
func TestRedisRetiredNodeLeavesTimersToOthers(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	cfg := presence.Config{TTL: time.Minute, FlapGrace: time.Second}
	cfg.NodeID = "n1"
	n1 := f.node(cfg)
	cfg.NodeID = "n2"
	n2 := f.node(cfg)
	t0 := f.clock.Now()
	connectJoin(t, n1, "a1", "alice", "c1")
	connectJoin(t, n2, "b1", "bob", "c1")
	stepTo(t, f, t0, 200*time.Millisecond, n1, n2)
	f.rec.TakeEvents()
	n1.Retire()
	if err := n1.Disconnect(ctx, "a1"); err != nil { // alice's grace: 1 s
		t.Fatal(err)
	}
	stepTo(t, f, t0, 3*time.Second, n1)
	for _, ev := range f.rec.TakeEvents() {
		if ev.UserID == "alice" && (ev.Kind == presence.EventLeave || ev.Kind == presence.EventStatus) {
			t.Fatalf("the retired node fired alice's grace end: %+v", ev)
		}
	}
	stepTo(t, f, t0, 4*time.Second, n2)
	var leave, offline bool
	for _, ev := range f.rec.TakeEvents() {
		leave = leave || ev.UserID == "alice" && ev.Kind == presence.EventLeave
		offline = offline || ev.UserID == "alice" && ev.Kind == presence.EventStatus && ev.Status == presence.Offline
	}
	if !leave || !offline {
		t.Fatalf("after n2's ticks: leave %v, offline %v; want both from n2", leave, offline)
	}
	if st := statusOf(t, n2, "bob"); st != presence.Online {
		t.Fatalf("bob %s", st)
	}
}
