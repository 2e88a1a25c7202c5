package adapter_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/internal/redistest"
)

// Redis Pub/Sub keeps nothing: what is published while a node's
// subscription is lost never reaches it. Config.Regained tells the node
// when its subscription to the requests (server-side emits) is back, so
// that it can check what it may have missed; a subscription that was never
// lost does not call it.
func TestRegainedAfterTheSubscriptionIsLost(t *testing.T) {
	opts := redistest.Options(t)
	opts.ClientName = uniquePrefix(t) // to find this node's connections
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	var regained atomic.Int64
	n := startGoNode(t, "n1", rdb, adapter.Config{Prefix: uniquePrefix(t),
		Regained: func(nsp string) {
			if nsp == "/" {
				regained.Add(1)
			}
		}})
	waitCluster(t, n)
	time.Sleep(200 * time.Millisecond)
	if got := regained.Load(); got != 0 {
		t.Fatalf("Regained called %d times with no loss", got)
	}
	// drop the node's Pub/Sub connections, as a link to Redis that fails
	admin := needRedis(t)
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for line := range strings.SplitSeq(list, "\n") {
		if !strings.Contains(line, " name="+opts.ClientName+" ") || !strings.Contains(line, " flags=P ") {
			continue
		}
		for f := range strings.FieldsSeq(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				if err := admin.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
					t.Fatal(err)
				}
				killed++
			}
		}
	}
	if killed == 0 {
		t.Fatalf("no Pub/Sub connection of the node in CLIENT LIST:\n%s", list)
	}
	eventually(t, 10*time.Second, "Regained called after the loss", func() bool { return regained.Load() >= 1 })
}

// A server-side event of the program's own whose peers (Config.Peers) are
// more than the servers subscribed is answered by those subscribed, with
// ErrPeersUnreachable: the others will not get it, and the caller must know.
func TestOwnEventWithAPeerNotSubscribed(t *testing.T) {
	rdb := needRedis(t)
	n := startGoNode(t, "n1", rdb, adapter.Config{Prefix: uniquePrefix(t), OwnEvents: "own:",
		Peers: func(context.Context) (int64, error) { return 2, nil }})
	waitCluster(t, n)
	res := make(chan error, 1)
	start := time.Now()
	_ = n.io.ServerSideEmitWithAck("own:ping")(func(_ []any, err error) { res <- err })
	err := <-res
	if !errors.Is(err, adapter.ErrPeersUnreachable) {
		t.Fatalf("own event with a peer not subscribed: %v, want ErrPeersUnreachable", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("told after %v; want at once", took)
	}
}
