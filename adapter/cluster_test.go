package adapter_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedisCluster starts three masters (no replicas) and joins them with
// redis-cli --cluster create. It skips the test when redis-cli cannot.
func startRedisCluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Skipf("redis-cli not found: %v", err)
	}
	if out, err := exec.Command(cli, "--cluster", "help").CombinedOutput(); !strings.Contains(string(out), "host1:port1") {
		tb.Skipf("redis-cli --cluster unavailable: %v", err)
	}
	var addrs []string
	for range 3 {
		p := startRedisProc(tb, "--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+strconv.Itoa(time.Now().Nanosecond())+".conf",
			"--cluster-node-timeout", "2000")
		addrs = append(addrs, p.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		eventually(tb, 10*time.Second, "cluster ok on "+a, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		c.Close()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	eventually(tb, 10*time.Second, "cluster client sees 3 masters", func() bool {
		var n atomic.Int32
		err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			n.Add(1)
			return c.Ping(ctx).Err()
		})
		return err == nil && n.Load() == 3
	})
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// TestRedisCluster runs the Go-to-Go suite over a Redis Cluster: sharded
// mode (shard channels routed to the node owning their slot) and classic.
func TestRedisCluster(t *testing.T) {
	cc := startRedisCluster(t)
	// The rooms of the suite live on different nodes.
	masters := map[string]bool{}
	for _, room := range []string{"r1", "r2", "user:a", "user:b", "user:c", "user:d"} {
		node, err := cc.MasterForKey(context.Background(), "x#/#"+room+"#")
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	t.Logf("room channels spread over %d masters", len(masters))
	inModes(t, func(t *testing.T, sharded bool) { testGoGo(t, cc, sharded) })
}
