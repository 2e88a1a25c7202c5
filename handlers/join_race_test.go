package handlers_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/gate"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/server"
)

// gatedEngine holds Join, when its gate is armed, until released: the join
// has passed its membership check and is inside the engine.
type gatedEngine struct {
	presence.Engine
	gate gate.Gate
}

func (g *gatedEngine) Join(ctx context.Context, sid, conv string) (presence.JoinResult, error) {
	g.gate.Pass()
	return g.Engine.Join(ctx, sid, conv)
}

// members is a Membership the test changes; while down is set, it fails.
type members struct {
	mu   sync.Mutex
	m    map[string]bool
	down error
}

func (m *members) IsMember(_ context.Context, conv, user string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down != nil {
		return false, m.down
	}
	return m.m[conv+"/"+user], nil
}

func (m *members) setDown(err error) { m.mu.Lock(); m.down = err; m.mu.Unlock() }

func (m *members) set(key string, v bool) { m.mu.Lock(); m.m[key] = v; m.mu.Unlock() }

// wsSocket is just enough of a Socket.IO client over websocket: connect,
// emit with an ack, read the ack.
type wsSocket struct {
	t    *testing.T
	conn *websocket.Conn
}

func dialSocket(t *testing.T, base, token string) *wsSocket {
	t.Helper()
	u := "ws" + strings.TrimPrefix(base, "http") + "/socket.io/?EIO=4&transport=websocket"
	conn, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &wsSocket{t: t, conn: conn}
	s.read("0")
	b, _ := json.Marshal(map[string]string{"token": token})
	if err := conn.WriteMessage(websocket.TextMessage, append([]byte("40"), b...)); err != nil {
		t.Fatal(err)
	}
	s.read(`42["session"`)
	return s
}

// read returns the next message starting with prefix (answering pings,
// skipping others).
func (s *wsSocket) read(prefix string) string {
	s.t.Helper()
	m, _ := s.readTo(prefix)
	return m
}

// readTo returns the first message with prefix, and the messages read
// before it (answering pings).
func (s *wsSocket) readTo(prefix string) (string, []string) {
	s.t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var before []string
	for {
		_, msg, err := s.conn.ReadMessage()
		if err != nil {
			s.t.Fatalf("waiting for %q: %v", prefix, err)
		}
		m := string(msg)
		if m == "2" {
			_ = s.conn.WriteMessage(websocket.TextMessage, []byte("3"))
			continue
		}
		if strings.HasPrefix(m, prefix) {
			return m, before
		}
		before = append(before, m)
	}
}

func (s *wsSocket) emit(id int, event string, payload any) {
	s.t.Helper()
	b, _ := json.Marshal([]any{event, payload})
	if err := s.conn.WriteMessage(websocket.TextMessage, []byte("42"+itoa(id)+string(b))); err != nil {
		s.t.Fatal(err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A conversation:join that passed the membership check finishes after the
// member was removed and evicted: it must not leave the removed member
// joined (#12 finding 5). The test holds the join inside the engine, runs
// the removal and its eviction, then lets the join finish.
func TestJoinRacingEvictionIsUndone(t *testing.T) {
	var eng *gatedEngine
	n := startNode(t, func(mem presence.Engine) presence.Engine {
		eng = &gatedEngine{Engine: mem}
		return eng
	})
	mem, membership, sockets, hs, secret := n.mem, n.membership, n.sockets, n.hs, n.secret
	token := func(user string) string { return signToken(t, secret, user) }

	bob := dialSocket(t, hs.URL, token("bob"))
	bob.emit(1, "conversation:join", map[string]string{"conversationId": "c1"})
	bob.read("431[")

	alice := dialSocket(t, hs.URL, token("alice"))
	entered, release := eng.gate.Arm()
	alice.emit(7, "conversation:join", map[string]string{"conversationId": "c1"})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the join did not reach the engine")
	}
	// Alice is removed, and the eviction runs, while her join is inside
	// the engine.
	membership.set("c1/alice", false)
	if err := sockets.Evict(context.Background(), "c1", []string{"alice"}); err != nil {
		t.Fatal(err)
	}
	close(release)

	ack := alice.read("437[")
	if !strings.Contains(ack, `"code":"forbidden"`) {
		t.Fatalf("the join that raced the eviction was answered %s, want forbidden", ack)
	}
	res, err := mem.Roster(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range res.Online {
		if mb.UserID == "alice" {
			t.Fatalf("alice, removed, is still in the roster: %+v", res.Online)
		}
	}
	// Bob was told of alice's join, so he is told of her leave too.
	bob.read(`42["presence:leave",{"conversationId":"c1","userId":"alice"`)
	// And alice's socket is out of the room: she may not type there.
	alice.emit(8, "typing:start", map[string]string{"conversationId": "c1"})
	if got := alice.read("438["); !strings.Contains(got, `"code":"forbidden"`) {
		t.Fatalf("typing after the undone join: %s", got)
	}
}

// A presence:leave from another node that arrives right after a
// presence:join of the same user in the same conversation (the leave,
// through one node, came first; the join, through this one, a few
// milliseconds after it, reached this node's sockets at once) leaves this
// node's sockets seeing the user gone while the roster has them: each is
// told of the join again. A leave the roster agrees with changes nothing.
func TestLeaveOvertakingJoin(t *testing.T) {
	n := startNode(t, nil)
	sockets, srv, hs, secret := n.sockets, n.srv, n.hs, n.secret
	bob := dialSocket(t, hs.URL, signToken(t, secret, "bob"))
	bob.emit(1, "conversation:join", map[string]string{"conversationId": "c1"})
	bob.read("431[")
	alice := dialSocket(t, hs.URL, signToken(t, secret, "alice"))
	alice.emit(2, "conversation:join", map[string]string{"conversationId": "c1"})
	alice.read("432[")
	bob.read(`42["presence:join",{"conversationId":"c1","userId":"alice"`)

	// another node's leave of alice, older than her join here, arrives now
	stale := map[string]any{"conversationId": "c1", "userId": "alice", "at": nil, "reason": "disconnected"}
	if err := srv.IO().Local().To(handlers.ConversationRoom("c1")).Emit("presence:leave", handlers.LeavePayload{ConversationID: "c1", UserID: "alice", Reason: "disconnected"}); err != nil {
		t.Fatal(err)
	}
	sockets.RemoteBroadcast("other", []any{"presence:leave", stale})
	bob.read(`42["presence:leave",{"conversationId":"c1","userId":"alice"`)
	bob.read(`42["presence:join",{"conversationId":"c1","userId":"alice"`) // told again

	// alice leaves for real; a leave arriving after it changes nothing
	alice.emit(3, "conversation:leave", map[string]string{"conversationId": "c1"})
	alice.read("433[")
	bob.read(`42["presence:leave",{"conversationId":"c1","userId":"alice"`)
	sockets.RemoteBroadcast("other", []any{"presence:leave", stale})
	_ = bob.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		_, msg, err := bob.conn.ReadMessage()
		if err != nil {
			break // quiet
		}
		if strings.Contains(string(msg), "presence:join") {
			t.Fatalf("a join after a leave the roster agrees with: %s", msg)
		}
	}
}

// testNode is one node on a memory engine, serving over HTTP, with alice
// and bob members of c1.
type testNode struct {
	mem        *presence.MemoryEngine
	membership *members
	sockets    *handlers.Sockets
	rooms      *handlers.Rooms
	srv        *server.Server
	hs         *httptest.Server
	secret     []byte
}

// startNode starts a testNode; wrap, if set, wraps its engine.
func startNode(t *testing.T, wrap func(presence.Engine) presence.Engine) *testNode {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	m := metrics.New()
	rooms := handlers.NewRooms(0, log)
	n := &testNode{
		mem:        presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1", Sink: rooms.Sink()}),
		membership: &members{m: map[string]bool{"c1/alice": true, "c1/bob": true}},
		rooms:      rooms,
		secret:     []byte("0123456789abcdef0123456789abcdef"),
	}
	t.Cleanup(func() { n.mem.Close() })
	var eng presence.Engine = n.mem
	if wrap != nil {
		eng = wrap(eng)
	}
	n.sockets = handlers.NewSockets(handlers.SessionConfig{NodeID: "n1"}, handlers.SocketDeps{
		Log: log, Metrics: m, Engine: eng, Membership: n.membership, Rooms: rooms,
	})
	v, err := auth.NewHS256(n.secret)
	if err != nil {
		t.Fatal(err)
	}
	n.srv, err = server.New(server.Config{}, server.Deps{Log: log, Metrics: m, Verifier: v, Sockets: n.sockets})
	if err != nil {
		t.Fatal(err)
	}
	rooms.Bind(n.srv.IO())
	n.sockets.ListenEvictions()
	n.hs = httptest.NewServer(n.srv.Handler())
	t.Cleanup(func() {
		n.srv.IO().Close(nil)
		n.hs.Close()
	})
	return n
}

// readUntil returns the messages read before the first with prefix
// (answering pings).
func (s *wsSocket) readUntil(prefix string) []string {
	s.t.Helper()
	_, before := s.readTo(prefix)
	return before
}
