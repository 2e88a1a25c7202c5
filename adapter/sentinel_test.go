package adapter_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	_, addr := startSentinelOf(tb, redistest.StartProc(tb))
	return failoverClient(tb, addr)
}

// failoverClient is a client of "mymaster" through the sentinel at addr.
func failoverClient(tb testing.TB, addr string) *redis.Client {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "mymaster", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: true,
	})
	tb.Cleanup(func() { client.Close() })
	return client
}

// startSentinelOf starts a sentinel monitoring master as "mymaster" and
// returns a client of the sentinel and its address.
func startSentinelOf(tb testing.TB, master *redistest.Proc) (*redis.SentinelClient, string) {
	tb.Helper()
	port := redistest.FreePort(tb)
	dir := tb.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	cfg := "port " + strconv.Itoa(port) + "\nbind 127.0.0.1\ndir " + dir + "\n" +
		"sentinel monitor mymaster 127.0.0.1 " + strconv.Itoa(master.Port) + " 1\n" +
		"sentinel down-after-milliseconds mymaster 1000\n"
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(master.Bin, conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start sentinel: %v", err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { sc.Close() })
	eventually(tb, 5*time.Second, "sentinel knows mymaster", func() bool {
		_, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
		return err == nil
	})
	return sc, addr
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
	ctx := context.Background()
	master := redistest.StartProc(t)
	replica := redistest.StartProc(t)
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rc.Close() })
	if err := rc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	sc, addr := startSentinelOf(t, master)
	eventually(t, 20*time.Second, "sentinel knows the replica", func() bool {
		rs, err := sc.Replicas(ctx, "mymaster").Result()
		return err == nil && len(rs) == 1 && strings.Contains(rs[0]["flags"], "slave") && !strings.Contains(rs[0]["flags"], "disconnected") &&
			rs[0]["master-link-status"] == "ok"
	})
	cfg := adapter.Config{Prefix: uniquePrefix(t), Sharded: sharded, PublishTimeout: 300 * time.Millisecond, RequestsTimeout: time.Second}
	n1 := startGoNode(t, "n1", failoverClient(t, addr), cfg)
	n2 := startGoNode(t, "n2", failoverClient(t, addr), cfg)
	waitCluster(t, n1, n2)
	c1 := dialClient(t, n1.url, "c1", clientOpts{auth: auth("a", "r")})
	c2 := dialClient(t, n2.url, "c2", clientOpts{auth: auth("b", "r")})
	waitMembers(t, n1, map[string][]*wsClient{"r": {c1}})
	waitMembers(t, n2, map[string][]*wsClient{"r": {c2}})
	waitRooms(t, n1, n2)
	n1.io.To("r").Emit("before")
	c2.expect("before")

	if err := sc.Failover(ctx, "mymaster").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, 10*time.Second, "the replica promoted", func() bool {
		a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		return err == nil && len(a) == 2 && a[1] == strconv.Itoa(replica.Port)
	})
	promoted := time.Since(start)
	crossBothWays(t, 15*time.Second, "r", n1, n2, c1, c2)
	took := time.Since(start)
	t.Logf("cross-node broadcasts both ways %v after SENTINEL FAILOVER (the replica promoted after %v)", took.Round(time.Millisecond), promoted.Round(time.Millisecond))
	if after := took - promoted; after > 2500*time.Millisecond {
		t.Errorf("cross-node broadcasts resumed %v after the promotion, want within 2.5 s (the next command connection to the new master, within a second)", after)
	}
}
