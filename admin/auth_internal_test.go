package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
)

func TestSessions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := newSessions("token-0123456789abcdef", time.Hour)
	s.now = func() time.Time { return now }
	v := s.issue()
	nonce, _, ok := s.check(v)
	if !ok || nonce == "" {
		t.Fatalf("a fresh session %q refused", v)
	}
	f := strings.Split(v, ".")
	for name, bad := range map[string]string{
		"empty":            "",
		"two parts":        f[0] + "." + f[1],
		"later expiry":     "1900000000." + f[1] + "." + f[2],
		"other nonce":      f[0] + ".00" + f[1][2:] + "." + f[2],
		"mac of the csrf":  f[0] + "." + f[1] + "." + s.csrf(f[1]),
		"other token's":    newSessions("another-token-0123456789", time.Hour).issue(),
		"non-numeric time": "x." + f[1] + "." + s.mac("session", "x", f[1]),
	} {
		if _, _, ok := s.check(bad); ok {
			t.Errorf("%s: %q accepted", name, bad)
		}
	}
	now = now.Add(time.Hour)
	if _, _, ok := s.check(v); ok {
		t.Error("an expired session accepted")
	}
}

// TestFailuresWindow: the limit of wrong tokens per IP and its window, on
// one node (in memory) and across two nodes counting in Redis, where the
// failures of both count together; and a Redis that fails leaves the node
// counting on its own.
func TestFailuresWindow(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb, "test-admin-fails-")
	ctx := context.Background()
	for _, mode := range []string{"memory", "redis", "redis down"} {
		t.Run(mode, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			f1, f2 := newFailures(2, time.Minute), newFailures(2, time.Minute)
			down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
			defer down.Close()
			for _, f := range []*failures{f1, f2} {
				f.now = func() time.Time { return now }
				switch mode {
				case "redis":
					f.rdb, f.prefix = rdb, prefix
				case "redis down":
					f.rdb = down
				}
			}
			second := f2 // the other node
			if mode != "redis" {
				second = f1 // each node counts its own
			}
			if f1.add(ctx, "1.2.3.4") {
				t.Fatal("blocked from the first failure")
			}
			if _, blocked := f1.blocked(ctx, "1.2.3.4"); blocked {
				t.Fatal("blocked after one failure")
			}
			if !second.add(ctx, "1.2.3.4") {
				t.Fatal("the second failure did not start a block")
			}
			if wait, blocked := f1.blocked(ctx, "1.2.3.4"); !blocked || wait != time.Minute {
				t.Fatalf("after two: blocked %v for %v", blocked, wait)
			}
			if _, blocked := f1.blocked(ctx, "5.6.7.8"); blocked {
				t.Fatal("another address blocked")
			}
			now = now.Add(time.Minute)
			if _, blocked := f1.blocked(ctx, "1.2.3.4"); blocked {
				t.Fatal("still blocked after the window")
			}
			if mode == "redis" {
				if n := rdb.ZCard(ctx, f1.key("1.2.3.4")).Val(); n != 0 {
					t.Fatalf("%d forgotten failures kept in Redis", n)
				}
				if ttl := rdb.PTTL(ctx, f1.key("1.2.3.4")).Val(); ttl > time.Minute {
					t.Fatalf("key kept for %v", ttl)
				}
			} else if len(f1.byIP) != 0 {
				t.Fatalf("forgotten failures kept: %v", f1.byIP)
			}
		})
	}
}
