package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/server"
)

// TestTokenExpiryClosesTransport: at its token's exp a socket's websocket is
// closed without a Socket.IO DISCONNECT packet ("41"), so that
// socket.io-client reconnects by itself (and may fetch a fresh token).
func TestTokenExpiryClosesTransport(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	// exp is whole seconds: between 1 and 2 s from now.
	tok, err := auth.SignHS256([]byte(secret), "exp-user", 2*time.Second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := dialWS(t, ts.URL, tok)
	defer c.conn.Close()
	// Still up a moment after connecting.
	if got := c.call(t, "heartbeat", `{}`); !strings.Contains(string(got), `"ok":true`) {
		t.Fatalf("heartbeat: %s", got)
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, msg, err := c.conn.ReadMessage()
		if err != nil {
			break // closed
		}
		if m := string(msg); strings.HasPrefix(m, "41") {
			t.Fatalf("got a DISCONNECT packet %q: the client would not reconnect", m)
		} else if m == "2" {
			_ = c.conn.WriteMessage(1, []byte("3"))
		}
	}
	took := time.Since(start)
	if took < 900*time.Millisecond || took > 4*time.Second {
		t.Errorf("closed %v after connecting, want at the token's exp (1-2 s)", took)
	}
	if n := ts.Sockets.Open(); n != 0 {
		// the disconnect work runs on the close
		deadline := time.Now().Add(2 * time.Second)
		for ts.Sockets.Open() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := ts.Sockets.Open(); n != 0 {
			t.Errorf("%d sockets still open", n)
		}
	}
}
