package presence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
	"github.com/redis/go-redis/v9"
)

// A user's sockets live in its record ("n|act|status|grace|disc|s1,s2"),
// and in each conversation in its member record ("<since><tags>", or
// "n|since|grace|left|" in the user's flap grace):
// no per-user set, no per-conversation socket keys, and no away timer
// while the user's node watches them.
func TestRedisUserRecordHoldsSockets(t *testing.T) {
	f := newFakeClockRedis(t)
	rdb, prefix := f.rdb, f.prefix
	ctx := context.Background()
	eng := f.node(presence.Config{NodeID: "n1", TTL: 10 * time.Second})
	connectJoin(t, eng, "a1", "alice", "c1")
	connectJoin(t, eng, "a2", "alice", "c1")
	rec := rdb.HGet(ctx, prefix+":{g}:users", "alice").Val()
	if f := strings.Split(rec, "|"); len(f) != 6 || f[0] != "2" || f[2] != "on" || f[5] != "a1,a2" {
		t.Fatalf("alice's record %q, want 2|…|on|…|…|a1,a2", rec)
	}
	joined := f.clock.Now().UnixMilli()
	tags := presence.MemberTag("a1") + "," + presence.MemberTag("a2")
	if m, want := rdb.HGet(ctx, prefix+":{c:c1}:m", "alice").Val(), presence.ShortMember(joined, tags); m != want {
		t.Errorf("alice's member record %q, want %q (since %d, the sockets' tags)", m, want, joined)
	}
	for _, k := range []string{prefix + ":{g}:usk:alice", prefix + ":{c:c1}:sk", prefix + ":{c:c1}:on", prefix + ":{c:c1}:su"} {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("key %s exists", k)
		}
	}
	// the node watches its users for away: no timer in Redis
	due := prefix + ":{g}:due"
	if n := rdb.ZCard(ctx, due).Val(); n != 0 {
		t.Errorf("%d timers in Redis for an online user, want none", n)
	}
	if err := eng.Disconnect(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	// … until a socket goes while others stay (the watch is handed over)
	if got := rdb.ZRange(ctx, due, 0, -1).Val(); !slices.Contains(got, "a\talice") {
		t.Errorf("timers after a1 left %q, want alice's away timer among them", got)
	}
	if got := userSockets(t, eng, "alice"); !slices.Equal(got, []string{"a2"}) {
		t.Errorf("alice's sockets %q after a1 left, want [a2]", got)
	}
	if err := eng.Connect(ctx, presence.Socket{ID: "a,3", UserID: "alice"}); err == nil {
		t.Error("a socket id with a comma was accepted")
	}
}

// A member record is "<since><tags>" while the user has sockets in the
// conversation, and the full "0|since|graceDeadline|leftAt|" in its flap
// grace; a join in the grace writes the short form back with the first
// join time, which the roster gives throughout. A join time past the short
// form's 7 characters (the year 2109) is written in the full form.
func TestRedisMemberRecordForms(t *testing.T) {
	f := newFakeClockRedis(t)
	rdb, prefix, clock := f.rdb, f.prefix, f.clock
	ctx := context.Background()
	eng := f.node(presence.Config{NodeID: "n1", TTL: 10 * time.Second, FlapGrace: 5 * time.Second})
	m := prefix + ":{c:c1}:m"
	connectJoin(t, eng, "a1", "alice", "c1")
	since := clock.Now().UnixMilli()
	if got, want := rdb.HGet(ctx, m, "alice").Val(), presence.ShortMember(since, presence.MemberTag("a1")); got != want {
		t.Errorf("record of one socket %q, want %q", got, want)
	}
	clock.Advance(time.Minute)
	if err := eng.Disconnect(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	left := clock.Now().UnixMilli()
	if got, want := rdb.HGet(ctx, m, "alice").Val(), fmt.Sprintf("0|%d|%d|%d|", since, left+5000, left); got != want {
		t.Errorf("record in the flap grace %q, want %q", got, want)
	}
	clock.Advance(time.Second)
	connectJoin(t, eng, "a2", "alice", "c1")
	if got, want := rdb.HGet(ctx, m, "alice").Val(), presence.ShortMember(since, presence.MemberTag("a2")); got != want {
		t.Errorf("record after a join in the grace %q, want %q (the first join time)", got, want)
	}
	r, err := eng.Roster(ctx, "c1")
	if err != nil || len(r.Online) != 1 || r.Online[0].Since.UnixMilli() != since {
		t.Errorf("roster = %+v, %v; want alice since %d", r, err, since)
	}

	clock.Advance(time.Date(2110, 1, 1, 0, 0, 0, 0, time.UTC).Sub(clock.Now()))
	connectJoin(t, eng, "b1", "bob", "c1")
	far := clock.Now().UnixMilli()
	if got, want := rdb.HGet(ctx, m, "bob").Val(), fmt.Sprintf("1|%d|0|0|%s", far, presence.MemberTag("b1")); got != want {
		t.Errorf("record joined in 2110 %q, want %q", got, want)
	}
	r, err = eng.Roster(ctx, "c1")
	if err != nil || len(r.Online) != 2 || r.Online[1].UserID != "bob" || r.Online[1].Since.UnixMilli() != far {
		t.Errorf("roster = %+v, %v; want bob since %d second", r, err, far)
	}
}

// The short member record is written only while every live instance
// reads it: an instance of a release before 2026-12-05 (a token without a
// reader level) holding a node id keeps the full form, which that release
// reads, until it is gone; this release reads both.
func TestRedisMemberRecordWaitsForEveryReader(t *testing.T) {
	f := newFakeClockRedis(t)
	rdb, prefix, clock := f.rdb, f.prefix, f.clock
	ctx := context.Background()
	eng := f.node(presence.Config{NodeID: "n1", TTL: 10 * time.Second, LeaseTTL: 10 * time.Second})
	renew := func() {
		t.Helper()
		clock.Advance(5 * time.Second)
		if err := eng.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	now := clock.Now().UnixMilli()
	rdb.HSet(ctx, prefix+":{g}:holder", "old", fmt.Sprintf("0123456789abcdef|%d|%d", now, now))
	rdb.ZAdd(ctx, prefix+":{g}:lease", redis.Z{Score: float64(now + time.Hour.Milliseconds()), Member: "old"})
	renew()
	m := prefix + ":{c:c1}:m"
	connectJoin(t, eng, "a1", "alice", "c1")
	since := clock.Now().UnixMilli()
	if got, want := rdb.HGet(ctx, m, "alice").Val(), fmt.Sprintf("1|%d|0|0|%s", since, presence.MemberTag("a1")); got != want {
		t.Errorf("record beside an instance of an earlier release %q, want the full form %q", got, want)
	}
	rdb.HDel(ctx, prefix+":{g}:holder", "old")
	rdb.ZRem(ctx, prefix+":{g}:lease", "old")
	renew()
	connectJoin(t, eng, "a2", "alice", "c1")
	tags := presence.MemberTag("a1") + "," + presence.MemberTag("a2")
	if got, want := rdb.HGet(ctx, m, "alice").Val(), presence.ShortMember(since, tags); got != want {
		t.Errorf("record once every instance reads the short form %q, want %q", got, want)
	}
	if r, err := eng.Roster(ctx, "c1"); err != nil || len(r.Online) != 1 || r.Online[0].Since.UnixMilli() != since {
		t.Errorf("roster = %+v, %v; want alice since %d", r, err, since)
	}
}

// Redis data written by a release before 2026-12-02 keeps working: a user
// record without sockets, its sockets in the set usk, member records
// without sockets, theirs in the hash su, and the sorted sets sk and on of
// each conversation. The set moves into the user record at the user's
// next connect or disconnect; a member record keeps its form until the
// member leaves; su, sk and on entries go with their sockets and members.
func TestRedisLegacyUserRecord(t *testing.T) {
	f := newFakeClockRedis(t)
	rdb, prefix, clock := f.rdb, f.prefix, f.clock
	ctx := context.Background()
	eng := f.node(presence.Config{NodeID: "n1", TTL: 10 * time.Second})
	connectJoin(t, eng, "o1", "old", "c1")
	// Rewrite o1's entries as the earlier release wrote them.
	at := strconv.FormatInt(clock.Now().UnixMilli(), 10)
	usk, users := prefix+":{g}:usk:old", prefix+":{g}:users"
	c := prefix + ":{c:c1}:"
	sk, on, su, m := c+"sk", c+"on", c+"su", c+"m"
	pipe := rdb.TxPipeline()
	pipe.HSet(ctx, users, "old", "1|"+at+"|on|0|0")
	pipe.SAdd(ctx, usk, "o1")
	pipe.ZAdd(ctx, sk, redis.Z{Score: 1, Member: "o1"})
	pipe.ZAdd(ctx, on, redis.Z{Score: 1, Member: "old"})
	pipe.HSet(ctx, m, "old", "1|"+at+"|0|0")
	pipe.HSet(ctx, su, "o1", "old")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	if got := userSockets(t, eng, "old"); !slices.Equal(got, []string{"o1"}) {
		t.Errorf("admin view of a legacy record: sockets %q, want [o1]", got)
	}
	if err := eng.Connect(ctx, presence.Socket{ID: "o2", UserID: "old", Max: 1}); !errors.Is(err, presence.ErrTooManySockets) {
		t.Errorf("Connect with the legacy set full: %v; want ErrTooManySockets", err)
	}
	if rec := rdb.HGet(ctx, users, "old").Val(); rec != "1|"+at+"|on|0|0" || !rdb.SIsMember(ctx, usk, "o1").Val() {
		t.Errorf("a refused Connect changed the legacy record: %q, set %v", rec, rdb.SMembers(ctx, usk).Val())
	}
	if ps, err := eng.Users(ctx, []string{"old"}); err != nil || len(ps) != 1 || ps[0].Status != presence.Online {
		t.Errorf("Users of a legacy record = %+v, %v; want online", ps, err)
	}

	if err := eng.TypingStart(ctx, "o1", "c1"); err != nil {
		t.Errorf("typing on a legacy member record: %v", err)
	}
	connectJoin(t, eng, "o2", "old", "c1")
	if rec := rdb.HGet(ctx, users, "old").Val(); !strings.HasPrefix(rec, "2|") || !strings.HasSuffix(rec, "|o1,o2") {
		t.Errorf("record after a connect %q, want 2|…|o1,o2", rec)
	}
	if got := rdb.HGet(ctx, m, "old").Val(); !strings.HasPrefix(got, "2|") || strings.Count(got, "|") != 3 {
		t.Errorf("legacy member record after a second join %q, want 2|…, still four fields", got)
	}
	if got := rdb.HGet(ctx, su, "o2").Val(); got != "old" {
		t.Errorf("su of o2 %q, want old (the legacy record keeps its sockets there)", got)
	}
	if r, err := eng.Roster(ctx, "c1"); err != nil || len(r.Online) != 1 || r.Online[0].UserID != "old" {
		t.Errorf("roster of a legacy member = %+v, %v", r, err)
	}
	if rdb.Exists(ctx, usk).Val() != 0 {
		t.Error("the legacy set is still there after the connect moved it")
	}
	for _, sid := range []string{"o1", "o2"} {
		if err := eng.Disconnect(ctx, sid); err != nil {
			t.Fatal(err)
		}
	}
	if rdb.Exists(ctx, sk).Val() != 0 {
		t.Error("the legacy sk entry outlived its socket")
	}
	for i := 0; i < 40 && rdb.HExists(ctx, users, "old").Val(); i++ {
		clock.Advance(500 * time.Millisecond)
		if err := eng.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if rdb.HExists(ctx, users, "old").Val() {
		t.Errorf("record %q outlived both sockets", rdb.HGet(ctx, users, "old").Val())
	}
	for _, k := range []string{on, su, m} {
		if rdb.Exists(ctx, k).Val() != 0 {
			t.Errorf("legacy key %s outlived the member's grace", k)
		}
	}
}

// A member record written by a release of 2026-12-02 to 2026-12-04 lists
// socket ids, not tags: its sockets are still found (typing, a repeated
// join, a leave), a new socket goes in as its tag, and the member leaves
// when the last of either form goes.
func TestRedisMemberRecordOfIds(t *testing.T) {
	f := newFakeClockRedis(t)
	rdb, prefix, clock := f.rdb, f.prefix, f.clock
	ctx := context.Background()
	eng := f.node(presence.Config{NodeID: "n1", TTL: 10 * time.Second, FlapGrace: -1})
	connectJoin(t, eng, "i1", "ida", "c1")
	connectJoin(t, eng, "i2", "ida", "c1")
	m := prefix + ":{c:c1}:m"
	at := strconv.FormatInt(clock.Now().UnixMilli(), 10)
	rdb.HSet(ctx, m, "ida", "2|"+at+"|0|0|i1,i2") // as the earlier release wrote it

	if err := eng.TypingStart(ctx, "i1", "c1"); err != nil {
		t.Errorf("typing of a socket listed by its id: %v", err)
	}
	if _, err := eng.Join(ctx, "i2", "c1"); err != nil {
		t.Fatal(err)
	}
	if got := rdb.HGet(ctx, m, "ida").Val(); got != "2|"+at+"|0|0|i1,i2" {
		t.Errorf("a repeated join changed the record to %q", got)
	}
	connectJoin(t, eng, "i3", "ida", "c1")
	since := clock.Now().UnixMilli()
	// written back in the short form (since 2026-12-05), the ids kept
	if got, want := rdb.HGet(ctx, m, "ida").Val(), presence.ShortMember(since, "i1,i2,"+presence.MemberTag("i3")); got != want {
		t.Errorf("record after a new socket joined %q, want %q", got, want)
	}
	for _, sid := range []string{"i1", "i3"} {
		if err := eng.Leave(ctx, sid, "c1"); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := rdb.HGet(ctx, m, "ida").Val(), presence.ShortMember(since, "i2"); got != want {
		t.Errorf("record after i1 and i3 left %q, want %q", got, want)
	}
	if err := eng.TypingStart(ctx, "i2", "c1"); err != nil {
		t.Errorf("typing of a socket listed by its id in a short record: %v", err)
	}
	if err := eng.Disconnect(ctx, "i2"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if err := eng.Tick(ctx); err != nil { // the grace's timer (of 0) fires
		t.Fatal(err)
	}
	if rdb.HExists(ctx, m, "ida").Val() {
		t.Errorf("record %q outlived its last socket", rdb.HGet(ctx, m, "ida").Val())
	}
}

func userSockets(t *testing.T, eng *presence.RedisEngine, user string) []string {
	t.Helper()
	infos, err := eng.UserSockets(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range infos {
		ids = append(ids, s.ID)
	}
	return ids
}

// Typing records the user's activity as a heartbeat does: at most once
// per activityEvery from a node (6 s with AwayAfter 1 min), not with
// every change.
func TestRedisTypingActivityThrottled(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	eng := f.node(presence.Config{NodeID: "n1", TTL: 10 * time.Second, AwayAfter: time.Minute})
	connectJoin(t, eng, "a1", "alice", "c1")
	act := func() string {
		eng.Settle() // records go in the background
		return strings.Split(f.rdb.HGet(ctx, f.prefix+":{g}:users", "alice").Val(), "|")[1]
	}
	want := strconv.FormatInt(f.clock.Advance(10*time.Second).UnixMilli(), 10)
	if err := eng.TypingStart(ctx, "a1", "c1"); err != nil {
		t.Fatal(err)
	}
	if got := act(); got != want {
		t.Fatalf("activity after the first typing %s, want %s", got, want)
	}
	f.clock.Advance(2 * time.Second)
	if err := eng.TypingStop(ctx, "a1", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := eng.TypingStart(ctx, "a1", "c1"); err != nil {
		t.Fatal(err)
	}
	if got := act(); got != want {
		t.Fatalf("activity 2 s later %s, want still %s (not due)", got, want)
	}
	want = strconv.FormatInt(f.clock.Advance(5*time.Second).UnixMilli(), 10)
	if err := eng.TypingStop(ctx, "a1", "c1"); err != nil {
		t.Fatal(err)
	}
	if got := act(); got != want {
		t.Fatalf("activity 7 s after the first %s, want %s (due again)", got, want)
	}
}
