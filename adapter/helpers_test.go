package adapter_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"go.uber.org/goleak"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions()...)
}

func leakOptions() []goleak.Option {
	return nil
}

// redisURL is the test Redis (redistest.URL), for the Node servers.
func redisURL() string { return redistest.URL() }

// needRedis returns a client of the test Redis (redistest.Client).
func needRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	return redistest.Client(tb)
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

// uniquePrefix is a channel prefix no other test uses.
func uniquePrefix(tb testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := nonWord.ReplaceAllString(tb.Name(), "-")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "t-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
}

// countingObserver counts what the adapter reports.
type countingObserver struct {
	published atomic.Int64
	failed    atomic.Int64
	received  atomic.Int64
	queueFull atomic.Int64
	down      atomic.Int64
	mu        sync.Mutex
	lastErr   error
}

func (o *countingObserver) Published() { o.published.Add(1) }
func (o *countingObserver) PublishFailed(_ string, err error) {
	o.failed.Add(1)
	switch {
	case errors.Is(err, adapter.ErrPublishQueueFull):
		o.queueFull.Add(1)
	case errors.Is(err, adapter.ErrRedisUnavailable):
		o.down.Add(1)
	}
	o.mu.Lock()
	o.lastErr = err
	o.mu.Unlock()
}
func (o *countingObserver) Received() { o.received.Add(1) }

func (o *countingObserver) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastErr
}

// goNode is a Socket.IO server with the Redis adapter on an httptest server.
// Its sockets join "user:<auth.user>" and the rooms of auth.rooms, keep
// {user} as data, join a room on a "join" event and leave one on "leave".
type goNode struct {
	name string
	io   *socket.Server
	ts   *httptest.Server
	b    *adapter.Builder
	url  string

	mu  sync.Mutex
	sse []sseCall
}

type sseCall struct {
	name string
	args []any
}

func startGoNode(tb testing.TB, name string, client redis.UniversalClient, cfg adapter.Config) *goNode {
	tb.Helper()
	b, err := adapter.New(context.Background(), client, cfg)
	if err != nil {
		tb.Fatalf("adapter.New: %v", err)
	}
	opts := socket.DefaultServerOptions()
	opts.SetServeClient(false)
	opts.SetAdapter(b)
	io := socket.NewServer(nil, opts)
	n := &goNode{name: name, io: io, b: b}
	io.On("connection", func(args ...any) {
		s := args[0].(*socket.Socket)
		auth := s.Handshake().Auth
		user, _ := auth["user"].(string)
		if user != "" {
			s.Join(socket.Room("user:" + user))
		}
		if rooms, ok := auth["rooms"].([]any); ok {
			for _, r := range rooms {
				if room, ok := r.(string); ok {
					s.Join(socket.Room(room))
				}
			}
		}
		s.SetData(map[string]any{"user": user, "node": name})
		_ = s.On("join", func(args ...any) {
			if room, ok := args[0].(string); ok {
				s.Join(socket.Room(room))
			}
			if ack, ok := args[len(args)-1].(socket.Ack); ok {
				ack([]any{"ok"}, nil)
			}
		})
	})
	_ = io.Of("/", nil).On("echo", func(args ...any) {
		if ack, ok := args[len(args)-1].(socket.Ack); ok {
			ack([]any{args[0]}, nil)
		}
	})
	for _, ev := range []string{"note", "ping-sse"} {
		_ = io.Of("/", nil).On(ev, func(args ...any) {
			n.mu.Lock()
			n.sse = append(n.sse, sseCall{name: ev, args: args})
			n.mu.Unlock()
			if len(args) > 0 {
				if ack, ok := args[len(args)-1].(socket.Ack); ok {
					ack([]any{map[string]any{"from": name, "got": args[0]}}, nil)
				}
			}
		})
	}
	n.ts = httptest.NewServer(io.ServeHandler(nil))
	n.url = n.ts.URL
	tb.Cleanup(n.stop)
	return n
}

func (n *goNode) stop() {
	done := make(chan struct{})
	n.io.Close(func(error) { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	n.ts.Close()
	_ = n.b.Close()
}

func (n *goNode) adapter() *adapter.NamespaceAdapter {
	return n.io.Of("/", nil).Adapter().(*adapter.NamespaceAdapter)
}

// waitRoom waits until the node has room (in) or has it no more (!in);
// what names the wait in the failure.
func (n *goNode) waitRoom(t *testing.T, room socket.Room, in bool, what string) {
	t.Helper()
	eventually(t, 3*time.Second, what, func() bool {
		_, ok := n.adapter().Rooms().Load(room)
		return ok == in
	})
}

func (n *goNode) sseCalls(name string) []sseCall {
	n.mu.Lock()
	defer n.mu.Unlock()
	return callsNamed(n.sse, name)
}

// copyElems is a copy of an array or map with f applied to each element;
// any other value is returned as it is.
func copyElems(v any, f func(any) any) any {
	switch t := v.(type) {
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = f(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = f(e)
		}
		return out
	}
	return v
}

// hasCallWith says whether one of calls has arg0 as its first argument.
func hasCallWith(calls []sseCall, arg0 any) bool {
	return slices.ContainsFunc(calls, func(c sseCall) bool { return c.args[0] == arg0 })
}

// callsNamed are the calls of event name, in order.
func callsNamed(calls []sseCall, name string) []sseCall {
	var out []sseCall
	for _, c := range calls {
		if c.name == name {
			out = append(out, c)
		}
	}
	return out
}

func (n *goNode) serverCount(tb testing.TB) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := n.adapter().ServerCountContext(ctx)
	if err != nil {
		tb.Fatalf("server count: %v", err)
	}
	return c
}

// eventually polls cond until it holds or timeout passes.
var eventually = redistest.Eventually

// waitCluster waits until every node is subscribed and counts n servers.
func waitCluster(tb testing.TB, nodes ...*goNode) {
	tb.Helper()
	for _, n := range nodes {
		eventually(tb, 5*time.Second, n.name+" subscribed", func() bool { return n.adapter().Subscribed("") })
	}
	for _, n := range nodes {
		eventually(tb, 5*time.Second, n.name+" server count", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			c, err := n.adapter().ServerCountContext(ctx)
			return err == nil && c >= int64(len(nodes))
		})
	}
}

// waitRooms waits until each node is subscribed to the channels of the rooms
// it has (sharded mode), so that a broadcast to them arrives.
func waitRooms(tb testing.TB, nodes ...*goNode) {
	tb.Helper()
	for _, n := range nodes {
		a := n.adapter()
		for _, room := range a.Rooms().Keys() {
			eventually(tb, 5*time.Second, n.name+" subscribed to "+string(room), func() bool { return a.Subscribed(room) })
		}
	}
}

// waitMembers waits until node n's adapter has each client in the rooms
// named for it: the library answers a client's CONNECT before the
// "connection" handlers have joined its rooms, so a client that is
// connected may not be in them yet.
func waitMembers(tb testing.TB, n *goNode, rooms map[string][]*wsClient) {
	tb.Helper()
	a := n.adapter()
	for room, clients := range rooms {
		for _, c := range clients {
			eventually(tb, 5*time.Second, c.name+" in "+room+" on "+n.name, func() bool {
				sids, ok := a.Rooms().Load(socket.Room(room))
				return ok && sids.Has(socket.SocketId(c.sid))
			})
		}
	}
}

// fence has emit send a unique "fence" event to every client and waits for
// each client to get it: whatever that sender published before has arrived.
func fence(tb testing.TB, emit func(ev string, args ...any), clients ...*wsClient) {
	tb.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	emit("fence", id)
	for _, c := range clients {
		for {
			ev, ok := c.wait("fence", 3*time.Second)
			if !ok {
				tb.Fatalf("client %s: no fence", c.name)
			}
			if len(ev.args) > 0 && ev.args[0] == id {
				break
			}
		}
	}
}

// emitter of a node, for fence.
func (n *goNode) emit(ev string, args ...any) { _ = n.io.Emit(ev, args...) }

// got checks that each client received exactly want[i] events named name:
// it waits up to 3s for the expected ones (on a Redis Cluster, messages of
// different shard channels are not ordered with the fence), then counts.
func got(tb testing.TB, name string, clients []*wsClient, want []int) {
	tb.Helper()
	for i, c := range clients {
		deadline := time.Now().Add(3 * time.Second)
		for c.count(name) < want[i] && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := len(c.take(name)); n != want[i] {
			tb.Errorf("client %s got %d %q events, want %d", c.name, n, name, want[i])
		}
	}
}

// pairInRoom starts node n1 (cfg1) and node n2 (cfg2) and a client on
// each, both in room, and waits until each node knows the other and the
// room.
func pairInRoom(t *testing.T, rdb redis.UniversalClient, cfg1, cfg2 adapter.Config, room string) (n1, n2 *goNode, c1, c2 *wsClient) {
	t.Helper()
	n1 = startGoNode(t, "n1", rdb, cfg1)
	n2 = startGoNode(t, "n2", rdb, cfg2)
	waitCluster(t, n1, n2)
	c1 = dialClient(t, n1.url, "c1", clientOpts{auth: auth("a", room)})
	c2 = dialClient(t, n2.url, "c2", clientOpts{auth: auth("b", room)})
	waitMembers(t, n1, map[string][]*wsClient{room: {c1}})
	waitMembers(t, n2, map[string][]*wsClient{room: {c2}})
	waitRooms(t, n1, n2)
	return n1, n2, c1, c2
}

// crossBothWays waits until a broadcast to room from n1 reaches c2 (on n2),
// and one from n2 reaches c1 (on n1): each event sent again until one
// arrives, within timeout.
func crossBothWays(t *testing.T, timeout time.Duration, room socket.Room, n1, n2 *goNode, c1, c2 *wsClient) {
	t.Helper()
	for i, dir := range []struct {
		from *goNode
		to   *wsClient
	}{{n1, c2}, {n2, c1}} {
		ev := fmt.Sprintf("after%d", i)
		eventually(t, timeout, ev+" crosses nodes", func() bool {
			dir.from.io.To(room).Emit(ev)
			_, ok := dir.to.wait(ev, 100*time.Millisecond)
			return ok
		})
	}
}
