package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
)

// After a Redis Cluster master dies and its replica takes over, the server's
// client sends the keys of those slots to the new master within seconds of
// the cluster being whole again, and the readiness check fails while the
// dead master still serves slots in the client's map. With go-redis's
// default slot map reload (60 s) the client kept sending to the dead
// master for up to a minute (failover audit).
func TestClusterFailoverFollowed(t *testing.T) {
	procs := redistest.ClusterWithReplicas(t)
	var addrs []string
	for a := range procs {
		addrs = append(addrs, a)
	}
	opts := &redis.UniversalOptions{Addrs: addrs, IsClusterMode: true, ContextTimeoutEnabled: true, MaxRetries: 1, DialerRetries: 1}
	rdb := newRedisClient(opts)
	defer rdb.Close()
	ctx := t.Context()
	const key = "{g}:failover"
	redistest.Eventually(t, 10*time.Second, "a first write", func() bool { return rdb.Set(ctx, key, "1", 0).Err() == nil })
	if err := redisAnswers(ctx, rdb); err != nil {
		t.Fatalf("readiness before the failover: %v", err)
	}
	master, err := rdb.(*redis.ClusterClient).MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	dead := master.Options().Addr
	procs[dead].Kill()
	killed := time.Now()
	var other *redis.Client
	for a := range procs {
		if a != dead {
			other = redis.NewClient(&redis.Options{Addr: a})
			defer other.Close()
			break
		}
	}
	// the readiness check fails while the dead master is in the map
	sawDown := false
	redistest.Eventually(t, 30*time.Second, "the replica of "+dead+" taking over", func() bool {
		if !sawDown {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			sawDown = redisAnswers(cctx, rdb) != nil
			cancel()
		}
		info, err := other.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
		m, err := other.ClusterShards(ctx).Result()
		if err != nil {
			return false
		}
		for _, sh := range m {
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Port == int64(procs[dead].Port) && n.Health == "online" {
					return false
				}
			}
		}
		return true
	})
	whole := time.Now()
	if !sawDown {
		t.Error("the readiness check never failed while a master was dead")
	}
	redistest.Eventually(t, 10*time.Second, "a write to the slot of the dead master", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return rdb.Set(cctx, key, "2", 0).Err() == nil
	})
	t.Logf("killed %s; the cluster whole %s later, the write %s after that",
		dead, whole.Sub(killed).Round(time.Millisecond), time.Since(whole).Round(time.Millisecond))
	redistest.Eventually(t, 10*time.Second, "the readiness check passing again", func() bool { return redisAnswers(ctx, rdb) == nil })
}

// A Redis that refuses the URL's password, or needs one the URL lacks, is
// told apart from one that cannot be reached: the start's log line names
// the credentials.
func TestRedisRefusedCredentials(t *testing.T) {
	r := redistest.StartProc(t)
	ctx := context.Background()
	if err := r.Client().ConfigSet(ctx, "requirepass", "right-"+randomSuffix()).Err(); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{"redis://:wrong@" + r.Addr(), "redis://" + r.Addr(), "redis://someone:wrong@" + r.Addr()} {
		opts, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(opts)
		err = c.Ping(ctx).Err()
		_ = c.Close()
		if err == nil || !redisRefusedCredentials(err) {
			t.Errorf("%s: %v, want it taken for refused credentials", url, err)
		}
	}
	// a server that is not there is not
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)), MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err == nil || redisRefusedCredentials(err) {
		t.Errorf("unreachable: %v, want an error not taken for refused credentials", err)
	}
}
