package redistest

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
)

// StartSentinel starts a sentinel monitoring master as "mymaster" (down
// after 1 s) and returns a client of the sentinel and its address.
func StartSentinel(tb testing.TB, master *Proc) (*redis.SentinelClient, string) {
	tb.Helper()
	port := FreePort(tb)
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
	Eventually(tb, 5*time.Second, "sentinel knows mymaster", func() bool {
		_, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
		return err == nil
	})
	return sc, addr
}

// FailoverClient is a client of "mymaster" through the sentinel at addr.
func FailoverClient(tb testing.TB, addr string) *redis.Client {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "mymaster", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: true,
	})
	tb.Cleanup(func() { client.Close() })
	return client
}

// ReplicatedSentinel starts a master, a replica of it and a sentinel
// monitoring them, and waits until the sentinel knows the replica in sync.
// It returns the replica, and the sentinel's client and address.
func ReplicatedSentinel(tb testing.TB) (replica *Proc, sc *redis.SentinelClient, addr string) {
	tb.Helper()
	ctx := context.Background()
	master := StartProc(tb)
	replica = StartProc(tb)
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	tb.Cleanup(func() { rc.Close() })
	if err := rc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port)).Err(); err != nil {
		tb.Fatal(err)
	}
	sc, addr = StartSentinel(tb, master)
	Eventually(tb, 20*time.Second, "sentinel knows the replica", func() bool {
		rs, err := sc.Replicas(ctx, "mymaster").Result()
		return err == nil && len(rs) == 1 && strings.Contains(rs[0]["flags"], "slave") && !strings.Contains(rs[0]["flags"], "disconnected") &&
			rs[0]["master-link-status"] == "ok"
	})
	return replica, sc, addr
}

// FailOver has the sentinel fail mymaster over to replica and waits until
// it names the replica master; it returns when that was.
func FailOver(tb testing.TB, sc *redis.SentinelClient, replica *Proc) time.Time {
	tb.Helper()
	ctx := context.Background()
	if err := sc.Failover(ctx, "mymaster").Err(); err != nil {
		tb.Fatal(err)
	}
	Eventually(tb, 10*time.Second, "the replica promoted", func() bool {
		a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		return err == nil && len(a) == 2 && a[1] == strconv.Itoa(replica.Port)
	})
	return time.Now()
}
