package adapter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"

	"github.com/presenced/presenced/adapter"
)

// TestRedisRestart kills Redis under two nodes and starts it again: the
// nodes keep serving their own clients, publishes fail fast and are counted
// meanwhile, and cross-node broadcasts resume by themselves.
func TestRedisRestart(t *testing.T) {
	inModes(t, testRedisRestart)
}

func testRedisRestart(t *testing.T, sharded bool) {
	srv := redistest.StartProc(t)
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1, DialerRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { rdb.Close() })
	obs1, obs2 := &countingObserver{}, &countingObserver{}
	cfg := adapter.Config{Prefix: uniquePrefix(t), Sharded: sharded, PublishTimeout: 300 * time.Millisecond, RequestsTimeout: time.Second}
	cfg1, cfg2 := cfg, cfg
	cfg1.Observer, cfg2.Observer = obs1, obs2
	n1, n2, c1, c2 := pairInRoom(t, rdb, cfg1, cfg2, "r")

	n1.io.To("r").Emit("before")
	c1.expect("before")
	c2.expect("before")

	srv.Kill()

	// Local delivery does not wait for Redis.
	failedBefore := obs1.failed.Load()
	start := time.Now()
	n1.io.To("r").Emit("during")
	if _, ok := c1.wait("during", time.Second); !ok {
		t.Fatal("local client did not get a broadcast during the outage")
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("local delivery took %v during the outage", d)
	}
	// Publishes fail fast, and are counted.
	for i := range 20 {
		n1.io.To("r").Emit("during", i)
	}
	eventually(t, 2*time.Second, "21 failed publishes counted", func() bool {
		return obs1.failed.Load()-failedBefore >= 21
	})
	t.Logf("21 publishes failed within %v (last error: %v)", time.Since(start), obs1.err())
	if _, ok := c2.wait("during", 300*time.Millisecond); ok {
		t.Error("a broadcast crossed nodes without Redis")
	}
	// Each node knows it is cut off.
	for _, n := range []*goNode{n1, n2} {
		eventually(t, 5*time.Second, n.name+" unreachable", func() bool { return errors.Is(n.adapter().Reachable(), adapter.ErrRedisUnavailable) })
	}
	// The nodes still serve their clients.
	if r := c1.emitWithAck("join", "r2"); len(r) != 1 || r[0] != "ok" {
		t.Errorf("client on n1 answered %v during the outage", r)
	}
	if c1.isClosed() || c2.isClosed() {
		t.Fatal("a client lost its connection")
	}

	time.Sleep(500 * time.Millisecond) // let the subscribers retry in vain a few times
	srv.Start()
	restarted := time.Now()

	// Cross-node broadcasts resume, both ways.
	crossBothWays(t, 10*time.Second, "r", n1, n2, c1, c2)
	t.Logf("cross-node broadcasts resumed %v after the restart", time.Since(restarted))
	for _, n := range []*goNode{n1, n2} {
		eventually(t, 5*time.Second, n.name+" resubscribed", func() bool { return n.adapter().Subscribed("") })
		eventually(t, 5*time.Second, n.name+" reachable", func() bool { return n.adapter().Reachable() == nil })
		if c := n.serverCount(t); c != 2 {
			t.Errorf("%s counts %d servers after the restart", n.name, c)
		}
	}
	if c1.isClosed() || c2.isClosed() {
		t.Fatal("a client lost its connection")
	}
	if obs2.received.Load() == 0 || obs1.published.Load() == 0 {
		t.Errorf("observer saw published=%d received=%d", obs1.published.Load(), obs2.received.Load())
	}
}
