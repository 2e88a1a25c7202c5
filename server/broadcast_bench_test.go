package server_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/server"
)

// BenchmarkRoomBroadcast is one broadcast to a room of 100 websocket
// sockets, through the whole server, until every client has read it
// (the clients share the CPUs with the server; their share is the same in
// both modes). "encode-once" is our path (transport.LocalAdapter: one frame
// queued on each socket's connection); "library" is the Socket.IO library's
// websocket transport and per-socket packet pipeline. ns/op is per
// broadcast, that is per 100 deliveries.
func BenchmarkRoomBroadcast(b *testing.B) {
	const members = 100
	for _, mode := range []struct {
		name    string
		library bool
	}{{"encode-once", false}, {"library", true}} {
		b.Run(mode.name, func(b *testing.B) {
			ts := newTestServer(b, server.Config{LibraryWebsocket: mode.library})
			room := handlers.UserRoom("room-user")
			var got sync.WaitGroup
			clients := make([]*wsClient, members)
			for i := range clients {
				clients[i] = dialWS(b, ts.URL, mint(b, "room-user"))
				b.Cleanup(func() { _ = clients[i].conn.Close() })
			}
			payload := `{"conversationId":"c-1","userId":"u-` + strconv.Itoa(42) + `","typing":true}`
			b.ReportAllocs()
			b.ResetTimer()
			got.Add(members)
			for _, c := range clients {
				go func() {
					defer got.Done()
					for n := 0; n < b.N; {
						_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
						if m := c.nextBytes(b); len(m) > 2 && m[0] == '4' && m[1] == '2' {
							n++
						}
					}
				}()
			}
			for range b.N {
				if err := ts.Server.IO().To(room).Emit("typing", payload); err != nil {
					b.Fatal(err)
				}
			}
			got.Wait()
		})
	}
}
