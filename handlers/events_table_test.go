package handlers

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

// Table-driven tests of every client → server event (CONTRACT §1) against
// the memory engine, without a network: each case runs some setup events,
// then one event through serve (the path of both the direct and the
// library events), and checks the ack, the events emitted (room emits,
// presence:update, status changes) and the state after (engine, rooms,
// throttled states, subscriptions). A refused event must change nothing.
//
// The unknown-event answer and the `session` event need a Socket.IO socket
// (register, Connect): events_socket_test.go drives those over a websocket.
//
// The harness's pieces that the fuzz targets (fuzz_events_test.go) use too:
// noLimits, newTestConn, serveEvent, convsOf and connSnapshot.

// tblEmit is one thing the server sent: a room emit (Room, Except set), a
// presence:update to one socket (To set), or a status change (Event
// "status", Payload "<user> <status>").
type tblEmit struct {
	Room, Except, To, Event string
	Payload                 string // JSON, or the status change
}

// tblMembers is a Membership over a set of "conv/user"; conversation
// "broken" fails.
type tblMembers map[string]bool

func (m tblMembers) IsMember(_ context.Context, conv, user string) (bool, error) {
	if conv == "broken" {
		return false, store.ErrUnavailable
	}
	return m[conv+"/"+user], nil
}

// tblViewers answers from the engine: every user as the engine knows them
// (no privacy filter; lastseen's tests cover that). A query of user
// "panic" panics, of user "broken" fails.
type tblViewers struct{ eng presence.Engine }

func (v tblViewers) Presences(ctx context.Context, _ string, ids []string) ([]lastseen.Presence, error) {
	if slices.Contains(ids, "panic") {
		panic("viewers: asked to panic")
	}
	if slices.Contains(ids, "broken") {
		return nil, presence.ErrUnavailable
	}
	ups, err := v.eng.Users(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]lastseen.Presence, len(ups))
	for i, up := range ups {
		out[i] = lastseen.Presence{UserID: up.UserID, Status: string(up.Status), Display: string(up.Status)}
	}
	return out, nil
}

func (tblViewers) PresencesFor(_ context.Context, up presence.UserPresence, viewers []string) ([]lastseen.Presence, error) {
	out := make([]lastseen.Presence, len(viewers))
	for i := range viewers {
		out[i] = lastseen.Presence{UserID: up.UserID, Status: string(up.Status), Display: string(up.Status)}
	}
	return out, nil
}

var tblStart = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// tblEnv: sockets s1 (user u1), s2 (user u2) and s3 (user u1 again),
// connected; u1 and u2 are members of c1..c5, u1 alone of "mine".
type tblEnv struct {
	h        *Sockets
	mem      *presence.Memory // the backend, to attach other nodes
	rooms    *Rooms
	eng      *presence.MemoryEngine
	clock    *fakeclock.Clock
	conns    map[string]*Conn
	mu       sync.Mutex
	emits    []tblEmit
	activity []string
}

type tblOptions struct {
	limits    EventLimits // zero: no limits
	noViewers bool        // no Viewers nor Subscriptions
	jitter    time.Duration
	opTimeout time.Duration
}

func newTblEnv(t *testing.T, o tblOptions) *tblEnv {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	e := &tblEnv{clock: fakeclock.New(tblStart), conns: map[string]*Conn{}}
	rooms := NewRooms(0, log)
	rooms.send = func(room socket.Room, except, event string, payload any) {
		e.record(t, tblEmit{Room: string(room), Except: except, Event: event}, payload)
	}
	rooms.OnStatus(func(_ context.Context, ev presence.Event) {
		e.record(t, tblEmit{Event: "status", Payload: ev.UserID + " " + string(ev.Status)}, nil)
	})
	e.mem, e.rooms = presence.NewMemory(), rooms
	e.eng = presence.NewMemoryEngine(e.mem, presence.Config{
		NodeID: "n1", Now: e.clock.Now, MaxConversations: 3, Sink: presence.HeldForReply(rooms.Sink()), // as cmd/presenced wires it
	})
	members := tblMembers{}
	for _, conv := range []string{"c1", "c2", "c3", "c4", "c5"} {
		members[conv+"/u1"], members[conv+"/u2"] = true, true
	}
	members["mine/u1"] = true
	limits := o.limits
	if limits == (EventLimits{}) {
		limits = noLimits
	}
	deps := SocketDeps{
		Log: log, Metrics: metrics.New(), Engine: e.eng, Membership: members, Rooms: rooms,
		Activity: func(_ context.Context, user string, at time.Time) {
			e.mu.Lock()
			e.activity = append(e.activity, user+" "+timestamp.Format(at))
			e.mu.Unlock()
		},
	}
	if !o.noViewers {
		v := tblViewers{eng: e.eng}
		subs := NewSubscriptions(presence.NewLocalBus(), v, log)
		subs.emit = func(c *Conn, event string, payload any) error {
			e.record(t, tblEmit{To: c.sid, Event: event}, payload)
			return nil
		}
		// delivered at once rather than through Subscriptions.Run
		rooms.OnStatus(subs.deliverNow)
		deps.Viewers, deps.Subscriptions = v, subs
	}
	jitter := o.jitter
	if jitter == 0 {
		jitter = -1 // none: nextInMs is exactly the interval
	}
	e.h = NewSockets(SessionConfig{
		NodeID: "n1", Limits: limits, HeartbeatInterval: 15 * time.Second, HeartbeatJitter: jitter,
		StateInterval: time.Hour, OpTimeout: o.opTimeout,
	}, deps)
	e.h.now = e.clock.Now
	for _, s := range [][2]string{{"s1", "u1"}, {"s2", "u2"}, {"s3", "u1"}} {
		e.conns[s[0]] = newTestConn(t, e.eng, s[0], s[1])
	}
	t.Cleanup(func() {
		for _, c := range e.conns {
			e.h.clearStates(c)
			if e.h.subs != nil {
				e.h.subs.Drop(c)
			}
		}
	})
	e.take() // the connections' status changes
	return e
}

func (e *tblEnv) record(t *testing.T, em tblEmit, payload any) {
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			t.Errorf("payload of %s: %v", em.Event, err)
		}
		em.Payload = string(b)
	}
	e.mu.Lock()
	e.emits = append(e.emits, em)
	e.mu.Unlock()
}

// take returns and forgets what was sent so far.
func (e *tblEnv) take() []tblEmit {
	e.mu.Lock()
	defer e.mu.Unlock()
	got := e.emits
	e.emits = nil
	return got
}

// noLimits lifts every event limit.
var noLimits = EventLimits{Typing: NoLimit, Join: NoLimit, Query: NoLimit, State: NoLimit, Heartbeat: NoLimit, Other: NoLimit}

// newTestConn is a socket sid of user, with a fake room set (*fuzzRooms),
// ready, and connected to eng.
func newTestConn(tb testing.TB, eng presence.Engine, sid, user string) *Conn {
	tb.Helper()
	c := &Conn{UserID: user, sid: sid, rooms: &fuzzRooms{set: types.NewSet[socket.Room]()}, ready: make(chan struct{})}
	close(c.ready)
	if err := eng.Connect(context.Background(), presence.Socket{ID: sid, UserID: user}); err != nil {
		tb.Fatal(err)
	}
	c.connected.Store(true)
	return c
}

// serveEvent runs one event of c as a client's event is run, and returns
// its ack (nil when none was asked for, or none came) and whether one came.
func serveEvent(h *Sockets, c *Conn, event string, payload any, withAck bool) (map[string]any, bool) {
	var got map[string]any
	acked := false
	var ack socket.Ack
	if withAck {
		ack = func(reply []any, _ error) {
			acked = true
			if len(reply) != 1 {
				got = map[string]any{"badReply": reply}
				return
			}
			got = ackBody(reply[0])
		}
	}
	h.serve(c, event, h.handlers[event], []any{payload}, replierOf(ack), time.Time{}, false)
	return got, acked
}

// convsOf lists the conversations socket c has joined as the engine knows
// them (nil: none, or the engine does not know the socket), read as the
// admin panel reads them.
func convsOf(tb testing.TB, eng *presence.MemoryEngine, c *Conn) []string {
	tb.Helper()
	socks, err := eng.UserSockets(context.Background(), c.UserID)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range socks {
		if s.ID == c.sid {
			if len(s.Conversations) == 0 {
				return nil
			}
			return s.Conversations
		}
	}
	return nil
}

// connSnapshot is c's throttled states (conversation → JSON of the latest)
// and its subscriptions, sorted.
func connSnapshot(c *Conn) (states map[string]string, subs []string) {
	states = map[string]string{}
	c.mu.Lock()
	for conv, slot := range c.states {
		b, _ := json.Marshal(slot.latest)
		states[conv] = string(b)
	}
	for id := range c.subs {
		subs = append(subs, id)
	}
	c.mu.Unlock()
	slices.Sort(subs)
	return states, subs
}

// send runs one event of socket sid and returns its ack (nil: none).
func (e *tblEnv) send(sid, event string, payload any, withAck bool) map[string]any {
	got, _ := serveEvent(e.h, e.conns[sid], event, payload, withAck)
	return got
}

// tblState is everything of s1 an event could change, and the rosters of
// c1 and mine.
type tblState struct {
	Convs   []string
	Rooms   []socket.Room
	Rosters string
	Users   string
	States  map[string]string
	Subs    []string
}

func (e *tblEnv) state(t *testing.T) tblState {
	t.Helper()
	ctx := context.Background()
	c := e.conns["s1"]
	s := tblState{Convs: convsOf(t, e.eng, c), Rooms: c.rooms.(*fuzzRooms).Rooms().Keys()}
	slices.Sort(s.Rooms)
	var rosters []presence.JoinResult
	for _, conv := range []string{"c1", "c2", "mine"} {
		r, err := e.eng.Roster(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		rosters = append(rosters, r)
	}
	b, _ := json.Marshal(rosters)
	s.Rosters = string(b)
	us, err := e.eng.Users(ctx, []string{"u1", "u2"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(us)
	s.Users = string(b)
	s.States, s.Subs = connSnapshot(c)
	return s
}

// tblStep is one setup event; it must be acked ok.
type tblStep struct {
	sid, event string
	payload    any
}

func conv(id string) map[string]any { return map[string]any{"conversationId": id} }

func join(sid, c string) tblStep { return tblStep{sid, "conversation:join", conv(c)} }

// eventCase is one event sent by s1 after setup.
type eventCase struct {
	name    string
	opts    tblOptions
	setup   []tblStep
	prepare func(t *testing.T, e *tblEnv) // after setup
	event   string
	payload any
	noAck   bool
	// code is the ack's outcome: "ok" or an error code. A refused event
	// must leave the state as it was (but for the activity of refusals
	// that count as activity: refusedActivity).
	code    string
	message string // a substring of the error message
	ack     func(t *testing.T, ack map[string]any)
	// sent is what the event sent, in order (nil: nothing).
	sent  []tblEmit
	after func(t *testing.T, e *tblEnv)
}

func runEventCases(t *testing.T, cases []eventCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTblEnv(t, tc.opts)
			for _, st := range tc.setup {
				if ack := e.send(st.sid, st.event, st.payload, true); ack["ok"] != true {
					t.Fatalf("setup %s %s %v: %v", st.sid, st.event, st.payload, ack)
				}
			}
			if tc.prepare != nil {
				tc.prepare(t, e)
			}
			e.take()
			before := e.state(t)
			ack := e.send("s1", tc.event, tc.payload, !tc.noAck)
			sent := e.take()
			switch {
			case tc.noAck:
				if ack != nil {
					t.Fatalf("acked an event sent without an ack: %v", ack)
				}
			case tc.code == "ok":
				if ack["ok"] != true {
					t.Fatalf("ack %v, want ok", ack)
				}
				if _, has := ack["error"]; has {
					t.Fatalf("ok ack with an error: %v", ack)
				}
			default:
				if ack["ok"] != false {
					t.Fatalf("ack %v, want ok: false", ack)
				}
				errObj, _ := ack["error"].(map[string]any)
				if got, _ := errObj["code"].(string); got != tc.code {
					t.Fatalf("ack %v, want code %s", ack, tc.code)
				}
				msg, _ := errObj["message"].(string)
				if msg == "" || !strings.Contains(msg, tc.message) {
					t.Fatalf("message %q, want one containing %q", msg, tc.message)
				}
				if len(ack) != 2 {
					t.Fatalf("error ack with other fields: %v", ack)
				}
				after := e.state(t)
				if refusedActivity[tc.code] {
					// such a refusal is the user's activity (an away user
					// comes back): the users are the case's to check
					before.Users, after.Users = "", ""
				}
				if !tblEqual(before, after) {
					t.Fatalf("refused (%s) but changed state:\nbefore %+v\nafter  %+v", tc.code, before, after)
				}
			}
			if !slices.Equal(sent, tc.sent) {
				t.Fatalf("sent:\n got %+v\nwant %+v", sent, tc.sent)
			}
			if tc.ack != nil {
				tc.ack(t, ack)
			}
			if tc.after != nil {
				tc.after(t, e)
			}
		})
	}
}

func tblEqual(a, b tblState) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Ack and state helpers.

func inRoom(t *testing.T, e *tblEnv, sid, conv string, want bool) {
	t.Helper()
	if got := e.conns[sid].rooms.InRoom(ConversationRoom(conv)); got != want {
		t.Errorf("%s in room of %s: %v, want %v", sid, conv, got, want)
	}
	if got := slices.Contains(convsOf(t, e.eng, e.conns[sid]), conv); got != want {
		t.Errorf("%s in the engine's %s: %v, want %v", sid, conv, got, want)
	}
}

// typingIn is the typing list of conversation conv as the engine knows it.
func typingIn(tb testing.TB, eng presence.Engine, conv string) []string {
	tb.Helper()
	r, err := eng.Roster(context.Background(), conv)
	if err != nil {
		tb.Fatal(err)
	}
	return r.Typing
}

func latestState(e *tblEnv, conv string) (string, bool) {
	c := e.conns["s1"]
	c.mu.Lock()
	defer c.mu.Unlock()
	slot, ok := c.states[conv]
	if !ok {
		return "", false
	}
	b, _ := json.Marshal(slot.latest)
	return string(b), true
}

func subsOf(e *tblEnv, sid string) []string {
	c := e.conns[sid]
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id := range c.subs {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func presencesOf(t *testing.T, ack map[string]any) []lastseen.Presence {
	t.Helper()
	ps, ok := ack["presences"].(lastseen.PresenceList)
	if !ok {
		t.Fatalf("presences %#v", ack["presences"])
	}
	return ps
}

func userIDs(ids ...string) map[string]any {
	arr := make([]any, len(ids))
	for i, id := range ids {
		arr[i] = id
	}
	return map[string]any{"userIds": arr}
}

func manyIDs(n int) map[string]any {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "u" + itoaTbl(i)
	}
	return userIDs(ids...)
}

// withDuplicate appends the first of a userIds payload's ids again.
func withDuplicate(p map[string]any) map[string]any {
	ids := p["userIds"].([]any)
	p["userIds"] = append(ids, ids[0])
	return p
}

func itoaTbl(n int) string { b, _ := json.Marshal(n); return string(b) }

// badConvIDs are conversationId payloads every conversation event refuses
// as invalid_argument.
var badConvIDs = []struct {
	name    string
	payload any
	message string
}{
	{"no payload", nil, "conversationId is required"},
	{"missing", map[string]any{}, "conversationId is required"},
	{"null", map[string]any{"conversationId": nil}, "conversationId is required"},
	{"number", map[string]any{"conversationId": 5.0}, "must be a string"},
	{"array", map[string]any{"conversationId": []any{"c1"}}, "must be a string"},
	{"empty", conv(""), "1-128 characters"},
	{"129 characters", conv(strings.Repeat("a", 129)), "1-128 characters"},
	{"space", conv("c 1"), "1-128 characters"},
	{"non-ASCII", conv("caf\u00e9"), "1-128 characters"},
	{"slash", conv("c/1"), "1-128 characters"},
	{"payload a string", "c1", "payload must be an object"},
	{"payload an array", []any{conv("c1")}, "payload must be an object"},
}

// invalidConvCases are badConvIDs as cases of event, after setup.
func invalidConvCases(event string, setup []tblStep) []eventCase {
	var out []eventCase
	for _, b := range badConvIDs {
		out = append(out, eventCase{
			name: "invalid " + b.name, setup: setup, event: event, payload: b.payload,
			code: CodeInvalidArgument, message: b.message,
		})
	}
	return out
}

func TestEventConversationJoin(t *testing.T) {
	cases := []eventCase{
		{
			name: "first socket of the user", event: "conversation:join", payload: conv("c1"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "presence:join", Payload: `{"conversationId":"c1","userId":"u1","at":null}`}},
			ack: func(t *testing.T, ack map[string]any) {
				if ack["conversationId"] != "c1" {
					t.Errorf("conversationId %v", ack["conversationId"])
				}
				b, _ := json.Marshal(ack["online"])
				if string(b) != `[{"userId":"u1","status":"online","since":null}]` {
					t.Errorf("online %s", b)
				}
				if ty, ok := ack["typing"].([]string); !ok || len(ty) != 0 {
					t.Errorf("typing %#v, want []", ack["typing"])
				}
			},
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c1", true) },
		},
		{
			name: "roster of others, typing included", setup: []tblStep{join("s2", "c1"), {"s2", "typing:start", conv("c1")}},
			prepare: func(_ *testing.T, e *tblEnv) { e.clock.Advance(time.Second) },
			event:   "conversation:join", payload: conv("c1"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "presence:join", Payload: `{"conversationId":"c1","userId":"u1","at":null}`}},
			ack: func(t *testing.T, ack map[string]any) {
				on, _ := ack["online"].(MemberList)
				if len(on) != 2 || on[0].UserID != "u2" || on[1].UserID != "u1" {
					t.Errorf("online %+v, want u2 (joined first) then u1", on)
				}
				if ty, _ := ack["typing"].([]string); !slices.Equal(ty, []string{"u2"}) {
					t.Errorf("typing %v, want [u2]", ty)
				}
			},
		},
		{
			name: "second socket of the user: no presence:join", setup: []tblStep{join("s3", "c1")},
			event: "conversation:join", payload: conv("c1"), code: "ok",
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c1", true); inRoom(t, e, "s3", "c1", true) },
		},
		{
			name: "again: idempotent", setup: []tblStep{join("s1", "c1")},
			event: "conversation:join", payload: conv("c1"), code: "ok",
			after: func(t *testing.T, e *tblEnv) {
				if got := convsOf(t, e.eng, e.conns["s1"]); !slices.Equal(got, []string{"c1"}) {
					t.Errorf("conversations %v", got)
				}
			},
		},
		{
			name: "id of 128 characters", event: "conversation:join", payload: conv(strings.Repeat("a", 128)),
			code: CodeForbidden, message: "not a member",
		},
		{
			name: "every id character allowed", event: "conversation:join", payload: conv("aZ0_.:@-"),
			code: CodeForbidden, message: "not a member",
		},
		{
			name: "not a member", event: "conversation:join", payload: conv("other"),
			code: CodeForbidden, message: "not a member of this conversation",
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "other", false) },
		},
		{
			name: "membership unavailable", event: "conversation:join", payload: conv("broken"),
			code: CodeUnavailable, message: "retry",
		},
		{
			name: "over MaxConversations", setup: []tblStep{join("s1", "c1"), join("s1", "c2"), join("s1", "c3")},
			event: "conversation:join", payload: conv("c4"), code: CodeLimitExceeded, message: "too many conversations on this connection (at most 3)",
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c4", false) },
		},
		{
			name: "rejoin at MaxConversations", setup: []tblStep{join("s1", "c1"), join("s1", "c2"), join("s1", "c3")},
			event: "conversation:join", payload: conv("c2"), code: "ok",
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c2", true) },
		},
		{
			name: "rate limited", opts: tblOptions{limits: EventLimits{Join: Limit{Rate: 0.001, Burst: 2}}},
			setup: []tblStep{join("s1", "c1"), join("s1", "c2")},
			event: "conversation:join", payload: conv("c3"), code: CodeRateLimited,
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c3", false) },
		},
		{
			name: "another socket's bucket is its own", opts: tblOptions{limits: EventLimits{Join: Limit{Rate: 0.001, Burst: 2}}},
			setup: []tblStep{join("s2", "c1"), join("s2", "c2")},
			event: "conversation:join", payload: conv("c3"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c3", Except: "s1", Event: "presence:join", Payload: `{"conversationId":"c3","userId":"u1","at":null}`}},
		},
		{
			name: "without an ack: still done", event: "conversation:join", payload: conv("c1"), noAck: true,
			sent:  []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "presence:join", Payload: `{"conversationId":"c1","userId":"u1","at":null}`}},
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c1", true) },
		},
	}
	cases = append(cases, invalidConvCases("conversation:join", nil)...)
	runEventCases(t, cases)
}

func TestEventConversationLeave(t *testing.T) {
	both := []tblStep{join("s2", "c1"), join("s1", "c1")}
	cases := []eventCase{
		{
			// the leaving socket is out of the room already: no Except
			name: "last socket of the user", setup: both, event: "conversation:leave", payload: conv("c1"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Event: "presence:leave", Payload: `{"conversationId":"c1","userId":"u1","at":null,"reason":"left"}`}},
			ack: func(t *testing.T, ack map[string]any) {
				if len(ack) != 1 {
					t.Errorf("ack %v, want only ok", ack)
				}
			},
			after: func(t *testing.T, e *tblEnv) {
				inRoom(t, e, "s1", "c1", false)
				inRoom(t, e, "s2", "c1", true)
			},
		},
		{
			name: "another socket of the user stays: no presence:leave", setup: append(slices.Clone(both), join("s3", "c1")),
			event: "conversation:leave", payload: conv("c1"), code: "ok",
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c1", false); inRoom(t, e, "s3", "c1", true) },
		},
		{
			name: "clears a visible state and typing", setup: append(slices.Clone(both),
				tblStep{"s1", "state:set", map[string]any{"conversationId": "c1", "state": map[string]any{"x": 1.0}}},
				tblStep{"s1", "typing:start", conv("c1")}),
			event: "conversation:leave", payload: conv("c1"), code: "ok",
			sent: []tblEmit{
				{Room: "conversation:c1", Except: "s1", Event: "state", Payload: `{"conversationId":"c1","userId":"u1","state":null}`},
				{Room: "conversation:c1", Event: "typing", Payload: `{"conversationId":"c1","userId":"u1","typing":false,"ttlMs":5000}`},
				{Room: "conversation:c1", Event: "presence:leave", Payload: `{"conversationId":"c1","userId":"u1","at":null,"reason":"left"}`},
			},
			after: func(t *testing.T, e *tblEnv) {
				if s, ok := latestState(e, "c1"); ok {
					t.Errorf("state %s remains", s)
				}
				if ty := typingIn(t, e.eng, "c1"); len(ty) != 0 {
					t.Errorf("typing %v", ty)
				}
			},
		},
		{
			name: "a state never sent is dropped silently", setup: both,
			prepare: func(t *testing.T, e *tblEnv) {
				// queued behind the throttle, not broadcast yet
				e.conns["s1"].mu.Lock()
				e.conns["s1"].states = map[string]*stateSlot{"c1": {latest: map[string]any{"x": 1.0}, sent: time.Now()}}
				e.conns["s1"].mu.Unlock()
			},
			event: "conversation:leave", payload: conv("c1"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Event: "presence:leave", Payload: `{"conversationId":"c1","userId":"u1","at":null,"reason":"left"}`}},
			after: func(t *testing.T, e *tblEnv) {
				if s, ok := latestState(e, "c1"); ok {
					t.Errorf("state %s remains", s)
				}
			},
		},
		{
			name: "a conversation not joined", event: "conversation:leave", payload: conv("c2"), code: "ok",
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c2", false) },
		},
		{
			name: "no membership check", setup: []tblStep{join("s1", "mine")},
			prepare: func(_ *testing.T, e *tblEnv) { delete(e.h.membership.(tblMembers), "mine/u1") },
			event:   "conversation:leave", payload: conv("mine"), code: "ok",
			sent:  []tblEmit{{Room: "conversation:mine", Event: "presence:leave", Payload: `{"conversationId":"mine","userId":"u1","at":null,"reason":"left"}`}},
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "mine", false) },
		},
		{
			name: "rate limited, sharing join's bucket", opts: tblOptions{limits: EventLimits{Join: Limit{Rate: 0.001, Burst: 2}}},
			setup: []tblStep{join("s1", "c1"), join("s1", "c2")},
			event: "conversation:leave", payload: conv("c1"), code: CodeRateLimited,
			after: func(t *testing.T, e *tblEnv) { inRoom(t, e, "s1", "c1", true) },
		},
	}
	cases = append(cases, invalidConvCases("conversation:leave", both)...)
	runEventCases(t, cases)
}

func TestEventHeartbeat(t *testing.T) {
	serverTime := func(want string) func(t *testing.T, ack map[string]any) {
		return func(t *testing.T, ack map[string]any) {
			if ack["serverTime"] != want {
				t.Errorf("serverTime %v, want %s", ack["serverTime"], want)
			}
			if ack["nextInMs"] != int64(15000) {
				t.Errorf("nextInMs %#v, want 15000 (no jitter)", ack["nextInMs"])
			}
		}
	}
	activity := func(want ...string) func(t *testing.T, e *tblEnv) {
		return func(t *testing.T, e *tblEnv) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if !slices.Equal(e.activity, want) {
				t.Errorf("activity %v, want %v", e.activity, want)
			}
		}
	}
	// goAway makes u1 away: no activity for AwayAfter, then the engine's
	// timers run.
	goAway := func(t *testing.T, e *tblEnv) {
		e.clock.Advance(6 * time.Minute)
		if err := e.eng.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		if us, _ := e.eng.Users(context.Background(), []string{"u1"}); us[0].Status != presence.Away {
			t.Fatalf("u1 %s, want away", us[0].Status)
		}
	}
	status := func(want presence.Status) func(t *testing.T, e *tblEnv) {
		return func(t *testing.T, e *tblEnv) {
			if us, _ := e.eng.Users(context.Background(), []string{"u1"}); us[0].Status != want {
				t.Errorf("u1 %s, want %s", us[0].Status, want)
			}
		}
	}
	cases := []eventCase{
		{
			name: "no payload", event: "heartbeat", payload: nil, code: "ok",
			ack: serverTime("2026-11-30T12:00:00.000Z"), after: activity("u1 2026-11-30T12:00:00.000Z"),
		},
		{
			name: "active null is the default", event: "heartbeat", payload: map[string]any{"active": nil}, code: "ok",
			ack: serverTime("2026-11-30T12:00:00.000Z"),
		},
		{
			name: "active brings an away user back", prepare: goAway, event: "heartbeat", payload: map[string]any{"active": true}, code: "ok",
			sent: []tblEmit{{Event: "status", Payload: "u1 online"}},
			ack:  serverTime("2026-11-30T12:06:00.000Z"),
			after: func(t *testing.T, e *tblEnv) {
				status(presence.Online)(t, e)
				activity("u1 2026-11-30T12:06:00.000Z")(t, e)
			},
		},
		{
			name: "inactive: still away, still seen", prepare: goAway, event: "heartbeat", payload: map[string]any{"active": false}, code: "ok",
			after: func(t *testing.T, e *tblEnv) {
				status(presence.Away)(t, e)
				activity("u1 2026-11-30T12:06:00.000Z")(t, e)
			},
		},
		{
			name: "jitter", opts: tblOptions{jitter: 5 * time.Second}, event: "heartbeat", code: "ok",
			ack: func(t *testing.T, ack map[string]any) {
				if n, _ := ack["nextInMs"].(int64); n < 15000 || n >= 20000 {
					t.Errorf("nextInMs %v, want in [15000, 20000)", ack["nextInMs"])
				}
			},
		},
		{
			name: "a refused event is activity (typing in a conversation not joined)", prepare: goAway,
			event: "typing:start", payload: map[string]any{"conversationId": "c1"}, code: CodeForbidden,
			sent: []tblEmit{{Event: "status", Payload: "u1 online"}}, after: status(presence.Online),
		},
		{
			name: "a bad payload is no activity", prepare: goAway,
			event: "typing:start", payload: map[string]any{"conversationId": 5.0}, code: CodeInvalidArgument,
			after: status(presence.Away),
		},
		{name: "active a string", event: "heartbeat", payload: map[string]any{"active": "yes"}, code: CodeInvalidArgument, message: "active must be a boolean", after: activity()},
		{name: "active a number", event: "heartbeat", payload: map[string]any{"active": 1.0}, code: CodeInvalidArgument, message: "active must be a boolean"},
		{name: "payload an array", event: "heartbeat", payload: []any{}, code: CodeInvalidArgument, message: "payload must be an object"},
		{
			name: "rate limited: no activity recorded", opts: tblOptions{limits: EventLimits{Heartbeat: Limit{Rate: 0.001, Burst: 1}}},
			setup: []tblStep{{"s1", "heartbeat", nil}}, prepare: goAway,
			event: "heartbeat", payload: map[string]any{"active": true}, code: CodeRateLimited,
			after: func(t *testing.T, e *tblEnv) {
				status(presence.Away)(t, e)
				activity("u1 2026-11-30T12:00:00.000Z")(t, e) // the setup's only
			},
		},
	}
	runEventCases(t, cases)
}

func TestEventTyping(t *testing.T) {
	joined := []tblStep{join("s2", "c1"), join("s1", "c1")}
	typing := append(slices.Clone(joined), tblStep{"s1", "typing:start", conv("c1")})
	start := `{"conversationId":"c1","userId":"u1","typing":true,"ttlMs":5000}`
	stop := `{"conversationId":"c1","userId":"u1","typing":false,"ttlMs":5000}`
	isTyping := func(want bool) func(t *testing.T, e *tblEnv) {
		return func(t *testing.T, e *tblEnv) {
			if got := slices.Contains(typingIn(t, e.eng, "c1"), "u1"); got != want {
				t.Errorf("u1 typing %v, want %v", got, want)
			}
		}
	}
	stopWith := func(reason any) map[string]any {
		return map[string]any{"conversationId": "c1", "reason": reason}
	}
	cases := []eventCase{
		{
			name: "start", setup: joined, event: "typing:start", payload: conv("c1"), code: "ok",
			sent:  []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "typing", Payload: start}},
			after: isTyping(true),
		},
		{
			name: "start again within the TTL: silent", setup: typing,
			prepare: func(_ *testing.T, e *tblEnv) { e.clock.Advance(4 * time.Second) },
			event:   "typing:start", payload: conv("c1"), code: "ok",
			after: func(t *testing.T, e *tblEnv) {
				e.clock.Advance(4 * time.Second) // 8s after the first start, 4s after the refresh
				isTyping(true)(t, e)
			},
		},
		{
			// the entry expired and no tick removed it yet: its stop (to
			// the whole room, as the expiry's), then the new start
			name: "start after the TTL: the expiry's stop, then the start", setup: typing,
			prepare: func(_ *testing.T, e *tblEnv) { e.clock.Advance(6 * time.Second) },
			event:   "typing:start", payload: conv("c1"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Event: "typing", Payload: stop}, {Room: "conversation:c1", Except: "s1", Event: "typing", Payload: start}},
		},
		{
			name: "start not joined", setup: []tblStep{join("s2", "c1")}, event: "typing:start", payload: conv("c1"),
			code: CodeForbidden, message: "join the conversation first",
		},
		{
			name: "start rate limited", opts: tblOptions{limits: EventLimits{Typing: Limit{Rate: 0.001, Burst: 2}}},
			setup: append(slices.Clone(joined), tblStep{"s1", "typing:stop", conv("c1")}, tblStep{"s1", "typing:stop", conv("c1")}),
			event: "typing:start", payload: conv("c1"), code: CodeRateLimited, after: isTyping(false),
		},
		{
			name: "stop", setup: typing, event: "typing:stop", payload: conv("c1"), code: "ok",
			sent:  []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "typing", Payload: stop}},
			after: isTyping(false),
		},
		{name: "stop sent", setup: typing, event: "typing:stop", payload: stopWith("sent"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "typing", Payload: stop}}, after: isTyping(false)},
		{name: "stop cleared", setup: typing, event: "typing:stop", payload: stopWith("cleared"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "typing", Payload: stop}}, after: isTyping(false)},
		{name: "stop reason null", setup: typing, event: "typing:stop", payload: stopWith(nil), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "typing", Payload: stop}}, after: isTyping(false)},
		{name: "stop not typing: silent", setup: joined, event: "typing:stop", payload: conv("c1"), code: "ok"},
		{
			// the entry expired and no tick removed it yet: nobody was
			// told, so the stop is announced
			name: "stop after the TTL: announced", setup: typing,
			prepare: func(_ *testing.T, e *tblEnv) { e.clock.Advance(6 * time.Second) },
			event:   "typing:stop", payload: conv("c1"), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "typing", Payload: stop}},
		},
		{name: "stop reason bogus", setup: typing, event: "typing:stop", payload: stopWith("bogus"),
			code: CodeInvalidArgument, message: `reason must be "sent" or "cleared"`, after: isTyping(true)},
		{name: "stop reason a number", setup: typing, event: "typing:stop", payload: stopWith(5.0),
			code: CodeInvalidArgument, message: "reason must be", after: isTyping(true)},
		{name: "stop not joined", event: "typing:stop", payload: conv("c1"), code: CodeForbidden, message: "join the conversation first"},
		{
			name: "stop rate limited, sharing start's bucket", opts: tblOptions{limits: EventLimits{Typing: Limit{Rate: 0.001, Burst: 1}}},
			setup: typing, event: "typing:stop", payload: conv("c1"), code: CodeRateLimited, after: isTyping(true),
		},
	}
	cases = append(cases, invalidConvCases("typing:start", joined)...)
	for _, c := range invalidConvCases("typing:stop", typing) {
		c.name = "stop " + c.name
		c.after = isTyping(true)
		cases = append(cases, c)
	}
	runEventCases(t, cases)
}

func TestEventStateSet(t *testing.T) {
	joined := []tblStep{join("s2", "c1"), join("s1", "c1")}
	set := func(state any) map[string]any { return map[string]any{"conversationId": "c1", "state": state} }
	withState := append(slices.Clone(joined), tblStep{"s1", "state:set", set(map[string]any{"x": 1.0})})
	latest := func(want string) func(t *testing.T, e *tblEnv) {
		return func(t *testing.T, e *tblEnv) {
			got, ok := latestState(e, "c1")
			if want == "" && ok || want != "" && got != want {
				t.Errorf("latest state %q (%v), want %q", got, ok, want)
			}
		}
	}
	// 1024 bytes of JSON: {"s":"…"} is 8 bytes around the string.
	exact := map[string]any{"s": strings.Repeat("a", MaxStateBytes-8)}
	over := map[string]any{"s": strings.Repeat("a", MaxStateBytes-7)}
	escapes := map[string]any{"s": strings.Repeat("<>&", (MaxStateBytes-8)/3)}
	escapedJSON, _ := json.Marshal(escapes) // (as broadcasts write it: 6 bytes a character)
	cases := []eventCase{
		{
			name: "set", setup: joined, event: "state:set", payload: set(map[string]any{"cursor": map[string]any{"line": 3.0}}), code: "ok",
			sent:  []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "state", Payload: `{"conversationId":"c1","userId":"u1","state":{"cursor":{"line":3}}}`}},
			after: latest(`{"cursor":{"line":3}}`),
		},
		{
			name: "within the interval: coalesced, sent later", setup: withState, event: "state:set", payload: set(map[string]any{"x": 2.0}), code: "ok",
			after: latest(`{"x":2}`),
		},
		{
			name: "clear", setup: withState, event: "state:set", payload: set(nil), code: "ok",
			prepare: func(_ *testing.T, e *tblEnv) {
				e.conns["s1"].mu.Lock()
				e.conns["s1"].states["c1"].sent = time.Time{} // the interval has passed
				e.conns["s1"].mu.Unlock()
			},
			sent:  []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "state", Payload: `{"conversationId":"c1","userId":"u1","state":null}`}},
			after: latest(""),
		},
		{
			name: "1024 bytes", setup: joined, event: "state:set", payload: set(exact), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "state", Payload: `{"conversationId":"c1","userId":"u1","state":{"s":"` + strings.Repeat("a", MaxStateBytes-8) + `"}}`}},
		},
		{name: "1025 bytes", setup: withState, event: "state:set", payload: set(over), code: CodeInvalidArgument, message: "1025 bytes of JSON; at most 1024", after: latest(`{"x":1}`)},
		// counted as the client writes it, not with json.Marshal's HTML escapes (6 bytes each)
		{
			name: "1024 bytes of <>&", setup: joined, event: "state:set", payload: set(escapes), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "state", Payload: `{"conversationId":"c1","userId":"u1","state":` + string(escapedJSON) + `}`}},
		},
		{name: "state missing", setup: withState, event: "state:set", payload: conv("c1"), code: CodeInvalidArgument, message: "state is required"},
		{name: "state a number", setup: withState, event: "state:set", payload: set(5.0), code: CodeInvalidArgument, message: "state must be an object or null"},
		{name: "state an array", setup: withState, event: "state:set", payload: set([]any{1.0}), code: CodeInvalidArgument, message: "state must be an object or null"},
		{name: "state a string", setup: withState, event: "state:set", payload: set("s"), code: CodeInvalidArgument, message: "state must be an object or null"},
		// a binary attachment is not JSON: broadcast as JSON it would be {}
		{name: "state with binary", setup: withState, event: "state:set", payload: set(map[string]any{"img": types.NewBytesBuffer(make([]byte, 50000)), "n": 1.0}), code: CodeInvalidArgument, message: "plain JSON: it holds binary data", after: latest(`{"x":1}`)},
		{name: "state with binary in an array", setup: withState, event: "state:set", payload: set(map[string]any{"a": []any{1.0, types.NewBytesBuffer([]byte{1})}}), code: CodeInvalidArgument, message: "plain JSON: it holds binary data", after: latest(`{"x":1}`)},
		{name: "state too deep", setup: withState, event: "state:set", payload: set(nested(maxStateDepth + 1)), code: CodeInvalidArgument, message: "plain JSON: nested more than 32 levels deep", after: latest(`{"x":1}`)},
		// a msgpack client's Date: told so, not of binary data and depth
		{name: "state with a date", setup: withState, event: "state:set", payload: set(map[string]any{"at": tblStart}), code: CodeInvalidArgument, message: "plain JSON: it holds a date", after: latest(`{"x":1}`)},
		{
			name: "state at the depth limit", setup: joined, event: "state:set", payload: set(nested(maxStateDepth)), code: "ok",
			sent: []tblEmit{{Room: "conversation:c1", Except: "s1", Event: "state", Payload: `{"conversationId":"c1","userId":"u1","state":` + strings.Repeat(`{"a":`, maxStateDepth) + `1` + strings.Repeat(`}`, maxStateDepth) + `}`}},
		},
		{name: "not joined", event: "state:set", payload: set(map[string]any{}), code: CodeForbidden, message: "join the conversation first"},
		{
			name: "rate limited", opts: tblOptions{limits: EventLimits{State: Limit{Rate: 0.001, Burst: 1}}},
			setup: withState, event: "state:set", payload: set(map[string]any{"x": 2.0}), code: CodeRateLimited, after: latest(`{"x":1}`),
		},
	}
	for _, c := range invalidConvCases("state:set", withState) {
		if p, ok := c.payload.(map[string]any); ok {
			p["state"] = map[string]any{"x": 2.0}
		}
		cases = append(cases, c)
	}
	runEventCases(t, cases)
}

func TestEventPresenceQuery(t *testing.T) {
	cases := []eventCase{
		{
			name: "request order, duplicates kept", event: "presence:query", payload: userIDs("u2", "nobody", "u2", "u1"), code: "ok",
			ack: func(t *testing.T, ack map[string]any) {
				b, _ := json.Marshal(presencesOf(t, ack))
				want := `[{"userId":"u2","status":"online","lastSeen":null,"lastSeenBucket":null,"display":"online"},` +
					`{"userId":"nobody","status":"offline","lastSeen":null,"lastSeenBucket":null,"display":"offline"},` +
					`{"userId":"u2","status":"online","lastSeen":null,"lastSeenBucket":null,"display":"online"},` +
					`{"userId":"u1","status":"online","lastSeen":null,"lastSeenBucket":null,"display":"online"}]`
				if string(b) != want {
					t.Errorf("presences %s\nwant %s", b, want)
				}
			},
		},
		{
			name: "counts as activity", prepare: func(t *testing.T, e *tblEnv) {
				e.clock.Advance(6 * time.Minute)
				if err := e.eng.Tick(context.Background()); err != nil {
					t.Fatal(err)
				}
				e.take()
			},
			event: "presence:query", payload: userIDs("u1"), code: "ok",
			sent: []tblEmit{{Event: "status", Payload: "u1 online"}},
		},
		{name: "1000 ids", event: "presence:query", payload: manyIDs(MaxQueryIDs), code: "ok",
			ack: func(t *testing.T, ack map[string]any) {
				if ps := presencesOf(t, ack); len(ps) != MaxQueryIDs || ps[999].UserID != "u999" {
					t.Errorf("%d presences", len(ps))
				}
			}},
		{name: "1001 ids", event: "presence:query", payload: manyIDs(MaxQueryIDs + 1), code: CodeLimitExceeded, message: "userIds has 1001 ids; at most 1000"},
		{name: "empty", event: "presence:query", payload: userIDs(), code: CodeInvalidArgument, message: "at least 1 id"},
		{name: "missing", event: "presence:query", payload: map[string]any{}, code: CodeInvalidArgument, message: "userIds is required"},
		{name: "no payload", event: "presence:query", payload: nil, code: CodeInvalidArgument, message: "userIds is required"},
		{name: "a string", event: "presence:query", payload: map[string]any{"userIds": "u1"}, code: CodeInvalidArgument, message: "must be an array"},
		{name: "a number inside", event: "presence:query", payload: map[string]any{"userIds": []any{"u1", 5.0}}, code: CodeInvalidArgument, message: "userIds[1] must be 1-128 characters"},
		{name: "an invalid id inside", event: "presence:query", payload: userIDs("u1", "a b"), code: CodeInvalidArgument, message: "userIds[1]"},
		{name: "null inside", event: "presence:query", payload: map[string]any{"userIds": []any{nil}}, code: CodeInvalidArgument, message: "userIds[0]"},
		{name: "viewers fail", event: "presence:query", payload: userIDs("broken"), code: CodeUnavailable, message: "retry"},
		{name: "viewers panic: internal", event: "presence:query", payload: userIDs("panic"), code: CodeInternal, message: "internal error"},
		{name: "no viewers", opts: tblOptions{noViewers: true}, event: "presence:query", payload: userIDs("u1"), code: CodeUnavailable, message: "presence queries are not available"},
		{
			name: "rate limited", opts: tblOptions{limits: EventLimits{Query: Limit{Rate: 0.001, Burst: 1}}},
			setup: []tblStep{{"s1", "presence:query", userIDs("u2")}}, event: "presence:query", payload: userIDs("u2"), code: CodeRateLimited,
		},
	}
	runEventCases(t, cases)
}

func TestEventPresenceSubscribe(t *testing.T) {
	subscribed := func(want ...string) func(t *testing.T, e *tblEnv) {
		return func(t *testing.T, e *tblEnv) {
			if got := subsOf(e, "s1"); !slices.Equal(got, want) {
				t.Errorf("subscribed to %v, want %v", got, want)
			}
			// the index that delivers updates agrees
			c := e.conns["s1"]
			e.h.subs.mu.Lock()
			defer e.h.subs.mu.Unlock()
			var indexed []string
			for id, set := range e.h.subs.byUser {
				if _, ok := set[c]; ok {
					indexed = append(indexed, id)
				}
			}
			slices.Sort(indexed)
			if !slices.Equal(indexed, want) {
				t.Errorf("delivery index has s1 under %v, want %v", indexed, want)
			}
		}
	}
	toU9 := []tblStep{{"s1", "presence:subscribe", userIDs("u9")}}
	cases := []eventCase{
		{
			name: "duplicates ignored", event: "presence:subscribe", payload: userIDs("u2", "u9", "u2"), code: "ok",
			ack: func(t *testing.T, ack map[string]any) {
				ps := presencesOf(t, ack)
				if len(ps) != 2 || ps[0].UserID != "u2" || ps[0].Status != "online" || ps[1].UserID != "u9" || ps[1].Status != "offline" {
					t.Errorf("presences %+v", ps)
				}
			},
			after: subscribed("u2", "u9"),
		},
		{name: "replaces the set", setup: toU9, event: "presence:subscribe", payload: userIDs("u8"), code: "ok", after: subscribed("u8")},
		{
			name: "empty unsubscribes", setup: toU9, event: "presence:subscribe", payload: userIDs(), code: "ok",
			ack: func(t *testing.T, ack map[string]any) {
				if ps := presencesOf(t, ack); len(ps) != 0 {
					t.Errorf("presences %+v", ps)
				}
			},
			after: subscribed(),
		},
		{
			name: "then presence:update on a status change", event: "presence:subscribe", payload: userIDs("u9"), code: "ok",
			after: func(t *testing.T, e *tblEnv) {
				if err := e.eng.Connect(context.Background(), presence.Socket{ID: "s9", UserID: "u9"}); err != nil {
					t.Fatal(err)
				}
				want := []tblEmit{
					{Event: "status", Payload: "u9 online"},
					{To: "s1", Event: "presence:update", Payload: `{"userId":"u9","status":"online","lastSeen":null,"lastSeenBucket":null,"display":"online"}`},
				}
				if got := e.take(); !slices.Equal(got, want) {
					t.Errorf("sent %+v\nwant %+v", got, want)
				}
				// an unsubscribed socket is not told
				e.send("s1", "presence:subscribe", userIDs(), true)
				if err := e.eng.Disconnect(context.Background(), "s9"); err != nil {
					t.Fatal(err)
				}
				if err := e.eng.Tick(context.Background()); err != nil {
					t.Fatal(err)
				}
				e.clock.Advance(4 * time.Second) // past the flap grace
				if err := e.eng.Tick(context.Background()); err != nil {
					t.Fatal(err)
				}
				for _, em := range e.take() {
					if em.Event == "presence:update" {
						t.Errorf("sent after unsubscribing: %+v", em)
					}
				}
			},
		},
		{
			name: "viewers fail: the set stays as it was", setup: toU9, event: "presence:subscribe", payload: userIDs("u2", "broken"),
			code: CodeUnavailable, message: "retry", after: subscribed("u9"),
		},
		{
			name: "lost socket: the set stays as it was", setup: toU9, prepare: reapNode, event: "presence:subscribe", payload: userIDs("u2"),
			code: CodeUnavailable, message: "connection is closing", after: subscribed("u9"),
		},
		{name: "1001 ids", setup: toU9, event: "presence:subscribe", payload: manyIDs(MaxQueryIDs + 1), code: CodeLimitExceeded, message: "at most 1000", after: subscribed("u9")},
		{name: "1000 ids and a duplicate: ignored", setup: toU9, event: "presence:subscribe", payload: withDuplicate(manyIDs(MaxQueryIDs)), code: "ok"},
		{name: "missing", setup: toU9, event: "presence:subscribe", payload: map[string]any{}, code: CodeInvalidArgument, message: "userIds is required"},
		{name: "an invalid id inside", setup: toU9, event: "presence:subscribe", payload: userIDs("u1", strings.Repeat("x", 129)), code: CodeInvalidArgument, message: "userIds[1]"},
		{name: "payload a string", setup: toU9, event: "presence:subscribe", payload: "u1", code: CodeInvalidArgument, message: "payload must be an object"},
		{name: "no subscriptions", opts: tblOptions{noViewers: true}, event: "presence:subscribe", payload: userIDs("u1"), code: CodeUnavailable, message: "presence subscriptions are not available"},
		{
			name: "rate limited, sharing query's bucket", opts: tblOptions{limits: EventLimits{Query: Limit{Rate: 0.001, Burst: 1}}},
			setup: []tblStep{{"s1", "presence:query", userIDs("u2")}}, event: "presence:subscribe", payload: userIDs("u2"), code: CodeRateLimited,
			after: subscribed(),
		},
	}
	runEventCases(t, cases)
}

// serve's own refusals, before any handler runs.
func TestEventServeRefusals(t *testing.T) {
	t.Run("connection not ready", func(t *testing.T) {
		e := newTblEnv(t, tblOptions{opTimeout: 20 * time.Millisecond})
		c := e.conns["s1"]
		c.ready = make(chan struct{}) // Connect's work not done
		before := e.state(t)
		ack := e.send("s1", "conversation:join", conv("c1"), true)
		if code(ack) != CodeUnavailable || !strings.Contains(ack["error"].(map[string]any)["message"].(string), "not ready") {
			t.Fatalf("ack %v, want unavailable: connection not ready", ack)
		}
		if after := e.state(t); !tblEqual(before, after) {
			t.Fatalf("state changed: %+v → %+v", before, after)
		}
	})
	t.Run("waits for the connection to be ready", func(t *testing.T) {
		e := newTblEnv(t, tblOptions{})
		c := e.conns["s1"]
		c.ready = make(chan struct{})
		time.AfterFunc(10*time.Millisecond, func() { close(c.ready) })
		if ack := e.send("s1", "conversation:join", conv("c1"), true); ack["ok"] != true {
			t.Fatalf("ack %v", ack)
		}
	})
	t.Run("waited too long in the queue", func(t *testing.T) {
		e := newTblEnv(t, tblOptions{opTimeout: time.Second})
		var got map[string]any
		ack := socket.Ack(func(reply []any, _ error) { got = ackBody(reply[0]) })
		e.h.serve(e.conns["s1"], "conversation:join", e.h.handlers["conversation:join"], []any{conv("c1")}, replierOf(ack), time.Now().Add(-2*time.Second), true)
		if code(got) != CodeUnavailable || !strings.Contains(got["error"].(map[string]any)["message"].(string), "overloaded") {
			t.Fatalf("ack %v, want unavailable: overloaded", got)
		}
		inRoom(t, e, "s1", "c1", false)
		// queued, but not for long: served
		e.h.serve(e.conns["s1"], "conversation:join", e.h.handlers["conversation:join"], []any{conv("c1")}, replierOf(ack), time.Now(), true)
		if got["ok"] != true {
			t.Fatalf("ack %v", got)
		}
	})
	t.Run("engine refuses a lost socket", func(t *testing.T) {
		e := newTblEnv(t, tblOptions{})
		e.conns["s1"].connected.Store(false)
		e.h.engine = refusingEngine{e.eng}
		ack := e.send("s1", "heartbeat", nil, true)
		if code(ack) != CodeUnavailable {
			t.Fatalf("ack %v, want unavailable", ack)
		}
		if e.conns["s1"].connected.Load() {
			t.Error("marked connected")
		}
	})
}

// refusingEngine is an engine whose backend is down for connections.
type refusingEngine struct{ *presence.MemoryEngine }

func (refusingEngine) Connect(context.Context, presence.Socket) error {
	return presence.ErrUnavailable
}

// A socket the engine lost while its connection stayed open: its node was
// reaped by another node (its lease lapsed, as after a long pause), or the
// engine forgot the socket. Its Conn still says the engine knows it
// (connected), so serve does not connect it again: every event that reaches
// the engine is refused with unavailable ("connection is closing", the
// answer to presence.ErrUnknown), changes nothing, sends nothing, and the
// socket stays unknown to the engine until it reconnects. (A socket whose
// engine Connect failed is connected again by its next event: that path
// needs a Socket.IO socket, TestEventsConnectALostSocket.)
func TestEventLostSocket(t *testing.T) {
	joined := []tblStep{join("s2", "c1"), join("s1", "c1")}
	events := []struct {
		name, event string
		payload     any
	}{
		{"heartbeat", "heartbeat", nil},
		{"inactive heartbeat", "heartbeat", map[string]any{"active": false}},
		{"join another conversation", "conversation:join", conv("c2")},
		{"join again", "conversation:join", conv("c1")},
		{"leave", "conversation:leave", conv("c1")},
		{"typing:start", "typing:start", conv("c1")},
		{"typing:stop", "typing:stop", conv("c1")},
		{"state:set", "state:set", map[string]any{"conversationId": "c1", "state": map[string]any{"x": 1.0}}},
		{"presence:query", "presence:query", userIDs("u2")},
		{"presence:subscribe", "presence:subscribe", userIDs("u2")},
	}
	var cases []eventCase
	for _, loss := range lossModes {
		for _, ev := range events {
			cases = append(cases, eventCase{
				name: loss.name + ": " + ev.name, setup: joined, prepare: loss.lose,
				event: ev.event, payload: ev.payload, code: CodeUnavailable, message: "connection is closing",
				after: func(t *testing.T, e *tblEnv) {
					engineKnows(t, e, "s1", false)
					if !e.conns["s1"].connected.Load() {
						t.Error("the Conn no longer says connected")
					}
					e.mu.Lock()
					defer e.mu.Unlock()
					if len(e.activity) != 0 {
						t.Errorf("activity %v recorded for a lost socket", e.activity)
					}
				},
			})
		}
	}
	runEventCases(t, cases)
}

// lossModes are the ways the engine loses socket s1 (prepare functions).
var lossModes = []struct {
	name string
	lose func(t *testing.T, e *tblEnv)
}{
	{"reaped with its node", reapNode},
	{"forgotten", func(t *testing.T, e *tblEnv) {
		if err := e.eng.Disconnect(context.Background(), "s1"); err != nil {
			t.Fatal(err)
		}
		engineKnows(t, e, "s1", false)
	}},
}

// reapNode lets node n1's lease lapse and another node of the same
// backend sweep it: every socket of the environment is gone from the
// engine, with leaves and offlines of reason timeout.
func reapNode(t *testing.T, e *tblEnv) {
	t.Helper()
	e.clock.Advance(6 * time.Second) // past the 5s lease
	n2 := presence.NewMemoryEngine(e.mem, presence.Config{NodeID: "n2", Now: e.clock.Now, Sink: e.rooms.Sink()})
	if err := n2.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{"s1", "s2", "s3"} {
		engineKnows(t, e, sid, false)
	}
}

// engineKnows checks whether the engine has socket sid.
func engineKnows(t *testing.T, e *tblEnv, sid string, want bool) {
	t.Helper()
	c := e.conns[sid]
	socks, err := e.eng.UserSockets(context.Background(), c.UserID)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.ContainsFunc(socks, func(s presence.SocketInfo) bool { return s.ID == sid })
	if got != want {
		t.Errorf("engine has %s: %v, want %v", sid, got, want)
	}
}

// A join's, leave's and typing change's room event goes to the room right
// after the ack, on the same goroutine: the ack does not wait for the
// fan-out, and the room still hears of the change before serve returns.
func TestEventRoomEventsAfterTheAck(t *testing.T) {
	e := newTblEnv(t, tblOptions{})
	e.send("s2", "conversation:join", conv("c1"), true)
	e.send("s1", "conversation:join", conv("c2"), true)
	for _, ev := range []struct {
		event, room, push string
		payload           any
	}{
		{"conversation:join", "c1", "presence:join", conv("c1")},
		{"typing:start", "c1", "typing", conv("c1")},
		{"conversation:leave", "c1", "presence:leave", conv("c1")},
	} {
		count := func() int {
			e.mu.Lock()
			defer e.mu.Unlock()
			return len(e.emits)
		}
		before, atAck := count(), -1
		ack := func([]any, error) { atAck = count() }
		e.h.serve(e.conns["s1"], ev.event, e.h.handlers[ev.event], []any{ev.payload}, replierOf(ack), time.Time{}, false)
		if atAck != before {
			t.Errorf("%s: %d room events out when the ack was sent, want none (%d before)", ev.event, atAck-before, before)
		}
		e.mu.Lock()
		last := e.emits[len(e.emits)-1]
		e.mu.Unlock()
		if count() <= before || last.Event != ev.push || last.Room != string(ConversationRoom(ev.room)) {
			t.Errorf("%s: last emit %+v once served, want %s to the room of %s", ev.event, last, ev.push, ev.room)
		}
	}
}

// A handler that panics after the engine changed something still has the
// room told (the held events go out), and its socket gets one internal
// error.
func TestEventRoomEventsAfterAPanic(t *testing.T) {
	e := newTblEnv(t, tblOptions{})
	e.send("s2", "conversation:join", conv("c1"), true)
	panicking := func(ctx context.Context, c *Conn, _ payload) (any, error) {
		if _, err := e.eng.Join(ctx, c.sid, "c1"); err != nil {
			return nil, err
		}
		panic("after the join")
	}
	e.mu.Lock()
	before := len(e.emits)
	e.mu.Unlock()
	var acks [][]any
	ack := func(reply []any, _ error) { acks = append(acks, reply) }
	e.h.serve(e.conns["s1"], "conversation:join", panicking, []any{conv("c1")}, replierOf(ack), time.Time{}, false)
	if len(acks) != 1 || code(ackBody(acks[0][0])) != CodeInternal {
		t.Fatalf("acks %v, want one internal error", acks)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	after := e.emits[before:]
	if len(after) != 1 || after[0].Event != "presence:join" || after[0].Room != string(ConversationRoom("c1")) || !strings.Contains(after[0].Payload, `"userId":"u1"`) {
		t.Fatalf("emits after the panic %+v, want u1's presence:join to c1, made by the engine's join", after)
	}
}

// nested is an object nested levels deep: {"a":{"a":…1…}}.
func nested(levels int) map[string]any {
	var v any = 1.0
	for range levels - 1 {
		v = map[string]any{"a": v}
	}
	return map[string]any{"a": v}
}

// Last write wins between a user's sockets: a state held by one socket's
// throttle is not sent over a state another socket of the user set after
// it, on this node or (its broadcast arriving here) on another (a
// black-box audit, 2026-12-08: the held state went out last and stayed,
// 30 of 30 tries). That the held one shows again once the later one is
// cleared needs the library's rooms (RestoreState): e2e 23.
func TestStateHeldNotSentOverALaterOne(t *testing.T) {
	set := func(state any) map[string]any { return map[string]any{"conversationId": "c1", "state": state} }
	states := func(e *tblEnv) []string {
		var out []string
		for _, em := range e.take() {
			if em.Event == "state" {
				out = append(out, em.Payload)
			}
		}
		return out
	}
	const interval = 40 * time.Millisecond
	for _, remote := range []bool{false, true} {
		name := "same node"
		if remote {
			name = "other node"
		}
		t.Run(name, func(t *testing.T) {
			e := newTblEnv(t, tblOptions{})
			e.h.cfg.StateInterval = interval
			for _, sid := range []string{"s1", "s2", "s3"} {
				e.send(sid, "conversation:join", conv("c1"), true)
			}
			e.take()
			e.send("s1", "state:set", set(map[string]any{"a": 0.0}), true) // sent at once
			e.send("s1", "state:set", set(map[string]any{"a": 1.0}), true) // held by the throttle
			if remote {
				// the user's other device, on another node, sets a state
				// after it: its broadcast arrives here
				e.h.RemoteBroadcast("n2", []any{"state", map[string]any{"conversationId": "c1", "userId": "u1", "state": map[string]any{"y": 1.0}}})
			} else {
				e.send("s3", "state:set", set(map[string]any{"y": 1.0}), true)
			}
			time.Sleep(3 * interval)
			want := []string{`{"conversationId":"c1","userId":"u1","state":{"a":0}}`}
			if !remote {
				want = append(want, `{"conversationId":"c1","userId":"u1","state":{"y":1}}`)
			}
			if got := states(e); !slices.Equal(got, want) {
				t.Fatalf("state broadcasts %q, want %q (the held {a:1} not over the later {y:1})", got, want)
			}
		})
	}
}

// The state records: a cleared one counts no more, another node's later
// one holds back a restore, a leave forgets them, and a node with many
// sweeps the old ones (seldom).
func TestLastStates(t *testing.T) {
	var l lastStates
	t0 := time.Now()
	l.set("c1", "u1", localSetter("s1"), t0)
	l.set("c1", "u1", localSetter("s3"), t0.Add(time.Second))
	if !l.newer("c1", "u1", "s1", t0) || l.newer("c1", "u1", "s3", t0.Add(time.Second)) {
		t.Fatal("newer: s3's later set is newer for s1 only")
	}
	l.cleared("c1", "u1", localSetter("s3"))
	if l.newer("c1", "u1", "s1", t0) {
		t.Fatal("a cleared record still counts")
	}
	l.set("c1", "u1", remoteSetter("n2"), t0.Add(2*time.Second))
	if !l.laterRemote("c1", "u1", t0) || l.laterRemote("c1", "u1", t0.Add(3*time.Second)) {
		t.Fatal("laterRemote: n2's record is later than t0 only")
	}
	l.left("c1", "u1")
	if l.newer("c1", "u1", "s1", t0.Add(-time.Hour)) || len(l.m) != 0 {
		t.Fatalf("records after the leave: %v", l.m)
	}
	// old records go once there are many; recent ones stay
	old := t0.Add(-2 * lastStatesKeep)
	for i := range lastStatesSweep {
		l.set("c", strconv.Itoa(i), remoteSetter("dead"), old)
	}
	l.set("c", "fresh", localSetter("s9"), t0)
	if len(l.m) != 1 || l.m[stateKey{"c", "fresh"}] == nil {
		t.Fatalf("%d users with records after the sweep, want the fresh one alone", len(l.m))
	}
}
