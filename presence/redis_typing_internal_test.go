package presence

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/redistest"
)

// A conversation's moment is its earliest; take hands each due
// conversation out once, in order of its moment, up to the limit, and
// skips the moments an earlier one replaced.
func TestTypingTimers(t *testing.T) {
	var tt typingTimers
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tt.set("c1", at(500))
	tt.set("c1", at(900)) // later: c1 keeps 500
	tt.set("c2", at(800))
	tt.set("c2", at(300)) // earlier: 300 (the 800 left in the queue is skipped)
	tt.set("c3", at(700))
	if got := tt.take(at(299), 10); len(got) != 0 {
		t.Fatalf("take before any moment %q", got)
	}
	if got := tt.take(at(700), 2); !slices.Equal(got, []string{"c2", "c1"}) {
		t.Fatalf("take(700, 2) %q, want c2 c1", got)
	}
	if got := tt.take(at(2000), 10); !slices.Equal(got, []string{"c3"}) {
		t.Fatalf("take(2000) %q, want c3 alone (c1's 900 and c2's 800 were replaced)", got)
	}
	tt.set("c1", at(2500))
	if got := tt.take(at(2500), 10); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("a moment set after its take: %q", got)
	}
	if len(tt.at) != 0 || len(tt.queue) != 0 {
		t.Fatalf("left: %v %v", tt.at, tt.queue)
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
	} {
		if got := memberHas(tc.rec, tc.su, tc.sid, "alice"); got != tc.want {
			t.Errorf("memberHas(%q, %q, %q) = %v, want %v", tc.rec, tc.su, tc.sid, got, tc.want)
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
