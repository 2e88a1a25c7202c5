package presence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/internal/redistest"
)

// A conversation's moment is its earliest start's expiry. take hands a
// due conversation out, with the users whose starts expired and the latest
// of their scores, only while one of this node's starts there has
// expired: one whose starts all stopped costs no check, and a restart
// moves the moment. A check settles the starts it checked; one noted anew
// meanwhile keeps its moment.
func TestTypingTimers(t *testing.T) {
	var tt typingTimers
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	convs := func(due []typingDue) []string {
		var out []string
		for _, d := range due {
			out = append(out, fmt.Sprintf("%s:%s@%d", d.conv, strings.Join(d.users, ","), d.upTo))
		}
		slices.Sort(out)
		return out
	}
	tt.started("c1", "alice", "s1", at(500), 10500)
	tt.started("c1", "bob", "s1", at(900), 10900)
	tt.started("c1", "frank", "s1", at(600), 10610) // (an estimate 10 ms on)
	tt.started("c2", "carol", "s1", at(300), 10300)
	tt.started("c3", "dave", "s1", at(700), 10700)
	tt.stopped("c3", "dave", tt.mark())
	tt.started("c4", "eve", "s1", at(600), 10600)
	tt.started("c4", "eve", "s1", at(5850), 15850) // a restart: c4's first moment finds nothing expired
	if got := tt.take(at(299), 10); len(got) != 0 {
		t.Fatalf("take before any moment %q", convs(got))
	}
	if got := convs(tt.take(at(700), 1)); !slices.Equal(got, []string{"c2:carol@10300"}) {
		t.Fatalf("take(700, 1) %q, want c2:carol", got)
	}
	if got := convs(tt.take(at(700), 10)); !slices.Equal(got, []string{"c1:alice,frank@10610"}) {
		t.Fatalf("take(700) %q, want c1:alice,frank up to frank's score (c3's start stopped, c4's restarted, bob's not expired)", got)
	}
	tt.started("c1", "frank", "s1", at(5700), 15700) // frank starts again while the check is out
	tt.checked("c1", at(700), []string{"alice", "frank"})
	tt.checked("c2", at(700), []string{"carol"})
	if got := convs(tt.take(at(900), 10)); !slices.Equal(got, []string{"c1:bob@10900"}) {
		t.Fatalf("take(900) %q, want c1:bob (alice's and carol's checked, frank's restarted)", got)
	}
	tt.set("c1", at(1900)) // the check failed: c1 again in a second (the start stays)
	if got := tt.take(at(1899), 10); len(got) != 0 {
		t.Fatalf("take(1899) %q, want none", convs(got))
	}
	if got := convs(tt.take(at(1900), 10)); !slices.Equal(got, []string{"c1:bob@10900"}) {
		t.Fatalf("take(1900) %q, want c1:bob again after its failed check", got)
	}
	tt.checked("c1", at(1900), []string{"bob"})
	if got := convs(tt.take(at(5849), 10)); !slices.Equal(got, []string{"c1:frank@15700"}) {
		t.Fatalf("take(5849) %q, want c1:frank", got)
	}
	tt.checked("c1", at(5849), []string{"frank"})
	if got := convs(tt.take(at(5850), 10)); !slices.Equal(got, []string{"c4:eve@15850"}) {
		t.Fatalf("take(5850) %q, want c4:eve", got)
	}
	tt.checked("c4", at(5850), []string{"eve"})
	if got := tt.take(at(9000), 10); len(got) != 0 {
		t.Fatalf("take(9000) %q, want none", convs(got))
	}
	if len(tt.at) != 0 || len(tt.queue) != 0 || len(tt.own) != 0 {
		t.Fatalf("left: %v %v %v", tt.at, tt.queue, tt.own)
	}
}

// resyncTyping's write of a start again notes its score if that start is
// still the user's last there, the later of the two.
func TestTypingRescored(t *testing.T) {
	var tt typingTimers
	t0 := time.Unix(1000, 0)
	tt.started("c1", "alice", "s1", t0.Add(time.Second), 1000)
	tt.started("c1", "bob", "s1", t0.Add(time.Second), 1000)
	owned := tt.owned(t0)
	tt.started("c1", "bob", "s1", t0.Add(2*time.Second), 2000) // bob starts again meanwhile
	for _, o := range owned {
		tt.rescored(o, 1200)
	}
	tt.rescored(ownStart{conv: "c1", user: "alice", seq: owned[0].seq + 99}, 5000) // not alice's start
	for _, o := range owned {
		if o.user == "alice" {
			tt.rescored(o, 900) // an earlier estimate keeps the later score
		}
	}
	if a, b := tt.own["c1"]["alice"].score, tt.own["c1"]["bob"].score; a != 1200 || b != 2000 {
		t.Fatalf("scores alice %d, bob %d; want 1200 (written again) and 2000 (a later start's)", a, b)
	}
}

// A stop forgets only the starts noted before it was sent: with two
// sockets of one user on this node, a start noted while the other
// socket's stop was on its way may have reached Redis after the stop, and
// its expiry must still fire.
func TestTypingStopKeepsLaterStart(t *testing.T) {
	var tt typingTimers
	t0 := time.Unix(1000, 0)
	tt.started("c1", "alice", "s1", t0.Add(time.Second), 1000)
	mark := tt.mark()                                            // socket 1's stop is sent
	tt.started("c1", "alice", "s1", t0.Add(2*time.Second), 2000) // socket 2's start, noted first
	tt.stopped("c1", "alice", mark)                              // the stop's reply
	due := tt.take(t0.Add(2*time.Second), 10)
	if len(due) != 1 || due[0].conv != "c1" || !slices.Equal(due[0].users, []string{"alice"}) {
		t.Fatalf("take %+v, want alice's later start in c1", due)
	}
	tt.stopped("c1", "alice", tt.mark())
	if len(tt.own) != 0 {
		t.Fatalf("a stop sent after the start left %v", tt.own)
	}
}

func TestMemberTag(t *testing.T) {
	// stable across nodes and releases: the SHA-256 of the id, 6 bytes
	if got := memberTag("s1"); got != "6LwWPILu" {
		t.Errorf("memberTag(s1) = %q", got)
	}
	if a, b := memberTag("AAAAAAAAAAAAAAAAAAAAAAAA"), memberTag("AAAAAAAAAAAAAAAAAAAAAAAB"); len(a) != 8 || a == b || strings.ContainsAny(a+b, ",|\t") {
		t.Errorf("tags %q, %q: want 8 characters each, different, without a separator", a, b)
	}
}

func TestMemberHas(t *testing.T) {
	for _, tc := range []struct {
		rec, su, sid string
		want         bool
	}{
		{"1|100|0|0|s1", "", "s1", true},
		{"2|100|0|0|s0,s1", "", "s1", true},
		{"2|100|0|0|s0,s12", "", "s1", false},
		{"1|100|0|0|", "", "s1", false},
		{"", "", "s1", false},
		{"1|100|0", "", "s1", false},         // not a record
		{"1|100|0|0", "alice", "s1", true},   // a legacy record: su has the socket
		{"1|100|0|0", "", "s1", false},       // a legacy record without it
		{"1|100|0|0", "bob", "s1", false},    // su's entry is another user's
		{"1|100|0|0|s1|x", "", "s1|x", true}, // (ids never hold | or ,: redisSocketID)
		// since 2026-12-05 a record lists tags; one of an earlier release
		// ids, and a record may hold both
		{"1|100|0|0|" + memberTag("s1"), "", "s1", true},
		{"2|100|0|0|s0," + memberTag("s1"), "", "s1", true},
		{"2|100|0|0|s1," + memberTag("s0"), "", "s1", true},
		{"1|100|0|0|" + memberTag("s0"), "", "s1", false},
		{ShortMember(100, memberTag("s1")), "", "s1", true}, // the short form (since 2026-12-05)
		{ShortMember(100, memberTag("s0")+","+memberTag("s1")), "", "s1", true},
		{ShortMember(100, "s0,s1"), "", "s1", true},
		{ShortMember(100, memberTag("s0")), "", "s1", false},
		{ShortMember(100, memberTag("s0")), "alice", "s1", false}, // not legacy: su does not count
	} {
		if got := memberHas(tc.rec, tc.su, tc.sid, "alice"); got != tc.want {
			t.Errorf("memberHas(%q, %q, %q) = %v, want %v", tc.rec, tc.su, tc.sid, got, tc.want)
		}
	}
	// su is read only for a record that lists no sockets
	for rec, want := range map[string]bool{ShortMember(100, "s1"): false, "1|100|0|0": true, "1|100|0|0|": false, "1|100|0|0|s1": false, "": false, "1|100|0": false} {
		if got := legacyMember(rec); got != want {
			t.Errorf("legacyMember(%q) = %v, want %v", rec, got, want)
		}
	}
}

// The typing expiry is written on the node's estimate of Redis's clock: a
// node whose own clock (Config.Now) is an hour off still writes an expiry
// TypingTTL after Redis's TIME. A socket Redis does not have joined (its
// member record lost its socket) is refused and leaves no entry.
func TestTypingOnRedisClock(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb, "tyclock")
	ctx := context.Background()
	eng := NewRedisEngine(rdb, Config{NodeID: "n1", TypingTTL: 5 * time.Second,
		Now: func() time.Time { return time.Now().Add(-time.Hour) }}, RedisConfig{Prefix: prefix})
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{"s1", "s2"} {
		if err := eng.Connect(ctx, Socket{ID: sid, UserID: "alice"}); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Join(ctx, sid, "c1"); err != nil {
			t.Fatal(err)
		}
	}
	k := eng.conv("c1")
	if err := eng.TypingStart(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	tm, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	exp := rdb.ZScore(ctx, k.ty, "alice").Val()
	if d := int64(exp) - tm.UnixMilli() - 5000; d < -1000 || d > 100 {
		t.Fatalf("typing expiry %d ms after Redis's TIME + TTL, want about 0", d)
	}
	if err := eng.TypingStop(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, k.ty).Val(); n != 0 {
		t.Fatalf("%d typing entries after the stop", n)
	}
	// Redis loses s2 from alice's record (a reap, say): s2's start is refused
	rdb.HSet(ctx, k.m, "alice", "1|100|0|0|s1")
	if err := eng.TypingStart(ctx, "s2", "c1"); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("start of a socket Redis has not joined: %v, want ErrNotJoined", err)
	}
	if n := rdb.ZCard(ctx, k.ty).Val(); n != 0 {
		t.Fatalf("%d typing entries after a refused start, want 0", n)
	}
}

type roundTripHook struct{ n atomic.Int64 }

func (h *roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// A typing start stopped on this node costs no round trip at its expiry;
// one left to expire costs one, and its stop is announced; one whose entry
// went meanwhile (another node's stop) or was moved later by a start on
// another node costs one and is forgotten.
//
// On a Redis Cluster a check's transaction stays in one hash slot: the
// conversations due together are checked one transaction each.
func TestTypingExpiryChecks(t *testing.T) {
	t.Run("one server", func(t *testing.T) { testTypingExpiryChecks(t, redistest.Client(t)) })
	t.Run("cluster", func(t *testing.T) { testTypingExpiryChecks(t, redistest.Cluster(t)) })
}

// typingTestEngine is a Redis engine (TypingTTL 5 s) on a fake clock,
// Redis's clock included, with users' sockets "s-<user>" joined to convs;
// take returns the typing events delivered since its last call.
func typingTestEngine(t *testing.T, rdb redis.UniversalClient, tag string, users, convs []string) (eng *RedisEngine, clock *fakeclock.Clock, take func() []Event) {
	t.Helper()
	ctx := context.Background()
	clock = fakeclock.New(time.Now())
	var mu sync.Mutex
	var typing []Event
	sink := func(_ context.Context, evs []Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			if ev.Kind == EventTyping {
				typing = append(typing, ev)
			}
		}
	}
	eng = NewRedisEngine(rdb, Config{NodeID: "n1", TypingTTL: 5 * time.Second, Now: clock.Now, Sink: sink}, RedisConfig{Prefix: redistest.Prefix(t, rdb, tag)})
	eng.fakeClock = clock.Now
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if err := eng.Connect(ctx, Socket{ID: "s-" + u, UserID: u}); err != nil {
			t.Fatal(err)
		}
		for _, c := range convs {
			if _, err := eng.Join(ctx, "s-"+u, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	eng.Settle()
	return eng, clock, func() []Event {
		mu.Lock()
		defer mu.Unlock()
		out := typing
		typing = nil
		return out
	}
}

func testTypingExpiryChecks(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	eng, clock, take := typingTestEngine(t, rdb, "tyexp", []string{"alice", "bob"}, []string{"c1", "c2"})
	hook := &roundTripHook{}
	rdb.AddHook(hook)
	expire := func(wantTrips int64, wantStops ...string) {
		t.Helper()
		clock.Advance(6 * time.Second)
		hook.n.Store(0)
		take()
		if err := eng.runTyping(ctx, clock.Now()); err != nil {
			t.Fatal(err)
		}
		if got := hook.n.Load(); got != wantTrips {
			t.Errorf("expiry check: %d round trips, want %d", got, wantTrips)
		}
		var stops []string
		for _, ev := range take() {
			if !ev.Typing {
				stops = append(stops, ev.UserID)
			}
		}
		if !slices.Equal(stops, wantStops) {
			t.Errorf("stops announced %q, want %q", stops, wantStops)
		}
	}
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := eng.TypingStop(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	expire(0)
	if err := eng.TypingStart(ctx, "s-bob", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	expire(1, "bob")
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	rdb.ZRem(ctx, eng.conv("c1").ty, "alice") // stopped elsewhere
	expire(1)
	expire(0)
	// a start of alice's on another node moved her entry on: the check
	// leaves it, for that node to fire, and forgets her start
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	later := float64(eng.redisNow() + 8000)
	rdb.ZAdd(ctx, eng.conv("c1").ty, redis.Z{Score: later, Member: "alice"})
	expire(1)
	expire(0)
	if sc, err := rdb.ZScore(ctx, eng.conv("c1").ty, "alice").Result(); err != nil || sc != later {
		t.Fatalf("alice's entry moved on elsewhere: %v (%v), want it left at %v", sc, err, later)
	}
	rdb.ZRem(ctx, eng.conv("c1").ty, "alice")
	// the estimate of Redis's clock went back a second since the start:
	// its entry is still removed at its expiry, in one round trip
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	eng.fakeClock = func() time.Time { return clock.Now().Add(-time.Second) }
	expire(1, "alice")
	eng.fakeClock = clock.Now
	expire(0)
	// two conversations due at once: one round trip, or one per
	// conversation on a cluster ({c:c1} and {c:c2} are different slots)
	for _, c := range []string{"c1", "c2"} {
		if err := eng.TypingStart(ctx, "s-bob", c); err != nil {
			t.Fatal(err)
		}
	}
	eng.Settle()
	trips := int64(1)
	if !eng.crossSlot {
		trips = 2
	}
	expire(trips, "bob", "bob")
	eng.typing.mu.Lock()
	defer eng.typing.mu.Unlock()
	if len(eng.typing.own) != 0 || len(eng.typing.at) != 0 {
		t.Errorf("typing timers left: %v %v", eng.typing.own, eng.typing.at)
	}
}

// cmdNames records the commands of each pipeline sent.
type cmdNames struct {
	mu   sync.Mutex
	sent [][]string
}

func (h *cmdNames) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *cmdNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *cmdNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, c := range cmds {
			names = append(names, strings.ToUpper(c.Name()))
		}
		h.mu.Lock()
		h.sent = append(h.sent, names)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *cmdNames) take() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sent
	h.sent = nil
	return s
}

// A start costs Redis two commands, HGET and ZADD, and a stop one, ZREM:
// no record of the typist's socket (this node knows it), no read of the
// entry's expiry, and no member record for a stop. A stop of a socket
// whose entry Redis has lost from its member
// record still ends the typing it started, and says so; the socket's leave
// afterwards stops nothing and announces nothing.
func TestTypingStopWithoutMemberRecord(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb, "tystop")
	ctx := context.Background()
	var mu sync.Mutex
	var typing []bool
	sink := func(_ context.Context, evs []Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			if ev.Kind == EventTyping {
				typing = append(typing, ev.Typing)
			}
		}
	}
	eng := NewRedisEngine(rdb, Config{NodeID: "n1", TypingTTL: 5 * time.Second, Sink: sink}, RedisConfig{Prefix: prefix})
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eng.Connect(ctx, Socket{ID: "s1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Join(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	k := eng.conv("c1")
	hook := &cmdNames{}
	rdb.AddHook(hook)
	if err := eng.TypingStart(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	var start []string
	for _, p := range hook.take() {
		if slices.Contains(p, "ZADD") {
			start = p
		}
	}
	if !slices.Equal(start, []string{"HGET", "ZADD"}) {
		t.Fatalf("the start's pipeline %q, want [HGET ZADD]", start)
	}
	// Redis loses s1 from alice's record; this node still has it joined
	rdb.HSet(ctx, k.m, "alice", "1|100|0|0|sX")
	hook.take()
	if err := eng.TypingStop(ctx, "s1", "c1"); err != nil {
		t.Fatalf("stop: %v", err)
	}
	var stop []string
	for _, p := range hook.take() {
		if slices.Contains(p, "ZREM") {
			stop = p
		}
	}
	if !slices.Equal(stop, []string{"ZREM"}) {
		t.Fatalf("the stop's pipeline %q, want [ZREM]", stop)
	}
	if n := rdb.ZCard(ctx, k.ty).Val(); n != 0 {
		t.Fatalf("%d typing entries after the stop", n)
	}
	mu.Lock()
	got := slices.Clone(typing)
	mu.Unlock()
	if !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("typing events %v, want the start and the stop", got)
	}
	if n := rdb.Exists(ctx, k.tyo).Val(); n != 0 {
		t.Fatalf("the typist's socket written to Redis (%s)", k.tyo)
	}
	rdb.HSet(ctx, k.m, "alice", "1|100|0|0|s1")
	if err := eng.Leave(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got = slices.Clone(typing)
	mu.Unlock()
	if !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("typing events after the leave %v, want no second stop", got)
	}
}

// slowCheck delays the reply of a typing check's transaction (the one with
// ZREMRANGEBYSCORE) after Redis ran it, and says when it ran.
type slowCheck struct {
	ran   chan struct{}
	delay time.Duration
}

func (h *slowCheck) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *slowCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *slowCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "zremrangebyscore" }) {
			select {
			case h.ran <- struct{}{}:
			default:
			}
			time.Sleep(h.delay)
		}
		return err
	}
}

// A start that adds its user's entry just after this node's check removed
// it is announced after the check's stop, however late the check's reply
// comes (a black-box audit: announced as the replies came, 2 to 4 of 120
// sessions started within a few ms of the expiry reached the others
// before the stop).
func TestTypingStartAfterCheckInOrder(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	eng, clock, take := typingTestEngine(t, rdb, "tyorder", []string{"alice"}, []string{"c1"})
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	hook := &slowCheck{ran: make(chan struct{}, 1), delay: 300 * time.Millisecond}
	rdb.AddHook(hook)
	clock.Advance(5 * time.Second)
	checked := make(chan error, 1)
	go func() { checked <- eng.runTyping(ctx, clock.Now()) }()
	<-hook.ran // the check removed the entry; its reply is late
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	var got []bool
	for _, ev := range take() {
		got = append(got, ev.Typing)
	}
	if want := []bool{true, false, true}; !slices.Equal(got, want) {
		t.Fatalf("typing events %v, want %v (the new session's start after the expiry's stop)", got, want)
	}
}

// A start that finds this node's last start of the user expired and not
// yet removed (no check ran) moves the entry and announces the old
// session's stop before its own start; a start within the TTL is silent.
// The start knows the expiry from the node's own record: it reads none.
func TestTypingStartAfterUncheckedExpiry(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	eng, clock, take := typingTestEngine(t, rdb, "tyunchecked", []string{"alice"}, []string{"c1"})
	kinds := func(evs []Event) (out []bool) {
		for _, ev := range evs {
			out = append(out, ev.Typing)
		}
		return out
	}
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	clock.Advance(2 * time.Second)
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	if got := kinds(take()); !slices.Equal(got, []bool{true}) {
		t.Fatalf("a start and a refresh: %v, want one start", got)
	}
	clock.Advance(5100 * time.Millisecond) // past the refresh's expiry, no tick
	if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
		t.Fatal(err)
	}
	eng.Settle()
	if got := kinds(take()); !slices.Equal(got, []bool{false, true}) {
		t.Fatalf("a start after the unchecked expiry: %v, want the stop, then the start", got)
	}
	if n := rdb.ZCard(ctx, eng.conv("c1").ty).Val(); n != 1 {
		t.Fatalf("%d typing entries, want 1", n)
	}
}

// A reply of nothing (redis.Nil) is not a failure of Redis: only a failed
// command asks the reconciliations to read the member records.
func TestRedisFailedArmsMemberChecks(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	eng := NewRedisEngine(rdb, Config{NodeID: "n1"}, RedisConfig{Prefix: redistest.Prefix(t, rdb, "armchecks")})
	pipe := rdb.Pipeline()
	pipe.HGet(ctx, eng.rcfg.Prefix+":nothing", "nobody")
	if err := eng.exec(ctx, pipe); !errors.Is(err, redis.Nil) {
		t.Fatalf("exec: %v, want redis.Nil", err)
	}
	if n := eng.memberChecks.Load(); n != 0 {
		t.Fatalf("after a nil reply: %d member checks armed, want 0", n)
	}
	pipe = rdb.Pipeline()
	pipe.HGet(ctx, eng.rcfg.Prefix+":nothing", "nobody")
	pipe.Do(ctx, "NOSUCHCOMMAND")
	if err := eng.exec(ctx, pipe); err == nil {
		t.Fatal("exec of an unknown command succeeded")
	}
	if n := eng.memberChecks.Load(); n != 2 {
		t.Fatalf("after a failed command: %d member checks armed, want 2", n)
	}
}

// Two starts of one user on one node (two tabs) right after this node's
// last start expired, before its check ran: the expired session's stop
// is announced once, then the new start.
func TestTypingConcurrentStartsAfterExpiry(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	eng, clock, take := typingTestEngine(t, rdb, "tyconc", []string{"alice"}, []string{"c1"})
	if err := eng.Connect(ctx, Socket{ID: "s2", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Join(ctx, "s2", "c1"); err != nil {
		t.Fatal(err)
	}
	kinds := func(evs []Event) (out []bool) {
		for _, ev := range evs {
			out = append(out, ev.Typing)
		}
		return out
	}
	for i := range 30 {
		if err := eng.TypingStart(ctx, "s-alice", "c1"); err != nil {
			t.Fatal(err)
		}
		eng.Settle()
		take()
		clock.Advance(5100 * time.Millisecond) // expired; no check ran
		var wg sync.WaitGroup
		for _, s := range []string{"s-alice", "s2"} {
			wg.Go(func() {
				if err := eng.TypingStart(ctx, s, "c1"); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		eng.Settle()
		if got := kinds(take()); !slices.Equal(got, []bool{false, true}) {
			t.Fatalf("round %d: %v, want one stop, then one start", i, got)
		}
		if err := eng.TypingStop(ctx, "s2", "c1"); err != nil {
			t.Fatal(err)
		}
		eng.Settle()
		take()
	}
}

// A start racing its socket's disconnect (the tab sends typing:start and
// closes) leaves no typing entry behind once both are done, when the
// user stays through another socket: the leave takes the entry whose
// write was under way (typedBy with sending).
func TestTypingStartRacingDisconnect(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	eng, _, take := typingTestEngine(t, rdb, "tyrace", []string{"alice"}, []string{"c1"})
	k := eng.conv("c1")
	left := 0
	for i := range 100 {
		sid := "x" + strconv.Itoa(i)
		if err := eng.Connect(ctx, Socket{ID: sid, UserID: "alice"}); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Join(ctx, sid, "c1"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { _ = eng.TypingStart(ctx, sid, "c1") })
		wg.Go(func() {
			time.Sleep(time.Duration(i%5) * 20 * time.Microsecond)
			if err := eng.DisconnectNow(ctx, sid); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		eng.Settle()
		if _, err := rdb.ZScore(ctx, k.ty, "alice").Result(); err == nil {
			left++
		}
		rdb.Del(ctx, k.ty)
		take()
	}
	if left > 0 {
		t.Fatalf("in %d of 100 races the typist disconnected and its typing entry stayed", left)
	}
}

// failMemberReads fails the HMGETs of one key, as a Redis Cluster master
// that is down fails the commands on its slots, and counts the registry
// reads (HSCAN: one per registry bucket and reconciliation).
type failMemberReads struct {
	key    string
	hscans atomic.Int64
}

func (h *failMemberReads) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *failMemberReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *failMemberReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			switch c.Name() {
			case "hscan":
				h.hscans.Add(1)
			case "hmget":
				if a := c.Args(); len(a) > 1 && a[1] == h.key {
					c.SetErr(errors.New("CLUSTERDOWN The cluster is down"))
				}
			}
		}
		return err
	}
}

// While one conversation's master is down, a reconciliation whose member
// read fails there still completes: the next comes ReconcileEvery later,
// not on every 50 ms tick.
func TestRedisMemberReadFailureKeepsReconcilePace(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	eng, clock, _ := typingTestEngine(t, rdb, "tyloop", []string{"alice", "bob"}, []string{"c1", "c2", "c3"})
	h := &failMemberReads{key: eng.conv("c2").m}
	rdb.AddHook(h)
	eng.redisFailed()
	clock.Advance(eng.rcfg.ReconcileEvery)
	for range 40 { // 2 s of ticks
		clock.Advance(50 * time.Millisecond)
		_ = eng.Tick(ctx)
	}
	// a reconciliation reads each of the registry's buckets once
	if n := h.hscans.Load(); n == 0 || n > regMinBuckets {
		t.Fatalf("%d registry reads in 40 ticks, want one reconciliation's (%d)", n, regMinBuckets)
	}
}
