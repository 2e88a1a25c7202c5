package adapter_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/adapter"
)

func modes() []struct {
	name    string
	sharded bool
} {
	return []struct {
		name    string
		sharded bool
	}{{"classic", false}, {"sharded", true}}
}

// inModes runs test once per mode, as a subtest named after the mode.
func inModes(t *testing.T, test func(t *testing.T, sharded bool)) {
	t.Helper()
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) { test(t, m.sharded) })
	}
}

// ackWith answers every acknowledgement request with reply.
func ackWith(reply ...any) func(string, []any) []any {
	return func(ev string, args []any) []any {
		if ev == "qa" {
			return []any{[]any{"x", "y"}} // one argument, an array
		}
		return reply
	}
}

func auth(user string, rooms ...string) map[string]any {
	list := make([]any, len(rooms))
	for i, r := range rooms {
		list[i] = r
	}
	return map[string]any{"user": user, "rooms": list}
}

// TestGoGo runs three Go servers on one Redis, in both modes.
func TestGoGo(t *testing.T) {
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) { testGoGo(t, needRedis(t), m.sharded) })
	}
}

func testGoGo(t *testing.T, rdb redis.UniversalClient, sharded bool) {
	prefix := uniquePrefix(t)
	cfg := adapter.Config{Prefix: prefix, Sharded: sharded, RequestsTimeout: 2 * time.Second}
	n1 := startGoNode(t, "n1", rdb, cfg)
	n2 := startGoNode(t, "n2", rdb, cfg)
	n3 := startGoNode(t, "n3", rdb, cfg)
	waitCluster(t, n1, n2, n3)

	c1 := dialClient(t, n1.url, "c1", clientOpts{auth: auth("a", "r1"), ackReply: ackWith("c1")})
	c2 := dialClient(t, n2.url, "c2", clientOpts{auth: auth("b", "r1", "r2"), ackReply: ackWith("c2")})
	c3 := dialClient(t, n3.url, "c3", clientOpts{auth: auth("c", "r2"), ackReply: ackWith("c3")})
	c4 := dialClient(t, n1.url, "c4", clientOpts{auth: auth("d", "r1", "r2"), ackReply: ackWith("c4")})
	all := []*wsClient{c1, c2, c3, c4}
	waitMembers(t, n1, map[string][]*wsClient{"r1": {c1, c4}, "r2": {c4}})
	waitMembers(t, n2, map[string][]*wsClient{"r1": {c2}, "r2": {c2}})
	waitMembers(t, n3, map[string][]*wsClient{"r2": {c3}})
	waitRooms(t, n1, n2, n3)

	t.Run("server count", func(t *testing.T) {
		for _, n := range []*goNode{n1, n2, n3} {
			if got := n.serverCount(t); got != 3 {
				t.Errorf("%s: server count %d, want 3", n.name, got)
			}
			if got := n.adapter().ServerCount(); got != 3 {
				t.Errorf("%s: ServerCount() %d, want 3", n.name, got)
			}
		}
	})

	broadcasts := []struct {
		name string
		from *goNode
		emit func(ev string)
		want []int
	}{
		{"one room", n1, func(ev string) { n1.io.To("r1").Emit(ev, "x") }, []int{1, 1, 0, 1}},
		{"two rooms", n2, func(ev string) { n2.io.To("r1", "r2").Emit(ev, "x") }, []int{1, 1, 1, 1}},
		{"except", n3, func(ev string) { n3.io.To("r1").Except("r2").Emit(ev, "x") }, []int{1, 0, 0, 0}},
		{"except only", n1, func(ev string) { n1.io.Except("r1").Emit(ev) }, []int{0, 0, 1, 0}},
		{"user room", n3, func(ev string) { n3.io.To("user:b").Emit(ev, map[string]any{"k": 1}) }, []int{0, 1, 0, 0}},
		{"socket id room", n3, func(ev string) { n3.io.To(socket.Room(c2.sid)).Emit(ev) }, []int{0, 1, 0, 0}},
		{"local", n1, func(ev string) { n1.io.Local().To("r1").Emit(ev) }, []int{1, 0, 0, 1}},
		{"everyone", n2, func(ev string) { n2.io.Emit(ev, 1, 2) }, []int{1, 1, 1, 1}},
	}
	for i, bc := range broadcasts {
		t.Run(bc.name, func(t *testing.T) {
			ev := fmt.Sprintf("m%d", i)
			bc.emit(ev)
			fence(t, bc.from.emit, all...)
			got(t, ev, all, bc.want)
		})
	}

	t.Run("payload", func(t *testing.T) {
		type payload struct {
			ConversationID string    `json:"conversationId"`
			At             time.Time `json:"at"`
			Count          int       `json:"count"`
			Skip           string    `json:"-"`
			Bin            []byte    `json:"bin,omitempty"`
		}
		at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
		n1.io.To("user:b").Emit("p", payload{ConversationID: "c1", At: at, Count: 7}, []byte{1, 2, 3}, 1.5, -3)
		ev := c2.expect("p")
		obj, _ := ev.args[0].(map[string]any)
		if obj["conversationId"] != "c1" || obj["count"] != 7.0 || obj["at"] != at.Format(time.RFC3339Nano) || len(obj) != 3 {
			t.Errorf("struct arrived as %#v", ev.args[0])
		}
		if b, _ := ev.args[1].([]byte); string(b) != "\x01\x02\x03" {
			t.Errorf("binary arrived as %#v", ev.args[1])
		}
		if ev.args[2] != 1.5 || ev.args[3] != -3.0 {
			t.Errorf("numbers arrived as %#v %#v", ev.args[2], ev.args[3])
		}
	})

	t.Run("fetch sockets", func(t *testing.T) {
		sockets := fetch(t, n1.io.In("r1"))
		var ids []string
		for _, s := range sockets {
			ids = append(ids, string(s.Id()))
			if !s.Rooms().Has("r1") {
				t.Errorf("socket %s rooms %v lack r1", s.Id(), s.Rooms().Keys())
			}
			data, _ := s.Data().(map[string]any)
			if data["user"] == "" || data["user"] == nil {
				t.Errorf("socket %s data %#v", s.Id(), s.Data())
			}
			if s.Handshake() == nil || s.Handshake().Auth["user"] == nil {
				t.Errorf("socket %s handshake %#v", s.Id(), s.Handshake())
			}
		}
		sort.Strings(ids)
		want := []string{c1.sid, c2.sid, c4.sid}
		sort.Strings(want)
		if !slices.Equal(ids, want) {
			t.Fatalf("fetched %v, want %v", ids, want)
		}
		for _, s := range sockets {
			if string(s.Id()) == c2.sid {
				_ = s.Emit("direct", "hi")
			}
		}
		c2.expect("direct")
		if all := fetch(t, n3.io.Local()); len(all) != 1 {
			t.Errorf("local fetch on n3: %d sockets, want 1", len(all))
		}
	})

	t.Run("server-side emit", func(t *testing.T) {
		if err := n1.io.ServerSideEmit("note", "hello", 42); err != nil {
			t.Fatal(err)
		}
		for _, n := range []*goNode{n2, n3} {
			eventually(t, 3*time.Second, n.name+" note", func() bool { return len(n.sseCalls("note")) == 1 })
			if args := n.sseCalls("note")[0].args; len(args) != 2 || args[0] != "hello" || args[1] != 42.0 {
				t.Errorf("%s got %#v", n.name, args)
			}
		}
		if len(n1.sseCalls("note")) != 0 {
			t.Error("the sender got its own server-side emit")
		}
	})

	t.Run("server-side emit with ack", func(t *testing.T) {
		res := make(chan struct {
			args []any
			err  error
		}, 1)
		start := time.Now()
		_ = n1.io.ServerSideEmitWithAck("ping-sse", "hi")(func(args []any, err error) {
			res <- struct {
				args []any
				err  error
			}{args, err}
		})
		r := <-res
		if r.err != nil {
			t.Fatalf("ack error %v after %v", r.err, time.Since(start))
		}
		var from []string
		for _, a := range r.args {
			m, _ := a.(map[string]any)
			if m["got"] != "hi" {
				t.Errorf("response %#v", a)
			}
			f, _ := m["from"].(string)
			from = append(from, f)
		}
		sort.Strings(from)
		if !slices.Equal(from, []string{"n2", "n3"}) {
			t.Errorf("responses from %v", from)
		}
	})

	t.Run("broadcast with ack", func(t *testing.T) {
		args, err := emitWithAck(n2.io.To("r1").Timeout(2*time.Second), "q", "?")
		if err != nil {
			t.Fatalf("ack error: %v (responses %v)", err, args)
		}
		var from []string
		for _, a := range args {
			s, _ := a.(string)
			from = append(from, s)
		}
		sort.Strings(from)
		if !slices.Equal(from, []string{"c1", "c2", "c4"}) {
			t.Errorf("responses %v", args)
		}
		fence(t, n2.emit, all...)
		got(t, "q", all, []int{1, 1, 0, 1}) // the sender's own client c2 too: once
		// A single ack argument that is an array stays one response.
		args, err = emitWithAck(n3.io.To("r2").Timeout(2*time.Second), "qa")
		if err != nil || len(args) != 3 {
			t.Fatalf("responses %#v, err %v", args, err)
		}
		for _, a := range args {
			if l, ok := a.([]any); !ok || len(l) != 2 {
				t.Errorf("response %#v, want [x y]", a)
			}
		}
		fence(t, n3.emit, all...)
		got(t, "qa", all, []int{0, 1, 1, 1})
	})

	t.Run("remote join and leave", func(t *testing.T) {
		n2.io.In("user:a").SocketsJoin("r9")
		n1.waitRoom(t, "r9", true, "c1 in r9")
		waitRooms(t, n1)
		n3.io.To("r9").Emit("m9")
		fence(t, n3.emit, all...)
		got(t, "m9", all, []int{1, 0, 0, 0})
		n3.io.In("user:a").SocketsLeave("r9")
		n1.waitRoom(t, "r9", false, "c1 out of r9")
	})

	t.Run("all rooms", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		rooms, err := n1.adapter().AllRooms(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []socket.Room{"r1", "r2", "user:a", "user:b", "user:c", "user:d", socket.Room(c3.sid)} {
			if !rooms.Has(r) {
				t.Errorf("all rooms lack %s: %v", r, rooms.Keys())
			}
		}
	})

	t.Run("emitter", func(t *testing.T) {
		em := adapter.NewEmitter(rdb, adapter.EmitterConfig{Prefix: prefix, Sharded: sharded})
		emit := func(ev string, args ...any) { _ = em.Emit(ev, args...) }
		if err := em.To("user:c").Emit("be", map[string]any{"n": 1}); err != nil {
			t.Fatal(err)
		}
		if err := em.To("r1").Except("r2").Emit("be2"); err != nil {
			t.Fatal(err)
		}
		if err := em.To("r2").Emit("be3", []byte{9}); err != nil {
			t.Fatal(err)
		}
		fence(t, emit, all...)
		got(t, "be", all, []int{0, 0, 1, 0})
		got(t, "be2", all, []int{1, 0, 0, 0})
		got(t, "be3", all, []int{0, 1, 1, 1})
		if err := em.Emit("connect"); err == nil {
			t.Error("reserved event accepted")
		}

		if err := em.In("user:c").SocketsJoin("r7"); err != nil {
			t.Fatal(err)
		}
		n3.waitRoom(t, "r7", true, "c3 in r7")
		if err := em.In("user:c").SocketsLeave("r7"); err != nil {
			t.Fatal(err)
		}
		n3.waitRoom(t, "r7", false, "c3 out of r7")
		if err := em.ServerSideEmit("note", "from-emitter"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 3*time.Second, "emitter note on n3", func() bool {
			return hasCallWith(n3.sseCalls("note"), "from-emitter")
		})
	})

	// What a backend publishes by mistake on the broadcast channel: options
	// that are no list of rooms reach nobody (read as "no rooms" they went
	// to every socket), a packet of no packet type or of a namespace that
	// is no string is dropped, and numbers JSON has no form for arrive as
	// null, as a Node server's JSON.stringify writes them (they made the
	// packet unencodable: the clients got an event without data).
	t.Run("malformed from Redis", func(t *testing.T) {
		if sharded {
			t.Skip("the classic channel's messages; the sharded decoder shares decodeOpts and decodePacket (wire_decode_test.go)")
		}
		publish := func(packet, opts any) {
			b, err := msgpack.Marshal([]any{"emitter", packet, opts})
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.Publish(context.Background(), prefix+"#/#", b).Err(); err != nil {
				t.Fatal(err)
			}
		}
		leak := map[string]any{"type": 2, "data": []any{"leak"}, "nsp": "/"}
		for _, opts := range []any{
			map[string]any{"rooms": "r1"},
			map[string]any{"rooms": map[string]any{"r1": true}},
			map[string]any{"rooms": []any{"r1"}, "except": "r2"},
			map[string]any{"rooms": []any{map[string]any{}}},
			"r1", nil, 5,
		} {
			publish(leak, opts)
		}
		publish(map[string]any{"type": "2", "data": []any{"leak"}, "nsp": "/"}, map[string]any{})
		publish(map[string]any{"type": 2, "data": []any{"leak"}, "nsp": 5}, map[string]any{})
		publish(map[string]any{"type": 2.5, "data": []any{"leak"}, "nsp": "/"}, map[string]any{})
		publish(map[string]any{"type": 2, "data": []any{"nan", map[string]any{"x": math.NaN(), "ok": 1}, math.Inf(1), []any{math.Inf(-1)}}, "nsp": "/"},
			map[string]any{"rooms": []any{"user:c"}})
		fence(t, func(ev string, args ...any) {
			_ = adapter.NewEmitter(rdb, adapter.EmitterConfig{Prefix: prefix}).Emit(ev, args...)
		}, all...)
		got(t, "leak", all, []int{0, 0, 0, 0})
		ev, ok := c3.wait("nan", 3*time.Second)
		if !ok {
			t.Fatal("the event with NaN and Infinity did not arrive")
		}
		if want := []any{map[string]any{"x": nil, "ok": 1.0}, nil, []any{nil}}; !reflect.DeepEqual(ev.args, want) {
			t.Errorf("args %#v, want %#v", ev.args, want)
		}
	})

	t.Run("remote disconnect", func(t *testing.T) {
		n3.io.In("user:d").DisconnectSockets(false)
		c4.expect("disconnect")
		n1.waitRoom(t, "user:d", false, "c4 gone from n1")
		fence(t, n2.emit, c1, c2, c3)
	})
}

// fetch runs FetchSockets and returns its sockets.
func fetch(tb testing.TB, op *socket.BroadcastOperator) []*socket.RemoteSocket {
	tb.Helper()
	var out []*socket.RemoteSocket
	var err error
	op.FetchSockets()(func(s []*socket.RemoteSocket, e error) { out, err = s, e })
	if err != nil {
		tb.Fatalf("fetch sockets: %v", err)
	}
	return out
}

// emitWithAck emits with acknowledgements and waits for the callback.
func emitWithAck(op *socket.BroadcastOperator, ev string, args ...any) ([]any, error) {
	type result struct {
		args []any
		err  error
	}
	res := make(chan result, 1)
	op.EmitWithAck(ev, args...)(func(a []any, err error) { res <- result{a, err} })
	select {
	case r := <-res:
		return r.args, r.err
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("no ack callback")
	}
}

// TestDelivered: Config.Delivered is told of each broadcast another node
// delivered here, with its packet's data, and of none of this node's own.
func TestDelivered(t *testing.T) {
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) {
			rdb := needRedis(t)
			prefix := uniquePrefix(t)
			var mu sync.Mutex
			var seen []any
			cfg := adapter.Config{Prefix: prefix, Sharded: m.sharded, RequestsTimeout: 2 * time.Second}
			cfg2 := cfg
			cfg2.Delivered = func(_ string, p *parser.Packet) {
				mu.Lock()
				seen = append(seen, p.Data)
				mu.Unlock()
			}
			n1, n2, _, c2 := pairInRoom(t, rdb, cfg, cfg2, "r1")

			n2.io.To("r1").Emit("own", 1)
			n1.io.To("r1").Emit("state", map[string]any{"conversationId": "c", "userId": "u", "state": nil})
			c2.expect("own")
			c2.expect("state")
			eventually(t, 3*time.Second, "Delivered told of n1's broadcast", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(seen) > 0
			})
			mu.Lock()
			defer mu.Unlock()
			want := []any{[]any{"state", map[string]any{"conversationId": "c", "userId": "u", "state": nil}}}
			if !reflect.DeepEqual(seen, want) {
				t.Errorf("Delivered got %#v, want %#v (n1's broadcast only)", seen, want)
			}
		})
	}
}
