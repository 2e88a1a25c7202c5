package server_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/presenced/presenced/server"
)

// BenchmarkSocketMemory opens 1,000 websocket sockets, each joined to 3 of
// 30 conversations (in-memory engine), and reports the Go heap and the
// goroutines they hold, per socket. The bare test clients live in the same
// process: their share (a gorilla client connection each, about 9 KB, and
// no goroutine) is in heap-B/socket too. For the server's share alone,
// profile: go test -run X -bench SocketMemory -memprofile m.out ./server/
// and read m.out without the dialer's stacks. Figures: docs/benchmarks.
func BenchmarkSocketMemory(b *testing.B) {
	const n = 1000
	for range b.N {
		b.StopTimer()
		ts := newTestServer(b, server.Config{})
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		b.StartTimer()
		cs := make([]*wsClient, n)
		for i := range cs {
			cs[i] = dialWS(b, ts.URL, mint(b, "mem-"+strconv.Itoa(i)))
			for j := range 3 {
				cs[i].call(b, "conversation:join", `{"conversationId":"c`+strconv.Itoa((i*3+j)%30)+`"}`)
			}
		}
		b.StopTimer()
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/socket")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/socket")
		if open := ts.Sockets.Open(); open != n {
			b.Fatalf("open sockets: %d, want %d", open, n)
		}
		for _, c := range cs {
			_ = c.conn.Close()
		}
		b.StartTimer()
	}
}
