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
type connectGate struct {
	slots chan struct{}
	wait  time.Duration

	mu      sync.Mutex
	holders map[string]func() // socket id → its leave, until Connect ran or the connection closed
}

// gateMaxWait bounds a connect's wait for a slot, well inside the
// client's connect timeout (socket.io-client: 20 s).
const gateMaxWait = 5 * time.Second

func newConnectGate() *connectGate {
	return &connectGate{
		slots:   make(chan struct{}, 4*runtime.GOMAXPROCS(0)),
		wait:    gateMaxWait,
		holders: map[string]func(){},
	}
}

// enter waits for a slot (at most g.wait) and returns the function that
// gives it back; calling that more than once does nothing.
func (g *connectGate) enter() func() {
	select {
	case g.slots <- struct{}{}:
	default:
		t := time.NewTimer(g.wait)
		defer t.Stop()
		select {
		case g.slots <- struct{}{}:
		case <-t.C:
			return func() {} // waited long enough: on without a slot
		}
	}
	var once sync.Once
	return func() { once.Do(func() { <-g.slots }) }
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
