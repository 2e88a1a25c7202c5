package server_test

import (
	"bytes"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ws "github.com/gorilla/websocket"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/server"
)

// wsClient is a bare Engine.IO v4 / Socket.IO v5 websocket client: it
// costs the benchmark as little as a client can.
type wsClient struct {
	conn *ws.Conn
	buf  bytes.Buffer
	id   uint64
}

func dialWS(tb testing.TB, url, token string) *wsClient {
	tb.Helper()
	return dialWSWith(tb, url, token, "", nil)
}

// dialWSWith is dialWS with more query parameters and request headers.
func dialWSWith(tb testing.TB, url, token, query string, h http.Header) *wsClient {
	tb.Helper()
	u := "ws" + strings.TrimPrefix(url, "http") + "/socket.io/?EIO=4&transport=websocket" + query
	conn, _, err := ws.DefaultDialer.Dial(u, h)
	if err != nil {
		tb.Fatal(err)
	}
	c := &wsClient{conn: conn}
	if m := c.next(tb); !strings.HasPrefix(m, "0{") {
		tb.Fatalf("open packet: %q", m)
	}
	if err := conn.WriteMessage(ws.TextMessage, []byte(`40{"token":"`+token+`"}`)); err != nil {
		tb.Fatal(err)
	}
	for m := c.next(tb); !strings.HasPrefix(m, `42["session"`); m = c.next(tb) {
		if strings.HasPrefix(m, "44") {
			tb.Fatalf("connect refused: %q", m)
		}
	}
	return c
}

// next reads one message, answering pings; the bytes are valid until the
// next read.
func (c *wsClient) next(tb testing.TB) string { return string(c.nextBytes(tb)) }

func (c *wsClient) nextBytes(tb testing.TB) []byte {
	for {
		_, r, err := c.conn.NextReader()
		if err != nil {
			tb.Fatal(err)
		}
		c.buf.Reset()
		if _, err := c.buf.ReadFrom(r); err != nil {
			tb.Fatal(err)
		}
		if b := c.buf.Bytes(); len(b) == 1 && b[0] == '2' {
			_ = c.conn.WriteMessage(ws.TextMessage, []byte("3"))
			continue
		}
		return c.buf.Bytes()
	}
}

// pingThenClose sends a PING ("hi") and a CLOSE (1000), then reads until
// the connection ends; it returns the PONGs read meanwhile and the code of
// the server's CLOSE (0: none).
func (c *wsClient) pingThenClose(tb testing.TB) (pongs []string, code int) {
	tb.Helper()
	c.conn.SetPongHandler(func(s string) error { pongs = append(pongs, s); return nil })
	if err := c.conn.WriteControl(ws.PingMessage, []byte("hi"), time.Now().Add(time.Second)); err != nil {
		tb.Fatal(err)
	}
	if err := c.conn.WriteControl(ws.CloseMessage, ws.FormatCloseMessage(ws.CloseNormalClosure, ""), time.Now().Add(time.Second)); err != nil {
		tb.Fatal(err)
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	var err error
	for err == nil {
		_, _, err = c.conn.ReadMessage()
	}
	var ce *ws.CloseError
	if errors.As(err, &ce) {
		code = ce.Code
	}
	return pongs, code
}

// emit sends an event with an ack id and returns the ACK packet prefix
// to wait for ("43<id>").
func (c *wsClient) emit(tb testing.TB, event, arg string) []byte {
	c.id++
	msg := strconv.AppendUint([]byte("42"), c.id, 10)
	msg = append(msg, `["`+event+`",`+arg+`]`...)
	if err := c.conn.WriteMessage(ws.TextMessage, msg); err != nil {
		tb.Fatal(err)
	}
	return strconv.AppendUint([]byte("43"), c.id, 10)
}

// call emits an event with an ack and waits for the ack; it returns the
// ack packet's data.
func (c *wsClient) call(tb testing.TB, event, arg string) []byte {
	want := c.emit(tb, event, arg)
	for {
		b := c.nextBytes(tb)
		if bytes.HasPrefix(b, want) && len(b) > len(want) && b[len(want)] == '[' {
			return b[len(want):]
		}
	}
}

// BenchmarkSocketHeartbeat is one heartbeat through the whole server over
// a loopback websocket (in-memory engine): the client's write, the
// server's read, handling and ack, the client's read of the ack; 32
// sockets per CPU with one heartbeat in flight each. "library" runs the Socket.IO
// library's own websocket transport and event pipeline; "direct" runs
// ours (transport/wstransport.go, handlers/direct.go). ns/op and allocs/op include
// the client's share (small: it reuses its buffers).
func BenchmarkSocketHeartbeat(b *testing.B) {
	for _, mode := range []struct {
		name    string
		library bool
	}{{"direct", false}, {"library", true}} {
		b.Run(mode.name, func(b *testing.B) {
			// Limits the benchmark never reaches: the limiter's cost is
			// measured, not its refusals.
			high := handlers.Limit{Rate: 1e9, Burst: 1e9}
			ts := newTestServerWith(b, server.Config{LibraryWebsocket: mode.library}, handlers.SessionConfig{NodeID: "n1", Limits: handlers.EventLimits{Heartbeat: high}})
			const perProc = 32
			sockets := perProc * runtime.GOMAXPROCS(0)
			clients := make(chan *wsClient, sockets)
			for i := range sockets {
				c := dialWS(b, ts.URL, mint(b, "bench-"+strconv.Itoa(i)))
				b.Cleanup(func() { _ = c.conn.Close() })
				clients <- c
			}
			var bad atomic.Int64
			b.SetParallelism(perProc)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c := <-clients
				for pb.Next() {
					if !bytes.HasPrefix(c.call(b, "heartbeat", `{"active":true}`), []byte(`[{"nextInMs":`)) {
						bad.Add(1)
					}
				}
			})
			if n := bad.Load(); n > 0 {
				b.Fatalf("%d heartbeats not acked ok", n)
			}
		})
	}
}
