package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ws "github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/server"
)

// A room broadcast reaches websocket sockets as one frame encoded once
// (transport.LocalAdapter) and polling sockets through the library, whatever
// its size: each websocket frame header form (7-bit, 16-bit and 64-bit
// lengths) arrives whole.
func TestBroadcastReachesWebsocketAndPolling(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	c := dialWS(t, ts.URL, mint(t, "bc-user"))
	defer c.conn.Close()
	u := ts.URL + "/socket.io/?EIO=4&transport=polling&sid="
	got := connectPolling(t, ts.URL, `{"token":"`+mint(t, "bc-user")+`"}`)
	if !strings.Contains(got, "session") {
		t.Fatalf("polling connect: %q", got)
	}
	sid := pollingSid(t, ts)
	for _, n := range []int{10, 200, 70_000} {
		payload := strings.Repeat("x", n)
		if err := ts.Server.IO().To(handlers.UserRoom("bc-user")).Emit("big", payload); err != nil {
			t.Fatal(err)
		}
		want := `42["big","` + payload + `"]`
		_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		if m := c.next(t); m != want {
			t.Fatalf("%d bytes over websocket: got %d bytes %.40q", n, len(m), m)
		}
		var polled string
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && !strings.Contains(polled, want) {
			_, body := do(t, "GET", u+sid, "", nil)
			polled += body
		}
		if !strings.Contains(polled, want) {
			t.Fatalf("%d bytes over polling: got %.80q", n, polled)
		}
	}
}

// pollingSid returns the engine id of the one polling socket of ts.
func pollingSid(t *testing.T, ts *testServer) string {
	t.Helper()
	for _, s := range ts.Server.IO().Sockets().Sockets().Values() {
		if s.Conn().Transport().Name() == "polling" {
			return s.Conn().Id()
		}
	}
	t.Fatal("no polling socket")
	return ""
}

// A socket keeps its order between broadcasts and acks: an event sent
// after a broadcast was emitted is acked after that broadcast arrives.
func TestBroadcastAndAckOrder(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	c := dialWS(t, ts.URL, mint(t, "order-user"))
	defer c.conn.Close()
	room := handlers.UserRoom("order-user")
	for i := range 200 {
		if err := ts.Server.IO().To(room).Emit("seq", i); err != nil {
			t.Fatal(err)
		}
		ack := c.emit(t, "heartbeat", `{"active":true}`)
		_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		first := c.next(t)
		if first != `42["seq",`+strconv.Itoa(i)+`]` {
			t.Fatalf("round %d: first message %q, want the broadcast before the ack", i, first)
		}
		if m := c.nextBytes(t); !bytes.HasPrefix(m, ack) {
			t.Fatalf("round %d: second message %q, want the ack %q", i, m, ack)
		}
	}
}

// A socket disconnected by the server is sent its DISCONNECT packet before
// the connection closes (what is queued is written first), so the client
// sees "io server disconnect", not a lost transport.
func TestServerDisconnectWritesQueuedPackets(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	c := dialWS(t, ts.URL, mint(t, "kick-user"))
	defer c.conn.Close()
	ts.Server.IO().In(handlers.UserRoom("kick-user")).DisconnectSockets(true)
	_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	var seen []string
	for {
		_, msg, err := c.conn.ReadMessage()
		if err != nil {
			break
		}
		seen = append(seen, string(msg))
	}
	if len(seen) == 0 || seen[len(seen)-1] != "41" {
		js, _ := json.Marshal(seen)
		t.Fatalf("messages before the close: %s; want the DISCONNECT packet 41 last", js)
	}
}

// A websocket client that stops reading is disconnected once what it left
// unread passes PRESENCE_MAX_UNREAD (the queue of wsout.go), and counted.
func TestWebsocketUnreadBound(t *testing.T) {
	ts := newTestServer(t, server.Config{MaxUnread: 256 << 10, MaxUnreadAge: time.Minute})
	c := dialWS(t, ts.URL, mint(t, "stalled-user"))
	defer c.conn.Close()
	// the client reads nothing: its TCP window fills, then the queue
	floodUntilClosed(t, ts, "stalled-user", 32<<10)
	if got := testutil.ToFloat64(ts.Metrics.SlowConsumerDisconnects); got != 1 {
		t.Fatalf("slow-consumer disconnects: %v, want 1", got)
	}
}

// floodUntilClosed emits size bytes to user's room every millisecond
// until the server has no socket open (at most 10 s; then the test fails).
func floodUntilClosed(t *testing.T, ts *testServer, user string, size int) {
	t.Helper()
	payload := strings.Repeat("y", size)
	deadline := time.Now().Add(10 * time.Second)
	for ts.Sockets.Open() > 0 && time.Now().Before(deadline) {
		_ = ts.Server.IO().To(handlers.UserRoom(user)).Emit("big", payload)
		time.Sleep(time.Millisecond)
	}
	if n := ts.Sockets.Open(); n != 0 {
		t.Fatalf("open sockets: %d, want the stalled one disconnected", n)
	}
}

// What a websocket client leaves unread in the kernel counts too: the
// connection's send buffer is small while a bound applies (wsSendBuffer),
// so that all the client is sent before its disconnect stays near the
// bound. With the kernel's own sizing it took megabytes more.
func TestWebsocketUnreadBoundIncludesKernel(t *testing.T) {
	const bound = 256 << 10
	ts := newTestServer(t, server.Config{MaxUnread: bound, MaxUnreadAge: time.Minute})
	c := dialWS(t, ts.URL, mint(t, "kernel-user"))
	defer c.conn.Close()
	floodUntilClosed(t, ts, "kernel-user", 16<<10)
	// everything the server had written before the close, read now
	total := 0
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, m, err := c.conn.ReadMessage()
		if err != nil {
			break
		}
		total += len(m)
	}
	// the bound, the kernel's 128 KiB on each side, and a frame in flight
	if limit := bound + 3*128<<10 + 32<<10; total > limit {
		t.Fatalf("the client was sent %d bytes before its disconnect, want at most %d", total, limit)
	}
	if got := testutil.ToFloat64(ts.Metrics.SlowConsumerDisconnects); got != 1 {
		t.Fatalf("slow-consumer disconnects: %v, want 1", got)
	}
}

// A websocket client that takes nothing for MaxUnreadAge while the writer
// waits on it (no more is queued, so only the write's deadline sees it) is
// disconnected and counted as a slow consumer, as one whose queue passed a
// bound is.
func TestWebsocketWriteDeadlineCountsSlowConsumer(t *testing.T) {
	ts := newTestServer(t, server.Config{MaxUnread: -1, MaxUnreadAge: 300 * time.Millisecond})
	c := dialWS(t, ts.URL, mint(t, "blocked-user"))
	defer c.conn.Close()
	payload := strings.Repeat("b", 64<<10)
	for range 40 { // 2.5 MiB at once, then nothing
		_ = ts.Server.IO().To(handlers.UserRoom("blocked-user")).Emit("big", payload)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ts.Sockets.Open() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ts.Sockets.Open(); n != 0 {
		t.Fatalf("open sockets: %d, want the blocked one disconnected", n)
	}
	deadline = time.Now().Add(2 * time.Second)
	for testutil.ToFloat64(ts.Metrics.SlowConsumerDisconnects) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(ts.Metrics.SlowConsumerDisconnects); got != 1 {
		t.Fatalf("slow-consumer disconnects: %v, want 1", got)
	}
}

// upgrade opens a websocket for the polling session sid, probes it and
// sends the UPGRADE; its reads time out after timeout.
func upgrade(t *testing.T, ts *testServer, sid string, timeout time.Duration) *ws.Conn {
	t.Helper()
	conn, _, err := ws.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http")+"/socket.io/?EIO=4&transport=websocket&sid="+sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	if err := conn.WriteMessage(ws.TextMessage, []byte("2probe")); err != nil {
		t.Fatal(err)
	}
	if _, m, err := conn.ReadMessage(); err != nil || string(m) != "3probe" {
		t.Fatalf("probe: %q %v", m, err)
	}
	if err := conn.WriteMessage(ws.TextMessage, []byte("5")); err != nil {
		t.Fatal(err)
	}
	return conn
}

// A socket that upgrades from polling to our websocket is sent broadcasts
// on the websocket once the upgrade is done.
func TestBroadcastAfterUpgrade(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	if got := connectPolling(t, ts.URL, `{"token":"`+mint(t, "up-user")+`"}`); !strings.Contains(got, "session") {
		t.Fatalf("polling connect: %q", got)
	}
	conn := upgrade(t, ts, pollingSid(t, ts), 3*time.Second)
	defer conn.Close()
	deadline := time.Now().Add(3 * time.Second)
	for ts.Server.IO().Sockets().Sockets().Values()[0].Conn().Transport().Name() != "websocket" {
		if time.Now().After(deadline) {
			t.Fatal("not upgraded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 3 {
		if err := ts.Server.IO().To(handlers.UserRoom("up-user")).Emit("after", i); err != nil {
			t.Fatal(err)
		}
		for {
			_, m, err := conn.ReadMessage()
			if err != nil {
				t.Fatalf("broadcast %d: %v", i, err)
			}
			if string(m) == "6" { // a NOOP the engine sends the old transport's way
				continue
			}
			if want := `42["after",` + strconv.Itoa(i) + `]`; string(m) != want {
				t.Fatalf("got %q, want %q", m, want)
			}
			break
		}
	}
}

// A room broadcast reaches the room as it is now: the members list kept
// for a room since its last broadcast (transport.LocalAdapter) is dropped
// when a socket joins or leaves it, and when the room goes away.
func TestBroadcastFollowsRoomChanges(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	a := dialWS(t, ts.URL, mint(t, "rm-a"))
	defer a.conn.Close()
	b := dialWS(t, ts.URL, mint(t, "rm-b"))
	defer b.conn.Close()
	io := ts.Server.IO()
	userA, userB := handlers.UserRoom("rm-a"), handlers.UserRoom("rm-b")
	const room = "some-room"
	// want reads c's next message, which must be want.
	want := func(c *wsClient, who, want string) {
		t.Helper()
		_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		if m := c.next(t); m != want {
			t.Fatalf("%s got %q, want %q", who, m, want)
		}
	}
	emit := func(to socket.Room, msg string) {
		t.Helper()
		if err := io.To(to).Emit("m", msg); err != nil {
			t.Fatal(err)
		}
	}

	io.In(userA).SocketsJoin(room)
	io.In(userB).SocketsJoin(room)
	for i := range 3 { // the members list is kept from the first
		emit(room, "both"+strconv.Itoa(i))
		want(a, "a", `42["m","both`+strconv.Itoa(i)+`"]`)
		want(b, "b", `42["m","both`+strconv.Itoa(i)+`"]`)
	}

	io.In(userB).SocketsLeave(room)
	emit(room, "a only")
	emit(userB, "probe b") // b's next message: not "a only"
	want(a, "a", `42["m","a only"]`)
	want(b, "b", `42["m","probe b"]`)

	io.In(userA).SocketsLeave(room) // the room is gone
	emit(room, "nobody")
	io.In(userB).SocketsJoin(room) // and made again
	emit(room, "b again")
	emit(userA, "probe a")
	want(b, "b", `42["m","b again"]`)
	want(a, "a", `42["m","probe a"]`)
}

// A broadcast to a room large enough to be written in parts side by side
// (transport.inParts) reaches every member once, and each member gets a
// run of broadcasts in the order they were emitted.
func TestLargeRoomFanOutInOrder(t *testing.T) {
	prev := runtime.GOMAXPROCS(4) // four parts whatever the machine
	defer runtime.GOMAXPROCS(prev)
	ts := newTestServer(t, server.Config{})
	io := ts.Server.IO()
	const members, runs = 140, 30
	const room = "large-room"
	clients := make([]*wsClient, members)
	for i := range clients {
		user := "fan" + strconv.Itoa(i)
		clients[i] = dialWS(t, ts.URL, mint(t, user))
		defer clients[i].conn.Close()
		io.In(handlers.UserRoom(user)).SocketsJoin(room)
	}
	for r := range runs {
		if err := io.To(room).Emit("m", r); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range clients {
		for r := range runs {
			_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if m, want := c.next(t), `42["m",`+strconv.Itoa(r)+`]`; m != want {
				t.Fatalf("member %d: got %q, want %q", i, m, want)
			}
		}
	}
	// none twice: a probe to each member's own room comes next
	for i, c := range clients {
		if err := io.To(handlers.UserRoom("fan" + strconv.Itoa(i))).Emit("probe"); err != nil {
			t.Fatal(err)
		}
		_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if m := c.next(t); m != `42["probe"]` {
			t.Fatalf("member %d: got %q after the run, want the probe", i, m)
		}
	}
}

// joinProbeEngine broadcasts a probe to the conversation's room while a
// join is under way: after the socket entered the room, before the
// engine's snapshot (the ack's roster and typing list) is taken.
type joinProbeEngine struct {
	presence.Engine
	srv atomic.Pointer[server.Server]
}

func (e *joinProbeEngine) Join(ctx context.Context, sid, conv string) (presence.JoinResult, error) {
	if s := e.srv.Load(); s != nil {
		_ = s.IO().To(handlers.ConversationRoom(conv)).Emit("probe", conv)
	}
	return e.Engine.Join(ctx, sid, conv)
}

// What a conversation's room says while a socket joins it reaches that
// socket after the join's ack (transport.Hold): such an event may be newer
// than the ack's snapshot, and a client applies the ack first. Without the
// hold the probe came first (a typing stop the snapshot had not seen yet
// was then undone by the ack: a user shown typing for good).
func TestJoinAckBeforeTheRoomsEvents(t *testing.T) {
	eng := &joinProbeEngine{}
	ts := newTestServerEngine(t, server.Config{}, handlers.SessionConfig{NodeID: "n1"}, func(e presence.Engine) presence.Engine {
		eng.Engine = e
		return eng
	})
	srv := ts.Server
	eng.srv.Store(srv)
	c := dialWS(t, ts.URL, mint(t, "joiner"))
	defer c.conn.Close()
	for i := range 20 {
		conv := "probe-" + strconv.Itoa(i)
		ack := c.emit(t, "conversation:join", `{"conversationId":"`+conv+`"}`)
		_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		if first := c.nextBytes(t); !bytes.HasPrefix(first, ack) {
			t.Fatalf("join %d: first message %q, want the ack %q", i, first, ack)
		}
		if second := c.next(t); second != `42["probe","`+conv+`"]` {
			t.Fatalf("join %d: second message %q, want the probe", i, second)
		}
	}
	// the hold ended: the room's broadcasts reach the socket at once again
	if err := srv.IO().To(handlers.ConversationRoom("probe-0")).Emit("after", 1); err != nil {
		t.Fatal(err)
	}
	if m := c.next(t); m != `42["after",1]` {
		t.Fatalf("after the joins: %q", m)
	}
}
