package handlers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/handlers"
)

// A member removed while this node's subscription to the other nodes'
// notices was lost (the removal's notice never came) is taken out of the
// conversation when the subscription is back (ResyncAfterGap): before, they
// kept their place in the room, its typing and states, for good (a privacy
// audit, 2026-12-07).
func TestResyncAfterGapEvictsRemovedMembers(t *testing.T) {
	n := startNode(t, nil)
	bob, alice := bobAndAlice(t, n)

	n.membership.set("c1/alice", false) // through another node, not told here
	n.sockets.ResyncAfterGap()

	bob.read(`42["presence:leave",{"conversationId":"c1","userId":"alice"`)
	alice.emit(3, "typing:start", map[string]string{"conversationId": "c1"})
	if got := alice.read("433["); !strings.Contains(got, `"code":"forbidden"`) {
		t.Fatalf("typing after the resync: %s", got)
	}
	// bob, still a member, keeps his place
	bob.emit(4, "typing:start", map[string]string{"conversationId": "c1"})
	if got := bob.read("434["); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("a member's typing after the resync: %s", got)
	}
}

// A removal told again (the sender retries a notice not every node
// confirmed) after the user was added back leaves the user in place.
func TestEvictToldAgainSparesAMemberAgain(t *testing.T) {
	n := startNode(t, nil)
	alice := dialSocket(t, n.hs.URL, signToken(t, n.secret, "alice"))
	alice.emit(1, "conversation:join", map[string]string{"conversationId": "c1"})
	alice.read("431[")
	// a removal whose notice comes again after the user was added back
	// (the members list has her)
	if err := n.sockets.Evict(context.Background(), "c1", []string{"alice"}); err != nil {
		t.Fatal(err)
	}
	alice.emit(2, "typing:start", map[string]string{"conversationId": "c1"})
	if got := alice.read("432["); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("typing of a member the removal's notice named: %s", got)
	}
}

// A resync after a gap that the store could not answer (PostgreSQL down
// as well) runs again until it can: the removed member is taken out then.
func TestResyncAfterGapRetriedWhileTheStoreFails(t *testing.T) {
	defer handlers.SetResyncRetry(100 * time.Millisecond)()
	n := startNode(t, nil)
	bob, _ := bobAndAlice(t, n)

	n.membership.set("c1/alice", false)
	n.membership.setDown(errors.New("store down"))
	n.sockets.ResyncAfterGap() // checks nothing: the store fails
	time.Sleep(250 * time.Millisecond)
	n.membership.setDown(nil) // back: the next run takes alice out
	bob.read(`42["presence:leave",{"conversationId":"c1","userId":"alice"`)
}

// A typing stop that another node sent while this node's subscription
// was lost is told to this node's sockets after the gap, for each user
// another node showed typing here whom the roster no longer has typing;
// users still typing, and those whose stop came, are left alone. Before,
// the user was shown typing here for good (a black-box audit, 2026-12-07:
// a node stopped for 8 s).
func TestResyncAfterGapStopsLostTypists(t *testing.T) {
	defer handlers.SetViewerSettle(10 * time.Millisecond)()
	n := startNode(t, nil)
	n.rooms.FollowShown()
	bob, alice := bobAndAlice(t, n)
	alice.emit(3, "typing:start", map[string]string{"conversationId": "c1"})
	alice.read("433[")
	bob.read(`42["typing",{"conversationId":"c1","userId":"alice","typing":true`)

	// what other nodes showed this node's sockets: carol typing (her
	// stop is lost in the gap), dave typing and then his stop, and alice
	// typing (she still is)
	shown := func(user string, typing bool) {
		n.sockets.RemoteBroadcast("other", []any{"typing", map[string]any{"conversationId": "c1", "userId": user, "typing": typing, "ttlMs": float64(5000)}})
	}
	shown("carol", true)
	shown("dave", true)
	shown("dave", false)
	shown("alice", true)
	n.sockets.ResyncAfterGap()

	bob.read(`42["typing",{"conversationId":"c1","userId":"carol","typing":false`)
	time.Sleep(100 * time.Millisecond)
	n.sockets.ResyncAfterGap() // carol's stop was told: not again
	time.Sleep(100 * time.Millisecond)
	bob.emit(4, "heartbeat", map[string]any{})
	for _, m := range bob.readUntil("434[") {
		if strings.Contains(m, `"typing"`) {
			t.Errorf("after the stop of the typist lost: %s", m)
		}
	}
}

// The presence:join and presence:leave that other nodes sent while this
// node's subscription was lost are made up for on its sockets after the
// gap: of each conversation they are in, the roster is read and compared
// with what they were shown. A member missing is told at once; one gone
// only when a second read, leaveConfirm later, still lacks them (reason
// timeout). Before, the rooms of that node's clients kept those who left
// for good, and lacked those who joined.
func TestResyncAfterGapMakesUpJoinsAndLeaves(t *testing.T) {
	defer handlers.SetViewerSettle(10 * time.Millisecond)()
	defer handlers.SetLeaveConfirm(50 * time.Millisecond)()
	n := startNode(t, nil)
	n.rooms.FollowShown()
	bob, _ := bobAndAlice(t, n)

	// what other nodes showed this node's sockets: carol joined (she has
	// left since, her leave lost in the gap), and alice left (a stale
	// leave: her join since was lost); a second after alice's join, so
	// that the leave is not taken for one overtaking that join
	// (leaveOvertook)
	time.Sleep(1100 * time.Millisecond)
	shown := func(event, user string) {
		n.sockets.RemoteBroadcast("other", []any{event, map[string]any{"conversationId": "c1", "userId": user, "at": nil, "reason": "left"}})
	}
	shown("presence:join", "carol")
	shown("presence:leave", "alice")
	n.sockets.ResyncAfterGap()

	got := bob.read(`42["presence:`)
	if !strings.HasPrefix(got, `42["presence:join",{"conversationId":"c1","userId":"alice"`) {
		t.Fatalf("first made up: %s", got)
	}
	got = bob.read(`42["presence:`)
	if !strings.HasPrefix(got, `42["presence:leave",{"conversationId":"c1","userId":"carol"`) || !strings.Contains(got, `"reason":"timeout"`) {
		t.Fatalf("then: %s", got)
	}
	// told once: a second gap finds nothing to make up for
	n.sockets.ResyncAfterGap()
	time.Sleep(200 * time.Millisecond)
	bob.emit(3, "heartbeat", map[string]any{})
	for _, m := range bob.readUntil("433[") {
		if strings.Contains(m, `"presence:`) {
			t.Errorf("after the second gap: %s", m)
		}
	}
}

// bobAndAlice connects bob and then alice to n, each joined to c1 (acks 1
// and 2), once bob was told of alice's join.
func bobAndAlice(t *testing.T, n *testNode) (bob, alice *wsSocket) {
	t.Helper()
	bob = dialSocket(t, n.hs.URL, signToken(t, n.secret, "bob"))
	bob.emit(1, "conversation:join", map[string]string{"conversationId": "c1"})
	bob.read("431[")
	alice = dialSocket(t, n.hs.URL, signToken(t, n.secret, "alice"))
	alice.emit(2, "conversation:join", map[string]string{"conversationId": "c1"})
	alice.read("432[")
	bob.read(`42["presence:join",{"conversationId":"c1","userId":"alice"`)
	return bob, alice
}
