package adapter_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
)

// startSentinel starts a master and a sentinel monitoring it as "mymaster"
// and returns a failover client.
func startSentinel(tb testing.TB) *redis.Client {
	tb.Helper()
	master := redistest.StartProc(tb)
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
	defer sc.Close()
	eventually(tb, 5*time.Second, "sentinel knows mymaster", func() bool {
		_, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
		return err == nil
	})
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "mymaster", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: true,
	})
	tb.Cleanup(func() { client.Close() })
	return client
}

// TestRedisSentinel runs the Go-to-Go suite through Sentinel.
func TestRedisSentinel(t *testing.T) {
	client := startSentinel(t)
	inModes(t, func(t *testing.T, sharded bool) { testGoGo(t, client, sharded) })
}
