package adapter_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/adapter"
)

// capture records the raw messages of some channels.
type capture struct {
	mu   sync.Mutex
	msgs []captured
	ps   *redis.PubSub
	done chan struct{}
}

type captured struct {
	channel string
	payload []byte
}

func startCapture(tb testing.TB, rdb *redis.Client, sharded bool, prefix string) *capture {
	tb.Helper()
	ctx := context.Background()
	var ps *redis.PubSub
	if sharded {
		ps = rdb.SSubscribe(ctx, prefix+"#/#", prefix+"#/#r1#")
	} else {
		ps = rdb.PSubscribe(ctx, prefix+"*")
	}
	if _, err := ps.Receive(ctx); err != nil {
		tb.Fatal(err)
	}
	if sharded {
		if _, err := ps.Receive(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	c := &capture{ps: ps, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, captured{m.Channel, []byte(m.Payload)})
			c.mu.Unlock()
		}
	}()
	tb.Cleanup(func() { ps.Close(); <-c.done })
	return c
}

// next waits for the first message on channel from sender (its uid in the
// payload), and forgets everything captured so far.
func (c *capture) next(tb testing.TB, channel, uid string) []byte {
	tb.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for i, m := range c.msgs {
			if m.channel == channel && bytes.Contains(m.payload, []byte(uid)) {
				c.msgs = c.msgs[i+1:]
				c.mu.Unlock()
				return m.payload
			}
		}
		c.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	tb.Fatalf("no message on %s from %s", channel, uid)
	return nil
}

// requestID finds the requestId of a message (JSON or msgpack).
func requestID(tb testing.TB, payload []byte) string {
	tb.Helper()
	var v any
	var err error
	if payload[0] == '{' {
		v, err = decodeJSON(payload)
	} else {
		v, err = adapter.DecodeMsgpack(payload)
	}
	if err != nil {
		tb.Fatal(err)
	}
	m, _ := v.(map[string]any)
	if id, ok := m["requestId"].(string); ok {
		return id
	}
	if d, ok := m["data"].(map[string]any); ok {
		id, _ := d["requestId"].(string)
		return id
	}
	return ""
}

// startWireNode starts a Node server on the test Redis under a prefix of
// its own, in the mode sharded says.
func startWireNode(t *testing.T, sharded bool) (*redis.Client, string, *nodeServer) {
	t.Helper()
	rdb := needRedis(t)
	prefix := uniquePrefix(t)
	return rdb, prefix, startNodeServer(t, modeName(sharded), prefix)
}

// TestWireBytes makes the Node adapter and ours do the same things and
// compares the bytes each publishes (uids and request ids aside).
func TestWireBytes(t *testing.T) {
	inModes(t, testWireBytes)
}

func testWireBytes(t *testing.T, sharded bool) {
	rdb, prefix, ns := startWireNode(t, sharded)
	g := startGoNode(t, "go", rdb, adapter.Config{Prefix: prefix, Sharded: sharded, RequestsTimeout: 2 * time.Second})
	waitCluster(t, g)
	ns.waitServerCount(t, 2)
	cap := startCapture(t, rdb, sharded, prefix)
	goUID := g.adapter().UID()

	main := prefix + "#/#"
	request := prefix + "-request#/#"
	if sharded {
		request = main
	}
	args := []any{"ev", 1, "two", map[string]any{"a": []any{1, 2.5, true, nil}, "b": "é<&>\"\n"}, -5, 300, 70000, 5000000000, -40000, []byte{1, 2}}
	goArgs := args[1:]
	cases := []struct {
		name    string
		channel string
		node    func()
		goSide  func()
	}{
		{"broadcast to one room", main + "r1#",
			func() { ns.call(t, "broadcast", map[string]any{"rooms": []any{"r1"}, "event": "ev", "args": goArgs}) },
			func() { g.io.To("r1").Emit("ev", goArgs...) }},
		{"broadcast with except", main,
			func() {
				ns.call(t, "broadcast", map[string]any{"rooms": []any{"r1", "r2"}, "except": []any{"r3"}, "event": "ev", "args": []any{"x"}})
			},
			func() { g.io.To("r1", "r2").Except("r3").Emit("ev", "x") }},
		{"server-side emit", request,
			func() { ns.call(t, "serverSideEmit", map[string]any{"event": "note", "args": []any{"x", 1}}) },
			func() { _ = g.io.ServerSideEmit("note", "x", 1) }},
		{"sockets join", request,
			func() { ns.call(t, "socketsJoin", map[string]any{"target": "nobody", "rooms": []any{"r3"}}) },
			func() { g.io.In("nobody").SocketsJoin("r3") }},
		{"sockets leave", request,
			func() { ns.call(t, "socketsLeave", map[string]any{"target": "nobody", "rooms": []any{"r3"}}) },
			func() { g.io.In("nobody").SocketsLeave("r3") }},
		{"disconnect sockets", request,
			func() { ns.call(t, "disconnectSockets", map[string]any{"target": "nobody", "close": true}) },
			func() { g.io.In("nobody").DisconnectSockets(true) }},
		{"fetch sockets", request,
			func() { _, _ = ns.tryCall("fetchSockets", map[string]any{"rooms": []any{"r1"}, "timeout": 300}) },
			func() {
				g.io.In("r1").Timeout(300 * time.Millisecond).FetchSockets()(func([]*socket.RemoteSocket, error) {})
			}},
		{"broadcast with ack", request,
			func() {
				_, _ = ns.tryCall("broadcastWithAck", map[string]any{"rooms": []any{"r1"}, "event": "q", "args": []any{1}, "timeout": 300})
			},
			func() { _, _ = emitWithAck(g.io.To("r1").Timeout(300*time.Millisecond), "q", 1) }},
	}
	if !sharded {
		cases = append(cases, struct {
			name    string
			channel string
			node    func()
			goSide  func()
		}{"all rooms", request,
			func() { ns.call(t, "allRooms", nil) },
			func() { _, _ = g.adapter().AllRooms(context.Background()) }})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.node()
			nodeMsg := cap.next(t, c.channel, ns.uid)
			c.goSide()
			goMsg := cap.next(t, c.channel, goUID)
			normalized := bytes.ReplaceAll(nodeMsg, []byte(ns.uid), []byte(goUID))
			if id := requestID(t, nodeMsg); id != "" {
				normalized = bytes.ReplaceAll(normalized, []byte(id), []byte(requestID(t, goMsg)))
			}
			if !bytes.Equal(normalized, goMsg) {
				t.Errorf("node published %s\n   go published %s", show(normalized), show(goMsg))
			}
		})
	}
	_ = args
}

func decodeJSON(p []byte) (any, error) {
	var v any
	err := json.Unmarshal(p, &v)
	return v, err
}

func show(p []byte) string {
	if len(p) > 0 && p[0] == '{' {
		return string(p)
	}
	return fmt.Sprintf("%q", p)
}

// TestMsgpackMatchesNotepack encodes values in Go and with notepack.io and
// compares the bytes, and decodes each other's output.
func TestMsgpackMatchesNotepack(t *testing.T) {
	needRedis(t)
	ns := startNodeServer(t, "classic", uniquePrefix(t))
	type nested struct {
		ID    string   `json:"id"`
		Tags  []string `json:"tags"`
		Skip  int      `json:"-"`
		Empty string   `json:"empty,omitempty"`
		N     *int     `json:"n"`
	}
	long := string(bytes.Repeat([]byte("x"), 300))
	cases := []struct {
		name string
		goV  any
		jsV  any // as sent to node (JSON, $bin for binary)
	}{
		{"small ints", []any{0, 1, 127, 128, 255, 256, 65535, 65536, 4294967295, 4294967296}, nil},
		{"negative ints", []any{-1, -32, -33, -128, -129, -32768, -32769, -2147483648, -2147483649}, nil},
		// (notepack writes integral numbers of 2^64 and more as a garbled
		// uint 64; we write them as float 64, which notepack reads back.)
		{"floats", []any{1.5, -0.25, 3.0, -7.0, 1e18, 0.1}, nil},
		{"int kinds", []any{int8(-5), uint16(300), int64(1) << 40, uint32(70000)}, []any{-5, 300, 1 << 40, 70000}},
		{"strings", []any{"", "a", "é", long, string(bytes.Repeat([]byte("y"), 70000))}, nil},
		{"binary", []any{[]byte{}, []byte{1, 2, 3}, bytes.Repeat([]byte{7}, 300)}, nil},
		{"nil and bools", []any{nil, true, false}, nil},
		{"map sorted", map[string]any{"b": 1, "a": []any{"x"}}, map[string]any{"a": []any{"x"}, "b": 1}},
		{"struct as map", nested{ID: "i", Tags: []string{"t"}, Skip: 3}, map[string]any{"id": "i", "tags": []any{"t"}, "n": nil}},
		{"big array", make([]any, 20), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			js := c.jsV
			if js == nil {
				js = c.goV
			}
			if c.name == "struct as map" {
				// Sent as JSON in field order; JSON.parse keeps that order.
				js = c.goV
			}
			mine, err := adapter.EncodeMsgpack(c.goV)
			if err != nil {
				t.Fatal(err)
			}
			theirs, _ := ns.call(t, "encode", map[string]any{"value": js}).([]byte)
			if !bytes.Equal(mine, theirs) {
				t.Errorf("go %x\nnotepack %x", mine, theirs)
			}
			// notepack decodes ours to the same value.
			back := ns.call(t, "decode", map[string]any{"b64": base64.StdEncoding.EncodeToString(mine)})
			want := c.jsV
			if want == nil {
				want = c.goV
			}
			if c.name == "struct as map" {
				want = c.jsV
			}
			if fmt.Sprint(normalizeNumbers(toComparable(back))) != fmt.Sprint(normalizeNumbers(toComparable(want))) {
				t.Errorf("notepack decoded %v, want %v", back, want)
			}
		})
	}
	// Our decoder reads notepack's timestamps, float32 and ext types.
	// A timestamp is a Date: its ISO string in JSON (for JSON clients).
	ts, _ := adapter.DecodeMsgpack([]byte{0xd6, 0xff, 0, 0, 0, 1})
	if js, err := json.Marshal(ts); err != nil || string(js) != `"1970-01-01T00:00:01.000Z"` {
		t.Errorf("timestamp 32 decoded as %v (JSON %s, %v)", ts, js, err)
	}
	f, _ := adapter.DecodeMsgpack([]byte{0xca, 0x3f, 0xc0, 0, 0})
	if f != 1.5 {
		t.Errorf("float 32 decoded as %v", f)
	}
	if _, err := adapter.DecodeMsgpack([]byte{0x92, 0x01}); err == nil {
		t.Error("truncated array decoded")
	}
	if v, _ := adapter.DecodeMsgpack([]byte{0xcf, 0, 0x20, 0, 0, 0, 0, 0, 0}); v != float64(1<<53) {
		t.Errorf("uint64 decoded as %v", v)
	}
	if v, _ := adapter.EncodeMsgpack(math.Inf(1)); !bytes.Equal(v, []byte{0xcb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("+Inf encoded as %x", v)
	}
}

func toComparable(v any) any {
	if b, ok := v.([]byte); ok {
		return fmt.Sprintf("bin%x", b)
	}
	return copyElems(v, toComparable)
}

func normalizeNumbers(v any) any {
	switch t := v.(type) {
	case []any, map[string]any:
		return adapter.ReplaceElems(t, normalizeNumbers)
	case int:
		return float64(t)
	case int8:
		return float64(t)
	case int64:
		return float64(t)
	case uint16:
		return float64(t)
	case uint32:
		return float64(t)
	}
	return v
}

// TestWireResponses has a third server ask a Node and a Go server the same
// things and compares their answers byte for byte (uids aside).
func TestWireResponses(t *testing.T) {
	inModes(t, testWireResponses)
}

func testWireResponses(t *testing.T, sharded bool) {
	rdb, prefix, ns := startWireNode(t, sharded)
	cfg := adapter.Config{Prefix: prefix, Sharded: sharded, RequestsTimeout: 2 * time.Second}
	g := startGoNode(t, "go", rdb, cfg)
	asker := startGoNode(t, "asker", rdb, cfg)
	waitCluster(t, g, asker)
	ns.waitServerCount(t, 3)
	dialClient(t, ns.url, "cn", clientOpts{auth: auth("n", "rr"), ackReply: ackWith(map[string]any{"same": []any{1, "a"}})})
	cg := dialClient(t, g.url, "cg", clientOpts{auth: auth("g", "rr"), ackReply: ackWith(map[string]any{"same": []any{1, "a"}})})
	waitMembers(t, g, map[string][]*wsClient{"rr": {cg}})

	// Where the answers to the asker go.
	ctx := context.Background()
	var ps *redis.PubSub
	if sharded {
		ps = rdb.SSubscribe(ctx, prefix+"#/#"+asker.adapter().UID()+"#")
	} else {
		ps = rdb.Subscribe(ctx, prefix+"-response#/#")
	}
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	collect := func(n int) [][]byte {
		var out [][]byte
		for len(out) < n {
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			m, err := ps.ReceiveMessage(rctx)
			cancel()
			if err != nil {
				t.Fatalf("after %d answers: %v", len(out), err)
			}
			out = append(out, bytes.ReplaceAll([]byte(m.Payload), []byte(ns.uid), []byte(g.adapter().UID())))
		}
		return out
	}
	pairs := func(what string, msgs [][]byte) {
		t.Helper()
		// Each kind of answer comes once from each server: group equal ones.
		count := map[string]int{}
		for _, m := range msgs {
			count[string(m)]++
		}
		for m, n := range count {
			if n != 2 {
				t.Errorf("%s: answer %s came %d times (answers differ between Node and Go)", what, show([]byte(m)), n)
			}
		}
	}

	args, err := emitWithAck(asker.io.To("rr").Timeout(2*time.Second), "q")
	if err != nil || len(args) != 2 {
		t.Fatalf("acks %v, err %v", args, err)
	}
	msgs := collect(4)
	if testing.Verbose() {
		for _, m := range msgs {
			t.Logf("answer %s", show(m))
		}
	}
	pairs("broadcast with ack", msgs) // two client counts, two acks

	res := make(chan error, 1)
	_ = asker.io.ServerSideEmitWithAck("echo", map[string]any{"k": "v", "n": 1.5})(func(args []any, err error) { res <- err })
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	pairs("server-side emit with ack", collect(2))
}
