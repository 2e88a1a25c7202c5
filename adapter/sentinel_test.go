package adapter_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/internal/redistest"
)

// startSentinel starts a master and a sentinel monitoring it as "mymaster"
// and returns a failover client.
func startSentinel(tb testing.TB) *redis.Client {
	tb.Helper()
	_, addr := redistest.StartSentinel(tb, redistest.StartProc(tb))
	return redistest.FailoverClient(tb, addr)
}

// TestRedisSentinel runs the Go-to-Go suite through Sentinel.
func TestRedisSentinel(t *testing.T) {
	client := startSentinel(t)
	inModes(t, func(t *testing.T, sharded bool) { testGoGo(t, client, sharded) })
}

// After SENTINEL FAILOVER, room broadcasts cross nodes again within about
// a second of the promotion. The demoted master stays up and answers
// PINGs, with the nodes' subscriptions on it, while the nodes publish to
// the new master: before the subscriber's probe (subscriber.checkEcho)
// nothing crossed nodes for 10-11 s, until Sentinel turned the old master
// into a replica (a second failover audit); with the probe alone, 3-4 s
// after the promotion; since the subscriber follows the command client's
// dials (masterWatch), 1.0-1.1 s.
func TestSentinelFailoverFollowed(t *testing.T) {
	inModes(t, testSentinelFailoverFollowed)
}

func testSentinelFailoverFollowed(t *testing.T, sharded bool) {
	replica, sc, addr := redistest.ReplicatedSentinel(t)
	cfg := adapter.Config{Prefix: uniquePrefix(t), Sharded: sharded, PublishTimeout: 300 * time.Millisecond, RequestsTimeout: time.Second}
	n1 := startGoNode(t, "n1", redistest.FailoverClient(t, addr), cfg)
	n2 := startGoNode(t, "n2", redistest.FailoverClient(t, addr), cfg)
	waitCluster(t, n1, n2)
	c1 := dialClient(t, n1.url, "c1", clientOpts{auth: auth("a", "r")})
	c2 := dialClient(t, n2.url, "c2", clientOpts{auth: auth("b", "r")})
	waitMembers(t, n1, map[string][]*wsClient{"r": {c1}})
	waitMembers(t, n2, map[string][]*wsClient{"r": {c2}})
	waitRooms(t, n1, n2)
	n1.io.To("r").Emit("before")
	c2.expect("before")

	start := time.Now()
	promotedAt := redistest.FailOver(t, sc, replica)
	promoted := promotedAt.Sub(start)
	crossBothWays(t, 15*time.Second, "r", n1, n2, c1, c2)
	took := time.Since(start)
	t.Logf("cross-node broadcasts both ways %v after SENTINEL FAILOVER (the replica promoted after %v)", took.Round(time.Millisecond), promoted.Round(time.Millisecond))
	if after := took - promoted; after > 2500*time.Millisecond {
		t.Errorf("cross-node broadcasts resumed %v after the promotion, want within 2.5 s (the next command connection to the new master, within a second)", after)
	}
}
