package adapter_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/adapter"
)

// TestInterop runs a Go server and a Node server (socket.io 4.8 with
// @socket.io/redis-adapter) on one Redis, in both modes.
func TestInterop(t *testing.T) {
	inModes(t, testInterop)
}

func modeName(sharded bool) string {
	if sharded {
		return "sharded"
	}
	return "classic"
}

// waitShardSubscribers waits until channel has n shard subscribers.
func waitShardSubscribers(tb testing.TB, rdb *redis.Client, channel string, n int64) {
	tb.Helper()
	eventually(tb, 5*time.Second, "subscribers of "+channel, func() bool {
		res, err := rdb.PubSubShardNumSub(context.Background(), channel).Result()
		return err == nil && res[channel] >= n
	})
}

func strs(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func sorted(s ...string) []string {
	sort.Strings(s)
	return s
}

func testInterop(t *testing.T, sharded bool) {
	rdb := needRedis(t)
	prefix := uniquePrefix(t)
	ns := startNodeServer(t, modeName(sharded), prefix)
	g := startGoNode(t, "go", rdb, adapter.Config{
		Prefix: prefix, Sharded: sharded, RequestsTimeout: 3 * time.Second, AcceptClassicEmitter: sharded,
	})
	waitCluster(t, g)
	ns.waitServerCount(t, 2)

	cg := dialClient(t, g.url, "cg", clientOpts{auth: auth("g", "r1"), ackReply: ackWith("cg")})
	cn := dialClient(t, ns.url, "cn", clientOpts{auth: auth("n", "r1", "r2"), ackReply: ackWith("cn")})
	cg2 := dialClient(t, g.url, "cg2", clientOpts{auth: auth("g2", "r2"), ackReply: ackWith("cg2")})
	clients := []*wsClient{cg, cn, cg2}
	waitMembers(t, g, map[string][]*wsClient{"r1": {cg}, "r2": {cg2}, "user:g": {cg}, "user:g2": {cg2}})
	waitRooms(t, g)
	if sharded {
		for room, n := range map[string]int64{"r1": 2, "r2": 2, "user:n": 1} {
			waitShardSubscribers(t, rdb, prefix+"#/#"+room+"#", n)
		}
	}

	t.Run("server count", func(t *testing.T) {
		if c := g.serverCount(t); c != 2 {
			t.Errorf("go counts %d servers", c)
		}
		if c := ns.call(t, "serverCount", nil); c != 2.0 {
			t.Errorf("node counts %v servers", c)
		}
	})

	t.Run("go to node", func(t *testing.T) {
		g.io.To("r1").Emit("a", "x", 1.5)
		g.io.To("r2").Except("user:n").Emit("a2")
		g.io.To("user:n").Emit("a3", map[string]any{"k": []any{1, "v"}})
		fence(t, g.emit, clients...)
		got(t, "a", clients, []int{1, 1, 0})
		got(t, "a2", clients, []int{0, 0, 1})
		got(t, "a3", clients, []int{0, 1, 0})
	})

	t.Run("node to go", func(t *testing.T) {
		ns.call(t, "broadcast", map[string]any{"rooms": []any{"r1"}, "event": "b", "args": []any{"x"}})
		ns.call(t, "broadcast", map[string]any{"rooms": []any{"r1", "r2"}, "except": []any{"user:g"}, "event": "b2"})
		ns.call(t, "broadcast", map[string]any{"rooms": []any{"user:g2"}, "event": "b3", "args": []any{map[string]any{"deep": []any{1, 2}}}})
		ns.call(t, "broadcast", map[string]any{"rooms": []any{cg.sid}, "event": "b4"})
		fence(t, ns.emit, clients...)
		got(t, "b", clients, []int{1, 1, 0})
		got(t, "b2", clients, []int{0, 1, 1})
		got(t, "b3", clients, []int{0, 0, 1})
		got(t, "b4", clients, []int{1, 0, 0})
	})

	t.Run("binary", func(t *testing.T) {
		g.io.To("user:n").Emit("bin", []byte{1, 2, 3}, map[string]any{"b": []byte{4}})
		ev := cn.expect("bin")
		if b, _ := ev.args[0].([]byte); !bytes.Equal(b, []byte{1, 2, 3}) {
			t.Errorf("node client got %#v", ev.args[0])
		}
		if m, _ := ev.args[1].(map[string]any); !bytes.Equal(m["b"].([]byte), []byte{4}) {
			t.Errorf("node client got %#v", ev.args[1])
		}
		ns.call(t, "broadcast", map[string]any{"rooms": []any{"user:g"}, "event": "bin2", "args": []any{[]byte{5, 6}}})
		ev = cg.expect("bin2")
		if b, _ := ev.args[0].([]byte); !bytes.Equal(b, []byte{5, 6}) {
			t.Errorf("go client got %#v", ev.args[0])
		}
	})

	t.Run("go fetches node sockets", func(t *testing.T) {
		sockets := fetch(t, g.io.In("r1"))
		var ids []string
		for _, s := range sockets {
			ids = append(ids, string(s.Id()))
			if string(s.Id()) == cn.sid {
				data, _ := s.Data().(map[string]any)
				if data["user"] != "n" || data["node"] != "node" {
					t.Errorf("node socket data %#v", s.Data())
				}
				if s.Handshake().Auth["user"] != "n" || s.Handshake().Address == "" {
					t.Errorf("node socket handshake %#v", s.Handshake())
				}
				if !s.Rooms().Has("r2") || !s.Rooms().Has("user:n") {
					t.Errorf("node socket rooms %v", s.Rooms().Keys())
				}
				_ = s.Emit("direct", "from-go")
			}
		}
		if !slices.Equal(sorted(ids...), sorted(cg.sid, cn.sid)) {
			t.Fatalf("fetched %v, want %v", ids, []string{cg.sid, cn.sid})
		}
		cn.expect("direct")
	})

	t.Run("node fetches go sockets", func(t *testing.T) {
		res, _ := ns.call(t, "fetchSockets", map[string]any{"rooms": []any{"r2"}}).([]any)
		var ids []string
		for _, e := range res {
			s, _ := e.(map[string]any)
			id, _ := s["id"].(string)
			ids = append(ids, id)
			if id == cg2.sid {
				data, _ := s["data"].(map[string]any)
				hs, _ := s["handshake"].(map[string]any)
				auth, _ := hs["auth"].(map[string]any)
				if data["user"] != "g2" || auth["user"] != "g2" || !slices.Contains(strs(s["rooms"]), "r2") {
					t.Errorf("go socket as node sees it: %#v", s)
				}
				// Node's shapes: the address without its port, the time as a JS Date string
				if a, _ := hs["address"].(string); a != "127.0.0.1" {
					t.Errorf("handshake.address %q, want 127.0.0.1", a)
				}
				if tm, _ := hs["time"].(string); !jsDateRE.MatchString(tm) {
					t.Errorf("handshake.time %q, not as Date.prototype.toString writes it", tm)
				}
			}
		}
		if !slices.Equal(sorted(ids...), sorted(cn.sid, cg2.sid)) {
			t.Fatalf("node fetched %v", ids)
		}
		ns.call(t, "remoteEmit", map[string]any{"sid": cg2.sid, "event": "direct2", "args": []any{"from-node"}})
		cg2.expect("direct2")
	})

	t.Run("server-side emit go to node", func(t *testing.T) {
		_ = g.io.ServerSideEmit("note", "hi", 1)
		eventually(t, 3*time.Second, "node got note", func() bool { return len(ns.sseCalls("note")) > 0 })
		if args := ns.sseCalls("note")[0].args; fmt.Sprint(args) != "[hi 1]" {
			t.Errorf("node got %v", args)
		}
		res := make(chan []any, 1)
		errs := make(chan error, 1)
		_ = g.io.ServerSideEmitWithAck("ping-sse", "q")(func(args []any, err error) { res <- args; errs <- err })
		args := <-res
		if err := <-errs; err != nil || len(args) != 1 {
			t.Fatalf("responses %#v, err %v", args, err)
		}
		if m, _ := args[0].(map[string]any); m["from"] != "node" || m["got"] != "q" {
			t.Errorf("response %#v", args[0])
		}
	})

	t.Run("server-side emit node to go", func(t *testing.T) {
		ns.call(t, "serverSideEmit", map[string]any{"event": "note", "args": []any{"from-node", 2}})
		eventually(t, 3*time.Second, "go got note", func() bool { return len(g.sseCalls("note")) > 0 })
		if args := g.sseCalls("note")[0].args; fmt.Sprint(args) != "[from-node 2]" {
			t.Errorf("go got %v", args)
		}
		res, _ := ns.call(t, "serverSideEmitWithAck", map[string]any{"event": "ping-sse", "args": []any{"z"}}).([]any)
		if len(res) != 1 {
			t.Fatalf("node got responses %#v", res)
		}
		if m, _ := res[0].(map[string]any); m["from"] != "go" || m["got"] != "z" {
			t.Errorf("node got response %#v", res[0])
		}
	})

	t.Run("broadcast with ack go to node", func(t *testing.T) {
		args, err := emitWithAck(g.io.To("r1").Timeout(2*time.Second), "q")
		if err != nil || !slices.Equal(strs(args), []string{"cg", "cn"}) {
			t.Fatalf("responses %#v, err %v", args, err)
		}
		args, err = emitWithAck(g.io.To("r2").Timeout(2*time.Second), "qa")
		if err != nil || len(args) != 2 {
			t.Fatalf("responses %#v, err %v", args, err)
		}
		for _, a := range args {
			if fmt.Sprint(a) != "[x y]" {
				t.Errorf("response %#v, want [x y]", a)
			}
		}
		fence(t, g.emit, clients...)
		got(t, "q", clients, []int{1, 1, 0})
		got(t, "qa", clients, []int{0, 1, 1})
	})

	t.Run("broadcast with ack node to go", func(t *testing.T) {
		res := ns.call(t, "broadcastWithAck", map[string]any{"rooms": []any{"r1"}, "event": "q"})
		if !slices.Equal(strs(res), []string{"cg", "cn"}) {
			t.Fatalf("node got %#v", res)
		}
		res = ns.call(t, "broadcastWithAck", map[string]any{"rooms": []any{"r2"}, "event": "qa"})
		if list, _ := res.([]any); len(list) != 2 || fmt.Sprint(list) != "[[x y] [x y]]" {
			t.Fatalf("node got %#v", res)
		}
		fence(t, ns.emit, clients...)
		got(t, "q", clients, []int{1, 1, 0})
		got(t, "qa", clients, []int{0, 1, 1})
	})

	t.Run("remote join and leave", func(t *testing.T) {
		g.io.In("user:n").SocketsJoin("r5")
		eventually(t, 3*time.Second, "node socket in r5", func() bool {
			return slices.Contains(strs(ns.call(t, "localRooms", nil)), "r5")
		})
		g.io.In("user:n").SocketsLeave("r5")
		eventually(t, 3*time.Second, "node socket out of r5", func() bool {
			return !slices.Contains(strs(ns.call(t, "localRooms", nil)), "r5")
		})
		ns.call(t, "socketsJoin", map[string]any{"target": "user:g", "rooms": []any{"r6"}})
		g.waitRoom(t, "r6", true, "go socket in r6")
		ns.call(t, "socketsLeave", map[string]any{"target": "user:g", "rooms": []any{"r6"}})
		g.waitRoom(t, "r6", false, "go socket out of r6")
	})

	t.Run("all rooms", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		rooms, err := g.adapter().AllRooms(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []socket.Room{"user:n", "user:g", "r1", "r2", socket.Room(cn.sid)} {
			if !rooms.Has(r) {
				t.Errorf("go's all rooms lack %s", r)
			}
		}
		if !sharded { // Node's sharded allRooms() is local only
			nodeRooms := strs(ns.call(t, "allRooms", nil))
			for _, r := range []string{"user:g", "user:g2", cg.sid} {
				if !slices.Contains(nodeRooms, r) {
					t.Errorf("node's all rooms lack %s: %v", r, nodeRooms)
				}
			}
		}
	})

	t.Run("node emitter reaches go", func(t *testing.T) {
		ns.call(t, "emitterEmit", map[string]any{"rooms": []any{"user:g"}, "event": "ne", "args": []any{"e", []byte{7}}})
		ns.call(t, "emitterEmit", map[string]any{"rooms": []any{"r2"}, "except": []any{"user:n"}, "event": "ne2"})
		ev := cg.expect("ne")
		if b, _ := ev.args[1].([]byte); !bytes.Equal(b, []byte{7}) {
			t.Errorf("got %#v", ev.args)
		}
		cg2.expect("ne2")
		ns.call(t, "emitterSocketsJoin", map[string]any{"target": "user:g", "rooms": []any{"r8"}})
		g.waitRoom(t, "r8", true, "go socket in r8")
		ns.call(t, "emitterServerSideEmit", map[string]any{"event": "note", "args": []any{"node-emitter"}})
		eventually(t, 3*time.Second, "go got emitter note", func() bool {
			return hasCallWith(g.sseCalls("note"), "node-emitter")
		})
	})

	t.Run("go emitter reaches node", func(t *testing.T) {
		em := adapter.NewEmitter(rdb, adapter.EmitterConfig{Prefix: prefix, Sharded: sharded})
		if err := em.To("user:n").Emit("ge", 1, []byte{8}); err != nil {
			t.Fatal(err)
		}
		if err := em.To("r1", "r2").Except("user:g2").Emit("ge2"); err != nil {
			t.Fatal(err)
		}
		ev := cn.expect("ge")
		if b, _ := ev.args[1].([]byte); ev.args[0] != 1.0 || !bytes.Equal(b, []byte{8}) {
			t.Errorf("got %#v", ev.args)
		}
		fence(t, func(ev string, args ...any) { _ = em.Emit(ev, args...) }, clients...)
		got(t, "ge2", clients, []int{1, 1, 0})
		if err := em.In("user:n").SocketsJoin("r11"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 3*time.Second, "node socket in r11", func() bool {
			return slices.Contains(strs(ns.call(t, "localRooms", nil)), "r11")
		})
		if err := em.ServerSideEmit("note", "go-emitter"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 3*time.Second, "node got go emitter note", func() bool {
			return hasCallWith(ns.sseCalls("note"), "go-emitter")
		})
	})

	t.Run("remote disconnect", func(t *testing.T) {
		g.io.In("user:n").DisconnectSockets(false)
		cn.expect("disconnect")
		ns.call(t, "disconnectSockets", map[string]any{"target": "user:g2"})
		cg2.expect("disconnect")
		g.waitRoom(t, "user:g2", false, "cg2 gone")
	})
}

// jsDateRE matches Date.prototype.toString in UTC.
var jsDateRE = regexp.MustCompile(`^[A-Z][a-z]{2} [A-Z][a-z]{2} \d{2} \d{4} \d{2}:\d{2}:\d{2} GMT\+0000 \(Coordinated Universal Time\)$`)
