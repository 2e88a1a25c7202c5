package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/presenced/presenced/internal/race"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
)

func TestBucket(t *testing.T) {
	l := Limit{Rate: 10, Burst: 3}
	var b bucket
	now := time.Second
	for i := range 3 {
		if !b.take(l, now) {
			t.Fatalf("take %d of the burst refused", i)
		}
	}
	if b.take(l, now) {
		t.Fatal("a 4th take at once passed a burst of 3")
	}
	// 10/s: one token every 100 ms, never more than the burst.
	if b.take(l, now+50*time.Millisecond) {
		t.Error("a token after 50 ms at 10/s")
	}
	if !b.take(l, now+110*time.Millisecond) {
		t.Error("no token after 110 ms at 10/s")
	}
	later := now + time.Hour
	for i := range 3 {
		if !b.take(l, later) {
			t.Fatalf("after an hour, take %d refused", i)
		}
	}
	if b.take(l, later) {
		t.Error("tokens piled up beyond the burst")
	}
	// A time earlier than the last (two goroutines' clocks read out of
	// order) neither adds tokens nor moves the bucket back.
	if b.take(l, later-time.Minute) {
		t.Error("an earlier time added tokens")
	}
}

func TestEventLimitsDefaults(t *testing.T) {
	got := EventLimits{}.table()
	want := limitTable{
		classOther: {20, 50}, classTyping: {5, 10}, classJoin: {20, 200},
		classQuery: {5, 10}, classState: {30, 60}, classHeartbeat: {10, 20},
	}
	if got != want {
		t.Errorf("defaults:\n got %v\nwant %v", got, want)
	}
	l := EventLimits{Typing: NoLimit, Join: Limit{Rate: 2}}.table()
	if !l[classTyping].Unlimited() {
		t.Errorf("NoLimit: got %v", l[classTyping])
	}
	if l[classJoin] != (Limit{2, 2}) {
		t.Errorf("a rate alone: got %v, want burst = rate", l[classJoin])
	}
	for _, pair := range [][2]string{{"typing:start", "typing:stop"}, {"conversation:join", "conversation:leave"}, {"presence:query", "presence:subscribe"}} {
		if classOf(pair[0]) != classOf(pair[1]) {
			t.Errorf("%s and %s are limited apart", pair[0], pair[1])
		}
	}
	for name := range (&Sockets{}).events() {
		if name != "state:set" && name != "heartbeat" && classOf(name) == classOther {
			t.Errorf("%s has no class of its own", name)
		}
	}
}

// limitedSockets is a handler set on a memory engine with one connected
// socket (no Socket.IO socket: only events that do not touch it are used).
func limitedSockets(t *testing.T, limits EventLimits) (*Sockets, *Conn, presence.Engine, *metrics.Metrics) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	m := metrics.New()
	eng := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1"})
	h := NewSockets(SessionConfig{NodeID: "n1", Limits: limits}, SocketDeps{Log: log, Metrics: m, Engine: eng, Rooms: NewRooms(0, log)})
	c := &Conn{UserID: "u1", sid: "s1", ready: make(chan struct{})}
	close(c.ready)
	c.connected.Store(true)
	if err := eng.Connect(context.Background(), presence.Socket{ID: "s1", UserID: "u1"}); err != nil {
		t.Fatal(err)
	}
	return h, c, eng, m
}

// call runs one event through serve (the path both the direct and the
// library events take) and returns its ack.
func call(h *Sockets, c *Conn, name string, arg any) map[string]any {
	var got map[string]any
	ack := func(reply []any, _ error) { got = ackBody(reply[0]) }
	h.serve(c, name, h.handlers[name], []any{arg}, replierOf(ack), time.Time{}, false)
	return got
}

// ackBody is an ack's body as a map: a map as it is, a body of its own
// type (okReply) by its fields (TestHeartbeatReplyJSON checks they encode
// alike), else through its JSON.
func ackBody(v any) map[string]any {
	switch b := v.(type) {
	case map[string]any:
		return b
	case *heartbeatReply: // (back in its pool once the ack returns: copied out here)
		return map[string]any{"nextInMs": b.NextInMs, "ok": b.OK, "serverTime": b.ServerTime}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{"marshalError": err.Error()}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return map[string]any{"unmarshalError": err.Error()}
	}
	return m
}

func code(ack map[string]any) string {
	if ack["ok"] == true {
		return "ok"
	}
	e, _ := ack["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestEventsOverTheLimitAreRefused(t *testing.T) {
	h, c, eng, m := limitedSockets(t, EventLimits{})
	ctx := context.Background()
	// The burst of 20 heartbeats passes; the 21st, at once, does not.
	for i := range 20 {
		if got := code(call(h, c, "heartbeat", map[string]any{"active": false})); got != "ok" {
			t.Fatalf("heartbeat %d: %s", i, got)
		}
	}
	// Make the user away-ready: a refused heartbeat with active: true must
	// not count as activity (nothing done).
	before, err := eng.Users(ctx, []string{"u1"})
	if err != nil {
		t.Fatal(err)
	}
	ack := call(h, c, "heartbeat", map[string]any{"active": true})
	if got := code(ack); got != CodeRateLimited {
		t.Fatalf("21st heartbeat: %v, want rate_limited", ack)
	}
	if msg, _ := ack["error"].(map[string]any)["message"].(string); msg == "" {
		t.Error("no message")
	}
	after, err := eng.Users(ctx, []string{"u1"})
	if err != nil {
		t.Fatal(err)
	}
	if before[0] != after[0] {
		t.Errorf("a refused heartbeat changed the user: %+v → %+v", before[0], after[0])
	}
	if got := testutil.ToFloat64(m.EventsRateLimited.WithLabelValues("heartbeat")); got != 1 {
		t.Errorf("presenced_events_rate_limited_total{event=heartbeat} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Events.WithLabelValues("heartbeat", CodeRateLimited)); got != 1 {
		t.Errorf("presenced_events_total{heartbeat,rate_limited} = %v, want 1", got)
	}
	// Other classes have their own buckets: a query is still allowed (it
	// fails for another reason: no viewers in this test).
	if got := code(call(h, c, "presence:query", map[string]any{"userIds": []any{"u2"}})); got == CodeRateLimited {
		t.Error("presence:query limited by the heartbeats")
	}
	// Bad payloads count too: a client cannot spray invalid events freely.
	for range 20 {
		call(h, c, "typing:start", "not an object")
	}
	if got := code(call(h, c, "typing:stop", map[string]any{"conversationId": "c1"})); got != CodeRateLimited {
		t.Errorf("typing:stop after 21 typing events: %s, want rate_limited (start and stop share a bucket)", got)
	}
}

func TestNoLimit(t *testing.T) {
	h, c, _, _ := limitedSockets(t, EventLimits{Heartbeat: NoLimit})
	for i := range 1000 {
		if got := code(call(h, c, "heartbeat", nil)); got != "ok" {
			t.Fatalf("heartbeat %d: %s", i, got)
		}
	}
}

// TestAllowAllocatesNothing: the limiter is on every event's path, the
// heartbeat's included.
func TestAllowAllocatesNothing(t *testing.T) {
	h, c, _, _ := limitedSockets(t, EventLimits{Heartbeat: Limit{Rate: 1e9, Burst: 1e9}})
	if n := testing.AllocsPerRun(1000, func() { h.allow(c, classHeartbeat, time.Now()) }); n != 0 {
		t.Errorf("allow: %v allocations per call", n)
	}
}

func BenchmarkAllow(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	h := NewSockets(SessionConfig{Limits: EventLimits{Heartbeat: Limit{Rate: 1e9, Burst: 1e9}}}, SocketDeps{Log: log, Metrics: metrics.New(), Rooms: NewRooms(0, log)})
	c := &Conn{}
	b.ReportAllocs()
	for b.Loop() {
		h.allow(c, classHeartbeat, time.Now())
	}
}

// appendReplier encodes each ack body into its buffer before Reply
// returns, as the direct path's ack does.
type appendReplier struct{ buf []byte }

func (r *appendReplier) Reply(body any) {
	if a, ok := body.(interface{ AppendJSON([]byte) []byte }); ok {
		r.buf = a.AppendJSON(r.buf[:0])
	}
}

// TestHeartbeatAllocatesNothing: a heartbeat, from serve to its encoded
// ack, allocates nothing (its ack body comes from a pool), so that the
// goroutines running heartbeats do not drive GC cycles: at 30,000
// heartbeats/s the seconds with a cycle held the p99.
func TestHeartbeatAllocatesNothing(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector drops pooled values")
	}
	h, c, _, _ := limitedSockets(t, EventLimits{Heartbeat: Limit{Rate: 1e9, Burst: 1e9}})
	r := &appendReplier{}
	fn := h.handlers["heartbeat"]
	args := []any{nil}
	n := testing.AllocsPerRun(1000, func() { h.serve(c, "heartbeat", fn, args, r, time.Time{}, false) })
	if !bytes.HasPrefix(r.buf, []byte(`{"nextInMs":`)) || !bytes.Contains(r.buf, []byte(`"ok":true`)) {
		t.Fatalf("ack %s", r.buf)
	}
	if n != 0 {
		t.Errorf("a heartbeat allocates %v times, want 0", n)
	}
}

// jsonSize counts a state as a client's JSON.stringify writes it: <, > and
// & in one byte each, U+2028 and U+2029 in their 3 bytes of UTF-8 (which
// encoding/json escapes in 6), and an escaped backslash before "u2028" as
// the 7 bytes it is. Before, 300 U+2028 (908 bytes from the client)
// counted 1,808 and the state was refused (a docs audit, 2026-12-07).
func TestJSONSizeAsClientsWriteIt(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want int
	}{
		{strings.Repeat("\u2028", 300), 8 + 900},
		{"a\u2029<&>", 8 + 1 + 3 + 3},
		{`\u2028`, 8 + 7},           // a backslash and "u2028": "\\u2028"
		{`\` + "\u2028", 8 + 2 + 3}, // a backslash, then the character
		{"\"\n", 8 + 4},
	} {
		got, err := jsonSize(map[string]any{"s": tc.s})
		if err != nil || got != tc.want {
			t.Errorf("jsonSize of %q: %d, %v; want %d", tc.s, got, err, tc.want)
		}
	}
	// NaN and ±Infinity (a msgpack client's) count as JSON.stringify
	// writes them, null; they were refused as "not JSON"
	nonFinite := map[string]any{"n": math.NaN(), "a": []any{math.Inf(1), 1.0}, "o": map[string]any{"i": math.Inf(-1)}}
	if got, err := jsonSize(nonFinite); err != nil || got != len(`{"a":[null,1],"n":null,"o":{"i":null}}`) {
		t.Errorf("jsonSize with NaN and infinities: %d, %v", got, err)
	}
}
