package adapter_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsClient is a minimal Socket.IO v5 / Engine.IO v4 client over WebSocket,
// enough for tests: connect with auth, receive events (binary attachments
// included), answer acknowledgements, emit. It works against Go and Node
// servers alike.
type wsClient struct {
	tb   testing.TB
	name string
	conn *websocket.Conn
	sid  string

	wmu sync.Mutex

	mu       sync.Mutex
	cond     *sync.Cond
	events   []wsEvent
	closed   bool
	ackReply func(ev string, args []any) []any
	pending  map[int]chan []any
	nextID   int
	recvTime map[string][]time.Time // event name -> receipt times (when timing is on)
	timing   bool
	counter  *atomic.Int64 // counts received events, when set

	done chan struct{}
}

type wsEvent struct {
	name string
	args []any
	at   time.Time
}

type clientOpts struct {
	auth     map[string]any
	ackReply func(ev string, args []any) []any
	timing   bool          // keep receipt times only, not events
	counter  *atomic.Int64 // incremented on each event received
}

// dialClient connects to the Socket.IO server at base (http://host:port).
func dialClient(tb testing.TB, base, name string, o clientOpts) *wsClient {
	tb.Helper()
	c, err := tryDial(tb, base, name, o)
	if err != nil {
		tb.Fatalf("client %s: %v", name, err)
	}
	return c
}

func tryDial(tb testing.TB, base, name string, o clientOpts) (*wsClient, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	u.Scheme = "ws"
	u.Path = "/socket.io/"
	u.RawQuery = "EIO=4&transport=websocket"
	dialer := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, _, err := dialer.Dial(u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	c := &wsClient{
		tb: tb, name: name, conn: conn,
		ackReply: o.ackReply,
		pending:  map[int]chan []any{},
		done:     make(chan struct{}),
		timing:   o.timing,
		counter:  o.counter,
		recvTime: map[string][]time.Time{},
	}
	c.cond = sync.NewCond(&c.mu)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, open, err := conn.ReadMessage()
	if err != nil || len(open) == 0 || open[0] != '0' {
		conn.Close()
		return nil, fmt.Errorf("engine.io open: %q %v", open, err)
	}
	auth := "{}"
	if o.auth != nil {
		b, _ := json.Marshal(o.auth)
		auth = string(b)
	}
	if err := c.write("40" + auth); err != nil {
		conn.Close()
		return nil, err
	}
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("connect: %w", err)
		}
		s := string(msg)
		if s == "2" {
			_ = c.write("3")
			continue
		}
		if strings.HasPrefix(s, "40") {
			var body struct {
				Sid string `json:"sid"`
			}
			_ = json.Unmarshal([]byte(s[2:]), &body)
			c.sid = body.Sid
			break
		}
		if strings.HasPrefix(s, "44") {
			conn.Close()
			return nil, fmt.Errorf("connect_error: %s", s[2:])
		}
	}
	_ = conn.SetReadDeadline(time.Time{})
	go c.readLoop()
	tb.Cleanup(c.close)
	return c, nil
}

func (c *wsClient) write(s string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.conn.WriteMessage(websocket.TextMessage, []byte(s))
}

func (c *wsClient) close() {
	c.wmu.Lock()
	_ = c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	_ = c.conn.Close()
	<-c.done
}

type binaryPacket struct {
	typ         byte
	id          int
	hasID       bool
	data        any
	attachments int
	buffers     [][]byte
}

func (c *wsClient) readLoop() {
	defer close(c.done)
	defer func() {
		c.mu.Lock()
		c.closed = true
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	var bin *binaryPacket
	for {
		mt, msg, err := c.conn.ReadMessage()
		if err != nil {
			return
		}
		if mt == websocket.BinaryMessage {
			if bin != nil {
				bin.buffers = append(bin.buffers, msg)
				if len(bin.buffers) == bin.attachments {
					c.dispatch(bin.typ, bin.id, bin.hasID, reconstruct(bin.data, bin.buffers))
					bin = nil
				}
			}
			continue
		}
		s := string(msg)
		switch {
		case s == "2":
			_ = c.write("3")
		case strings.HasPrefix(s, "4"):
			p := s[1:]
			if p == "" {
				continue
			}
			typ := p[0]
			p = p[1:]
			attachments := 0
			if typ == '5' || typ == '6' {
				i := strings.IndexByte(p, '-')
				attachments, _ = strconv.Atoi(p[:i])
				p = p[i+1:]
			}
			if strings.HasPrefix(p, "/") {
				if i := strings.IndexByte(p, ','); i >= 0 {
					p = p[i+1:]
				}
			}
			j := 0
			for j < len(p) && p[j] >= '0' && p[j] <= '9' {
				j++
			}
			id, hasID := 0, j > 0
			if hasID {
				id, _ = strconv.Atoi(p[:j])
			}
			var data any
			if j < len(p) {
				_ = json.Unmarshal([]byte(p[j:]), &data)
			}
			switch typ {
			case '5', '6':
				bin = &binaryPacket{typ: typ - 3, id: id, hasID: hasID, data: data, attachments: attachments}
			case '1':
				c.push(wsEvent{name: "disconnect"})
			default:
				c.dispatch(typ, id, hasID, data)
			}
		}
	}
}

func (c *wsClient) dispatch(typ byte, id int, hasID bool, data any) {
	args, _ := data.([]any)
	switch typ {
	case '2':
		if len(args) == 0 {
			return
		}
		name, _ := args[0].(string)
		ev := wsEvent{name: name, args: args[1:], at: time.Now()}
		if hasID {
			var reply []any
			c.mu.Lock()
			fn := c.ackReply
			c.mu.Unlock()
			if fn != nil {
				reply = fn(name, ev.args)
			}
			if reply == nil {
				reply = []any{}
			}
			b, _ := json.Marshal(reply)
			_ = c.write("43" + strconv.Itoa(id) + string(b))
		}
		c.push(ev)
	case '3':
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- args
		}
	}
}

func (c *wsClient) push(ev wsEvent) {
	if c.counter != nil {
		defer c.counter.Add(1)
	}
	c.mu.Lock()
	if c.timing {
		c.recvTime[ev.name] = append(c.recvTime[ev.name], ev.at)
	} else {
		c.events = append(c.events, ev)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

func reconstruct(v any, buffers [][]byte) any {
	switch t := v.(type) {
	case []any:
		for i, e := range t {
			t[i] = reconstruct(e, buffers)
		}
	case map[string]any:
		if ph, ok := t["_placeholder"].(bool); ok && ph {
			if n, ok := t["num"].(float64); ok && int(n) < len(buffers) {
				return buffers[int(n)]
			}
		}
		for k, e := range t {
			t[k] = reconstruct(e, buffers)
		}
	}
	return v
}

// emitWithAck sends an event to the server and waits for its acknowledgement.
func (c *wsClient) emitWithAck(ev string, args ...any) []any {
	c.tb.Helper()
	c.mu.Lock()
	id := c.nextID
	c.nextID++
	ch := make(chan []any, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(append([]any{ev}, args...))
	if err := c.write("42" + strconv.Itoa(id) + string(b)); err != nil {
		c.tb.Fatalf("client %s emit: %v", c.name, err)
	}
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		c.tb.Fatalf("client %s: no ack for %s", c.name, ev)
		return nil
	}
}

// wait returns (and consumes) the first event named name, waiting up to
// timeout for it.
func (c *wsClient) wait(name string, timeout time.Duration) (wsEvent, bool) {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for i, ev := range c.events {
			if ev.name == name {
				c.events = append(c.events[:i:i], c.events[i+1:]...)
				return ev, true
			}
		}
		if c.closed || time.Now().After(deadline) {
			return wsEvent{}, false
		}
		c.cond.Wait()
	}
}

// expect fails the test unless an event named name arrives within 3s.
func (c *wsClient) expect(name string) wsEvent {
	c.tb.Helper()
	ev, ok := c.wait(name, 3*time.Second)
	if !ok {
		c.tb.Fatalf("client %s: no %q event (have %v)", c.name, name, c.names())
	}
	return ev
}

// take consumes every buffered event named name.
func (c *wsClient) take(name string) []wsEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out, keep []wsEvent
	for _, ev := range c.events {
		if ev.name == name {
			out = append(out, ev)
		} else {
			keep = append(keep, ev)
		}
	}
	c.events = keep
	return out
}

func (c *wsClient) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ev := range c.events {
		if ev.name == name {
			n++
		}
	}
	return n
}

func (c *wsClient) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, ev := range c.events {
		out = append(out, ev.name)
	}
	return out
}

func (c *wsClient) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *wsClient) times(name string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.recvTime[name]...)
}

func (c *wsClient) resetTimes() {
	c.mu.Lock()
	c.recvTime = map[string][]time.Time{}
	c.mu.Unlock()
}
