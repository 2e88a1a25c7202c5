package server_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/server"
	"github.com/presenced/presenced/transport"
)

// An idle websocket's reader parks on the poller (transport/poller_linux.go)
// after transport.ParkAfter (ParkAfterConnect right after the CONNECT), or
// at once after a message that came ParkAfter or more after the one
// before: no goroutine of ours per idle socket, a reader again for each
// message, and every way a parked connection ends is reported (its
// registration goes).
func TestIdleReadersPark(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the poller is epoll")
	}
	ts := newTestServer(t, server.Config{})
	base, _ := transport.PolledConnections()
	waitPolled := func(want, wantParked int, what string) {
		t.Helper()
		waitPolledWithin(t, base, want, wantParked, transport.ParkAfter+3*time.Second, what)
	}
	runtime.GC()
	g0 := runtime.NumGoroutine()
	const n = 20
	cs := make([]*wsClient, n)
	for i := range cs {
		cs[i] = dialWS(t, ts.URL, mint(t, "park-"+strconv.Itoa(i)))
	}
	// The wait after the CONNECT is the short one (ParkAfterConnect): the
	// sockets park well before ParkAfter.
	waitPolledWithin(t, base, n, n, transport.ParkAfter*3/4, "after connecting")
	// No goroutine stays per idle socket: a blocked reader, or the library's
	// ping timer (the heartbeat runs on the transport's wheel,
	// transport/heartbeat.go), would make it n or more.
	if d := runtime.NumGoroutine() - g0; d > n/2 {
		t.Fatalf("%d goroutines for %d idle sockets: readers are not parked, or each has a ping timer", d, n)
	}
	heartbeats := func(what string) {
		t.Helper()
		for _, c := range cs {
			if got := c.call(t, "heartbeat", `{"active":true}`); !strings.Contains(string(got), `"nextInMs"`) {
				t.Fatalf("%s: heartbeat ack: %s", what, got)
			}
		}
	}
	// waits checks that the connections wait ParkAfter after their last
	// message before they park.
	waits := func(what string) {
		t.Helper()
		if _, parked := transport.PolledConnections(); parked == n {
			t.Fatalf("%s: all connections parked right after their heartbeats", what)
		}
		time.Sleep(2 * transport.ParkAfterConnect)
		if _, parked := transport.PolledConnections(); parked == n {
			t.Fatalf("%s: all connections parked %v after their heartbeats", what, 2*transport.ParkAfterConnect)
		}
		waitPolled(n, n, what)
	}
	// The first message past the CONNECT: woken, parked again after
	// ParkAfter.
	heartbeats("first heartbeats")
	waits("first heartbeats")
	// Each message now comes ParkAfter or more after the one before: the
	// connection parks as soon as it is handled, as real clients' sockets
	// do between heartbeats 15-20 s apart.
	heartbeats("sparse heartbeats")
	waitPolledWithin(t, base, n, n, transport.ParkAfter/2, "sparse heartbeats")
	// A message soon after the one before: the wait again.
	heartbeats("frequent heartbeats")
	waits("frequent heartbeats")
	// After a busy spell, the first message past a pause waits again: the
	// client may be busy again, and parking at once woke every such
	// connection twice through the poller when a burst of activity
	// followed a pause. The next one after a pause parks at once again.
	heartbeats("heartbeats after a busy spell and a pause")
	waits("heartbeats after a busy spell and a pause")
	heartbeats("sparse heartbeats again")
	waitPolledWithin(t, base, n, n, transport.ParkAfter/2, "sparse heartbeats again")
	// The client leaves: the reader wakes on the end of the stream.
	_ = cs[0].conn.Close()
	waitPolled(n-1, n-1, "after a client closed")
	// The server closes a parked connection (the engine's too).
	ts.Server.IO().In(handlers.UserRoom("park-1")).DisconnectSockets(true)
	waitPolled(n-2, n-2, "after the server closed one")
	for _, c := range cs[2:] {
		_ = c.conn.Close()
	}
	waitPolled(0, 0, "after all closed")
}

// waitPolledWithin waits until want connections (over base) are polled and
// wantParked of them parked, or fails after d.
func waitPolledWithin(t *testing.T, base, want, wantParked int, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n, parked := transport.PolledConnections()
		if n == base+want && parked >= wantParked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d connections polled, %d parked; want %d, %d", what, n-base, parked, want, wantParked)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
