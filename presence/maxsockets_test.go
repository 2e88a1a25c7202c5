package presence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
	"github.com/redis/go-redis/v9"
)

func nopSink(context.Context, []presence.Event) {}

// maxSocketsSuite checks one backend's cap on a user's sockets
// (Socket.Max); n1 and n2 are two nodes' engines on the same backend.
func maxSocketsSuite(t *testing.T, n1, n2 presence.Engine) {
	ctx := context.Background()
	const max = 3
	connect := func(e presence.Engine, user, sid string) error {
		return e.Connect(ctx, presence.Socket{ID: sid, UserID: user, Max: max})
	}
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	full := func(err error, what string) {
		t.Helper()
		if !errors.Is(err, presence.ErrTooManySockets) {
			t.Fatalf("%s: %v, want ErrTooManySockets", what, err)
		}
	}

	// Sockets on both nodes count, cluster-wide.
	must(connect(n1, "u", "a1"), "a1")
	must(connect(n2, "u", "a2"), "a2")
	must(connect(n1, "u", "a3"), "a3")
	full(connect(n2, "u", "a4"), "a fourth socket, max 3")
	must(connect(n1, "u", "a3"), "a Connect of a counted socket tried again")
	must(connect(n2, "v", "b1"), "another user")
	// A refused socket is unknown to its node: it was not counted.
	if _, err := n2.Join(ctx, "a4", "c1"); !errors.Is(err, presence.ErrUnknown) {
		t.Errorf("Join of the refused socket: %v, want ErrUnknown", err)
	}
	// A disconnect frees a place at once (a flap grace or not).
	must(n2.Disconnect(ctx, "a2"), "disconnect a2")
	must(connect(n2, "u", "a4"), "a4 after a2 disconnected")
	full(connect(n1, "u", "a5"), "a5 with a1, a3, a4 connected")
	// Max 0 is no cap (a socket let in while the count was unavailable,
	// connected again later).
	must(n1.Connect(ctx, presence.Socket{ID: "a6", UserID: "u"}), "a6 without a cap")
	full(connect(n2, "u", "a7"), "a7 with four sockets")

	// Concurrent handshakes of one user on two nodes: exactly max counted.
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := n1
			if i%2 == 1 {
				e = n2
			}
			switch err := connect(e, "w", fmt.Sprint("w", i)); {
			case err == nil:
				admitted.Add(1)
			case !errors.Is(err, presence.ErrTooManySockets):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != max {
		t.Errorf("%d of 40 concurrent handshakes admitted, want %d", got, max)
	}
}

func TestMemoryMaxSockets(t *testing.T) {
	m := presence.NewMemory()
	cfg := func(node string) presence.Config {
		return presence.Config{NodeID: node, Sink: nopSink}
	}
	maxSocketsSuite(t, presence.NewMemoryEngine(m, cfg("n1")), presence.NewMemoryEngine(m, cfg("n2")))
}

func TestRedisMaxSockets(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	cfg := func(node string) presence.Config {
		return presence.Config{NodeID: node, Sink: nopSink}
	}
	n1 := presence.NewRedisEngine(rdb, cfg("n1"), presence.RedisConfig{Prefix: prefix})
	n2 := presence.NewRedisEngine(rdb, cfg("n2"), presence.RedisConfig{Prefix: prefix})
	maxSocketsSuite(t, n1, n2)
}

// Nodes of a release before 2026-12-06 reserve a place at the handshake
// (a sorted set of socket → deadline per user); while a cluster is being
// upgraded, a node of this release counts their live reservations, and
// not the lapsed ones.
func TestRedisMaxSocketsCountsOldReservations(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1", Sink: nopSink}, presence.RedisConfig{Prefix: prefix})
	now := time.Now()
	usr := prefix + ":{g}:usr:u"
	ms := func(t time.Time) float64 { return float64(t.UnixMilli()) }
	if err := rdb.ZAdd(ctx, usr,
		redis.Z{Score: ms(now.Add(30 * time.Second)), Member: "old1"},
		redis.Z{Score: ms(now.Add(-time.Second)), Member: "lapsed"},
	).Err(); err != nil {
		t.Fatal(err)
	}
	if err := eng.Connect(ctx, presence.Socket{ID: "s1", UserID: "u", Max: 2}); err != nil {
		t.Fatalf("s1 with one live reservation, max 2: %v", err)
	}
	if err := eng.Connect(ctx, presence.Socket{ID: "s2", UserID: "u", Max: 2}); !errors.Is(err, presence.ErrTooManySockets) {
		t.Fatalf("s2 with s1 and a live reservation, max 2: %v, want ErrTooManySockets", err)
	}
	// The old node's Connect of its reserved socket counts it once.
	if err := eng.Connect(ctx, presence.Socket{ID: "old1", UserID: "u", Max: 2}); err != nil {
		t.Fatalf("the reserved socket itself: %v", err)
	}
	if n := rdb.HGet(ctx, prefix+":{g}:users", "u").Val(); n[:2] != strconv.Itoa(2)+"|" {
		t.Errorf("user record %q, want two sockets", n)
	}
}
