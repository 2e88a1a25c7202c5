package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store/storetest"
)

// holdNodeID keeps node id held on the Redis at addr under prefix, as a
// live node would, until the test ends.
func holdNodeID(t *testing.T, addr, prefix, id string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: id}, presence.RedisConfig{Prefix: prefix})
	if err := eng.Claim(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = eng.Close()
		_ = rdb.Close()
	})
}

// serveEnv is a cluster node's environment.
func serveEnv(t *testing.T, redisAddr, prefix, id string) func(string) (string, bool) {
	env := map[string]string{
		"REDIS_URL":             "redis://" + redisAddr,
		"DATABASE_URL":          storetest.FreshPostgres(t, "presenced_nodeid"),
		"PRESENCE_JWT_SECRET":   "0123456789abcdef0123",
		"PRESENCE_NODE_ID":      id,
		"PRESENCE_REDIS_PREFIX": prefix,
		"PRESENCE_ADDR":         "127.0.0.1:0",
		"PRESENCE_LOG_LEVEL":    "error",
	}
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serveExit runs serve until it returns (at most within) and maps its
// error to the exit code.
func serveExit(t *testing.T, getenv func(string) (string, bool), within time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var stderr strings.Builder
	err := run(ctx, []string{"serve"}, getenv, io.Discard, io.Discard)
	if ctx.Err() != nil {
		t.Fatalf("serve still running after %s (err %v)", within, err)
	}
	code := exitCode(err, &stderr)
	return code, stderr.String()
}

// A node whose id is held by a live node refuses to start: exit 2, with
// the setting named.
func TestServeNodeIDTaken(t *testing.T) {
	opt := redistest.Client(t).Options()
	prefix, id := "test-nodeid-"+randomSuffix(), "dup-"+randomSuffix()
	t.Cleanup(func() { cleanPrefix(opt.Addr, prefix) })
	holdNodeID(t, opt.Addr, prefix, id)
	code, msg := serveExit(t, serveEnv(t, opt.Addr, prefix, id), 20*time.Second)
	if code != 2 || !strings.Contains(msg, "PRESENCE_NODE_ID") || !strings.Contains(msg, id) {
		t.Fatalf("exit %d %q, want 2 naming PRESENCE_NODE_ID and %s", code, msg, id)
	}
}

// A node that starts while Redis is unreachable checks its id at its first
// connection, and exits 2 then if the id is taken. (Redis is reached
// through a proxy that closes every connection until the id is held. It
// listens from the start: a port freed and listened on again 2 s later
// was taken meanwhile, once, by the node's own dial to it, which the
// kernel connected to itself.)
func TestServeNodeIDTakenLate(t *testing.T) {
	opt := redistest.Client(t).Options()
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	var reachable atomic.Bool
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			if !reachable.Load() {
				_ = c.Close()
				continue
			}
			up, err := net.Dial("tcp", opt.Addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	prefix, id := "test-nodeid-"+randomSuffix(), "dup-"+randomSuffix()
	t.Cleanup(func() { cleanPrefix(opt.Addr, prefix) })
	getenv := serveEnv(t, proxy.Addr().String(), prefix, id)
	type result struct {
		code int
		msg  string
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var stderr strings.Builder
		err := run(ctx, []string{"serve"}, getenv, io.Discard, io.Discard)
		res <- result{exitCode(err, &stderr), stderr.String()}
	}()
	time.Sleep(2 * time.Second) // the node is up, without Redis
	holdNodeID(t, opt.Addr, prefix, id)
	reachable.Store(true)
	r := <-res
	if r.code != 2 || !strings.Contains(r.msg, "PRESENCE_NODE_ID") {
		t.Fatalf("exit %d %q, want 2 naming PRESENCE_NODE_ID", r.code, r.msg)
	}
}

func cleanPrefix(addr, prefix string) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

// A node whose Pub/Sub mode (PRESENCE_REDIS_SHARDED) is not that of a live
// node of the cluster refuses to start: exit 2, naming the setting and
// the other node. (A mismatched node ran with no word, sharing the
// presence data and hearing none of the others' room events.)
func TestServePubSubModeMismatch(t *testing.T) {
	rdb := redistest.Client(t)
	opt := rdb.Options()
	prefix, id := "test-mode-"+randomSuffix(), "sharded-"+randomSuffix()
	t.Cleanup(func() { cleanPrefix(opt.Addr, prefix) })
	live, err := adapter.New(context.Background(), rdb, adapter.Config{Prefix: prefix, Sharded: true, Name: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Close() })
	for deadline := time.Now().Add(5 * time.Second); ; {
		if other, _ := adapter.OtherMode(context.Background(), rdb, prefix, false); other == id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sharded node's beacon is not in Redis")
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, msg := serveExit(t, serveEnv(t, opt.Addr, prefix, "classic-"+randomSuffix()), 20*time.Second)
	if code != 2 || !strings.Contains(msg, "PRESENCE_REDIS_SHARDED") || !strings.Contains(msg, id) {
		t.Fatalf("exit %d %q, want 2 naming PRESENCE_REDIS_SHARDED and %s", code, msg, id)
	}
}
