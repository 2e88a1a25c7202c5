package server_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/zishang520/socket.io/servers/socket/v3"

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

// A websocket upgrade hands the engine only the headers and query
// parameters it reads: the library keeps each socket's request, and its
// handshake copies, for the socket's life.
func TestUpgradeKeepsWhatTheEngineReads(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	h := http.Header{
		"Cookie":          {"session=" + strings.Repeat("c", 2000)},
		"User-Agent":      {"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"},
		"Accept-Language": {"en-US,en;q=0.9"},
		"Origin":          {ts.URL},
	}
	c := dialWSWith(t, ts.URL, mint(t, "lean"), "&custom=1", h)
	if got := c.call(t, "heartbeat", `{"active":true}`); !strings.Contains(string(got), `"nextInMs"`) {
		t.Fatalf("heartbeat ack: %s", got)
	}
	var hs *socket.Handshake
	ts.IO().Of("/", nil).Sockets().Range(func(_ socket.SocketId, s *socket.Socket) bool {
		hs = s.Handshake()
		return false
	})
	if hs == nil {
		t.Fatal("no socket on the server")
	}
	headers := strings.ToLower(fmt.Sprint(hs.Headers))
	for _, gone := range []string{"cookie", "user-agent", "accept-language"} {
		if strings.Contains(headers, gone) {
			t.Errorf("the handshake kept header %s: %s", gone, headers)
		}
	}
	// the Host, as a Node server's handshake.headers.host (fetchSockets)
	if got, want := hs.Headers["Host"], strings.TrimPrefix(ts.URL, "http://"); fmt.Sprint(got) != fmt.Sprint([]string{want}) {
		t.Errorf("the handshake's Host %v, want %s", got, want)
	}
	for _, kept := range []string{"origin", "sec-websocket-version"} {
		if !strings.Contains(headers, kept) {
			t.Errorf("the handshake lost header %s: %s", kept, headers)
		}
	}
	// the upgrade's key, one per connection, is not kept (compactHandshake)
	if strings.Contains(headers, "sec-websocket-key") {
		t.Errorf("the handshake kept the upgrade's key: %s", headers)
	}
	if q := fmt.Sprint(hs.Query); strings.Contains(q, "custom") || !strings.Contains(q, "EIO") {
		t.Errorf("handshake query %s, want EIO and not custom", q)
	}
	if !hs.Xdomain {
		t.Error("the handshake lost the origin (xdomain)")
	}
}
