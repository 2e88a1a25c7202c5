package transport

import (
	"sync"
	"sync/atomic"

	"github.com/zishang520/socket.io/servers/socket/v3"
)

// holds are the sockets whose broadcasts are held back (Hold). holding
// counts them, so that a broadcast checks the map only while there are.
var (
	holds   sync.Map // *socket.Socket → *heldFrames
	holding atomic.Int64
)

// heldFrames are the frames broadcast to one socket during its hold.
type heldFrames struct {
	mu     sync.Mutex
	frames []*Frame
	done   bool
}

// Hold holds back the room broadcasts to s from now on (Frame.WriteTo),
// until release writes them to s, in order, after whatever s was sent
// meanwhile; from then on they go at once again. A join holds its socket
// from before the socket enters the room until its ack is written: the
// ack's roster and typing list are read after the socket entered the room,
// so an event that reached the socket before the ack could be newer than
// the ack's snapshot (a typing stop the read did not see yet: the client,
// applying the ack after it, would show the user typing for good); held,
// each such event comes after the ack, which a client applies first.
// release may be called more than once. A nil s holds nothing.
func Hold(s *socket.Socket) (release func()) {
	if s == nil {
		return func() {}
	}
	h := &heldFrames{}
	if _, dup := holds.LoadOrStore(s, h); dup {
		return func() {} // (held already: its holder releases)
	}
	holding.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			// under h.mu: a broadcast that comes meanwhile waits, then
			// finds the hold done and writes after these
			for _, f := range h.frames {
				f.write(s)
			}
			h.frames, h.done = nil, true
			holds.Delete(s)
			holding.Add(-1)
		})
	}
}

// held keeps f for s if s is held, and says whether it did.
func held(s *socket.Socket, f *Frame) bool {
	if holding.Load() == 0 {
		return false
	}
	v, ok := holds.Load(s)
	if !ok {
		return false
	}
	h := v.(*heldFrames)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false
	}
	h.frames = append(h.frames, f)
	return true
}
