package handlers

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/internal/jsontext"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
)

// Fuzz targets of the socket events' payload decoding (decode, payload.id,
// payload.ids, payload.optBool, the typing:stop reason and the state:set
// state checks), run through serve as a client's event is, against a
// memory engine. Each input is the event's JSON payload. Every target
// checks that nothing panics, that an event refused for any reason changes
// no state (engine, rooms, states, subscriptions), and that an accepted
// payload did what it said.
//
//	go test -run '^$' -fuzz '^FuzzConversationJoin$' -fuzztime 10s ./handlers

// fuzzRooms stands for the Socket.IO socket's room set.
type fuzzRooms struct{ set *types.Set[socket.Room] }

func (r *fuzzRooms) Rooms() *types.Set[socket.Room] { return r.set }
func (r *fuzzRooms) InRoom(room socket.Room) bool   { return r.set.Has(room) }
func (r *fuzzRooms) Join(rooms ...socket.Room)      { r.set.Add(rooms...) }
func (r *fuzzRooms) Leave(room socket.Room)         { r.set.Delete(room) }

// fuzzViewers answers every user as never seen.
type fuzzViewers struct{}

func (fuzzViewers) Presences(_ context.Context, _ string, ids []string) ([]lastseen.Presence, error) {
	out := make([]lastseen.Presence, len(ids))
	for i, id := range ids {
		out[i] = lastseen.Presence{UserID: id, Status: "offline", Display: "never seen"}
	}
	return out, nil
}

func (v fuzzViewers) PresencesFor(ctx context.Context, up presence.UserPresence, viewers []string) ([]lastseen.Presence, error) {
	out := make([]lastseen.Presence, len(viewers))
	for i := range viewers {
		out[i] = lastseen.Presence{UserID: up.UserID, Status: "offline", Display: "never seen"}
	}
	return out, nil
}

// fuzzEnv is one socket (user u1, sid s1) that has joined conversation c1,
// set a state there, started typing and subscribed to u9.
type fuzzEnv struct {
	h     *Sockets
	eng   *presence.MemoryEngine
	c     *Conn
	rooms *fuzzRooms
}

var fuzzMetrics = metrics.New()

func newFuzzEnv(tb testing.TB) *fuzzEnv {
	tb.Helper()
	log := slog.New(slog.DiscardHandler)
	var tick atomic.Int64
	base := time.Date(2026, 11, 9, 12, 0, 0, 0, time.UTC)
	// every reading a millisecond later: an accepted heartbeat would move
	// the activity time, a refused one must not
	now := func() time.Time { return base.Add(time.Duration(tick.Add(1)) * time.Millisecond) }
	eng := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1", Now: now, MaxConversations: 3})
	h := NewSockets(SessionConfig{NodeID: "n1", Limits: noLimits, StateInterval: time.Hour}, SocketDeps{
		Log: log, Metrics: fuzzMetrics, Engine: eng, Rooms: NewRooms(0, log),
		Viewers: fuzzViewers{}, Subscriptions: NewSubscriptions(presence.NewLocalBus(), fuzzViewers{}, log),
	})
	c := newTestConn(tb, eng, "s1", "u1")
	e := &fuzzEnv{h: h, eng: eng, c: c, rooms: c.rooms.(*fuzzRooms)}
	for _, step := range []struct {
		event   string
		payload any
	}{
		{"conversation:join", map[string]any{"conversationId": "c1"}},
		{"state:set", map[string]any{"conversationId": "c1", "state": map[string]any{"x": 1.0}}},
		{"typing:start", map[string]any{"conversationId": "c1"}},
		{"presence:subscribe", map[string]any{"userIds": []any{"u9"}}},
	} {
		if ack := e.call(step.event, step.payload); ack["ok"] != true {
			tb.Fatalf("setup %s: %v", step.event, ack)
		}
	}
	tb.Cleanup(func() { h.clearStates(c) })
	return e
}

// call runs one event and returns its ack.
func (e *fuzzEnv) call(event string, payload any) map[string]any {
	got, acked := serveEvent(e.h, e.c, event, payload, true)
	if !acked {
		return map[string]any{"noAck": true}
	}
	return got
}

// fuzzState is everything an event could change.
type fuzzState struct {
	Convs   []string
	Rosters map[string]string
	Users   string
	Rooms   []socket.Room
	States  map[string]string
	Subs    []string
}

func (e *fuzzEnv) snapshot(tb testing.TB, extraConvs ...string) fuzzState {
	tb.Helper()
	ctx := context.Background()
	s := fuzzState{Convs: convsOf(tb, e.eng, e.c), Rosters: map[string]string{}}
	for _, conv := range append(slices.Clone(s.Convs), extraConvs...) {
		r, err := e.eng.Roster(ctx, conv)
		if err != nil {
			tb.Fatal(err)
		}
		b, _ := json.Marshal(r)
		s.Rosters[conv] = string(b)
	}
	us, err := e.eng.Users(ctx, []string{"u1"})
	if err != nil {
		tb.Fatal(err)
	}
	b, _ := json.Marshal(us)
	s.Users = string(b)
	s.Rooms = e.rooms.set.Keys()
	slices.Sort(s.Rooms)
	s.States, s.Subs = connSnapshot(e.c)
	return s
}

// fuzzEvent runs the payloads of one event. check, given an accepted
// payload and its ack, asserts what the event did.
func fuzzEvent(f *testing.F, event string, seeds []string, check func(t *testing.T, e *fuzzEnv, p map[string]any, ack map[string]any)) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var payload any
		if json.Unmarshal(data, &payload) != nil {
			return // not JSON: the transport refuses the packet before any event
		}
		e := newFuzzEnv(t)
		var convs []string
		p, _ := payload.(map[string]any)
		if id, ok := p["conversationId"].(string); ok {
			convs = append(convs, id)
		}
		before := e.snapshot(t, convs...)
		ack := e.call(event, payload)
		if ack["noAck"] == true || ack == nil {
			t.Fatalf("%s %s: no ack", event, data)
		}
		if ack["ok"] != true {
			code := ackCode(ack)
			switch code {
			case CodeInvalidArgument, CodeForbidden, CodeLimitExceeded:
			default:
				t.Fatalf("%s %s: ack %v (want ok or a client error)", event, data, ack)
			}
			after := e.snapshot(t, convs...)
			if refusedActivity[code] {
				before.Users = after.Users // the user's activity: it may move
			}
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("%s %s refused (%s) but changed state:\nbefore %+v\nafter  %+v", event, data, code, before, after)
			}
			return
		}
		if p == nil && payload != nil {
			t.Fatalf("%s %s: a non-object payload accepted: %v", event, data, ack)
		}
		check(t, e, p, ack)
	})
}

func ackCode(ack map[string]any) string {
	e, _ := ack["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

var convSeeds = []string{
	`{"conversationId":"c1"}`, `{"conversationId":"c2"}`, `{"conversationId":""}`, `{"conversationId":null}`,
	`{}`, `null`, `[]`, `"c1"`, `5`, `{"conversationId":5}`, `{"conversationId":["c1"]}`,
	`{"conversationId":"has space"}`, `{"conversationId":"caf\u00e9"}`, `{"conversationId":"a:b@c.d-e_f"}`,
	`{"conversationId":"c1","extra":{"deep":[1,2,3]}}`,
}

// validConv asserts an accepted conversationId obeys the contract's id rule.
func validConv(t *testing.T, p map[string]any) string {
	t.Helper()
	id, ok := p["conversationId"].(string)
	if !ok || len(id) < 1 || len(id) > 128 {
		t.Fatalf("accepted conversationId %#v", p["conversationId"])
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == ':' || r == '@' || r == '-') {
			t.Fatalf("accepted conversationId %q with %q", id, r)
		}
	}
	return id
}

func FuzzConversationJoin(f *testing.F) {
	fuzzEvent(f, "conversation:join", convSeeds, func(t *testing.T, e *fuzzEnv, p, ack map[string]any) {
		conv := validConv(t, p)
		if ack["conversationId"] != conv {
			t.Fatalf("ack conversationId %v, want %q", ack["conversationId"], conv)
		}
		if !slices.Contains(convsOf(t, e.eng, e.c), conv) || !e.rooms.set.Has(ConversationRoom(conv)) {
			t.Fatalf("joined %q, but not in the engine or the room", conv)
		}
		if on, ok := ack["online"].(MemberList); !ok || !slices.ContainsFunc(on, func(m MemberPayload) bool { return m.UserID == "u1" }) {
			t.Fatalf("roster %v lacks the joiner", ack["online"])
		}
	})
}

func FuzzConversationLeave(f *testing.F) {
	fuzzEvent(f, "conversation:leave", convSeeds, func(t *testing.T, e *fuzzEnv, p, _ map[string]any) {
		conv := validConv(t, p)
		if slices.Contains(convsOf(t, e.eng, e.c), conv) || e.rooms.set.Has(ConversationRoom(conv)) {
			t.Fatalf("left %q, but still in the engine or the room", conv)
		}
		e.c.mu.Lock()
		_, has := e.c.states[conv]
		e.c.mu.Unlock()
		if has {
			t.Fatalf("left %q, but its state remains", conv)
		}
	})
}

func FuzzHeartbeat(f *testing.F) {
	seeds := []string{`{}`, `null`, `{"active":true}`, `{"active":false}`, `{"active":null}`, `{"active":"yes"}`,
		`{"active":1}`, `[]`, `true`, `{"active":[true]}`, `{"other":1}`}
	fuzzEvent(f, "heartbeat", seeds, func(t *testing.T, _ *fuzzEnv, p, ack map[string]any) {
		if v, ok := p["active"]; ok && v != nil {
			if _, isBool := v.(bool); !isBool {
				t.Fatalf("active %#v accepted", v)
			}
		}
		if _, ok := ack["nextInMs"].(int64); !ok {
			t.Fatalf("ack without nextInMs: %v", ack)
		}
		if s, _ := ack["serverTime"].(string); len(s) != 24 {
			t.Fatalf("ack serverTime %q", s)
		}
	})
}

func FuzzTypingStart(f *testing.F) {
	fuzzEvent(f, "typing:start", convSeeds, func(t *testing.T, e *fuzzEnv, p, _ map[string]any) {
		conv := validConv(t, p)
		if !slices.Contains(typingIn(t, e.eng, conv), "u1") {
			t.Fatalf("typing:start in %q accepted, u1 not typing", conv)
		}
	})
}

func FuzzTypingStop(f *testing.F) {
	seeds := append(slices.Clone(convSeeds), `{"conversationId":"c1","reason":"sent"}`, `{"conversationId":"c1","reason":"cleared"}`,
		`{"conversationId":"c1","reason":"bogus"}`, `{"conversationId":"c1","reason":5}`, `{"conversationId":"c1","reason":null}`)
	fuzzEvent(f, "typing:stop", seeds, func(t *testing.T, e *fuzzEnv, p, _ map[string]any) {
		conv := validConv(t, p)
		if r, ok := p["reason"]; ok && r != nil && r != "sent" && r != "cleared" {
			t.Fatalf("reason %#v accepted", r)
		}
		if slices.Contains(typingIn(t, e.eng, conv), "u1") {
			t.Fatalf("typing:stop in %q accepted, u1 still typing", conv)
		}
	})
}

var idSeeds = []string{
	`{"userIds":["u2"]}`, `{"userIds":["u2","u2","u3"]}`, `{"userIds":[]}`, `{"userIds":null}`, `{}`, `null`,
	`{"userIds":"u2"}`, `{"userIds":{"0":"u2"}}`, `{"userIds":[5]}`, `{"userIds":[""]}`, `{"userIds":["a b"]}`,
	`{"userIds":["u1",null]}`, `[["u2"]]`,
}

// validIDs asserts accepted userIds are a list of valid ids, at most
// MaxQueryIDs of them, or (distinct: presence:subscribe, whose duplicates
// are ignored) at most MaxQueryIDs distinct ones.
func validIDs(t *testing.T, p map[string]any, distinct bool) []string {
	t.Helper()
	arr, ok := p["userIds"].([]any)
	if !ok || (!distinct && len(arr) > MaxQueryIDs) {
		t.Fatalf("accepted userIds %#v", p["userIds"])
	}
	ids := make([]string, len(arr))
	for i, x := range arr {
		ids[i] = validConv(t, map[string]any{"conversationId": x})
	}
	if n := len(slices.Compact(slices.Sorted(slices.Values(ids)))); distinct && n > MaxQueryIDs {
		t.Fatalf("accepted %d distinct userIds", n)
	}
	return ids
}

func FuzzPresenceQuery(f *testing.F) {
	fuzzEvent(f, "presence:query", idSeeds, func(t *testing.T, _ *fuzzEnv, p, ack map[string]any) {
		ids := validIDs(t, p, false)
		if len(ids) == 0 {
			t.Fatal("an empty query accepted")
		}
		ps, _ := ack["presences"].(lastseen.PresenceList)
		if len(ps) != len(ids) {
			t.Fatalf("%d presences for %d ids", len(ps), len(ids))
		}
		for i := range ids {
			if ps[i].UserID != ids[i] {
				t.Fatalf("presence %d is %q, want %q (request order)", i, ps[i].UserID, ids[i])
			}
		}
	})
}

func FuzzPresenceSubscribe(f *testing.F) {
	fuzzEvent(f, "presence:subscribe", idSeeds, func(t *testing.T, e *fuzzEnv, p, ack map[string]any) {
		ids := validIDs(t, p, true)
		slices.Sort(ids)
		ids = slices.Compact(ids)
		if got := e.snapshot(t).Subs; !slices.Equal(got, ids) && !(len(got) == 0 && len(ids) == 0) {
			t.Fatalf("subscribed to %v, want %v", got, ids)
		}
		if ps, _ := ack["presences"].(lastseen.PresenceList); len(ps) != len(ids) {
			t.Fatalf("%d presences for %d distinct ids", len(ps), len(ids))
		}
	})
}

func FuzzStateSet(f *testing.F) {
	seeds := []string{`{"conversationId":"c1","state":{"x":2}}`, `{"conversationId":"c1","state":null}`,
		`{"conversationId":"c1"}`, `{"conversationId":"c1","state":5}`, `{"conversationId":"c1","state":[1]}`,
		`{"conversationId":"c1","state":"s"}`, `{"conversationId":"c2","state":{"x":1}}`, `{"state":{}}`,
		`{"conversationId":"c1","state":{"cursor":{"line":3,"ch":[1,2]},"colour":"#fff","u":"\u2603"}}`,
		`{"conversationId":"c1","state":{"big":"` + strings.Repeat("a", 1000) + `"}}`,
		`{"conversationId":"c1","state":{"big":"` + strings.Repeat("a", 1100) + `"}}`,
	}
	fuzzEvent(f, "state:set", seeds, func(t *testing.T, e *fuzzEnv, p, _ map[string]any) {
		conv := validConv(t, p)
		raw, ok := p["state"]
		if !ok {
			t.Fatal("state:set without state accepted")
		}
		if raw != nil {
			if _, isObj := raw.(map[string]any); !isObj {
				t.Fatalf("state %#v accepted", raw)
			}
			if b, _ := json.Marshal(raw); len(b) > MaxStateBytes {
				t.Fatalf("state of %d bytes accepted", len(b))
			}
		}
		want, _ := json.Marshal(raw)
		got, has := e.snapshot(t).States[conv]
		if raw != nil && (!has || got != string(want)) {
			t.Fatalf("state %s set, latest is %q", want, got)
		}
		if raw == nil && has && got != "null" {
			t.Fatalf("state cleared, latest is %q", got)
		}
	})
}

// A join's roster encodes itself (MemberList.AppendJSON) exactly as
// encoding/json encodes a []MemberPayload.
func FuzzMemberListJSON(f *testing.F) {
	f.Add("u1", "online", "2026-01-02T03:04:00.000Z", true, 2)
	f.Add("a<b>&\"\\", "away", "\x00 \u2028é", true, 1)
	f.Add("", "", "\xff", false, 0)
	f.Add("u", "online", "", false, -1)
	f.Fuzz(func(t *testing.T, id, status, since string, hasSince bool, n int) {
		var l MemberList
		if n >= 0 {
			l = MemberList{}
		}
		for i := range n % 4 {
			m := MemberPayload{UserID: id + strconv.Itoa(i), Status: status}
			if hasSince {
				m.Since = &since
			}
			l = append(l, m)
		}
		if err := jsontext.SameAsMarshal(l.AppendJSON, []MemberPayload(l), l); err != nil {
			t.Fatal(err)
		}
	})
}

// The heartbeat's ack body encodes itself (heartbeatReply.AppendJSON)
// exactly as encoding/json encodes a map of its fields, which is what the
// ack was before it had a type, and encoding/json encodes the type alike.
func TestHeartbeatReplyJSON(t *testing.T) {
	for _, r := range []heartbeatReply{
		{NextInMs: 18449, OK: true, ServerTime: "2026-12-04T09:46:36.748Z"},
		{NextInMs: 0, OK: false, ServerTime: ""},
		{NextInMs: -1, OK: true, ServerTime: "a<b>&\"\\\u2028"},
	} {
		plain := map[string]any{"nextInMs": r.NextInMs, "ok": r.OK, "serverTime": r.ServerTime}
		if err := jsontext.SameAsMarshal(r.AppendJSON, plain, r); err != nil {
			t.Error(err)
		}
	}
}
