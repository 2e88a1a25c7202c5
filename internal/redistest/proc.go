package redistest

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proc is a redis-server of the test's own, on a free port (StartProc),
// for tests that stop and start Redis or need one set up differently from
// the shared server.
type Proc struct {
	Bin  string // the redis-server binary
	Port int

	tb   testing.TB
	dir  string
	args []string
	cmd  *exec.Cmd
	exit chan struct{}
}

// NeedServer returns the redis-server binary: it skips the test without
// one, or fails it under CI=true.
func NeedServer(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("redis-server not found under CI: %v", err)
		}
		tb.Skipf("redis-server not found: %v", err)
	}
	return bin
}

// FreePort returns a port in 6390..7389 nobody listens on, nor on its
// cluster bus port (port + 10000).
func FreePort(tb testing.TB) int {
	tb.Helper()
	for range 50 {
		port := 6390 + rand.IntN(1000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		ln.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	tb.Fatal("no free port")
	return 0
}

// StartProc starts a redis-server without persistence on a free port, with
// the extra arguments, and kills it at the end of the test.
func StartProc(tb testing.TB, extra ...string) *Proc {
	tb.Helper()
	r := &Proc{tb: tb, Bin: NeedServer(tb), Port: FreePort(tb), dir: tb.TempDir(), args: extra}
	r.Start()
	tb.Cleanup(r.Kill)
	return r
}

// Addr is the server's host:port.
func (r *Proc) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// Start starts the server (again) and waits until it answers.
func (r *Proc) Start() {
	r.tb.Helper()
	args := append([]string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--daemonize", "no", "--loglevel", "warning"}, r.args...)
	r.cmd = exec.Command(r.Bin, args...)
	if err := r.cmd.Start(); err != nil {
		r.tb.Fatalf("start redis-server: %v", err)
	}
	r.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { _ = cmd.Wait(); close(exit) }(r.cmd, r.exit)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer c.Close()
	Eventually(r.tb, 5*time.Second, "redis-server up on "+r.Addr(), func() bool {
		return c.Ping(context.Background()).Err() == nil
	})
}

// Client is a client of the server, closed at the end of the test.
func (r *Proc) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	r.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (r *Proc) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exit
	r.cmd = nil
}

// Cluster starts a Redis Cluster of three masters (no replicas), joined
// with redis-cli --cluster create, and returns a client of it. It skips
// the test when redis-cli cannot create clusters.
func Cluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	_, addrs := startCluster(tb, 0, "2000")
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	Eventually(tb, 10*time.Second, "cluster client sees 3 masters", func() bool {
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

// ClusterWithReplicas starts a Redis Cluster of three masters, each with a
// replica (cluster-node-timeout 1 s: a dead master's replica takes over in
// a few seconds), and returns its servers by address. It skips the test
// when redis-cli cannot create clusters.
func ClusterWithReplicas(tb testing.TB) map[string]*Proc {
	tb.Helper()
	procs, _ := startCluster(tb, 1, "1000")
	return procs
}

// ClusterPartial starts a Redis Cluster of three masters without replicas
// that serves the slots of the masters up while one is down
// (cluster-require-full-coverage no), and returns its servers by address.
// It skips the test when redis-cli cannot create clusters.
func ClusterPartial(tb testing.TB) map[string]*Proc {
	tb.Helper()
	procs, _ := startCluster(tb, 0, "1000", "--cluster-require-full-coverage", "no")
	return procs
}

// startCluster starts three masters with replicas replicas each, joins them
// with redis-cli --cluster create, and waits until every server says the
// cluster is ok and every replica has synced with its master (one that has
// not refuses to take over from it). It returns the servers, by address
// and in order.
func startCluster(tb testing.TB, replicas int, nodeTimeout string, extra ...string) (map[string]*Proc, []string) {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Skipf("redis-cli not found: %v", err)
	}
	if out, err := exec.Command(cli, "--cluster", "help").CombinedOutput(); !strings.Contains(string(out), "host1:port1") {
		tb.Skipf("redis-cli --cluster unavailable: %v", err)
	}
	procs := map[string]*Proc{}
	var addrs []string
	for range 3 * (1 + replicas) {
		p := StartProc(tb, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", nodeTimeout}, extra...)...)
		procs[p.Addr()] = p
		addrs = append(addrs, p.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		Eventually(tb, 20*time.Second, "cluster ok on "+a, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		Eventually(tb, 20*time.Second, "replication up on "+a, func() bool {
			info, err := c.Info(context.Background(), "replication").Result()
			return err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up"))
		})
		c.Close()
	}
	return procs, addrs
}

// Eventually polls cond until it holds, or fails the test once timeout
// has passed.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
