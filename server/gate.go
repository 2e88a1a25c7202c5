package server

import (
	"runtime"
	"sync"
	"time"
)

// connectGate bounds the Socket.IO connects being set up at once: from the
// token check (authenticate) to the end of the handlers' Connect, the
// part of a handshake that costs CPU and backend round trips. Under a
// burst of new connections (a reconnect storm, a deploy) the sockets
// already connected then keep most of the node: their events, a join sent
// the moment its socket connected among them, do not queue behind
// hundreds of handshakes in progress. A connect waits at most
// gateMaxWait for its turn and then goes on regardless: the gate orders
// the work, it never refuses it.
//
// The gate narrows while the connected sockets' events are busy (busy
// reports it: events waiting or running on the websocket transport, at
// least GOMAXPROCS of them): a connect then needs one of the few narrow
// slots as well. In a reconnect storm, where every client joins its
// conversations the moment it is connected, a node with two cores set
// up its sockets as fast with two connects at a time as with eight, and
// answered the joins in half the time (join ack p50 17–20 against
// 46 ms; bench/, join burst). Connects alone (nothing else busy) keep
// every slot: two at a time cost a fifth of their rate.
//
// The narrow width is half GOMAXPROCS (at least one). A connect holds its
// slot through its Redis round trips, and it had two until 2026-12-05;
// since the engine counts the socket and checks the cap in one, a slot
// turns over faster, and two narrow slots let so many more connects
// through that the joins of a burst waited longer (join ack p50 20-28
// against 14 ms before). One narrow slot on two cores restored it and
// set the burst up no slower: join ack p50 14.0 / 14.4 ms, p99 138 / 144,
// setups of 16.9 / 18.0 s, against 27.8 / 21.1 ms, 249 / 594 ms and 19.4
// / 27.2 s with two (5,000 sockets × 3 conversations of ~100, 500 in
// flight, alternated runs).
type connectGate struct {
	slots  chan struct{} // wide: every connect takes one
	narrow chan struct{} // while busy, a connect takes one of these too
	busy   func() bool   // nil: never narrowed
	wait   time.Duration

	mu      sync.Mutex
	holders map[string]func() // socket id → its leave, until Connect ran or the connection closed
}

// gateMaxWait bounds a connect's wait for a slot, well inside the
// client's connect timeout (socket.io-client: 20 s).
const gateMaxWait = 5 * time.Second

// newConnectGate returns a gate of 4×GOMAXPROCS slots, narrowed to
// GOMAXPROCS/2 (at least one) while busy (nil: never).
func newConnectGate(busy func() bool) *connectGate {
	return &connectGate{
		slots:   make(chan struct{}, 4*runtime.GOMAXPROCS(0)),
		narrow:  make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)),
		busy:    busy,
		wait:    gateMaxWait,
		holders: map[string]func(){},
	}
}

// enter waits for a slot (at most g.wait in all) and returns the function
// that gives it back; calling that more than once does nothing.
func (g *connectGate) enter() func() {
	var t *time.Timer // the bound, from the first wait on
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	take := func(slots chan struct{}) bool {
		select {
		case slots <- struct{}{}:
			return true
		default:
		}
		if t == nil {
			t = time.NewTimer(g.wait)
		}
		select {
		case slots <- struct{}{}:
			return true
		case <-t.C:
			return false
		}
	}
	if !take(g.slots) {
		return func() {} // waited long enough: on without a slot
	}
	narrowed := g.busy != nil && g.busy() && take(g.narrow)
	var once sync.Once
	return func() {
		once.Do(func() {
			if narrowed {
				<-g.narrow
			}
			<-g.slots
		})
	}
}

// hold keeps a socket's leave until leaveFor (its Connect ran, or its
// connection closed first).
func (g *connectGate) hold(sid string, leave func()) {
	g.mu.Lock()
	g.holders[sid] = leave
	g.mu.Unlock()
}

// leaveFor gives back the slot the socket holds, if any.
func (g *connectGate) leaveFor(sid string) {
	g.mu.Lock()
	leave := g.holders[sid]
	delete(g.holders, sid)
	g.mu.Unlock()
	if leave != nil {
		leave()
	}
}
