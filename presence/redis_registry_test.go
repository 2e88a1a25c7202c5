package presence_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
)

// A node's registry is split into small buckets that Redis packs (about
// 45 bytes a socket instead of 95): 500 sockets make 16 buckets of at
// most 128 lines, each a listpack, their count in "<base>:n". The admin
// view finds a socket's line in its bucket, or in an earlier release's
// single hash; a reaper of the crashed node reads both, removes every
// entry and leaves no registry key behind.
func TestRedisRegistryBuckets(t *testing.T) {
	f := newFakeClockRedis(t)
	rdb, prefix, clock, rec := f.rdb, f.prefix, f.clock, f.rec
	ctx := context.Background()
	n1, n2 := f.node(presence.Config{NodeID: "n1"}), f.node(presence.Config{NodeID: "n2"})
	connectJoin(t, n2, "b1", "bob", "c0")
	const sockets = 500
	for i := range sockets {
		connectJoin(t, n1, fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i), fmt.Sprintf("c%d", i%10), fmt.Sprintf("c%d", (i+1)%10))
	}
	holder, err := rdb.HGet(ctx, prefix+":{g}:holder", "n1").Result()
	if err != nil {
		t.Fatal(err)
	}
	base := prefix + ":{n:n1}:" + strings.Split(holder, "|")[0] + ":socks"
	want := presence.RegMinBuckets
	for sockets > presence.RegPerBucket*want {
		want *= 2
	}
	if n, err := rdb.Get(ctx, base+":n").Int(); err != nil || n != want {
		t.Fatalf("bucket count %d (%v), want %d", n, err, want)
	}
	keys, err := rdb.Keys(ctx, base+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, k := range keys {
		if k == base+":n" {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(k, base+":"), "%d", &i); err != nil || i >= want {
			t.Fatalf("registry key %s: not a bucket below %d", k, want)
		}
		n := rdb.HLen(ctx, k).Val()
		if enc := rdb.ObjectEncoding(ctx, k).Val(); enc != "listpack" || n > 128 {
			t.Errorf("bucket %s: %d lines, encoding %s; want at most 128, listpack", k, n, enc)
		}
		lines += int(n)
	}
	if lines != sockets {
		t.Fatalf("%d registry lines, want %d", lines, sockets)
	}
	// s7's line where an earlier release kept it
	k7 := presence.RegistryBucketKey(base, "s7", want)
	line, err := rdb.HGet(ctx, k7, "s7").Result()
	if err != nil {
		k7 = presence.RegistryBucketKey(base, "s7", presence.RegMinBuckets) // placed before a doubling
		line, err = rdb.HGet(ctx, k7, "s7").Result()
	}
	if err != nil || line != "u7\tc7\tc8" {
		t.Fatalf("s7's line %q (%v), want u7, c7 and c8", line, err)
	}
	rdb.HDel(ctx, k7, "s7")
	rdb.HSet(ctx, base, "s7", line)
	for _, u := range []string{"u7", "u300"} {
		got, err := n1.UserSockets(ctx, u)
		if err != nil || len(got) != 1 || got[0].Node != "n1" || len(got[0].Conversations) != 2 {
			t.Fatalf("%s's sockets %+v (%v), want one on n1 in 2 conversations", u, got, err)
		}
	}

	// n1 crashes; n2 reaps it once n2's own lease is old enough and n1's lapsed
	rec.Take()
	for range 8 {
		clock.Advance(time.Second)
		if err := n2.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := rosterUsers(t, n2, "c0"); !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("roster of c0 after n1's reap: %v, want bob alone", got)
	}
	ids := make([]string, sockets)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%d", i)
	}
	ps, err := n2.Users(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Status != presence.Offline {
			t.Fatalf("%s is %s after n1's reap, want offline", p.UserID, p.Status)
		}
	}
	leaves := 0
	for _, ev := range rec.Take() {
		if strings.HasPrefix(ev, "leave ") && strings.HasSuffix(ev, " timeout") {
			leaves++
		}
	}
	if leaves != 2*sockets {
		t.Errorf("%d leaves (timeout), want %d", leaves, 2*sockets)
	}
	if keys := rdb.Keys(ctx, base+"*").Val(); len(keys) != 0 {
		t.Fatalf("registry keys left after the reap: %q", keys)
	}
}
