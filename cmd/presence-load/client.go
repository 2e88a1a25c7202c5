//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// A minimal Engine.IO v4 / Socket.IO v5 client over a websocket, enough
// for the load scenarios: connect with an auth token, emit events with ack
// ids, receive acks and server events, answer pings. One reader goroutine
// per connection; writes are serialised by a mutex so any goroutine may
// emit.

var errClosed = errors.New("connection closed")

var wsBufPool = &sync.Pool{} // gorilla's WriteBufferPool: idle sockets hold no write buffer

var dialer = &websocket.Dialer{
	HandshakeTimeout: 10 * time.Second,
	ReadBufferSize:   1024,
	WriteBufferSize:  1024,
	WriteBufferPool:  wsBufPool,
	Proxy:            nil,
}

// ackFunc receives an ack's payload (the JSON array after the id), the
// time the event was sent and the time the ack arrived. It runs on the
// reader goroutine: keep it short. The payload is valid until it returns
// (the reader's buffer).
type ackFunc func(payload []byte, sent, at time.Time)

type pendingAck struct {
	fn   ackFunc
	sent time.Time
}

// eventFunc receives a server event: its name, the whole JSON array and
// the arrival time. It runs on the reader goroutine; raw is valid until it
// returns.
type eventFunc func(name string, raw []byte, at time.Time)

type conn struct {
	ws      *websocket.Conn
	user    string
	node    int // index of the server node it is connected to
	sid     string
	onEvent eventFunc

	wmu    sync.Mutex
	nextID int
	wbuf   []byte // the message being written (emitRaw), under wmu

	rbuf bytes.Buffer // the message being read (readLoop)

	pmu     sync.Mutex
	pending map[int]pendingAck

	connected   chan struct{} // closed on the Socket.IO CONNECT answer
	connectedAt time.Time     // when it came
	session     chan struct{} // closed on the `session` event
	connErr     atomic.Value  // string: a CONNECT_ERROR's payload
	done        chan struct{} // closed when the reader ends
	closeErr    error
	closing     atomic.Bool

	// Engine.IO heartbeat of the server, for the diagnosis of sockets the
	// server closes: when its last ping came, when our pong was written,
	// when the connection ended.
	lastPing time.Time
	lastPong time.Time
	pings    int
	closedAt time.Time

	sessionOnce sync.Once
	connectOnce sync.Once
}

// dialSocket opens the websocket and connects the Socket.IO namespace
// with the token, waiting for the CONNECT answer and the `session` event.
// onEvent may be nil.
func dialSocket(ctx context.Context, addr, user, token string, node int, onEvent eventFunc) (*conn, error) {
	c, err := openSocket(ctx, addr, user, node, onEvent)
	if err != nil {
		return nil, err
	}
	if err := c.connect(ctx, token); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// browserHeaders (-browser-headers) adds what a desktop browser sends
// with a websocket handshake to every one (handshakeHeader).
var browserHeaders bool

// handshakeHeader is the request header of a websocket handshake: the
// dialer's own, and with -browser-headers a browser's.
func handshakeHeader(addr string) http.Header {
	if !browserHeaders {
		return http.Header{}
	}
	return http.Header{
		"User-Agent":      {"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"},
		"Accept-Language": {"en-US,en;q=0.9,de;q=0.8"},
		"Accept-Encoding": {"gzip, deflate, br, zstd"},
		"Cache-Control":   {"no-cache"},
		"Pragma":          {"no-cache"},
		"Origin":          {"http://" + addr},
		"Cookie":          {"session=" + strings.Repeat("s", 1000)},
	}
}

// openSocket opens the websocket and waits for the Engine.IO open packet;
// the Socket.IO namespace is not connected yet (connect).
func openSocket(ctx context.Context, addr, user string, node int, onEvent eventFunc) (*conn, error) {
	u := "ws://" + addr + "/socket.io/?EIO=4&transport=websocket"
	ws, resp, err := dialer.DialContext(ctx, u, handshakeHeader(addr))
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	c := &conn{
		ws: ws, user: user, node: node, onEvent: onEvent,
		pending:   map[int]pendingAck{},
		connected: make(chan struct{}),
		session:   make(chan struct{}),
		done:      make(chan struct{}),
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	_ = ws.SetReadDeadline(deadline)
	_, msg, err := ws.ReadMessage()
	if err != nil {
		ws.Close()
		return nil, fmt.Errorf("read open packet: %w", err)
	}
	if len(msg) == 0 || msg[0] != '0' {
		ws.Close()
		return nil, fmt.Errorf("unexpected first packet %q", clip(msg))
	}
	_ = ws.SetReadDeadline(time.Time{})
	go c.readLoop()
	return c, nil
}

// connect sends the Socket.IO CONNECT packet and waits for the answer and
// the `session` event.
func (c *conn) connect(ctx context.Context, token string) error {
	auth, _ := json.Marshal(map[string]string{"token": token})
	if err := c.write(append([]byte("40"), auth...)); err != nil {
		return err
	}
	select {
	case <-c.connected:
	case <-c.done:
		if v, ok := c.connErr.Load().(string); ok {
			return fmt.Errorf("connect_error %s", v)
		}
		return fmt.Errorf("closed before connect: %v", c.closeErr)
	case <-ctx.Done():
		return fmt.Errorf("connect: %w", ctx.Err())
	}
	select {
	case <-c.session:
		return nil
	case <-c.done:
		return fmt.Errorf("closed before session: %v", c.closeErr)
	case <-ctx.Done():
		return fmt.Errorf("session event: %w", ctx.Err())
	}
}

func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// emitRaw sends `42<id><body>` where body is the JSON array
// `["event",payload]`, registering fn for the ack. The send time is
// taken just before the write, under the write lock.
func (c *conn) emitRaw(body []byte, fn ackFunc) (sent time.Time, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	id := c.nextID
	c.nextID++
	// Built in a buffer of the connection's (WriteMessage copies it):
	// at 30,000 heartbeats/s the generator's own collections were the
	// slowest seconds of a window (readLoop).
	msg := append(c.wbuf[:0], '4', '2')
	msg = strconv.AppendInt(msg, int64(id), 10)
	msg = append(msg, body...)
	if cap(msg) <= maxKeptBuf {
		c.wbuf = msg
	}
	sent = time.Now()
	if fn != nil {
		c.pmu.Lock()
		c.pending[id] = pendingAck{fn, sent}
		c.pmu.Unlock()
	}
	_ = c.ws.SetWriteDeadline(sent.Add(10 * time.Second))
	if err := c.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
		if fn != nil {
			c.pmu.Lock()
			delete(c.pending, id)
			c.pmu.Unlock()
		}
		return sent, err
	}
	return sent, nil
}

// call emits an event and waits for its ack: the ack's first argument and
// the round-trip time.
func (c *conn) call(ctx context.Context, event string, payload any) (json.RawMessage, time.Duration, error) {
	body, err := json.Marshal([]any{event, payload})
	if err != nil {
		return nil, 0, err
	}
	type res struct {
		p  []byte
		at time.Time
	}
	ch := make(chan res, 1)
	sent, err := c.emitRaw(body, func(p []byte, _, at time.Time) { ch <- res{bytes.Clone(p), at} })
	if err != nil {
		return nil, 0, err
	}
	select {
	case r := <-ch:
		var args []json.RawMessage
		if err := json.Unmarshal(r.p, &args); err != nil || len(args) == 0 {
			return nil, r.at.Sub(sent), fmt.Errorf("%s: bad ack %q", event, clip(r.p))
		}
		return args[0], r.at.Sub(sent), nil
	case <-c.done:
		return nil, 0, fmt.Errorf("%s: %w", event, errClosed)
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("%s: no ack: %w", event, ctx.Err())
	}
}

// pendingAcks is the number of acks still awaited.
func (c *conn) pendingAcks() int {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return len(c.pending)
}

// dropPending forgets the awaited acks and returns how many there were.
func (c *conn) dropPending() int {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	n := len(c.pending)
	clear(c.pending)
	return n
}

// Close disconnects the Socket.IO namespace and closes the websocket, as
// socket.io-client's disconnect() does.
func (c *conn) Close() {
	if c.closing.Swap(true) {
		return
	}
	c.wmu.Lock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(time.Second))
	_ = c.ws.WriteMessage(websocket.TextMessage, []byte("41"))
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	_ = c.ws.Close()
}

// maxKeptBuf is the largest read or write buffer a connection keeps
// between messages (a join's ack with its roster is ~8 KB).
const maxKeptBuf = 16 << 10

// readLoop reads the server's messages into the connection's buffer, so
// that the generator allocates next to nothing per ack: with gorilla's
// ReadMessage (a fresh buffer of at least 512 bytes a message) the
// generator collected every ~1 s at 30,000 heartbeats/s, and the seconds
// of a window with one of its collections had 2-3x the p99 of the others,
// whichever server was measured.
func (c *conn) readLoop() {
	defer close(c.done)
	for {
		msg, err := c.next()
		if err != nil {
			c.closedAt = time.Now()
			c.closeErr = err
			_ = c.ws.Close()
			return
		}
		at := time.Now()
		if len(msg) == 0 {
			continue
		}
		switch msg[0] {
		case '2': // ping
			c.lastPing = at
			c.pings++
			if c.write([]byte("3")) == nil {
				c.lastPong = time.Now()
			}
		case '1': // close
			c.closedAt = at
			c.closeErr = errors.New("engine.io close packet")
			_ = c.ws.Close()
			return
		case '4':
			c.packet(msg[1:], at)
		}
	}
}

// next reads one message into rbuf; it is valid until the next call.
func (c *conn) next() ([]byte, error) {
	_, r, err := c.ws.NextReader()
	if err != nil {
		return nil, err
	}
	if c.rbuf.Cap() > maxKeptBuf {
		c.rbuf = bytes.Buffer{}
	}
	c.rbuf.Reset()
	if _, err := c.rbuf.ReadFrom(r); err != nil {
		return nil, err
	}
	return c.rbuf.Bytes(), nil
}

// packet handles one Socket.IO packet (namespace "/": no namespace part).
func (c *conn) packet(p []byte, at time.Time) {
	if len(p) == 0 {
		return
	}
	typ, rest := p[0], p[1:]
	if len(rest) > 0 && rest[0] == '/' { // a namespace other than "/": skip it
		if i := bytes.IndexByte(rest, ','); i >= 0 {
			rest = rest[i+1:]
		}
	}
	switch typ {
	case '0': // CONNECT answer {"sid":...}
		var v struct {
			SID string `json:"sid"`
		}
		_ = json.Unmarshal(rest, &v)
		c.connectOnce.Do(func() {
			c.sid = v.SID
			c.connectedAt = at
			close(c.connected)
		})
	case '4': // CONNECT_ERROR
		c.connErr.Store(string(rest))
		_ = c.ws.Close()
	case '1': // DISCONNECT
		_ = c.ws.Close()
	case '3': // ACK <id>[...]
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		id, err := strconv.Atoi(string(rest[:i]))
		if err != nil {
			return
		}
		c.pmu.Lock()
		pa, ok := c.pending[id]
		delete(c.pending, id)
		c.pmu.Unlock()
		if ok && pa.fn != nil {
			pa.fn(rest[i:], pa.sent, at)
		}
	case '2': // EVENT [<id>]["name",...]
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		body := rest[i:]
		name := eventName(body)
		if name == "session" {
			c.sessionOnce.Do(func() { close(c.session) })
		}
		if c.onEvent != nil {
			c.onEvent(name, body, at)
		}
	}
}

// eventName returns the first string of a JSON array such as
// `["presence:update",{...}]` without decoding the rest.
func eventName(b []byte) string {
	if len(b) < 4 || b[0] != '[' || b[1] != '"' {
		return ""
	}
	j := bytes.IndexByte(b[2:], '"')
	if j < 0 {
		return ""
	}
	return string(b[2 : 2+j])
}

// ackOK tells whether an ack payload `[{"ok":true,...}]` is a success,
// without decoding it.
func ackOK(p []byte) bool {
	return bytes.Contains(p, []byte(`"ok":true`))
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
