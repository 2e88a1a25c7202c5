// Package enginetest is the behaviour suite every presence backend passes.
// A backend's test calls Run with a factory that attaches nodes to one fresh
// shared backend; time is a fake clock the suite moves.
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/presence"
)

// Factory returns a function attaching a node to a fresh backend shared by
// all nodes of one test. cfg carries the clock and sink; the factory must
// keep them.
type Factory func(t *testing.T) func(cfg presence.Config) presence.Engine

// Clock is a fake clock safe for concurrent use.
type Clock = fakeclock.Clock

// NewClock starts at a fixed instant.
func NewClock() *Clock {
	return fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
}

// Recorder is a Sink that keeps events.
type Recorder struct {
	mu     sync.Mutex
	events []presence.Event
}

// Sink returns the recording sink.
func (r *Recorder) Sink() presence.Sink {
	return func(_ context.Context, ev []presence.Event) {
		r.mu.Lock()
		r.events = append(r.events, ev...)
		r.mu.Unlock()
	}
}

// Take returns the events recorded so far, rendered, and forgets them.
func (r *Recorder) Take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.events))
	for i, e := range r.events {
		out[i] = Render(e)
	}
	r.events = nil
	return out
}

// TakeEvents returns the raw events and forgets them.
func (r *Recorder) TakeEvents() []presence.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

// Render is a compact text form of an event for comparisons.
func Render(e presence.Event) string {
	switch e.Kind {
	case presence.EventJoin:
		return fmt.Sprintf("join %s %s", e.ConversationID, e.UserID)
	case presence.EventLeave:
		return fmt.Sprintf("leave %s %s %s", e.ConversationID, e.UserID, e.Reason)
	case presence.EventTyping:
		return fmt.Sprintf("typing %s %s %v", e.ConversationID, e.UserID, e.Typing)
	case presence.EventStatus:
		return fmt.Sprintf("status %s %s", e.UserID, e.Status)
	}
	return "?"
}

type env struct {
	t      *testing.T
	clock  *Clock
	rec    *Recorder
	attach func(cfg presence.Config) presence.Engine
	ctx    context.Context
	nodes  []presence.Engine
}

// settle waits for the activity records the nodes send in the background
// (presence.Settler), so that the clock moves, the timers run and the
// events are read only after them, as if each Touch had waited.
func (e *env) settle() {
	for _, n := range e.nodes {
		if s, ok := n.(presence.Settler); ok {
			s.Settle()
		}
	}
}

func (e *env) node(id string) presence.Engine {
	e.t.Helper()
	eng := e.attach(presence.Config{
		NodeID:           id,
		TTL:              45 * time.Second,
		TypingTTL:        5 * time.Second,
		FlapGrace:        3 * time.Second,
		AwayAfter:        5 * time.Minute,
		LeaseTTL:         5 * time.Second,
		MaxConversations: 3,
		Now:              e.clock.Now,
		Sink:             e.rec.Sink(),
	})
	e.t.Cleanup(func() { _ = eng.Close() })
	e.nodes = append(e.nodes, eng)
	return eng
}

// connectJoin connects socket sid of user to n and joins it to conv.
func (e *env) connectJoin(n presence.Engine, sid, user, conv string) {
	e.t.Helper()
	e.must(n.Connect(e.ctx, presence.Socket{ID: sid, UserID: user}))
	_, err := n.Join(e.ctx, sid, conv)
	e.must(err)
}

// takeChecked takes the events recorded so far, rendered, after check has
// seen each.
func (e *env) takeChecked(check func(x presence.Event)) []string {
	e.t.Helper()
	var got []string
	for _, x := range e.rec.TakeEvents() {
		got = append(got, Render(x))
		check(x)
	}
	return got
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) expect(want ...string) {
	e.t.Helper()
	e.settle()
	got := e.rec.Take()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("events:\n got  %q\n want %q", got, want)
	}
}

func (e *env) roster(eng presence.Engine, conv string) string {
	e.t.Helper()
	e.settle()
	r, err := eng.Roster(e.ctx, conv)
	e.must(err)
	var parts []string
	for _, m := range r.Online {
		parts = append(parts, m.UserID+"/"+string(m.Status))
	}
	return strings.Join(parts, ",") + " typing:" + strings.Join(r.Typing, ",")
}

// socketConvs lists the conversations socket sid of user has joined, as
// the admin panel reads them (every backend is an AdminView).
func (e *env) socketConvs(eng presence.Engine, user, sid string) []string {
	e.t.Helper()
	av, ok := eng.(presence.AdminView)
	if !ok {
		e.t.Fatalf("%T is not a presence.AdminView", eng)
	}
	socks, err := av.UserSockets(e.ctx, user)
	e.must(err)
	for _, s := range socks {
		if s.ID == sid {
			return s.Conversations
		}
	}
	return nil
}

func (e *env) status(eng presence.Engine, users ...string) string {
	e.t.Helper()
	e.settle()
	ps, err := eng.Users(e.ctx, users)
	e.must(err)
	var parts []string
	for _, p := range ps {
		parts = append(parts, p.UserID+"/"+string(p.Status))
	}
	return strings.Join(parts, ",")
}

// place connects each socket to its node, in the order of their ids, then
// makes the joins ("socket conversation"), each on the socket's node.
func (e *env) place(on map[presence.Socket]presence.Engine, joins ...string) {
	e.t.Helper()
	node := map[string]presence.Engine{}
	for _, s := range slices.SortedFunc(maps.Keys(on), func(a, b presence.Socket) int { return strings.Compare(a.ID, b.ID) }) {
		e.must(on[s].Connect(e.ctx, s))
		node[s.ID] = on[s]
	}
	for _, j := range joins {
		sid, conv, _ := strings.Cut(j, " ")
		_, err := node[sid].Join(e.ctx, sid, conv)
		e.must(err)
	}
}

// elapse moves time by d in steps of at most 500ms, ticking every live node
// at each step as their Run loops would.
func (e *env) elapse(d time.Duration, engs ...presence.Engine) {
	e.t.Helper()
	for d > 0 {
		step := min(d, 500*time.Millisecond)
		e.clock.Advance(step)
		d -= step
		e.tick(engs...)
	}
}

func (e *env) tick(engs ...presence.Engine) {
	e.t.Helper()
	e.settle()
	for _, eng := range engs {
		e.must(eng.Tick(e.ctx))
	}
}

// Run runs the whole suite.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		fn   func(e *env)
	}{
		{"JoinLeave", testJoinLeave},
		{"MultiDevice", testMultiDevice},
		{"FlapGrace", testFlapGrace},
		{"DisconnectNow", testDisconnectNow},
		{"EndGraces", testEndGraces},
		{"Typing", testTyping},
		{"TypingStopOfASibling", testTypingStopOfASibling},
		{"Errors", testErrors},
		{"AwayAndBack", testAway},
		{"AwayAcrossNodes", testAwayAcrossNodes},
		{"DeadNode", testDeadNode},
		{"DeadNodeLastClose", testDeadNodeLastClose},
		{"Idempotent", testIdempotent},
		{"UsersQuery", testUsers},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &env{t: t, clock: NewClock(), rec: &Recorder{}, attach: f(t), ctx: context.Background()}
			tt.fn(e)
		})
	}
}

func testJoinLeave(e *env) {
	n := e.node("n1")
	e.must(n.Connect(e.ctx, presence.Socket{ID: "s1", UserID: "alice"}))
	e.must(n.Connect(e.ctx, presence.Socket{ID: "s2", UserID: "bob"}))
	e.expect("status alice online", "status bob online")

	r, err := n.Join(e.ctx, "s1", "c1")
	e.must(err)
	if len(r.Online) != 1 || r.Online[0].UserID != "alice" || r.Online[0].Status != presence.Online || !r.Online[0].Since.Equal(e.clock.Now()) {
		e.t.Fatalf("join roster %+v", r)
	}
	ev := e.rec.TakeEvents()
	if len(ev) != 1 || ev[0].Kind != presence.EventJoin || ev[0].ExceptSocket != "s1" || !ev[0].At.Equal(e.clock.Now()) {
		e.t.Fatalf("join events %+v", ev)
	}
	e.clock.Advance(time.Second)
	_, err = n.Join(e.ctx, "s2", "c1")
	e.must(err)
	e.expect("join c1 bob")
	if got, want := e.roster(n, "c1"), "alice/online,bob/online typing:"; got != want {
		e.t.Fatalf("roster %q, want %q", got, want)
	}
	if got := e.socketConvs(n, "alice", "s1"); !slices.Equal(got, []string{"c1"}) {
		e.t.Fatalf("conversations of s1 %v", got)
	}
	e.must(n.Leave(e.ctx, "s2", "c1"))
	e.expect("leave c1 bob left")
	if got, want := e.roster(n, "c1"), "alice/online typing:"; got != want {
		e.t.Fatalf("roster %q, want %q", got, want)
	}
	// leaving again, or a conversation never joined, changes nothing
	e.must(n.Leave(e.ctx, "s2", "c1"))
	e.must(n.Leave(e.ctx, "s2", "c9"))
	e.expect()
}

func testMultiDevice(e *env) {
	n1, n2 := e.node("n1"), e.node("n2")
	e.must(n1.Connect(e.ctx, presence.Socket{ID: "phone", UserID: "alice"}))
	e.must(n2.Connect(e.ctx, presence.Socket{ID: "laptop", UserID: "alice"}))
	e.expect("status alice online")
	_, err := n1.Join(e.ctx, "phone", "c1")
	e.must(err)
	_, err = n2.Join(e.ctx, "laptop", "c1")
	e.must(err)
	e.expect("join c1 alice") // only the first socket cluster-wide
	e.must(n1.Leave(e.ctx, "phone", "c1"))
	e.expect() // laptop still there
	e.must(n1.Disconnect(e.ctx, "phone"))
	e.elapse(10*time.Second, n1, n2)
	e.expect()
	if got := e.status(n1, "alice"); got != "alice/online" {
		e.t.Fatalf("status %q", got)
	}
	e.must(n2.Leave(e.ctx, "laptop", "c1"))
	e.expect("leave c1 alice left")
	e.must(n2.Disconnect(e.ctx, "laptop"))
	e.elapse(4*time.Second, n1, n2)
	ev := e.rec.TakeEvents()
	if len(ev) != 1 || ev[0].Kind != presence.EventStatus || ev[0].Status != presence.Offline {
		e.t.Fatalf("offline events %+v", ev)
	}
	if want := e.clock.Now().Add(-4 * time.Second); !ev[0].LastSeen.Equal(want) {
		e.t.Fatalf("lastSeen %v, want the last disconnect %v", ev[0].LastSeen, want)
	}
	if got := e.status(n1, "alice"); got != "alice/offline" {
		e.t.Fatalf("status %q", got)
	}
}

func testFlapGrace(e *env) {
	n := e.node("n1")
	e.must(n.Connect(e.ctx, presence.Socket{ID: "s1", UserID: "alice"}))
	e.must(n.Connect(e.ctx, presence.Socket{ID: "b1", UserID: "bob"}))
	_, err := n.Join(e.ctx, "s1", "c1")
	e.must(err)
	_, err = n.Join(e.ctx, "b1", "c1")
	e.must(err)
	e.rec.Take()

	// disconnect and come back within the grace: nothing at all
	e.must(n.Disconnect(e.ctx, "s1"))
	e.clock.Advance(2 * time.Second)
	e.tick(n)
	e.must(n.Connect(e.ctx, presence.Socket{ID: "s2", UserID: "alice"}))
	_, err = n.Join(e.ctx, "s2", "c1")
	e.must(err)
	e.clock.Advance(5 * time.Second)
	e.tick(n)
	e.expect()
	if got, want := e.roster(n, "c1"), "alice/online,bob/online typing:"; got != want {
		e.t.Fatalf("roster %q, want %q", got, want)
	}

	// beyond the grace: leave (disconnected) and offline, then a fresh join
	e.must(n.Disconnect(e.ctx, "s2"))
	e.expect()
	e.clock.Advance(3 * time.Second)
	e.tick(n)
	got := e.takeChecked(func(x presence.Event) {
		if x.Kind == presence.EventLeave && !x.At.Equal(e.clock.Now().Add(-3*time.Second)) {
			e.t.Errorf("leave at %v, want the disconnect time", x.At)
		}
	})
	if want := []string{"leave c1 alice disconnected", "status alice offline"}; !slices.Equal(got, want) {
		e.t.Fatalf("events %q, want %q", got, want)
	}
	e.must(n.Connect(e.ctx, presence.Socket{ID: "s3", UserID: "alice"}))
	_, err = n.Join(e.ctx, "s3", "c1")
	e.must(err)
	e.expect("status alice online", "join c1 alice")
}

// testEndGraces: a user within a flap grace, removed from one of the
// conversations, leaves it at once when another node ends the grace there
// (at the disconnect, reason disconnected); the user's other conversation
// and status keep their grace. Ending it again, or for a user with a
// socket there, does nothing.
func testEndGraces(e *env) {
	n1, n2 := e.node("n1"), e.node("n2")
	e.place(map[presence.Socket]presence.Engine{
		{ID: "a1", UserID: "alice"}: n1, {ID: "b1", UserID: "bob"}: n2,
	}, "a1 c1", "a1 c2", "b1 c1")
	e.rec.Take()

	e.clock.Advance(time.Second)
	at := e.clock.Now()
	e.must(n1.Disconnect(e.ctx, "a1"))
	e.clock.Advance(time.Second)
	e.must(n2.EndGraces(e.ctx, "c1", []string{"bob", "alice"})) // bob is connected: stays
	e.settle()
	got := e.takeChecked(func(x presence.Event) {
		if x.Kind == presence.EventLeave && !x.At.Equal(at) {
			e.t.Errorf("leave at %v, want the disconnect %v", x.At, at)
		}
	})
	if want := []string{"leave c1 alice disconnected"}; !slices.Equal(got, want) {
		e.t.Fatalf("events %q, want %q", got, want)
	}
	if got, want := e.roster(n1, "c1"), "bob/online typing:"; got != want {
		e.t.Fatalf("roster c1 %q, want %q", got, want)
	}
	if got := e.roster(n2, "c2"); !strings.Contains(got, "alice") {
		e.t.Fatalf("roster c2 %q: alice's grace there ended too", got)
	}
	e.must(n2.EndGraces(e.ctx, "c1", []string{"alice", "bob"}))
	e.must(n1.EndGraces(e.ctx, "c9", []string{"alice"}))
	e.settle()
	e.expect()

	e.elapse(3*time.Second, n1, n2)
	e.settle()
	if got, want := e.rec.Take(), []string{"leave c2 alice disconnected", "status alice offline"}; !slices.Equal(got, want) {
		e.t.Fatalf("at the grace's end: %q, want %q", got, want)
	}
}

// testDisconnectNow: an operator's disconnect of a user's sockets on two
// nodes ends the user's presence at once, without the flap grace: the
// first socket's removal changes nothing (the other is there), the last
// one's announces the stop of its typing, the leave (reason disconnected)
// and the offline status, with that moment as last-seen. Twice, or after a
// plain Disconnect, it does nothing more.
func testDisconnectNow(e *env) {
	n1, n2 := e.node("n1"), e.node("n2")
	e.place(map[presence.Socket]presence.Engine{
		{ID: "b1", UserID: "bob"}: n1, {ID: "phone", UserID: "alice"}: n1, {ID: "laptop", UserID: "alice"}: n2,
	}, "b1 c1", "phone c1", "laptop c1")
	e.must(n2.TypingStart(e.ctx, "laptop", "c1"))
	e.rec.Take()

	e.clock.Advance(time.Second)
	e.must(n1.DisconnectNow(e.ctx, "phone"))
	e.expect() // the laptop is still there
	if got := e.status(n1, "alice"); got != "alice/online" {
		e.t.Fatalf("status %q after the first socket", got)
	}
	at := e.clock.Now()
	e.must(n2.DisconnectNow(e.ctx, "laptop"))
	e.settle()
	got := e.takeChecked(func(x presence.Event) {
		switch x.Kind {
		case presence.EventLeave:
			if !x.At.Equal(at) {
				e.t.Errorf("leave at %v, want the disconnect %v", x.At, at)
			}
		case presence.EventStatus:
			if !x.LastSeen.Equal(at) {
				e.t.Errorf("lastSeen %v, want the disconnect %v", x.LastSeen, at)
			}
		}
	})
	if want := []string{"typing c1 alice false", "leave c1 alice disconnected", "status alice offline"}; !slices.Equal(got, want) {
		e.t.Fatalf("events %q, want %q", got, want)
	}
	if got, want := e.roster(n1, "c1"), "bob/online typing:"; got != want {
		e.t.Fatalf("roster %q, want %q", got, want)
	}
	if got := e.status(n1, "alice"); got != "alice/offline" {
		e.t.Fatalf("status %q", got)
	}
	e.must(n2.DisconnectNow(e.ctx, "laptop"))
	e.must(n1.Disconnect(e.ctx, "b1"))
	e.must(n1.DisconnectNow(e.ctx, "b1"))
	e.elapse(5*time.Second, n1, n2)
	e.settle()
	if got, want := e.rec.Take(), []string{"leave c1 bob disconnected", "status bob offline"}; !slices.Equal(got, want) {
		e.t.Fatalf("after the repeats: %q, want only bob's grace to end, %q", got, want)
	}
}

// testTypingStopOfASibling: a start of one socket of alice's (a1) is
// announced to all but a1; another of hers (a2) refreshes it and stops
// it: the stop goes to all but a1 again (a2 was told of the start), not
// to all but a2. On another node, which does not know who made the start,
// to all.
func testTypingStopOfASibling(e *env) {
	n1, n2 := e.node("n1"), e.node("n2")
	e.place(map[presence.Socket]presence.Engine{
		{ID: "a1", UserID: "alice"}: n1, {ID: "a2", UserID: "alice"}: n1, {ID: "a3", UserID: "alice"}: n2, {ID: "b1", UserID: "bob"}: n2,
	}, "a1 c1", "a2 c1", "a3 c1", "b1 c1")
	e.rec.Take()
	for round, stopper := range []string{"a2", "a3"} {
		stop := n1
		if stopper == "a3" {
			stop = n2
		}
		e.must(n1.TypingStart(e.ctx, "a1", "c1"))
		e.must(stop.TypingStart(e.ctx, stopper, "c1")) // a refresh: nothing to announce
		e.must(stop.TypingStop(e.ctx, stopper, "c1"))
		e.settle()
		var except []string
		got := e.takeChecked(func(x presence.Event) { except = append(except, x.ExceptSocket) })
		if want := []string{"typing c1 alice true", "typing c1 alice false"}; !slices.Equal(got, want) {
			e.t.Fatalf("round %d: events %q, want %q", round, got, want)
		}
		if except[0] != "a1" || except[1] == stopper || (stopper == "a2" && except[1] != "a1") {
			e.t.Errorf("round %d (%s stops): the start left out %q, the stop %q; want a1, and a1 (or none) for the stop, never %s", round, stopper, except[0], except[1], stopper)
		}
	}
}

func testTyping(e *env) {
	n := e.node("n1")
	e.connectJoin(n, "s1", "alice", "c1")
	e.rec.Take()

	e.must(n.TypingStart(e.ctx, "s1", "c1"))
	e.expect("typing c1 alice true")
	e.clock.Advance(3 * time.Second)
	e.must(n.TypingStart(e.ctx, "s1", "c1")) // silent refresh
	e.expect()
	e.clock.Advance(3 * time.Second) // 6s after start, 3s after refresh: still typing
	e.tick(n)
	e.expect()
	if got, want := e.roster(n, "c1"), "alice/online typing:alice"; got != want {
		e.t.Fatalf("roster %q, want %q", got, want)
	}
	e.must(n.TypingStop(e.ctx, "s1", "c1"))
	e.expect("typing c1 alice false")
	e.must(n.TypingStop(e.ctx, "s1", "c1")) // not typing: nothing
	e.expect()

	// expiry
	e.must(n.TypingStart(e.ctx, "s1", "c1"))
	e.clock.Advance(5 * time.Second)
	e.tick(n)
	e.expect("typing c1 alice true", "typing c1 alice false")

	// a start after the entry expired, before the expiry check removed
	// it: the expiry's stop, then the new start (CONTRACT §1: a stop is
	// sent when an entry expires)
	e.must(n.TypingStart(e.ctx, "s1", "c1"))
	e.expect("typing c1 alice true")
	e.clock.Advance(5 * time.Second)
	e.must(n.TypingStart(e.ctx, "s1", "c1"))
	e.expect("typing c1 alice false", "typing c1 alice true")
	e.tick(n) // the new entry has not expired
	e.expect()
	// a stop after the entry expired, before the check: announced
	e.clock.Advance(5 * time.Second)
	e.must(n.TypingStop(e.ctx, "s1", "c1"))
	e.expect("typing c1 alice false")
	e.tick(n)
	e.expect()
	// a leave after it expired, before the check: its stop, then the leave
	e.must(n.TypingStart(e.ctx, "s1", "c1"))
	e.clock.Advance(5 * time.Second)
	e.must(n.Leave(e.ctx, "s1", "c1"))
	e.tick(n)
	e.expect("typing c1 alice true", "typing c1 alice false", "leave c1 alice left")
	_, err := n.Join(e.ctx, "s1", "c1")
	e.must(err)
	e.rec.Take()

	// leave stops typing, then the leave
	e.must(n.TypingStart(e.ctx, "s1", "c1"))
	e.must(n.Leave(e.ctx, "s1", "c1"))
	e.expect("typing c1 alice true", "typing c1 alice false", "leave c1 alice left")

	// disconnect stops typing at once; the leave waits for the grace
	_, err = n.Join(e.ctx, "s1", "c1")
	e.must(err)
	e.must(n.TypingStart(e.ctx, "s1", "c1"))
	e.rec.Take()
	e.must(n.Disconnect(e.ctx, "s1"))
	e.expect("typing c1 alice false")
}

func testErrors(e *env) {
	n := e.node("n1")
	e.must(n.Connect(e.ctx, presence.Socket{ID: "s1", UserID: "alice"}))
	e.rec.Take()
	for _, err := range []error{
		n.TypingStart(e.ctx, "s1", "c1"),
		n.TypingStop(e.ctx, "s1", "c1"),
	} {
		if !errors.Is(err, presence.ErrNotJoined) {
			e.t.Fatalf("typing before join: %v, want ErrNotJoined", err)
		}
	}
	if _, err := n.Join(e.ctx, "nope", "c1"); !errors.Is(err, presence.ErrUnknown) {
		e.t.Fatalf("unknown socket: %v", err)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		_, err := n.Join(e.ctx, "s1", c)
		e.must(err)
	}
	e.rec.Take()
	if _, err := n.Join(e.ctx, "s1", "c4"); !errors.Is(err, presence.ErrLimit) {
		e.t.Fatalf("over the limit: %v, want ErrLimit", err)
	}
	// rejoining one already joined is fine at the limit
	_, err := n.Join(e.ctx, "s1", "c3")
	e.must(err)
	e.expect()
	if got, want := e.roster(n, "c4"), " typing:"; got != want {
		e.t.Fatalf("refused join changed the roster: %q", got)
	}
}

func testAway(e *env) {
	n := e.node("n1")
	e.connectJoin(n, "s1", "alice", "c1")
	e.rec.Take()
	e.clock.Advance(4 * time.Minute)
	e.must(n.Heartbeat(e.ctx, "s1", false)) // alive but idle
	e.clock.Advance(time.Minute)
	e.tick(n)
	e.expect("status alice away")
	if got, want := e.roster(n, "c1"), "alice/away typing:"; got != want {
		e.t.Fatalf("roster %q, want %q", got, want)
	}
	if got := e.status(n, "alice"); got != "alice/away" {
		e.t.Fatalf("status %q", got)
	}
	e.must(n.Heartbeat(e.ctx, "s1", true))
	e.expect("status alice online")
	e.clock.Advance(5 * time.Minute)
	e.tick(n)
	e.expect("status alice away")
	e.must(n.Touch(e.ctx, "s1"))
	e.expect("status alice online")
	// a join is activity: an away user who joins is online in its own
	// join ack, and back online for everyone
	e.clock.Advance(5 * time.Minute)
	e.tick(n)
	e.expect("status alice away")
	res, err := n.Join(e.ctx, "s1", "c2")
	e.must(err)
	if len(res.Online) != 1 || res.Online[0].UserID != "alice" || res.Online[0].Status != presence.Online {
		e.t.Fatalf("join ack of an away user: %+v, want alice online", res.Online)
	}
	e.expect("join c2 alice", "status alice online")
}

// A user with sockets on two nodes: activity on either keeps them online,
// and they turn away once idle on both, also after the node that brought
// them back lost its socket.
func testAwayAcrossNodes(e *env) {
	n1, n2 := e.node("n1"), e.node("n2")
	// both nodes tick throughout, so that neither's lease lapses
	advance := func(d time.Duration) {
		for d > 0 {
			step := min(d, 2*time.Second)
			e.clock.Advance(step)
			e.tick(n1, n2)
			d -= step
		}
	}
	e.must(n1.Connect(e.ctx, presence.Socket{ID: "a1", UserID: "alice"}))
	e.must(n2.Connect(e.ctx, presence.Socket{ID: "a2", UserID: "alice"}))
	e.expect("status alice online")
	advance(4 * time.Minute)
	e.must(n2.Touch(e.ctx, "a2"))
	advance(90 * time.Second)
	e.expect() // active on n2 a minute and a half ago
	advance(4 * time.Minute)
	e.expect("status alice away")
	e.must(n2.Touch(e.ctx, "a2"))
	e.expect("status alice online")
	e.must(n2.Disconnect(e.ctx, "a2"))
	advance(5*time.Minute - 2*time.Second)
	e.expect()
	advance(4 * time.Second)
	e.expect("status alice away")
}

func testDeadNode(e *env) {
	n1, n2 := e.node("n1"), e.node("n2")
	e.place(map[presence.Socket]presence.Engine{
		{ID: "a1", UserID: "alice"}: n1, {ID: "b1", UserID: "bob"}: n2, {ID: "a2", UserID: "alice"}: n2,
	}, "a1 c1", "b1 c1", "b1 c2")
	e.rec.Take()
	// n2 stops (crash); n1 keeps ticking
	lastProof := e.clock.Now()
	for range 6 {
		e.clock.Advance(time.Second)
		e.tick(n1)
	}
	got := e.takeChecked(func(x presence.Event) {
		if x.Kind == presence.EventStatus && x.Status == presence.Offline && x.LastSeen.After(lastProof.Add(time.Second)) {
			e.t.Errorf("lastSeen %v after the dead node's last proof of life %v", x.LastSeen, lastProof)
		}
	})
	slices.Sort(got)
	if want := []string{"leave c1 bob timeout", "leave c2 bob timeout", "status bob offline"}; !slices.Equal(got, want) {
		e.t.Fatalf("events %q, want %q", got, want)
	}
	if got, want := e.roster(n1, "c1"), "alice/online typing:"; got != want {
		e.t.Fatalf("roster %q, want %q (alice still on n1)", got, want)
	}
	if got := e.status(n1, "alice", "bob"); got != "alice/online,bob/offline" {
		e.t.Fatalf("status %q", got)
	}
	// sweeping again finds nothing more
	e.clock.Advance(time.Second)
	e.tick(n1)
	e.expect()
}

// testDeadNodeLastClose: a user with a socket on a node that dies and one
// on a live node, which closes after the death and before the reap: the
// user's last-seen is that close (CONTRACT §1: the time the last
// connection closed, cluster-wide), not the dead node's last proof of
// life, which came before it.
func testDeadNodeLastClose(e *env) {
	n1, n2 := e.node("n1"), e.node("n2")
	e.place(map[presence.Socket]presence.Engine{
		{ID: "a1", UserID: "alice"}: n1, {ID: "a2", UserID: "alice"}: n2,
	}, "a1 c1", "a2 c1")
	e.rec.Take()
	// n2 stops (crash); 2 s later alice's socket on n1 closes
	e.clock.Advance(time.Second)
	e.tick(n1)
	e.clock.Advance(time.Second)
	e.tick(n1)
	closed := e.clock.Now()
	e.must(n1.Disconnect(e.ctx, "a1"))
	e.expect() // the socket on n2 is still counted
	for range 6 {
		e.clock.Advance(time.Second)
		e.tick(n1)
	}
	e.settle()
	got := e.takeChecked(func(x presence.Event) {
		if x.Kind == presence.EventStatus && !x.LastSeen.Equal(closed) {
			e.t.Errorf("lastSeen %v, want the close on the live node %v", x.LastSeen, closed)
		}
	})
	if want := []string{"leave c1 alice timeout", "status alice offline"}; !slices.Equal(got, want) {
		e.t.Fatalf("events %q, want %q", got, want)
	}
}

func testIdempotent(e *env) {
	n := e.node("n1")
	s := presence.Socket{ID: "s1", UserID: "alice"}
	e.must(n.Connect(e.ctx, s))
	e.must(n.Connect(e.ctx, s))
	_, err := n.Join(e.ctx, "s1", "c1")
	e.must(err)
	_, err = n.Join(e.ctx, "s1", "c1")
	e.must(err)
	e.expect("status alice online", "join c1 alice")
	e.must(n.Disconnect(e.ctx, "s1"))
	e.must(n.Disconnect(e.ctx, "s1"))
	e.clock.Advance(3 * time.Second)
	e.tick(n)
	e.tick(n)
	e.expect("leave c1 alice disconnected", "status alice offline")
	// operations on a gone socket
	if err := n.Heartbeat(e.ctx, "s1", true); !errors.Is(err, presence.ErrUnknown) {
		e.t.Fatalf("heartbeat of a gone socket: %v", err)
	}
}

func testUsers(e *env) {
	n := e.node("n1")
	e.must(n.Connect(e.ctx, presence.Socket{ID: "s1", UserID: "alice"}))
	ps, err := n.Users(e.ctx, []string{"bob", "alice", "bob"})
	e.must(err)
	var got []string
	for _, p := range ps {
		got = append(got, p.UserID+"/"+string(p.Status))
	}
	if want := []string{"bob/offline", "alice/online", "bob/offline"}; !slices.Equal(got, want) {
		e.t.Fatalf("users %q, want %q", got, want)
	}
	big := make([]string, 1000)
	for i := range big {
		big[i] = fmt.Sprintf("u%d", i)
	}
	ps, err = n.Users(e.ctx, big)
	e.must(err)
	if len(ps) != 1000 || ps[999].UserID != "u999" {
		e.t.Fatalf("1000 users: %d", len(ps))
	}
}
