package server_test

import (
	"bytes"
	"testing"
	"time"

	ws "github.com/gorilla/websocket"

	"github.com/presenced/presenced/server"
)

// A PONG that comes back at once is held (the library's ping race,
// pingrace.go) without holding the events behind it, and the connection
// survives every ping cycle.
func TestWebsocketPongHeldWithoutBlockingEvents(t *testing.T) {
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
}
