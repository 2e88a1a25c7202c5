package handlers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

// Events that take the library's path (here behind a binary event whose
// handler is held) wait in their socket's queue up to transport.MaxQueued;
// beyond, the reader reads nothing until the queue moves. Before, the
// library decoded and queued every message at once: a client sending
// without waiting for its acks made the node's memory grow at its line
// rate (a resource audit, 2026-12-07). Nothing is lost: every event is
// answered, in order, once the queue moves.
func TestQueuedEventsBounded(t *testing.T) {
	var eng *gatedEngine
	n := startNode(t, func(mem presence.Engine) presence.Engine {
		eng = &gatedEngine{Engine: mem}
		return eng
	})
	alice := dialSocket(t, n.hs.URL, signToken(t, n.secret, "alice"))
	entered, release := eng.gate.Arm()
	// a join with a binary attachment: the library's path; held in the engine
	alice.emitRaw(`451-1["conversation:join",{"conversationId":"c1","x":{"_placeholder":true,"num":0}}]`)
	if err := alice.conn.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the join did not reach the engine")
	}
	const sent = 200
	for i := 2; i < 2+sent; i++ {
		alice.emitRaw(`42` + itoa(i) + `["heartbeat",{"active":true}]`)
	}
	var engineID string
	n.srv.IO().Of("/", nil).Sockets().Range(func(_ socket.SocketId, s *socket.Socket) bool {
		engineID = s.Conn().Id()
		return false
	})
	time.Sleep(300 * time.Millisecond) // the reader takes what it may
	var slot any
	queued, ok := n.sockets.Backlog(&slot, func() string { return engineID })
	if !ok || queued > transport.MaxQueued {
		t.Fatalf("queued %d (socket %v), want at most %d", queued, ok, transport.MaxQueued)
	}
	close(release)
	if got := alice.ackOf(1); got["ok"] != true {
		t.Fatalf("the held join: %v", got)
	}
	for i := 2; i < 2+sent; i++ {
		msg := alice.read("43")
		if !strings.HasPrefix(msg, "43"+itoa(i)+"[") {
			t.Fatalf("ack %d: %s", i, msg)
		}
	}
}
