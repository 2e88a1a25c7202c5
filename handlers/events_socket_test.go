package handlers_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/logbuf"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
	"github.com/presenced/presenced/server"
	"github.com/presenced/presenced/timestamp"
)

// The socket events that need a Socket.IO socket rather than the table
// test's serve (events_table_test.go): the `session` event of Connect, the
// answer to unknown events (register's catch-all), and a socket whose
// engine Connect failed, connected again by its next event. They run over
// a websocket against a server with a memory engine, with the Socket.IO
// client of join_race_test.go (dialSocket, wsSocket).

// sockEnv is a server of node n1 with a memory engine whose events are
// recorded; alice and bob are members of c1.
type sockEnv struct {
	t       *testing.T
	url     string
	secret  []byte
	srv     *server.Server
	mem     *presence.MemoryEngine
	metrics *metrics.Metrics
	rec     *enginetest.Recorder
}

type sockOptions struct {
	limits handlers.EventLimits
	// wrap, when set, is the engine the handlers use, around the memory one
	wrap func(presence.Engine) presence.Engine
	// log, when set, gets the handlers' log (text)
	log io.Writer
}

func newSockEnv(t *testing.T, o sockOptions) *sockEnv {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	e := &sockEnv{t: t, secret: []byte("0123456789abcdef0123456789abcdef"), metrics: metrics.New(), rec: &enginetest.Recorder{}}
	rooms := handlers.NewRooms(0, log)
	record, deliver := e.rec.Sink(), rooms.Sink()
	e.mem = presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1", Sink: func(ctx context.Context, ev []presence.Event) {
		record(ctx, ev)
		deliver(ctx, ev)
	}})
	t.Cleanup(func() { e.mem.Close() })
	var eng presence.Engine = e.mem
	if o.wrap != nil {
		eng = o.wrap(e.mem)
	}
	hlog := log
	if o.log != nil {
		hlog = slog.New(slog.NewTextHandler(o.log, nil))
	}
	sockets := handlers.NewSockets(handlers.SessionConfig{
		NodeID: "n1", HeartbeatInterval: 15 * time.Second, HeartbeatJitter: 5 * time.Second, TypingTTL: 4 * time.Second,
		Limits: o.limits,
	}, handlers.SocketDeps{
		Log: hlog, Metrics: e.metrics, Engine: eng, Rooms: rooms,
		Membership: &members{m: map[string]bool{"c1/alice": true, "c1/bob": true}},
	})
	v, err := auth.NewHS256(e.secret)
	if err != nil {
		t.Fatal(err)
	}
	e.srv, err = server.New(server.Config{}, server.Deps{Log: log, Metrics: e.metrics, Verifier: v, Sockets: sockets})
	if err != nil {
		t.Fatal(err)
	}
	rooms.Bind(e.srv.IO())
	hs := httptest.NewServer(e.srv.Handler())
	t.Cleanup(func() {
		e.srv.IO().Close(nil)
		hs.Close()
	})
	e.url = hs.URL
	return e
}

func (e *sockEnv) token(user string) string {
	e.t.Helper()
	return signToken(e.t, e.secret, user)
}

// connect connects user as dialSocket does, and returns the socket, the
// socket id of its CONNECT answer and its `session` payload.
func (e *sockEnv) connect(user string) (*wsSocket, string, handlers.SessionPayload) {
	e.t.Helper()
	u := "ws" + strings.TrimPrefix(e.url, "http") + "/socket.io/?EIO=4&transport=websocket"
	conn, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	s := &wsSocket{t: e.t, conn: conn}
	s.read("0")
	b, _ := json.Marshal(map[string]string{"token": e.token(user)})
	s.emitRaw("40" + string(b))
	var connected struct{ Sid string }
	if msg := s.read("40"); json.Unmarshal([]byte(msg[2:]), &connected) != nil || connected.Sid == "" {
		e.t.Fatalf("CONNECT answer %q", msg)
	}
	msg := s.read(`42["session",`)
	var args []json.RawMessage
	if err := json.Unmarshal([]byte(msg[2:]), &args); err != nil || len(args) != 2 {
		e.t.Fatalf("session %q: %v", msg, err)
	}
	var p handlers.SessionPayload
	dec := json.NewDecoder(strings.NewReader(string(args[1])))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		e.t.Fatalf("session payload %s: %v", args[1], err)
	}
	return s, connected.Sid, p
}

// ackOf reads the ack of id and decodes its one argument.
func (s *wsSocket) ackOf(id int) map[string]any {
	s.t.Helper()
	msg := s.read("43" + itoa(id) + "[")
	var args []map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(msg, "43"+itoa(id))), &args); err != nil || len(args) != 1 {
		s.t.Fatalf("ack %q: %v", msg, err)
	}
	return args[0]
}

// emitRaw sends a Socket.IO EVENT packet as written.
func (s *wsSocket) emitRaw(packet string) {
	s.t.Helper()
	if err := s.conn.WriteMessage(websocket.TextMessage, []byte(packet)); err != nil {
		s.t.Fatal(err)
	}
}

func ackCode(ack map[string]any) (code, message string) {
	e, _ := ack["error"].(map[string]any)
	code, _ = e["code"].(string)
	message, _ = e["message"].(string)
	return code, message
}

// userState is a user's presence and sockets as the engine has them.
func (e *sockEnv) userState(user string) (presence.UserPresence, []presence.SocketInfo) {
	e.t.Helper()
	ups, err := e.mem.Users(context.Background(), []string{user})
	if err != nil {
		e.t.Fatal(err)
	}
	socks, err := e.mem.UserSockets(context.Background(), user)
	if err != nil {
		e.t.Fatal(err)
	}
	return ups[0], socks
}

// On connect the server emits `session` (CONTRACT §1 handshake) with the
// configured hints; the engine has the socket, the user comes online once
// (a second socket changes nothing), and the socket is in room user:<id>.
func TestSessionEvent(t *testing.T) {
	e := newSockEnv(t, sockOptions{})
	before := time.Now().UTC().Truncate(time.Millisecond)
	s, sid, p := e.connect("alice")
	after := time.Now()
	want := handlers.SessionPayload{
		UserID: "alice", SocketID: sid, Node: "n1", ServerTime: p.ServerTime,
		Heartbeat:   handlers.HeartbeatPayload{IntervalMs: 15000, JitterMs: 5000},
		TypingTTLMs: 4000,
	}
	if p != want {
		t.Errorf("session %+v\nwant    %+v", p, want)
	}
	at, err := time.Parse(timestamp.Layout, p.ServerTime)
	if err != nil || at.Before(before) || at.After(after) || !strings.HasSuffix(p.ServerTime, "Z") {
		t.Errorf("serverTime %q (%v), want a UTC time of the connect", p.ServerTime, err)
	}
	up, socks := e.userState("alice")
	if up.Status != presence.Online || len(socks) != 1 || socks[0].ID != sid || socks[0].Node != "n1" || len(socks[0].Conversations) != 0 {
		t.Errorf("engine: %+v, sockets %+v", up, socks)
	}
	if got := e.rec.Take(); len(got) != 1 || got[0] != "status alice online" {
		t.Errorf("engine events %q, want alice online", got)
	}
	// the user's room reaches the socket
	e.srv.IO().To("user:alice").Emit("note", map[string]string{"x": "y"})
	s.read(`42["note",{"x":"y"}]`)

	// A second socket: its own session, its own id; alice is online already.
	s2, sid2, p2 := e.connect("alice")
	if sid2 == sid || p2.SocketID != sid2 || p2.UserID != "alice" {
		t.Errorf("second session %+v (first socket %s)", p2, sid)
	}
	if got := e.rec.Take(); len(got) != 0 {
		t.Errorf("engine events %q for a second socket", got)
	}
	if _, socks := e.userState("alice"); len(socks) != 2 {
		t.Errorf("sockets %+v", socks)
	}
	e.srv.IO().To("user:alice").Emit("note", 2)
	s.read(`42["note",2]`)
	s2.read(`42["note",2]`)
}

// An unknown event asking for an ack is answered not_found "unknown event"
// (an ack is always ok or an error, CONTRACT §1); without an ack it is
// dropped. Either way nothing else changes and the socket stays
// connected. It is limited as "any other event": over the limit,
// rate_limited. Within the limit it is the user's activity ("any other
// client event", CONTRACT §1).
func TestUnknownEvent(t *testing.T) {
	var touches atomic.Int64
	e := newSockEnv(t, sockOptions{
		limits: handlers.EventLimits{Other: handlers.Limit{Rate: 0.001, Burst: 3}},
		wrap:   func(eng presence.Engine) presence.Engine { return &touchCounter{Engine: eng, n: &touches} },
	})
	s, sid, _ := e.connect("alice")
	s.emit(1, "conversation:join", map[string]string{"conversationId": "c1"})
	if ack := s.ackOf(1); ack["ok"] != true {
		t.Fatalf("join: %v", ack)
	}
	e.rec.Take()
	up, socks := e.userState("alice")

	notFound := func(id int) {
		t.Helper()
		ack := s.ackOf(id)
		if code, msg := ackCode(ack); ack["ok"] != false || code != handlers.CodeNotFound || msg != "unknown event" || len(ack) != 2 {
			t.Errorf("ack %d: %v, want not_found: unknown event", id, ack)
		}
	}
	s.emit(2, "bogus", map[string]any{"conversationId": "c1"})
	notFound(2)
	s.emitRaw(`423["conversation:Join"]`) // no payload; names are case-sensitive
	notFound(3)
	// Acked, so done: the engine is as it was, but for the activity
	// recorded for each (touches, below).
	if up2, socks2 := e.userState("alice"); up2.Status != up.Status || len(socks2) != 1 || len(socks2[0].Conversations) != 1 {
		t.Errorf("engine after unknown events: %+v %+v, was %+v %+v", up2, socks2, up, socks)
	}
	// No ack asked: no answer. The next answer is the heartbeat's.
	s.emitRaw(`42["bogus",{}]`)
	s.emit(4, "heartbeat", map[string]any{"active": false})
	if ack := s.read("43"); !strings.HasPrefix(ack, `434[{`) || !strings.Contains(ack, `"ok":true`) {
		t.Errorf("after an unknown event without an ack: %q, want the heartbeat's ack", ack)
	}
	// The limit of other events (burst 3: two acked, one not) is spent.
	s.emit(5, "bogus", nil)
	ack := s.ackOf(5)
	if code, msg := ackCode(ack); code != handlers.CodeRateLimited || !strings.Contains(msg, "slow down") {
		t.Errorf("over the limit: %v, want rate_limited", ack)
	}
	// Known events have their own limits; the socket is still served.
	s.emit(6, "typing:start", map[string]string{"conversationId": "c1"})
	if ack := s.ackOf(6); ack["ok"] != true {
		t.Errorf("typing after unknown events: %v", ack)
	}
	if got := e.rec.Take(); len(got) != 1 || got[0] != "typing c1 alice true" {
		t.Errorf("engine events %q, want only the typing", got)
	}

	if _, socks2 := e.userState("alice"); len(socks2) != 1 || socks2[0].ID != sid || len(socks2[0].Conversations) != 1 {
		t.Errorf("engine after: %+v", socks2)
	}
	// three within the limit (two acked, one not), one over it
	for deadline := time.Now().Add(2 * time.Second); touches.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if n := touches.Load(); n != 3 {
		t.Errorf("activity recorded for %d unknown events, want 3 (those within the limit)", n)
	}
	if v := testutil.ToFloat64(e.metrics.Events.WithLabelValues("unknown", handlers.CodeNotFound)); v != 2 {
		t.Errorf("unknown events answered not_found: metric %v, want 2", v)
	}
	if v := testutil.ToFloat64(e.metrics.Events.WithLabelValues("unknown", handlers.CodeRateLimited)); v != 1 {
		t.Errorf("unknown events rate limited: metric %v, want 1", v)
	}
}

// touchCounter counts the engine's Touch calls.
type touchCounter struct {
	presence.Engine
	n *atomic.Int64
}

func (c *touchCounter) Touch(ctx context.Context, socketID string) error {
	c.n.Add(1)
	return c.Engine.Touch(ctx, socketID)
}

// flakyEngine refuses Connect while down, as a backend that is out.
type flakyEngine struct {
	presence.Engine
	down     atomic.Bool
	mu       sync.Mutex
	connects int
}

func (f *flakyEngine) Connect(ctx context.Context, s presence.Socket) error {
	f.mu.Lock()
	f.connects++
	f.mu.Unlock()
	if f.down.Load() {
		return presence.ErrUnavailable
	}
	return f.Engine.Connect(ctx, s)
}

// A socket whose engine Connect failed still gets its session; its events
// try the Connect again: refused unavailable while the backend is down,
// and once it is back the event connects the socket and runs.
func TestEventsConnectALostSocket(t *testing.T) {
	var flaky *flakyEngine
	var logs logbuf.Buffer
	e := newSockEnv(t, sockOptions{log: &logs, wrap: func(eng presence.Engine) presence.Engine {
		flaky = &flakyEngine{Engine: eng}
		flaky.down.Store(true)
		return flaky
	}})
	s, sid, p := e.connect("alice")
	if p.SocketID != sid {
		t.Fatalf("session %+v", p)
	}
	if up, socks := e.userState("alice"); up.Status != presence.Offline || len(socks) != 0 {
		t.Fatalf("engine has the socket: %+v %+v", up, socks)
	}
	for i, ev := range []struct {
		event   string
		payload any
	}{
		{"heartbeat", nil},
		{"conversation:join", map[string]string{"conversationId": "c1"}},
		{"typing:start", map[string]string{"conversationId": "c1"}},
	} {
		s.emit(i+1, ev.event, ev.payload)
		ack := s.ackOf(i + 1)
		if code, msg := ackCode(ack); code != handlers.CodeUnavailable || !strings.Contains(msg, "retry") {
			t.Errorf("%s while down: %v, want unavailable", ev.event, ack)
		}
	}
	if up, socks := e.userState("alice"); up.Status != presence.Offline || len(socks) != 0 {
		t.Fatalf("engine has the socket: %+v %+v", up, socks)
	}
	if got := e.rec.Take(); len(got) != 0 {
		t.Errorf("engine events %q while down", got)
	}

	flaky.down.Store(false)
	s.emit(10, "conversation:join", map[string]string{"conversationId": "c1"})
	ack := s.ackOf(10)
	if ack["ok"] != true || ack["conversationId"] != "c1" {
		t.Fatalf("join once back: %v", ack)
	}
	if got := e.rec.Take(); len(got) != 2 || got[0] != "status alice online" || got[1] != "join c1 alice" {
		t.Errorf("engine events %q, want alice online, then her join", got)
	}
	up, socks := e.userState("alice")
	if up.Status != presence.Online || len(socks) != 1 || socks[0].ID != sid || len(socks[0].Conversations) != 1 {
		t.Errorf("engine: %+v %+v", up, socks)
	}
	// connected once: the next events do not connect again
	s.emit(11, "heartbeat", nil)
	if ack := s.ackOf(11); ack["ok"] != true {
		t.Errorf("heartbeat: %v", ack)
	}
	flaky.mu.Lock()
	n := flaky.connects
	flaky.mu.Unlock()
	if n < 5 { // the connect, three events while down, the join (and the late connects of connectLater)
		t.Errorf("%d engine connects, want 5 or more", n)
	}
	// the three failures are one line; their end is told only once no
	// event has failed for a while (TestUnavailableLog)
	if got := logs.Count("events failed: backend unavailable"); got != 1 {
		t.Errorf("%d lines of failed events, want 1:\n%s", got, logs.String())
	}
	if got := logs.Count("events succeed again"); got != 0 {
		t.Errorf("%d lines of the recovery right after the failures, want 0:\n%s", got, logs.String())
	}
}

// A socket whose engine Connect failed, and which sends no event (its
// client only listens), is connected once the backend is back: its user
// comes online without an event of its. Before, it stayed unknown to the
// engine, its user offline, for as long as it stayed connected.
func TestAdmittedSocketConnectedLater(t *testing.T) {
	defer handlers.SetLateConnectFirst(20 * time.Millisecond)()
	var flaky *flakyEngine
	e := newSockEnv(t, sockOptions{wrap: func(eng presence.Engine) presence.Engine {
		flaky = &flakyEngine{Engine: eng}
		flaky.down.Store(true)
		return flaky
	}})
	_, sid, _ := e.connect("alice")
	time.Sleep(100 * time.Millisecond) // a few late connects, refused
	if up, socks := e.userState("alice"); up.Status != presence.Offline || len(socks) != 0 {
		t.Fatalf("engine has the socket while down: %+v %+v", up, socks)
	}
	flaky.down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		up, socks := e.userState("alice")
		if up.Status == presence.Online && len(socks) == 1 && socks[0].ID == sid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine after the backend came back: %+v %+v, want alice online with her socket", up, socks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := e.rec.Take(); len(got) != 1 || got[0] != "status alice online" {
		t.Errorf("engine events %q, want alice online", got)
	}
}
