package server_test

import (
	"strings"
	"testing"
	"time"

	ws "github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/server"
)

// wsHandshake opens a websocket and sends CONNECT; it returns the connection
// and the server's answer ("40…" and the session, or "44…").
func wsHandshake(t *testing.T, url, token string) (*ws.Conn, string) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(url, "http") + "/socket.io/?EIO=4&transport=websocket"
	conn, _, err := ws.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, m, err := conn.ReadMessage(); err != nil || !strings.HasPrefix(string(m), "0{") {
		t.Fatalf("open: %q %v", m, err)
	}
	if err := conn.WriteMessage(ws.TextMessage, []byte(`40{"token":"`+token+`"}`)); err != nil {
		t.Fatal(err)
	}
	for {
		_, m, err := conn.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if s := string(m); strings.HasPrefix(s, "44") || strings.HasPrefix(s, `42["session"`) {
			return conn, s
		}
	}
}

// maxSocketsServer serves one node on the memory engine with
// MaxSocketsPerUser max.
func maxSocketsServer(t *testing.T, max int) (*testServer, *metrics.Metrics, *handlers.Sockets) {
	t.Helper()
	ts := newTestServerWith(t, server.Config{}, handlers.SessionConfig{NodeID: "n1", MaxSocketsPerUser: max})
	return ts, ts.Metrics, ts.Sockets
}

// TestMaxSocketsPerUser: beyond the cap a handshake gets connect_error
// "unauthorized" with reason "too many connections"; a closed socket frees
// its place.
func TestMaxSocketsPerUser(t *testing.T) {
	hs, m, _ := maxSocketsServer(t, 2)

	tok := mint(t, "many")
	first, got := wsHandshake(t, hs.URL, tok)
	if !strings.HasPrefix(got, `42["session"`) {
		t.Fatalf("first socket: %s", got)
	}
	if _, got := wsHandshake(t, hs.URL, tok); !strings.HasPrefix(got, `42["session"`) {
		t.Fatalf("second socket: %s", got)
	}
	_, got = wsHandshake(t, hs.URL, tok)
	if want := `44{"data":{"code":"unauthorized","reason":"too many connections"},"message":"unauthorized"}`; got != want {
		t.Fatalf("third socket: got %s, want %s", got, want)
	}
	if n := testutil.ToFloat64(m.SocketsRefused); n != 1 {
		t.Errorf("presenced_sockets_refused_total = %v, want 1", n)
	}
	if _, got := wsHandshake(t, hs.URL, mint(t, "other")); !strings.HasPrefix(got, `42["session"`) {
		t.Errorf("another user: %s", got)
	}
	// A closed socket frees its place.
	_ = first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, got := wsHandshake(t, hs.URL, tok)
		if strings.HasPrefix(got, `42["session"`) {
			break
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no place after a socket closed: %s", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMaxSocketsHandshakesClosedAtOnce: the engine counts a socket before
// its CONNECT is answered (Prepare); a client that closes its connection
// right after sending CONNECT, before or after the answer, leaves nothing
// counted: the disconnect work runs once for each (Open returns to 0) and
// the user's places are free.
func TestMaxSocketsHandshakesClosedAtOnce(t *testing.T) {
	hs, _, sockets := maxSocketsServer(t, 2)

	tok := mint(t, "flaky")
	u := "ws" + strings.TrimPrefix(hs.URL, "http") + "/socket.io/?EIO=4&transport=websocket"
	for i := range 30 {
		conn, _, err := ws.DefaultDialer.Dial(u, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := conn.ReadMessage(); err != nil { // the open packet
			t.Fatal(err)
		}
		if err := conn.WriteMessage(ws.TextMessage, []byte(`40{"token":"`+tok+`"}`)); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			time.Sleep(time.Duration(i) * 100 * time.Microsecond)
		}
		_ = conn.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for sockets.Open() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := sockets.Open(); n != 0 {
		t.Fatalf("%d sockets open after every connection closed", n)
	}
	for i := range 2 {
		if _, got := wsHandshake(t, hs.URL, tok); !strings.HasPrefix(got, `42["session"`) {
			t.Fatalf("socket %d after the closed handshakes: %s (their places were not freed)", i+1, got)
		}
	}
}
