package server_test

import (
	"bytes"
	"encoding/json"
	"github.com/presenced/presenced/transport"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	ws "github.com/gorilla/websocket"

	"github.com/presenced/presenced/server"
)

// A connection on our websocket from its handshake gets its heartbeat from
// the transport's wheel (transport/heartbeat.go): a PING every ping
// interval, counted from the last PONG; the events behind a PONG are not
// held up; the connection survives every cycle; and a client that stops
// answering is closed within the ping timeout.
func TestWebsocketHeartbeat(t *testing.T) {
	ts := newTestServer(t, server.Config{PingInterval: 150 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	c := dialWS(t, ts.URL, mint(t, "pong-user"))
	defer c.conn.Close()
	const cycles = 6
	minAck := time.Hour
	for cycle := 0; cycle < cycles; cycle++ {
		_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		// wait for the server's PING, answer at once, then emit an event
		for {
			_, msg, err := c.conn.ReadMessage()
			if err != nil {
				t.Fatalf("cycle %d: connection lost: %v", cycle, err)
			}
			if string(msg) == "2" {
				break
			}
		}
		start := time.Now()
		if err := c.conn.WriteMessage(ws.TextMessage, []byte("3")); err != nil {
			t.Fatal(err)
		}
		want := c.emit(t, "heartbeat", `{"active":true}`)
		for {
			_, got, err := c.conn.ReadMessage()
			if err != nil {
				t.Fatalf("cycle %d: no ack: %v", cycle, err)
			}
			if bytes.HasPrefix(got, want) {
				if !bytes.Contains(got, []byte(`"ok":true`)) {
					t.Fatalf("cycle %d: ack %s", cycle, got)
				}
				minAck = min(minAck, time.Since(start))
				break
			}
		}
	}
	// Held on the reader, every event behind a PONG would wait out most of
	// the 50 ms guard.
	if minAck >= 40*time.Millisecond {
		t.Errorf("fastest ack of an event sent right after a PONG: %v over %d cycles; the PONG guard holds up the reader", minAck, cycles)
	}
	if n := ts.Sockets.Open(); n != 1 {
		t.Errorf("open sockets after %d ping cycles: %d, want 1 (no ping timeout)", cycles, n)
	}
	if t.Failed() {
		return
	}
	// The client stops answering: closed a ping timeout after the next PING
	// (the wheel's tick is 15 ms here).
	var pingAt time.Time
	_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		_, msg, err := c.conn.ReadMessage()
		if err != nil {
			if pingAt.IsZero() {
				t.Fatalf("connection lost before the next PING: %v", err)
			}
			if d := time.Since(pingAt); d < 250*time.Millisecond || d > time.Second {
				t.Errorf("closed %v after an unanswered PING; the ping timeout is 300ms", d)
			}
			// with a CLOSE frame, as RFC 6455 asks: not 1006, an abnormal closure
			if !ws.IsCloseError(err, ws.CloseNormalClosure) {
				t.Errorf("the server's close: %v, want a CLOSE frame with 1000", err)
			}
			break
		}
		if string(msg) == "2" {
			if !pingAt.IsZero() {
				t.Fatalf("a second PING without a PONG")
			}
			pingAt = time.Now()
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for ts.Sockets.Open() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("open sockets after a ping timeout: %d, want 0", ts.Sockets.Open())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A session that is on a websocket is not upgraded again: a second
// websocket with its sid gets Engine.IO's 400, and the first connection
// keeps the session and its heartbeat (a takeover left the session with no
// PING, and a client that then froze stayed connected for good). A
// polling session still upgrades.
func TestWebsocketSessionNotUpgradedAgain(t *testing.T) {
	ts := newTestServer(t, server.Config{PingInterval: 150 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	base := "ws" + strings.TrimPrefix(ts.URL, "http") + "/socket.io/?EIO=4&transport=websocket"
	first, sid := openEngineWS(t, base)
	defer first.Close()
	second, resp, err := ws.DefaultDialer.Dial(base+"&sid="+sid, nil)
	if err == nil {
		second.Close()
		t.Fatal("a second websocket took the session over")
	}
	if resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("second websocket: %v (response %+v)", err, resp)
	}
	// the first one still has the session, and its PINGs
	_ = first.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, msg, err := first.ReadMessage(); err != nil || string(msg) != "2" {
		t.Fatalf("the first connection after the refused takeover: %q, %v", msg, err)
	}

	// polling → websocket, the upgrade Engine.IO has, still works
	res, err := http.Get(ts.URL + "/socket.io/?EIO=4&transport=polling")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var hs struct {
		SID string `json:"sid"`
	}
	if err := json.Unmarshal(bytes.TrimPrefix(body, []byte("0")), &hs); err != nil {
		t.Fatalf("polling handshake %q: %v", body, err)
	}
	up, _, err := ws.DefaultDialer.Dial(base+"&sid="+hs.SID, nil)
	if err != nil {
		t.Fatalf("upgrade of a polling session: %v", err)
	}
	defer up.Close()
	if err := up.WriteMessage(ws.TextMessage, []byte("2probe")); err != nil {
		t.Fatal(err)
	}
	_ = up.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, msg, err := up.ReadMessage(); err != nil || string(msg) != "3probe" {
		t.Fatalf("probe answer %q, %v", msg, err)
	}
	// and completes: the session's PINGs come on the websocket. (Ending
	// the test at the probe raced the server's close against the
	// library's probe handler, which arms its upgrade check after sending
	// the answer: a close in between left that check's goroutine running.)
	if err := up.WriteMessage(ws.TextMessage, []byte("5")); err != nil {
		t.Fatal(err)
	}
	for {
		_, msg, err := up.ReadMessage()
		if err != nil {
			t.Fatalf("after the upgrade: %v", err)
		}
		if string(msg) == "2" {
			break
		}
	}
}

// One Engine.IO connection may have maxRefusals CONNECTs refused; its next
// CONNECT closes it, even with a good token: its refusals are token checks that the per-IP handshake limit
// never sees (a black-box run made 5,000 in 494 ms on one connection). A
// client that tries again with a good token before that connects.
func TestRefusedConnectsCloseTheConnection(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	base := "ws" + strings.TrimPrefix(ts.URL, "http") + "/socket.io/?EIO=4&transport=websocket"
	dial := func() *ws.Conn {
		c, _ := openEngineWS(t, base)
		return c
	}
	// connect sends a CONNECT with token and reads the answer.
	connect := func(c *ws.Conn, token string) ([]byte, error) {
		if err := c.WriteMessage(ws.TextMessage, []byte(`40{"token":"`+token+`"}`)); err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, msg, err := c.ReadMessage()
		return msg, err
	}
	refuse := func(c *ws.Conn, i int) {
		t.Helper()
		if msg, err := connect(c, "not-a-jwt"); err != nil || !bytes.HasPrefix(msg, []byte("44")) {
			t.Fatalf("CONNECT %d: %q, %v, want a CONNECT_ERROR", i, msg, err)
		}
	}

	c := dial()
	defer c.Close()
	for i := 1; i <= 10; i++ {
		refuse(c, i)
	}
	if msg, err := connect(c, mint(t, "late-user")); err == nil {
		t.Fatalf("a CONNECT after 10 refused ones: %q, want the connection closed", msg)
	}

	c2 := dial()
	defer c2.Close()
	for i := 1; i <= 9; i++ {
		refuse(c2, i)
	}
	if msg, err := connect(c2, mint(t, "retry-user")); err != nil || !bytes.HasPrefix(msg, []byte("40{")) {
		t.Fatalf("a good token after 9 refusals: %q, %v", msg, err)
	}
}

// CONNECTs to namespaces the server does not serve are answered by the
// library, which never counted them: one connection may have
// transport.MaxOtherNspConnects; the next closes it (a resource audit:
// four connections without a token sent 4.85 million in 45 s). A polling
// POST carrying more than that ends its session.
func TestOtherNamespaceConnectsBounded(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	c, _ := openEngineWS(t, "ws"+strings.TrimPrefix(ts.URL, "http")+"/socket.io/?EIO=4&transport=websocket")
	defer c.Close()
	for i := 1; i <= transport.MaxOtherNspConnects; i++ {
		if err := c.WriteMessage(ws.TextMessage, []byte("40/ns"+strconv.Itoa(i)+",")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, msg, err := c.ReadMessage(); err != nil || !bytes.HasPrefix(msg, []byte("44/ns")) {
			t.Fatalf("CONNECT %d to another namespace: %q, %v, want its refusal", i, msg, err)
		}
	}
	_ = c.WriteMessage(ws.TextMessage, []byte("40/one-more,"))
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			break // closed
		}
		if bytes.HasPrefix(msg, []byte("44/one-more")) {
			t.Fatalf("CONNECT %d to another namespace answered: %q, want the connection closed", transport.MaxOtherNspConnects+1, msg)
		}
	}

	sid := handshake(t, ts.URL, nil)
	body := strings.Repeat("40/x,\x1e", transport.MaxOtherNspConnects) + "40/x,"
	if resp, _ := do(t, "POST", ts.URL+"/socket.io/?EIO=4&transport=polling&sid="+sid, body, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the POST: %d", resp.StatusCode)
	}
	if resp, got := do(t, "GET", ts.URL+"/socket.io/?EIO=4&transport=polling&sid="+sid, "", nil); resp.StatusCode == http.StatusOK && strings.Contains(got, "44/x") {
		t.Fatalf("a polling session after %d CONNECTs to another namespace in one POST: %d %q, want it ended", transport.MaxOtherNspConnects+1, resp.StatusCode, got)
	}
}

// CONNECTs after the first on one Engine.IO connection count against the
// per-IP handshake limit: a client cycling CONNECT / DISCONNECT on one
// connection made a full handshake each time, never counted.
func TestReconnectsCountAgainstHandshakeLimit(t *testing.T) {
	ts := newTestServer(t, server.Config{HandshakeLimit: 4, HandshakeWindow: time.Minute})
	c, _ := openEngineWS(t, "ws"+strings.TrimPrefix(ts.URL, "http")+"/socket.io/?EIO=4&transport=websocket") // handshake 1
	defer c.Close()
	token := mint(t, "cycler")
	connect := func() string {
		t.Helper()
		if err := c.WriteMessage(ws.TextMessage, []byte(`40{"token":"`+token+`"}`)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("waiting for the CONNECT's answer: %v", err)
			}
			// accepted: its session event (the library registers the
			// socket with its connection between the CONNECT's answer and
			// that event; a DISCONNECT sent in between is a protocol error
			// to it, which closes the connection)
			if m := string(msg); strings.HasPrefix(m, `42["session"`) || strings.HasPrefix(m, "44") {
				return m
			}
		}
	}
	for i := 1; i <= 4; i++ { // the first CONNECT is the handshake's; 3 more fit in 4
		if m := connect(); !strings.HasPrefix(m, `42["session"`) {
			t.Fatalf("CONNECT %d: %q, want it accepted", i, m)
		}
		if err := c.WriteMessage(ws.TextMessage, []byte("41")); err != nil {
			t.Fatal(err)
		}
		// the next CONNECT once the server has let the socket go (before
		// that, the library takes a CONNECT for a namespace still
		// connected as a protocol error too)
		deadline := time.Now().Add(2 * time.Second)
		for ts.Sockets.Open() > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m := connect(); !strings.HasPrefix(m, "44") || !strings.Contains(m, "too many handshakes") {
		t.Fatalf("CONNECT 5: %q, want refused over the handshake limit", m)
	}
	// and the address's next Engine.IO handshake is over the limit too
	if resp, _ := do(t, "GET", ts.URL+"/socket.io/?EIO=4&transport=polling", "", nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("handshake after the CONNECTs: %d, want 429", resp.StatusCode)
	}
}

// openEngineWS opens an Engine.IO websocket at url and reads its open
// packet: the connection and the session id.
func openEngineWS(t *testing.T, url string) (*ws.Conn, string) {
	t.Helper()
	c, _, err := ws.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, open, err := c.ReadMessage()
	if err != nil || !bytes.HasPrefix(open, []byte("0{")) {
		t.Fatalf("open packet %q: %v", open, err)
	}
	var hs struct {
		SID string `json:"sid"`
	}
	if err := json.Unmarshal(open[1:], &hs); err != nil {
		t.Fatal(err)
	}
	return c, hs.SID
}

// Valid JSON whose numbers do not fit a float64 gets its handler's answer
// over the websocket, as in Node (which reads them): not a parse error
// that closed the socket without an ack.
func TestWebsocketOutOfRangeNumbers(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	c := dialWS(t, ts.URL, mint(t, "numbers"))
	defer c.conn.Close()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, tc := range []struct{ event, arg, want string }{
		{"conversation:join", `{"conversationId":1e999}`, `"code":"invalid_argument"`},
		{"conversation:join", `{"conversationId":` + strings.Repeat("9", 400) + `}`, `"code":"invalid_argument"`},
		{"heartbeat", `{"active":true,"x":-1e999}`, `"ok":true`},
	} {
		if got := c.call(t, tc.event, tc.arg); !bytes.Contains(got, []byte(tc.want)) {
			t.Errorf("%s %s: ack %s, want %s", tc.event, tc.arg, got, tc.want)
		}
	}
	if got := c.call(t, "heartbeat", `{}`); !bytes.Contains(got, []byte(`"ok":true`)) {
		t.Fatalf("after them: %s", got)
	}
}
