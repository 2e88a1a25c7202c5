package adapter_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/internal/logbuf"
)

// TestNoRedis runs a node whose Redis is unreachable from the start: its
// clients are served, publishes fail fast and are counted (the queue is
// bounded), cluster requests answer with this node's share and an error.
func TestNoRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var dials atomic.Int64
	var d net.Dialer
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: 1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { rdb.Close() })

	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) {
			obs := &countingObserver{}
			logs := &logbuf.Buffer{}
			n := startGoNode(t, "n", rdb, adapter.Config{
				Log:    slog.New(slog.NewJSONHandler(logs, nil)).With("node", "n-operator"),
				Prefix: uniquePrefix(t), Sharded: m.sharded, Observer: obs,
				PublishTimeout: 200 * time.Millisecond, MaxPendingPublishes: 8, RequestsTimeout: 2 * time.Second,
			})
			c := dialClient(t, n.url, "c", clientOpts{auth: auth("a", "r"), ackReply: ackWith("c")})
			// The library answers the CONNECT before its connection handler
			// has joined the socket to its rooms.
			waitMembers(t, n, map[string][]*wsClient{"r": {c}})

			start := time.Now()
			const burst = 100
			for i := range burst {
				n.io.To("r").Emit("m", i)
			}
			for range burst {
				if _, ok := c.wait("m", time.Second); !ok {
					t.Fatal("local client missed a broadcast")
				}
			}
			eventually(t, 2*time.Second, "every publish counted as failed", func() bool { return obs.failed.Load() >= burst })
			t.Logf("%d publishes failed within %v: %d with the queue full, %d with the breaker open, %d after trying",
				burst, time.Since(start), obs.queueFull.Load(), obs.down.Load(), burst-obs.queueFull.Load()-obs.down.Load())
			if obs.queueFull.Load() == 0 {
				t.Error("the bounded queue never overflowed")
			}
			if obs.published.Load() != 0 {
				t.Errorf("%d publishes succeeded without Redis", obs.published.Load())
			}

			start = time.Now()
			var sockets []*socket.RemoteSocket
			n.io.In("r").FetchSockets()(func(s []*socket.RemoteSocket, e error) { sockets, err = s, e })
			if err == nil || len(sockets) != 1 {
				t.Errorf("fetch sockets: %d sockets, err %v", len(sockets), err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("fetch sockets took %v without Redis", d)
			}

			args, err := emitWithAck(n.io.To("r").Timeout(time.Second), "q")
			if err != nil || len(args) != 1 || args[0] != "c" {
				t.Errorf("broadcast with ack: %v, %v", args, err)
			}

			res := make(chan error, 1)
			_ = n.io.ServerSideEmitWithAck("ping-sse")(func(_ []any, err error) { res <- err })
			select {
			case err := <-res:
				if err == nil {
					t.Error("server-side emit with ack succeeded without Redis")
				}
			case <-time.After(3 * time.Second):
				t.Error("server-side emit with ack never answered")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if rooms, err := n.adapter().AllRooms(ctx); err == nil || !rooms.Has("r") {
				t.Errorf("all rooms: %v, %v", rooms, err)
			}
			if n.adapter().Subscribed("") {
				t.Error("subscribed without Redis")
			}
			if err := n.adapter().Reachable(); !errors.Is(err, adapter.ErrRedisUnavailable) {
				t.Errorf("Reachable without Redis: %v, want ErrRedisUnavailable", err)
			}

			// Its lines keep the operator's node id: the adapter's own
			// is another key (the same key twice lost the first in most
			// JSON readers; failover audit).
			eventually(t, 2*time.Second, "a subscription failure logged", func() bool { return strings.Contains(logs.String(), "redis subscription failed") })
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if strings.Count(line, `"node":`) != 1 || !strings.Contains(line, `"node":"n-operator"`) {
					t.Errorf("log line without the operator's node id, once: %s", line)
				}
				if strings.Contains(line, "redis subscription failed") && !strings.Contains(line, `"adapter_uid":`) {
					t.Errorf("subscription line without the adapter's uid: %s", line)
				}
			}

			// The subscriber keeps retrying, with a growing pause
			// (at most 2 s): not a dial loop.
			before := dials.Load()
			time.Sleep(2 * time.Second)
			if got := dials.Load() - before; got > 10 {
				t.Errorf("%d dials to the unreachable Redis in 2 s of an idle node", got)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	if _, err := adapter.New(context.Background(), nil, adapter.Config{}); err == nil {
		t.Error("nil client accepted")
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	if _, err := adapter.New(context.Background(), rdb, adapter.Config{PublishTimeout: -1}); err == nil {
		t.Error("negative timeout accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	b, err := adapter.New(ctx, rdb, adapter.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the builder's goroutines end with its context
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSetAdapterAfterNewServer plugs the builder into a running server.
func TestSetAdapterAfterNewServer(t *testing.T) {
	rdb := needRedis(t)
	io := socket.NewServer(nil, nil)
	b, err := adapter.New(context.Background(), rdb, adapter.Config{Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	io.SetAdapter(b)
	a, ok := io.Of("/", nil).Adapter().(*adapter.NamespaceAdapter)
	if !ok {
		t.Fatalf("namespace adapter is %T", io.Of("/", nil).Adapter())
	}
	eventually(t, 5*time.Second, "subscribed", func() bool { return a.Subscribed("") })
	if c := a.ServerCount(); c != 1 {
		t.Errorf("server count %d", c)
	}
	// A namespace created later gets its own adapter.
	if _, ok := io.Of("/other", nil).Adapter().(*adapter.NamespaceAdapter); !ok {
		t.Error("new namespace without the Redis adapter")
	}
	io.Close(nil)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
