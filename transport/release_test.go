package transport

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ws "github.com/gorilla/websocket"
)

// releaseBuffers finds gorilla's buffers, and a connection without them
// still answers control frames and closes (all that our transport asks of
// gorilla once it has upgraded).
func TestReleaseBuffers(t *testing.T) {
	upgraded := make(chan *ws.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := ws.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024}
		c, err := u.Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		upgraded <- c
	}))
	defer srv.Close()
	client, _, err := ws.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := <-upgraded
	if !releaseBuffers(c) {
		t.Fatal("gorilla's Conn.br and Conn.writeBuf not found: check releaseBuffers against the gorilla version in go.mod")
	}
	pong := make(chan string, 1)
	client.SetPongHandler(func(s string) error { pong <- s; return nil })
	go func() { _, _, _ = client.ReadMessage() }()
	if err := c.WriteControl(ws.PongMessage, []byte("hi"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-pong:
		if s != "hi" {
			t.Fatalf("pong %q", s)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no pong")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
